/**
 * Everything in one place: the callback route, the admin API and the console, as routes for an
 * application's own Effect HTTP server (`layerRoutes`) or as a Node HTTP server of their own
 * (`layer`, what `leasehold serve` runs).
 *
 * @since 0.1.0
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { type Duration, Effect, Layer, type Redacted } from "effect"
import { HttpRouter, HttpServerRequest } from "effect/http"
import { createServer } from "node:http"
import * as Admin from "./Admin.js"
import * as CallbackRoutes from "./CallbackRoutes.js"
import * as Console from "./Console.js"
import type { Credential } from "./Credentials.js"
import { problem, secure } from "./internal/Http.js"

/**
 * The router configuration the routes need: a path parameter may be as long as the longest value
 * the documented limits allow (a signal token: 1,024 bytes, percent-encoded), and one over a limit
 * must reach its route to be refused by name. Effect's router refuses a parameter over 100
 * characters as "not found" unless told otherwise: pass this as `routerConfig` to
 * `HttpRouter.serve` when serving `layerRoutes` on your own server (`layer` does).
 *
 * @category constants
 */
export const routerConfig = { maxParamLength: 16 * 1024 } as const

/** The longest URL (path and query) served; a longer one is answered 414. @category constants */
export const maxUrlLength = 16 * 1024

/**
 * The request line and headers `layer`'s Node server reads: far above `maxUrlLength`, so a long
 * URL is read whole and answered 414 instead of the connection being cut mid-request.
 */
const maxHeaderSize = 1024 * 1024

/** Whether every segment of the path decodes as percent-encoded UTF-8 (no lone surrogate, no stray `%`). */
const wellFormedPath = (url: string): boolean => {
  const end = url.search(/[?#]/)
  const path = end === -1 ? url : url.slice(0, end)
  try {
    for (const segment of path.split("/")) decodeURIComponent(segment)
    return true
  } catch {
    return false
  }
}

/**
 * Before routing: a URL over `maxUrlLength` is 414 and a path that is not percent-encoded UTF-8
 * is 400, each with one message, instead of the router's bare 404.
 *
 * @category layers
 */
export const layerRequestChecks = HttpRouter.middleware(
  (effect) =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
      request.url.length > maxUrlLength
        ? Effect.succeed(secure(problem(414, "uri-too-long", `the URL is longer than ${maxUrlLength} characters`)))
        : wellFormedPath(request.url)
        ? effect
        : Effect.succeed(
          secure(
            problem(
              400,
              "malformed-path",
              "the path is not valid percent-encoded UTF-8 (a stray %, or bytes that are not UTF-8)"
            )
          )
        )),
  { global: true }
)

/** @category models */
export interface RoutesOptions {
  /** The address the server is bound to: an open admin API (no token) is allowed on loopback only. */
  readonly host: string
  /** `LEASEHOLD_ADMIN_TOKEN`: one read-write credential named `admin`. */
  readonly token?: Redacted.Redacted<string> | undefined
  /** Named credentials (`Credentials`, `LEASEHOLD_ADMIN_TOKENS`), beside `token`. */
  readonly credentials?: ReadonlyArray<Credential> | undefined
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
 * with `HttpRouter.serve` and `{ routerConfig }` (long names and tokens; add `layerRequestChecks`
 * for 414 and 400 answers to long or malformed URLs). They require `Callbacks`, `RunStore` and `Handlers` per request, so
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
  return Layer.mergeAll(
    callbacks,
    admin,
    Console.layer({ ...consoleOptions, token: options.token, credentials: options.credentials })
  )
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
  HttpRouter.serve(Layer.mergeAll(layerRoutes(options), layerRequestChecks), {
    disableLogger: true,
    disableListenLog: true,
    routerConfig
  }).pipe(
    Layer.provideMerge(NodeHttpServer.layer(() => createServer({ maxHeaderSize }), {
      port: options.port,
      host: options.host,
      gracefulShutdownTimeout: options.shutdownGrace ?? "3 seconds"
    }))
  )
