/**
 * Attempt logs (core `AttemptLogs`; migration 0029): one row per claim, keyed by run and fence.
 * A failed attempt's lines are written by its guarded failure's own statement (`withFailure`, a
 * CTE over the rows the guarded UPDATE matched), so a failure the fence rejects writes none; a
 * completed attempt's after its completion, for the runs that stand completed under that very
 * fence (`keepCompleted`); and they are deleted with their run (`forgetting`). Every write applies
 * `AttemptLogStorage.bound` first, whoever the caller.
 */
import type { AttemptLogs, FailRequest, LeaseKey } from "@leasehold/core"
import { AttemptLogStorage } from "@leasehold/core/store"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import * as read from "./read.js"

/**
 * A CTE of the fail statement (guarded.ts › fail) writing the attempt's lines for the row its
 * guarded UPDATE `f` returned: none when the guard matched nothing. Nothing at all without lines.
 */
export const withFailure = (sql: SqlClient.SqlClient, s: StoreSchema, request: FailRequest) => {
  if (request.log === undefined) return sql``
  const bounded = AttemptLogStorage.bound(request.log)
  return sql`, attempt_log AS (
        INSERT INTO ${s.attemptLogs(sql)} (run_id, fence, attempt, outcome, lines, dropped)
        SELECT id, fence, ${bounded.attempt}::int, 'failed', ${AttemptLogStorage.encodeLines(bounded.lines)}::jsonb,
          ${bounded.dropped}::int
        FROM f
        ON CONFLICT (run_id, fence) DO NOTHING
      )`
}

/**
 * A CTE of a statement that deletes runs (their ids in the CTE `deleted`): their attempts' lines
 * go with them.
 */
export const forgetting = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql`forgotten_logs AS (
        DELETE FROM ${s.attemptLogs(sql)} WHERE run_id = ANY(ARRAY(SELECT id FROM deleted))
      ), `

/** A completed attempt's lines, to keep once its completion has committed. */
export interface CompletedLog extends LeaseKey {
  readonly log: AttemptLogs.AttemptLogInput
}

/**
 * Keeps completed attempts' lines in one statement, each only while its run stands completed under
 * the fence given (read through `runs_now`, so a run completed in the ledger counts); a run
 * completed by a later claim, or deleted by its completion, gets none. Returns the runs kept.
 */
export const keepCompleted = (sql: SqlClient.SqlClient, s: StoreSchema, logs: ReadonlyArray<CompletedLog>) => {
  if (logs.length === 0) return Effect.succeed([] as ReadonlyArray<string>)
  const bounded = logs.map((l) => AttemptLogStorage.bound(l.log))
  return Effect.map(
    sql<{ id: string }>`
      INSERT INTO ${s.attemptLogs(sql)} (run_id, fence, attempt, outcome, lines, dropped)
      SELECT r.id, r.fence, t.attempt, 'completed', t.lines, t.dropped
      FROM unnest(${logs.map((l) => l.runId)}::bigint[], ${logs.map((l) => String(l.fence))}::bigint[],
        ${bounded.map((b) => b.attempt)}::int[], ${bounded.map((b) => AttemptLogStorage.encodeLines(b.lines))}::jsonb[],
        ${bounded.map((b) => b.dropped)}::int[]) AS t(id, fence, attempt, lines, dropped)
      JOIN ${s.runsNow(sql)} r ON r.id = t.id AND r.fence = t.fence AND r.state = 'completed'
      ON CONFLICT (run_id, fence) DO NOTHING
      RETURNING run_id::text AS id`,
    (rows) => rows.map((r) => r.id)
  )
}

interface Row {
  readonly fence: bigint
  readonly attempt: number
  readonly outcome: "failed" | "completed"
  readonly lines: unknown
  readonly dropped: number
  readonly at: Date
}

/** A run's kept lines, oldest claim first; `RunNotFound` when there is no such run. */
export const list = (sql: SqlClient.SqlClient, s: StoreSchema, runId: string) =>
  Effect.gen(function*() {
    const run = yield* read.get(sql, s, runId)
    const rows = yield* sql<Row>`
      SELECT fence, attempt, outcome, lines, dropped, at FROM ${s.attemptLogs(sql)}
      WHERE run_id = ${run.id}::bigint ORDER BY fence`
    return rows.map((row): AttemptLogs.AttemptLog => ({
      runId: run.id,
      fence: Number(row.fence),
      attempt: row.attempt,
      outcome: row.outcome,
      lines: AttemptLogStorage.decodeLines(row.lines),
      dropped: row.dropped,
      at: row.at
    }))
  })
