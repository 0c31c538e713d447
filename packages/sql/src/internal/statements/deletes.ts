/**
 * Deleting runs and the operators' audit (migration 0028): a delete counts the runs a filter
 * selects as each stands (`runs_now`), then deletes them at most `deleteBatchSize` per
 * transaction, the lowest ids first and none above the highest counted (runs enqueued since are
 * not taken), with everything kept of them: history, unique windows, callbacks, signal
 * deliveries, rate starts, attempt logs, a workflow's journal and the ledger's batches (ledger.ts ›
 * `forgetDeleted`); their ready, waiting and key_holds rows go with their row (its triggers).
 */
import { DeleteCountChanged, type DeleteRequest, type OperatorActions, type RunFilter, RunsBusy } from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { admitInPassing } from "./admit.js"
import * as ledger from "./ledger.js"
import { filterCondition } from "./read.js"
import { num, toDate } from "./rows.js"
import { idleBound, readCommitted } from "./transactions.js"

/** How long a delete's transaction may sit idle between its statements before the server ends it. */
const idleLimit = Duration.seconds(5)

/** The selected runs as each stands, how many are running, and the highest id. */
const counted = (sql: SqlClient.SqlClient, s: StoreSchema, filter: RunFilter) =>
  Effect.map(
    sql<{ count: bigint; busy: bigint; max_id: string | null }>`
      SELECT count(*) AS count, count(*) FILTER (WHERE r.state = 'running') AS busy, max(r.id)::text AS max_id
      FROM ${s.runsNow(sql)} r WHERE ${filterCondition(sql, filter)}`,
    (rows) => ({ count: num(rows[0]!.count), busy: num(rows[0]!.busy), maxId: rows[0]!.max_id ?? "0" })
  )

export const countDeletable = (sql: SqlClient.SqlClient, s: StoreSchema, filter: RunFilter) =>
  Effect.map(counted(sql, s, filter), ({ busy, count }): OperatorActions.DeleteCount => ({ count, busy }))

export const deleteRuns = (sql: SqlClient.SqlClient, s: StoreSchema, request: DeleteRequest) =>
  Effect.gen(function*() {
    const found = yield* counted(sql, s, request.filter)
    if (found.count !== request.expected) {
      return yield* Effect.fail(new DeleteCountChanged({ expected: request.expected, found: found.count }))
    }
    if (found.busy > 0) return yield* Effect.fail(new RunsBusy({ busy: found.busy, deleted: 0 }))
    let deleted = 0
    // Each batch reads on from the last id the one before deleted (by the primary key), not
    // through the dead rows of the batches before it.
    let after = "0"
    for (;;) {
      const batch = yield* deleteBatch(sql, s, request, after, found.maxId, deleted)
      if (batch.deleted === 0) return { deleted }
      deleted += batch.deleted
      after = batch.last
    }
  })

type Deleted = { id: string; kind: string; queue: string; concurrency_key: string | null }

/** One transaction: the next batch of selected runs (ids above `after`), or 0 when none is left. */
const deleteBatch = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: DeleteRequest,
  after: string,
  maxId: string,
  deletedBefore: number
) =>
  Effect.gen(function*() {
    const busy = (n: number) => Effect.fail(new RunsBusy({ busy: n, deleted: deletedBefore }))
    // READ COMMITTED whatever the session asks: the checks below must see what committed while
    // their locks were waited for. A delete gone silent mid-batch lets its locks go (idle bound).
    const rows = yield* readCommitted(sql.withTransaction(Effect.gen(function*() {
      yield* sql`SELECT ${idleBound(sql, idleLimit)}`
      const picked = yield* sql<{ id: string }>`
        SELECT r.id::text AS id FROM ${s.runsNow(sql)} r
        WHERE r.id > ${after}::bigint AND r.id <= ${maxId}::bigint AND ${filterCondition(sql, request.filter)}
        ORDER BY r.id LIMIT ${RunStorage.deleteBatchSize}`
      if (picked.length === 0) return [] as ReadonlyArray<Deleted>
      const ids = picked.map((r) => r.id)
      // Locked in `hold`'s order (ready, waiting, then the claim batches): a claim skips a ready
      // row held here, and one that took it first has committed by the check below.
      yield* sql`SELECT 1 FROM ${s.ready(sql)} WHERE id = ANY(${ids}::bigint[]) ORDER BY id FOR UPDATE`
      yield* sql`SELECT 1 FROM ${s.waiting(sql)} WHERE id = ANY(${ids}::bigint[]) ORDER BY id FOR UPDATE`
      const [running] = yield* sql<{ n: bigint }>`
        SELECT count(*) AS n FROM ${s.runsNow(sql)} WHERE id = ANY(${ids}::bigint[]) AND state = 'running'`
      if (num(running!.n) > 0) return yield* busy(num(running!.n))
      const inOpenBatches = yield* ledger.forgetDeleted(sql, s, ids)
      if (inOpenBatches.length > 0) return yield* busy(inOpenBatches.length)
      const gone = yield* deleteStatement(sql, s, ids, request)
      // A run that became running since the check (a suspension's deadline claimed) is not
      // deleted: the whole batch is refused, and rolled back.
      const [left] = yield* sql<{ n: bigint }>`SELECT count(*) AS n FROM ${
        s.runs(sql)
      } WHERE id = ANY(${ids}::bigint[])`
      if (num(left!.n) > 0) return yield* busy(num(left!.n))
      return gone
    })))
    // A slot a deleted run held goes to its key's next run, as after a cancel.
    const keyed = rows.filter((r) => r.concurrency_key !== null)
    if (keyed.length > 0) {
      yield* admitInPassing(sql, s, {
        kinds: keyed.map((r) => r.kind),
        queues: keyed.map((r) => r.queue),
        keys: keyed.map((r) => r.concurrency_key!)
      })
    }
    return { deleted: rows.length, last: rows.at(-1)?.id ?? after }
  })

const deleteStatement = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  ids: ReadonlyArray<string>,
  request: DeleteRequest
) => {
  const actor = request.actor
  const audit = actor === undefined ? sql`` : sql`, audit AS (
      INSERT INTO ${s.operatorActions(sql)} (by, via, action, target, detail)
      SELECT ${actor.name}, ${actor.via}, 'runs.delete', ${RunStorage.auditedFilter(request.filter)},
        jsonb_build_object('count', count(*), 'ids', jsonb_agg(id::text ORDER BY id))
      FROM gone HAVING count(*) > 0
    )`
  // A workflow's journal is keyed by its execution: the run's idempotency key (isWorkflowRun).
  const executions = sql`(SELECT idempotency_key FROM gone
    WHERE kind LIKE 'workflow/%' AND idempotency_key LIKE kind || '/%')`
  return sql<Deleted>`
    WITH gone AS (
      DELETE FROM ${s.runs(sql)} WHERE id = ANY(${ids as Array<string>}::bigint[]) AND state <> 'running'
      RETURNING id, kind, queue, concurrency_key, idempotency_key
    ), events AS (
      DELETE FROM ${s.events(sql)} WHERE run_id IN (SELECT id FROM gone)
    ), keys AS (
      DELETE FROM ${s.idempotencyKeys(sql)} WHERE run_id IN (SELECT id FROM gone)
    ), unique_holds AS (
      DELETE FROM ${s.uniqueHolds(sql)} WHERE run_id IN (SELECT id FROM gone)
    ), callbacks AS (
      DELETE FROM ${s.callbacks(sql)} WHERE run_id IN (SELECT id FROM gone)
    ), deliveries AS (
      DELETE FROM ${s.deliveries(sql)} WHERE run_id IN (SELECT id FROM gone)
    ), rate_starts AS (
      DELETE FROM ${s.rateStarts(sql)} WHERE run_id IN (SELECT id FROM gone)
    ), attempt_logs AS (
      DELETE FROM ${s.attemptLogs(sql)} WHERE run_id IN (SELECT id FROM gone)
    ), activities AS (
      DELETE FROM ${s.workflowActivities(sql)} WHERE execution IN ${executions}
    ), deferreds AS (
      DELETE FROM ${s.workflowDeferreds(sql)} WHERE execution IN ${executions}
    ), clocks AS (
      DELETE FROM ${s.workflowClocks(sql)} WHERE execution IN ${executions}
    ), awaits AS (
      DELETE FROM ${s.workflowAwaits(sql)} WHERE execution IN ${executions}
    )${audit}
    SELECT id::text AS id, kind, queue, concurrency_key FROM gone ORDER BY id`
}

/** Records an operator's action in the audit. */
export const recordAction = (sql: SqlClient.SqlClient, s: StoreSchema, record: OperatorActions.ActionRecord) =>
  Effect.asVoid(sql`
    INSERT INTO ${s.operatorActions(sql)} (by, via, action, target, detail)
    VALUES (${record.actor.name}, ${record.actor.via}, ${record.action}, ${record.target},
      ${record.detail === undefined ? null : JSON.stringify(record.detail)}::jsonb)`)

/** The audit, newest first. */
export const actions = (sql: SqlClient.SqlClient, s: StoreSchema, query: OperatorActions.ActionsQuery) =>
  Effect.map(
    sql<
      { id: string; at: Date; by: string; via: OperatorActions.Via; action: string; target: string; detail: unknown }
    >`
      SELECT id::text AS id, at, by, via, action, target, detail FROM ${s.operatorActions(sql)}
      WHERE ${
      query.before === undefined
        ? sql`true`
        : /^[0-9]{1,18}$/.test(query.before)
        ? sql`id < ${query.before}::bigint`
        : sql`false`
    }
      ORDER BY id DESC LIMIT ${query.limit}`,
    (rows) => rows.map((r): OperatorActions.OperatorAction => ({ ...r, at: toDate(r.at) }))
  )
