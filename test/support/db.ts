/** Test access to the run's PostgreSQL: a fresh schema per store, over a real server. */
import { Database, PgRunStore } from "@leasehold/sql"
import { Layer } from "effect"
import { inject } from "vitest"

export const databaseUrl = (): string => inject("databaseUrl")

export const freshSchema = (prefix = "t"): string => `${prefix}_${Math.random().toString(36).slice(2, 10)}`

/** A store in a new schema, with the PgClient it uses (for direct SQL in assertions). */
export const layerStore = (
  schema: string = freshSchema(),
  maxConnections = 10,
  options: PgRunStore.PgRunStoreOptions = {}
) =>
  PgRunStore.layer({ ...options, schema }).pipe(
    Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections }))
  )

/**
 * SQL that moves a running run's lease expiry to `at` (an SQL timestamptz expression), wherever
 * it is kept: a run the batch ledger holds is moved to its row with that expiry (its batch's other
 * runs keep theirs), a run its row holds has the row's expiry set.
 */
export const setLeaseExpirySql = (schema: string, runId: string | number, at: string): string =>
  // The hold is a one-time filter, evaluated once before the row is looked at (and so even when
  // the row, still in state ledger, does not match).
  `UPDATE "${schema}".runs SET lease_expires_at = ${at}
   WHERE (SELECT "${schema}".hold(ARRAY[${Number(runId)}]::bigint[], ${at})) >= 0 AND id = ${
    Number(runId)
  } AND state = 'running'`
