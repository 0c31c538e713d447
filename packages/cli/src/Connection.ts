/**
 * How a command reaches its database: `--database-url`, else `DATABASE_URL`, else the embedded
 * PostgreSQL with its data in the project-local `.leasehold/pgdata` folder.
 *
 * @since 0.1.0
 */
import type { RunStore } from "@leasehold/core"
import type { PgClient } from "@effect/sql-pg"
import { Database, type EmbeddedPostgres, PgRunStore } from "@leasehold/sql"
import { Effect, Layer, Option, type Scope } from "effect"
import type { Migrator, SqlClient, SqlError } from "effect/sql"

/** Everything that can go wrong reaching the store. */
export type ConnectionError = EmbeddedPostgres.EmbeddedPostgresError | SqlError.SqlError | Migrator.MigrationError
import * as path from "node:path"

/** @category models */
export interface ConnectionFlags {
  readonly databaseUrl: Option.Option<string>
  readonly schema: string
}

export const embeddedDataDir = path.resolve(process.env.LEASEHOLD_DATA_DIR ?? ".leasehold/pgdata")

/** The URL to use, starting the embedded server in the current scope when none is configured. */
export const resolveUrl = (flags: ConnectionFlags): Effect.Effect<string, EmbeddedPostgres.EmbeddedPostgresError, Scope.Scope> =>
  Database.resolveUrl({ url: Option.getOrUndefined(flags.databaseUrl), embeddedDataDir })

/** PgClient + RunStore for the connection flags. */
export const storeLayer = (flags: ConnectionFlags, url: string) =>
  PgRunStore.layer({ schema: flags.schema }).pipe(Layer.provideMerge(Database.clientLayer(url)))

export const withStore = <A, E, R>(
  flags: ConnectionFlags,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | ConnectionError, Exclude<R, RunStore | PgClient.PgClient | SqlClient.SqlClient | Scope.Scope>> =>
  // The effect's own scope closes before the store's connections do: a worker forked into it
  // must stop (and release its listening connection) before the pool shuts down.
  Effect.scoped(Effect.flatMap(resolveUrl(flags), (url) => Effect.provide(Effect.scoped(effect), storeLayer(flags, url)))) as any
