/**
 * How a command reaches its database: `--database-url`, else `DATABASE_URL`, else the embedded
 * PostgreSQL with its data in the project-local `.leasehold/pgdata` folder.
 *
 * @since 0.1.0
 */
import type { PgClient } from "@effect/sql-pg"
import type { RunStore } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Layer, Option, Schema, type Scope } from "effect"
import { type Migrator, SqlClient, type SqlError } from "effect/sql"
import * as path from "node:path"

/** The schema holds no Leasehold store: `leasehold migrate` was never run against it. */
export class StoreMissing extends Schema.TaggedError<StoreMissing>()("StoreMissing", { schema: Schema.String }) {
  override get message(): string {
    return `no Leasehold store in schema "${this.schema}" (run \`leasehold migrate\` first, or check --schema)`
  }
}

/** Everything that can go wrong reaching the store. */
export type ConnectionError =
  | EmbeddedPostgres.EmbeddedPostgresError
  | SqlError.SqlError
  | Migrator.MigrationError
  | StoreMissing

/** @category models */
export interface ConnectionFlags {
  readonly databaseUrl: Option.Option<string>
  readonly schema: string
}

export interface StoreOptions {
  /**
   * Create or upgrade the schema first (default true). Commands that only read or act on existing
   * runs pass false: they must not create a store as a side effect of a typo in `--schema`.
   */
  readonly migrate?: boolean | undefined
  /** What becomes of completed runs (the worker's `--completed-runs`). Default keep. */
  readonly completedRuns?: PgRunStore.CompletedRuns | undefined
}

export const embeddedDataDir = path.resolve(process.env.LEASEHOLD_DATA_DIR ?? ".leasehold/pgdata")

/** The URL to use, starting the embedded server in the current scope when none is configured. */
export const resolveUrl = (
  flags: ConnectionFlags
): Effect.Effect<string, EmbeddedPostgres.EmbeddedPostgresError, Scope.Scope> =>
  // With a fallback given, MissingUrl cannot happen.
  Effect.catchTag(
    Database.resolveUrl({
      url: Option.getOrUndefined(flags.databaseUrl),
      fallback: EmbeddedPostgres.url({ dataDir: embeddedDataDir })
    }),
    "MissingUrl",
    (e) => Effect.die(e)
  )

/** PgClient + RunStore for the connection flags. */
export const layerStore = (flags: ConnectionFlags, url: string, options: StoreOptions = {}) =>
  PgRunStore.layer({ schema: flags.schema, migrate: options.migrate ?? true, completedRuns: options.completedRuns })
    .pipe(
      Layer.provideMerge(Database.layerFromUrl(url))
    )

/** Fails with `StoreMissing` unless the schema holds the store's tables. */
export const requireStore = (schema: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ present: boolean }>`SELECT to_regclass(${`"${schema}".runs`}) IS NOT NULL AS present`
    if (row?.present !== true) return yield* Effect.fail(new StoreMissing({ schema }))
  })

/**
 * Runs `effect` with the layer built for the resolved URL. The effect's own scope closes before the
 * layer's connections do: a worker forked into it must stop (and release its listening
 * connection) before the pool shuts down.
 */
const withConnection = <A, E, R, ROut, LE>(
  flags: ConnectionFlags,
  layer: (url: string) => Layer.Layer<ROut, LE>,
  effect: Effect.Effect<A, E, R>
) => Effect.scoped(Effect.flatMap(resolveUrl(flags), (url) => Effect.provide(Effect.scoped(effect), layer(url))))

/** Runs `effect` with a RunStore (and its PgClient) for the connection flags. */
export const withStore = <A, E, R>(
  flags: ConnectionFlags,
  effect: Effect.Effect<A, E, R>,
  options: StoreOptions = {}
): Effect.Effect<
  A,
  E | ConnectionError,
  Exclude<R, RunStore | PgClient.PgClient | SqlClient.SqlClient | Scope.Scope>
> => {
  const checked = options.migrate === false ? Effect.andThen(requireStore(flags.schema), effect) : effect
  return withConnection(flags, (url) => layerStore(flags, url, options), checked) as any
}

/** Runs `effect` with only a PgClient (no store built, no migration). */
export const withClient = <A, E, R>(
  flags: ConnectionFlags,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | ConnectionError, Exclude<R, PgClient.PgClient | SqlClient.SqlClient | Scope.Scope>> =>
  withConnection(flags, (url) => Database.layerFromUrl(url), effect) as any
