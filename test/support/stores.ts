/**
 * Two independent stores (two connection pools, as two worker processes would have) over one
 * schema, plus helpers that drive lease time through the database rather than by sleeping.
 */
import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { databaseUrl, freshSchema, setLeaseExpirySql } from "./db.js"

export interface Stores {
  readonly schema: string
  readonly a: RunStore["Service"]
  readonly b: RunStore["Service"]
  readonly sql: SqlClient.SqlClient
  /** Store b's own client: a transaction of b's is begun on it. */
  readonly sqlB: SqlClient.SqlClient
}

const storeOn = (
  schema: string,
  options: PgRunStore.PgRunStoreOptions,
  url = databaseUrl(),
  client: Database.DatabaseOptions = {}
) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      PgRunStore.layer({ ...options, schema }).pipe(
        Layer.provideMerge(Database.layerFromUrl(url, { maxConnections: 4, ...client }))
      )
    )
    return { store: Context.get(context, RunStore), sql: Context.get(context, SqlClient.SqlClient) }
  })

/** Scoped: two stores on a fresh schema, built with the given options. */
export const twoStoresWith = (options: PgRunStore.PgRunStoreOptions) =>
  Effect.gen(function*() {
    const schema = freshSchema()
    const first = yield* storeOn(schema, options)
    const second = yield* storeOn(schema, options)
    return { schema, a: first.store, b: second.store, sql: first.sql, sqlB: second.sql } satisfies Stores
  })

/** Scoped: two stores on a fresh schema, reached at `url` (a pooler's, say) with these client options. */
export const twoStoresAt = (url: string, options: PgRunStore.PgRunStoreOptions, client: Database.DatabaseOptions) =>
  Effect.gen(function*() {
    const schema = freshSchema()
    const first = yield* storeOn(schema, options, url, client)
    const second = yield* storeOn(schema, options, url, client)
    return { schema, a: first.store, b: second.store, sql: first.sql, sqlB: second.sql } satisfies Stores
  })

/** Scoped: two stores on a fresh schema. */
export const twoStores = twoStoresWith({})

/** Moves a run's lease expiry into the past: the database's clock, not a sleep, makes it expire. */
export const expireLease = (stores: Stores, runId: string) =>
  stores.sql.unsafe(setLeaseExpirySql(stores.schema, runId, "now() - interval '1 second'"))

export const readRun = (stores: Stores, runId: string) =>
  Effect.map(
    stores.sql.unsafe<
      { state: string; fence: bigint; lease_owner: string | null; lease_expires_at: Date | null; attempt: number }
    >(
      `SELECT state, fence, lease_owner, lease_expires_at, attempt FROM "${stores.schema}".runs_now WHERE id = ${
        Number(runId)
      }`
    ),
    (rows) => ({ ...rows[0]!, fence: Number(rows[0]!.fence) })
  )
