/**
 * Everything in one place: the callback route, the admin API and the console, as routes for an
 * application's own Effect HTTP server (`layerRoutes`) or as a Node HTTP server of their own
 * (`layer`, what `leasehold serve` runs).
 *
 * @since 0.1.0
 */
import { type Duration, Layer, type Redacted } from "effect"
import { HttpRouter } from "effect/http"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { createServer } from "node:http"
import * as Admin from "./Admin.js"
import * as CallbackRoutes from "./CallbackRoutes.js"
import * as Console from "./Console.js"

/** @category models */
export interface RoutesOptions {
  /** The address the server is bound to: an open admin API (no token) is allowed on loopback only. */
  readonly host: string
  /** `LEASEHOLD_ADMIN_TOKEN`. */
  readonly token?: Redacted.Redacted<string> | undefined
  /** Every state-changing admin route answers 403. */
  readonly readOnly?: boolean | undefined
  /** Only the callback route: no admin API, no console. */
  readonly callbacksOnly?: boolean | undefined
  /**
   * Serve the callback route (default true). False: the admin API and the console only, which
   * need no callback secrets (`Callbacks`).
   */
  readonly callbacks?: boolean | undefined
  /** Serve the console at `/` (default true, unless `callbacksOnly`), from `Console.defaultRoot` or `root`. */
  readonly console?: boolean | Console.ConsoleOptions | undefined
  /** Largest accepted request body in bytes. Default 1 MiB. */
  readonly maxBodySize?: number | undefined
  /** The CSRF token (default: random per process). */
  readonly csrfToken?: string | undefined
  /** Open `/api/events` streams at once (default 64); one more is answered 503 with `Retry-After`. */
  readonly maxEventStreams?: number | undefined
  /** Workflows' journals, for their runs' pages and their approvals (`Admin.WorkflowDecisions`). */
  readonly workflows?: Admin.WorkflowDecisions | undefined
  /** A trace viewer's URL with `{traceId}`, for the console's run pages (`Admin.AdminOptions.traceUrl`). */
  readonly traceUrl?: string | undefined
}

/**
 * The routes, for the application's own `HttpRouter`: merge them with its routes and serve them
 * with `HttpRouter.serve`. They require `Callbacks`, `RunStore` and `Handlers` per request, so
 * provide those to the served layer (after `HttpRouter.serve`), as for any route.
 *
 * @category layers
 */
export const layerRoutes = (options: RoutesOptions) => {
  const callbacks = options.callbacks === false && options.callbacksOnly !== true
    ? Layer.empty
    : CallbackRoutes.layer({ maxBodySize: options.maxBodySize })
  if (options.callbacksOnly === true) return callbacks
  const admin = Admin.layer(options)
  if (options.console === false) return Layer.mergeAll(callbacks, admin)
  const consoleOptions = typeof options.console === "object" ? options.console : {}
  return Layer.mergeAll(callbacks, admin, Console.layer({ ...consoleOptions, token: options.token }))
}

/**
 * @deprecated Renamed `layerRoutes` (Effect's layer naming); this alias goes in a later release.
 * @category layers
 */
export const routes = layerRoutes

/** @category models */
export interface ServerOptions extends RoutesOptions {
  /** 0 picks a free port (see `HttpServer.HttpServer`'s `address`). */
  readonly port: number
  /**
   * On shutdown, how long requests in flight may take before they are interrupted (a delivery
   * interrupted mid-transaction rolls back). Open event streams are cut then. Default 3 seconds.
   */
  readonly shutdownGrace?: Duration.Input | undefined
}

/**
 * A Node HTTP server on `host:port` serving `layerRoutes`. Requests are not logged (a callback
 * URL's query is a credential). Requires `Callbacks`, `RunStore` and `Handlers`; provides `HttpServer`.
 *
 * @category layers
 */
export const layer = (options: ServerOptions) =>
  HttpRouter.serve(layerRoutes(options), { disableLogger: true, disableListenLog: true }).pipe(
    Layer.provideMerge(NodeHttpServer.layer(() => createServer(), {
      port: options.port,
      host: options.host,
      gracefulShutdownTimeout: options.shutdownGrace ?? "3 seconds"
    }))
  )
