/**
 * `leasehold worker --metrics-port`: the worker's metrics in Prometheus's text format at
 * `/metrics`, served by effect/http on Node's HTTP server (`PrometheusMetrics.layerHttp`).
 *
 * @since 0.1.0
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Effect, Layer } from "effect"
import { HttpRouter, HttpServer } from "effect/http"
import { PrometheusMetrics } from "effect/observability"
import { createServer } from "node:http"
import * as Listen from "./Listen.js"

/** Starts the endpoint in the current scope; returns its URL. */
export const start = (host: string, port: number) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      HttpRouter.serve(PrometheusMetrics.layerHttp(), { disableLogger: true, disableListenLog: true }).pipe(
        Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port, host }))
      )
    ).pipe(Listen.explain("--metrics-port", host, port))
    return `${HttpServer.formatAddress(Context.get(context, HttpServer.HttpServer).address)}/metrics`
  })
