/**
 * Retention of history (core `Retention`, ADR 0028): the store's maintenance function
 * `maintain_history` (migration 0033) creates the id ranges ahead and drops the ranges reclaimed;
 * the status reads the ranges and the catalog's estimates, never the history itself.
 */
import type { Retention } from "@leasehold/core"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"

/** The maintenance, one caller at a time (its advisory lock); `rangeFloor`: the smallest range created. */
export const maintain = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: Retention.MaintainRequest,
  rangeFloor: number
) =>
  Effect.map(
    sql<{ action: Retention.Action["action"]; tbl: Retention.Action["table"]; lo: string; hi: string }>`
      SELECT action, tbl, lo::text AS lo, hi::text AS hi FROM ${sql.literal(`"${s.schema}".maintain_history`)}(
        ${Duration.toMillis(request.keep)}::float8 * interval '1 millisecond',
        ${Duration.toMillis(request.keepFailed)}::float8 * interval '1 millisecond',
        ${rangeFloor}::bigint, ${request.dryRun})`,
    (rows) => rows.map((r): Retention.Action => ({ action: r.action, table: r.tbl, from: r.lo, to: r.hi }))
  )

/** The ranges kept, and the runs and bytes of `runs` by the catalog's estimates (`reltuples`, relation sizes). */
export const status = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  Effect.gen(function*() {
    const ranges = yield* sql<
      { tbl: "runs" | "claim_batches"; lo: string; hi: string; created_at: Date; quiet_since: Date | null }
    >`
      SELECT tbl, lo::text AS lo, hi::text AS hi, created_at, quiet_since
      FROM ${sql.literal(`"${s.schema}".history_ranges`)} ORDER BY tbl DESC, lo`
    const [size] = yield* sql<{ runs: string; bytes: string }>`
      SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint::text AS runs,
        coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint::text AS bytes
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = ${`"${s.schema}".runs`}::regclass`
    const runsRanges = ranges.filter((r) => r.tbl === "runs" && r.lo !== r.hi)
    return {
      ranges: ranges.map((r) => ({
        table: r.tbl,
        from: r.lo,
        to: r.hi,
        createdAt: r.created_at,
        quietSince: r.quiet_since
      })),
      runs: Number(size!.runs),
      bytes: Number(size!.bytes),
      oldestKeptAt: runsRanges.length === 0 ? null : runsRanges[0]!.created_at
    } satisfies Retention.Status
  })
