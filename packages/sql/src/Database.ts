/**
 * The connection: an explicit URL, else `DATABASE_URL`, else the URL of `fallback` (such as
 * `EmbeddedPostgres.url()` from `@leasehold/embedded`, kept out of this package so that the store
 * does not bring a development server's binaries).
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Config, Effect, Layer, Option, Redacted, Schema, type Scope } from "effect"

/** Neither a URL, nor `DATABASE_URL`, nor a fallback was given. @category errors */
export class MissingUrl extends Schema.TaggedError<MissingUrl>()("MissingUrl", {}) {
  override get message(): string {
    return "no database URL: set DATABASE_URL, pass url, or give a fallback (EmbeddedPostgres.url() from @leasehold/embedded)"
  }
}

/** @category models */
export interface DatabaseOptions<E = never> {
  /** Server URL; `DATABASE_URL` when absent; `fallback` when neither is set. */
  readonly url?: string | undefined
  /**
   * The URL to use when neither `url` nor `DATABASE_URL` is set, run in the layer's scope: e.g.
   * `EmbeddedPostgres.url()` (`@leasehold/embedded`). Without it, a missing URL is `MissingUrl`.
   */
  readonly fallback?: Effect.Effect<string, E, Scope.Scope> | undefined
  readonly maxConnections?: number | undefined
  readonly applicationName?: string | undefined
  /**
   * The URL leads to a pooler in transaction mode (PgBouncer's `pool_mode = transaction`): no
   * named prepared statements, which would outlive the transaction on a server connection another
   * client gets next. Give the store the same (`PgRunStore` `pooler`). Default: a direct connection.
   */
  readonly pooler?: "transaction" | undefined
}

/**
 * The URL to use: `options.url`, else `DATABASE_URL` (read through Effect `Config`, redacted),
 * else `options.fallback`, run in the current scope.
 *
 * @category constructors
 */
export const resolveUrl = <E = never>(
  options: DatabaseOptions<E> = {}
): Effect.Effect<string, E | MissingUrl, Scope.Scope> =>
  Effect.gen(function*() {
    if (options.url !== undefined && options.url !== "") return options.url
    // A string setting cannot be malformed: only "missing" can happen, and Config.option covers it.
    const configured = yield* Effect.orDie(Config.option(Config.Redacted("DATABASE_URL")))
    if (Option.isSome(configured) && Redacted.value(configured.value) !== "") return Redacted.value(configured.value)
    if (options.fallback === undefined) return yield* Effect.fail(new MissingUrl())
    return yield* options.fallback
  })

/** A PgClient (and SqlClient) for the configured server (see `resolveUrl`). @category layers */
export const layer = <E = never>(options: DatabaseOptions<E> = {}) =>
  Layer.unwrap(Effect.map(resolveUrl(options), (url) => layerFromUrl(url, options)))

/**
 * The server and database a URL names, read as the driver reads it. The driver names its spans'
 * `db.namespace` and `server.address` from explicit fields only (a URL alone reads as database
 * `postgres` on `localhost`), so the client is given them too; being the URL's own values, they
 * change nothing about where it connects.
 *
 * @category constructors
 */
export const addressOf = (
  url: string
): { readonly host?: string; readonly port?: number; readonly database?: string } => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return {}
  }
  if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") return {}
  const decode = (text: string) => {
    try {
      return decodeURIComponent(text)
    } catch {
      return undefined
    }
  }
  const hostname = parsed.hostname
  let host = hostname === ""
    ? undefined
    : hostname.startsWith("[") && hostname.endsWith("]")
    ? hostname.slice(1, -1)
    : decode(hostname)
  let port = parsed.port === "" ? undefined : Number(parsed.port)
  let database = decode(parsed.pathname.replace(/^\//, ""))
  if (database === "") database = undefined
  for (const [key, value] of parsed.searchParams) {
    if (key === "host") host = value
    else if (key === "port") port = Number(value)
    else if (key === "dbname") database = value
  }
  const validPort = port !== undefined && Number.isInteger(port) && port >= 1 && port <= 65535 ? port : undefined
  return {
    ...(host === undefined ? {} : { host }),
    ...(validPort === undefined ? {} : { port: validPort }),
    ...(database === undefined ? {} : { database })
  }
}

/**
 * A PgClient (and SqlClient) for an explicit URL: no `DATABASE_URL`, no fallback.
 *
 * @category layers
 */
export const layerFromUrl = (url: string, options: Omit<DatabaseOptions<unknown>, "url" | "fallback"> = {}) =>
  PgClient.layer({
    ...addressOf(url),
    url: Redacted.make(url),
    maxConnections: options.maxConnections ?? 10,
    connectTimeout: "5 seconds",
    applicationName: options.applicationName ?? "leasehold",
    ...(options.pooler === "transaction" ? { prepare: false } : {})
  })

/**
 * @deprecated Renamed `layerFromUrl` (Effect's layer naming); this alias goes in a later release.
 * @category layers
 */
export const clientLayer = layerFromUrl
