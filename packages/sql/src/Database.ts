/**
 * The connection: `DATABASE_URL` (or an explicit URL) when given, the embedded PostgreSQL
 * otherwise.
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import * as EmbeddedPostgres from "./EmbeddedPostgres.js"

/** @category models */
export interface DatabaseOptions {
  /** Server URL; `DATABASE_URL` when absent; the embedded server when neither is set. */
  readonly url?: string | undefined
  /** Data folder for the embedded server. */
  readonly embeddedDataDir?: string | undefined
  readonly maxConnections?: number | undefined
  readonly applicationName?: string | undefined
}

/** The URL to use, starting the embedded server in the current scope when none is configured. @category constructors */
export const resolveUrl = (options: DatabaseOptions = {}) =>
  Effect.gen(function*() {
    const url = options.url ?? process.env.DATABASE_URL
    if (url !== undefined && url !== "") return url
    const pg = yield* EmbeddedPostgres.start({ dataDir: options.embeddedDataDir })
    return pg.url
  })

/** A PgClient (and SqlClient) for the configured server. @category layers */
export const layer = (options: DatabaseOptions = {}) =>
  Layer.unwrap(Effect.map(resolveUrl(options), (url) => clientLayer(url, options)))

/** A PgClient for an explicit URL. @category layers */
export const clientLayer = (url: string, options: Omit<DatabaseOptions, "url"> = {}) =>
  PgClient.layer({
    url: Redacted.make(url),
    maxConnections: options.maxConnections ?? 10,
    connectTimeout: "5 seconds",
    applicationName: options.applicationName ?? "leasehold"
  })
