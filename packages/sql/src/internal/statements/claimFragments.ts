/**
 * Fragments every statement that grants a claim reads: the claims (claim.ts, rate.ts) and the
 * hand-off's claim of a key's next run (admit.ts). Kept apart from each statement so the fence
 * floor and the paused queues are read the same way wherever a run is claimed.
 */
import type { SqlClient } from "effect/sql"
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
