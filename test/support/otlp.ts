/**
 * An OTLP/HTTP (JSON) receiver inside a test, and the exporter pointed at it: the spans a test's
 * runs and workflows export, as a collector would receive them.
 */
import { Telemetry } from "@leasehold/core"
import { Effect, Layer, type Scope } from "effect"
import { FetchHttpClient } from "effect/http"
import { Otlp } from "effect/observability"
import { createServer } from "node:http"

export interface OtlpValue {
  readonly stringValue?: string
  readonly intValue?: string | number
  readonly boolValue?: boolean
}
export interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly name: string
  readonly kind: number
  readonly attributes: ReadonlyArray<{ key: string; value: OtlpValue }>
  readonly links?: ReadonlyArray<{ traceId: string; spanId: string }>
  readonly events?: ReadonlyArray<{ name: string; attributes: ReadonlyArray<{ key: string; value: OtlpValue }> }>
  readonly status?: { readonly code?: number; readonly message?: string }
}

/** An OTLP/HTTP receiver on an ephemeral port, collecting every span posted to /v1/traces. */
export const receiver = Effect.acquireRelease(
  Effect.promise(() =>
    new Promise<{ url: string; spans: Array<OtlpSpan>; close: () => void }>((resolve) => {
      const spans: Array<OtlpSpan> = []
      const server = createServer((req, res) => {
        let body = ""
        req.on("data", (chunk) => void (body += String(chunk)))
        req.on("end", () => {
          if (req.url === "/v1/traces") {
            const payload = JSON.parse(body) as {
              resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<OtlpSpan> }> }>
            }
            for (const resource of payload.resourceSpans) {
              for (const scope of resource.scopeSpans) spans.push(...scope.spans)
            }
          }
          res.writeHead(200, { "content-type": "application/json" }).end("{}")
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address() as { port: number }
        resolve({ url: `http://127.0.0.1:${address.port}`, spans, close: () => server.close() })
      })
    })
  ),
  (r) => Effect.sync(r.close)
)

export const attribute = (span: OtlpSpan, key: string): unknown => {
  const value = span.attributes.find((a) => a.key === key)?.value
  return value?.stringValue ?? (value?.intValue === undefined ? value?.boolValue : Number(value.intValue))
}

/** Runs `body` with the OTLP exporter (and run tracing) on; the exporter flushes when it ends. */
export const exported = <A, E>(url: string, body: Effect.Effect<A, E, Scope.Scope>) =>
  Effect.scoped(body).pipe(
    Effect.provide(Layer.mergeAll(
      Otlp.layerJson({ baseUrl: url, resource: { serviceName: "leasehold-test" }, tracerExportInterval: "100 millis" }),
      Telemetry.layer()
    )),
    Effect.provide(FetchHttpClient.layer)
  )
