/**
 * Fragments every statement that grants a claim reads: the claims (claim.ts, rate.ts) and the
 * hand-off's claim of a key's next run (admit.ts). Kept apart from each statement so the fence
 * floor and the paused queues are read the same way wherever a run is claimed.
 */
import type { SqlClient, Statement } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"

/**
 * The lowest fence a claim may grant on this server's timeline (`fence_floor()`, migration
 * `0012_fence_epoch`): read once per statement. After a promotion every claim jumps above what the
 * old primary granted, lost claims included (docs/adr/0016-failover-safe-fences.md).
 */
export const fenceFloor = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql`fence_floor AS MATERIALIZED (SELECT ${sql.literal(`"${s.schema}".fence_floor()`)} AS floor)`

/**
 * The request's queues that are not paused (`queues.ts`): an init plan, evaluated once per
 * statement, so every branch still reaches its runs by index.
 */
export const activeQueues = (sql: SqlClient.SqlClient, s: StoreSchema, queues: ReadonlyArray<string>) =>
  sql`ARRAY(SELECT DISTINCT u.name FROM unnest(${queues as Array<string>}::text[]) AS u(name)
    WHERE NOT EXISTS (SELECT 1 FROM ${s.pausedQueues(sql)} p WHERE p.queue = u.name))`

/** How a claim is written on its run's row: for whom, for how long, recorded when, and on which rows. */
export interface ClaimOnRow {
  readonly owner: string | null
  readonly ttlMs: number
  /**
   * The time the claim is recorded at (`claimed_at`): the statement's `now()`, or the rated claim's
   * `statement_timestamp()`, the time its window counted the start.
   */
  readonly claimedAt: "now()" | "statement_timestamp()"
  /** Claims only the rows where this holds; the others keep their columns (and hold no lease). */
  readonly when?: Statement.Fragment | undefined
}

/**
 * The `SET` list that claims a run `r` on its row, beside `fence_floor f` (`fenceFloor`): its fence
 * raised by 1 or to the floor, running, one more attempt, leased to the owner from the database's
 * `now()`, its suspension cleared, and the claim recorded on the row (the history reads it there
 * until a later claim supersedes it). Every statement that claims a run in its row writes these.
 */
export const claimAssignments = (sql: SqlClient.SqlClient, claim: ClaimOnRow) => {
  const { when } = claim
  // In a CASE the owner's type is stated: a statement that claims nothing has a null owner.
  const owner = when === undefined ? sql`${claim.owner}` : sql`${claim.owner}::text`
  const set = (column: string, value: Statement.Fragment, unclaimed: "keep" | "none" = "keep") =>
    when === undefined
      ? sql`${sql.literal(column)} = ${value}`
      : unclaimed === "keep"
      ? sql`${sql.literal(column)} = CASE WHEN ${when} THEN ${value} ELSE ${sql.literal(`r.${column}`)} END`
      : sql`${sql.literal(column)} = CASE WHEN ${when} THEN ${value} END`
  const fence = sql`greatest(r.fence + 1, f.floor)`
  const attempt = sql`r.attempt + 1`
  return sql.csv([
    set("fence", fence),
    set("state", sql`'running'`),
    set("attempt", attempt),
    set("lease_owner", owner, "none"),
    set("lease_expires_at", sql`now() + ${claim.ttlMs}::float8 * interval '1 millisecond'`, "none"),
    set("finished_at", sql`NULL`),
    set("signal_name", sql`NULL`),
    set("signal_token", sql`NULL`),
    set("suspend_deadline", sql`NULL`),
    set("claimed_by", owner),
    set("claimed_at", sql.literal(claim.claimedAt)),
    set("claimed_fence", fence),
    set("claimed_attempt", attempt),
    set("updated_at", sql`now()`)
  ])
}

/**
 * What a claim returns of each run it updated (`r`) that the worker reads (rows.ts › `ClaimRow`),
 * beside how long it waited and what each statement needs to order its runs. The time left until
 * the run's deadline is the database's (its `now()`), never the worker's.
 */
export const claimedColumns = (sql: SqlClient.SqlClient) =>
  sql.literal(`r.id, r.queue, r.kind, r.payload, r.attempt, r.max_attempts, r.fence, r.checkpoint, r.signals,
          r.concurrency_key, r.state, r.trace_parent, r.priority, ${timeoutColumns("r")}`)

/** A run's attempt timeout and the milliseconds left until its deadline (by `now()`), as a claim returns them. */
export const timeoutColumns = (run: string) =>
  `${run}.attempt_timeout_ms, (extract(epoch FROM ${run}.deadline - now()) * 1000)::float8 AS deadline_in_ms`
