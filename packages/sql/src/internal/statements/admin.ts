/**
 * Operator and application transitions: resume a suspended run, cancel, retry. Cancel and retry
 * take a run away from whoever may hold it, so both advance the fence: the fence alone decides.
 */
import {
  InvalidTransition,
  Json,
  OperatorActions,
  type ResumeCheck,
  type RunFilter,
  RunNotFound,
  type RunState,
  SignalTokenNotFound
} from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { admitInPassing } from "./admit.js"
import * as ledger from "./ledger.js"
import * as rate from "./rate.js"
import { filterCondition } from "./read.js"
import { isRunId } from "./rows.js"
import { openLedgerRuns } from "./sample.js"

const explain = (sql: SqlClient.SqlClient, s: StoreSchema, runId: string, operation: string) =>
  Effect.gen(function*() {
    const rows = yield* sql<{ id: string; state: RunState }>`
      SELECT id::text AS id, state FROM ${s.runsNow(sql)} WHERE id = ${runId}::bigint`
    const row = rows[0]
    return yield* row === undefined
      ? Effect.fail(new RunNotFound({ runId }))
      : Effect.fail(new InvalidTransition({ runId: row.id, state: row.state, operation }))
  })

/**
 * Makes the suspended run that `target` selects claimable with the signal's payload; the
 * re-claim takes a higher fence. Returns the run's id, or nothing when no suspended run matched.
 * A resumed run under a key limit waits in its key's line (migration 0013): it is admitted at
 * once if its key has room and no older run of the key waits.
 */
export const resumeWhere = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  target: Statement.Fragment,
  payload: string,
  actor?: OperatorActions.Actor
) =>
  Effect.gen(function*() {
    const rows = yield* resumeStatement(sql, s, target, payload, actor)
    yield* admitKeysOf(sql, s, rows)
    return rows
  })

/** An operator's name and where from, as JSON text for an event's detail (`null` for the application's own writes). */
const actorDetail = (actor: OperatorActions.Actor | undefined) =>
  actor === undefined ? null : JSON.stringify(RunStorage.detailOf(actor))

const resumeStatement = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  target: Statement.Fragment,
  payload: string,
  actor?: OperatorActions.Actor
) => {
  const outcome = `{"_tag":"Signalled","payload":${payload}}`
  return sql<{ id: string; kind: string; queue: string; concurrency_key: string | null }>`
    WITH target AS (
      SELECT id FROM ${s.runs(sql)} WHERE ${target} AND state = 'suspended' FOR UPDATE
    ), resumed AS (
      UPDATE ${s.runs(sql)} r SET
        state = 'pending', run_at = now(),
        signals = r.signals || jsonb_build_object(r.signal_name, ${outcome}::jsonb),
        signal_name = NULL, signal_token = NULL, suspend_deadline = NULL, updated_at = now()
      FROM target t WHERE r.id = t.id AND r.state = 'suspended'
      RETURNING r.id, r.fence, r.queue, r.kind, r.concurrency_key
    ), history AS (
      INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
      SELECT id, fence, 'resumed',
        jsonb_build_object('payload', ${payload}::jsonb) || coalesce(${actorDetail(actor)}::jsonb, '{}'::jsonb)
      FROM resumed
    )
    SELECT id::text AS id, kind, queue, concurrency_key, pg_notify(${s.channel}, 'q:' || queue) FROM resumed`
}

const encodePayload = (payload: unknown) => Json.encode(payload ?? null, "resume payload")

/**
 * The resume, after `check` when there is one: the suspended run `target` selects is locked first
 * (`FOR UPDATE`), so the run checked is the run resumed, awaiting the same signal; a refusal rolls
 * the transaction back with nothing written.
 */
const checkedResume = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  target: Statement.Fragment,
  payload: string,
  check: ResumeCheck | undefined,
  actor: OperatorActions.Actor | undefined
) =>
  check === undefined ? resumeWhere(sql, s, target, payload, actor) : sql.withTransaction(Effect.gen(function*() {
    const [run] = yield* sql<{ kind: string; signal_name: string }>`
      SELECT kind, signal_name FROM ${s.runs(sql)} WHERE ${target} AND state = 'suspended' FOR UPDATE`
    if (run !== undefined) yield* check({ kind: run.kind, signal: run.signal_name })
    return yield* resumeWhere(sql, s, target, payload, actor)
  }))

/** Resumes the suspended run with this id. */
export const resumeById = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  runId: string,
  payload: unknown,
  actor?: OperatorActions.Actor,
  check?: ResumeCheck
) =>
  Effect.gen(function*() {
    if (!isRunId(runId)) return yield* Effect.fail(new RunNotFound({ runId }))
    const encoded = yield* encodePayload(payload)
    const rows = yield* checkedResume(sql, s, sql`id = ${runId}::bigint`, encoded, check, actor)
    if (rows.length === 0) return yield* explain(sql, s, runId, "resume")
    return rows[0]!.id
  })

/** Resumes the suspended run holding this signal token (unique among suspended runs). */
export const resumeByToken = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  token: string,
  payload: unknown,
  actor?: OperatorActions.Actor,
  check?: ResumeCheck
) =>
  Effect.gen(function*() {
    // A token no run could hold (a NUL, too long) names no run: nothing to look up.
    if (!RunStorage.isStorableToken(token)) return yield* Effect.fail(new SignalTokenNotFound({ token }))
    const encoded = yield* encodePayload(payload)
    const rows = yield* checkedResume(sql, s, sql`signal_token = ${token}`, encoded, check, actor)
    if (rows.length === 0) return yield* Effect.fail(new SignalTokenNotFound({ token }))
    return rows[0]!.id
  })

/** A fixed list of states as SQL: `('a', 'b')` (constants, never input). */
const stateList = (states: ReadonlyArray<RunState>) => (sql: SqlClient.SqlClient) =>
  sql.literal(`(${states.map((state) => `'${state}'`).join(", ")})`)

// What cancel and retry write, for one run or every run a filter selects. Both take the run from
// whoever may hold it, so both advance the fence.
const cancelSet = (sql: SqlClient.SqlClient) =>
  sql`state = 'cancelled', fence = fence + 1, lease_owner = NULL, lease_expires_at = NULL,
    signal_name = NULL, signal_token = NULL, suspend_deadline = NULL, finished_at = now(), updated_at = now()`
const cancellable = stateList(["pending", "running", "suspended"])
// A retried run is governed by the rate limits in force now: a limit declared or removed while it
// had ended did not reach it (only unfinished runs are regoverned).
const retrySet = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql`state = 'pending', fence = fence + 1, attempt = 0, run_at = now(),
    result = NULL, error = NULL, finished_at = NULL, updated_at = now(),
    rate_scope = ${sql.literal(rate.governing(s, "runs.kind", "runs.queue"))}`
const retriable = stateList(["failed", "cancelled"])

/** Cancels the runs `target` selects that have not ended; a running holder is told to stop. */
const cancelWhere = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  target: Statement.Fragment,
  actor?: OperatorActions.Actor
) =>
  sql<{ id: string }>`
    WITH c AS (
      UPDATE ${s.runs(sql)} SET ${cancelSet(sql)}
      WHERE ${target} AND state IN ${cancellable(sql)}
      RETURNING id, fence
    ), history AS (
      INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
      SELECT id, fence, 'cancelled', ${actorDetail(actor)}::jsonb FROM c
    )
    SELECT id::text AS id, pg_notify(${s.channel}, 'c:' || id) FROM c ORDER BY c.id`

/**
 * Puts the failed or cancelled runs `target` selects back to pending with fresh attempts. Keyed
 * runs under a limit wait in their keys' lines, admitted at once where their keys have room.
 */
const retryWhere = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  target: Statement.Fragment,
  actor?: OperatorActions.Actor
) =>
  Effect.gen(function*() {
    const rows = yield* sql<{ id: string; kind: string; queue: string; concurrency_key: string | null }>`
      WITH r AS (
        UPDATE ${s.runs(sql)} SET ${retrySet(sql, s)}
        WHERE ${target} AND state IN ${retriable(sql)}
        RETURNING id, fence, queue, kind, concurrency_key
      ), history AS (
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
        SELECT id, fence, 'retried', ${actorDetail(actor)}::jsonb FROM r
      ), woken AS (
        SELECT pg_notify(${s.channel}, 'q:' || queue) FROM (SELECT DISTINCT queue FROM r) q
      )
      SELECT id::text AS id, kind, queue, concurrency_key, (SELECT count(*) FROM woken) AS woken FROM r ORDER BY r.id`
    yield* admitKeysOf(sql, s, rows)
    return rows
  })

/** The admission after a resume or a retry: the runs' keys, where a limit governs them. */
const admitKeysOf = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  rows: ReadonlyArray<{ readonly kind: string; readonly queue: string; readonly concurrency_key: string | null }>
) => {
  const keyed = rows.filter((r) => r.concurrency_key !== null)
  return keyed.length === 0 ? Effect.void : admitInPassing(sql, s, {
    kinds: keyed.map((r) => r.kind),
    queues: keyed.map((r) => r.queue),
    keys: keyed.map((r) => r.concurrency_key!)
  })
}

/** Cancels a run that has not ended. A running holder's fence is superseded and it is told to stop. */
export const cancel = (sql: SqlClient.SqlClient, s: StoreSchema, runId: string, actor?: OperatorActions.Actor) =>
  Effect.gen(function*() {
    if (!isRunId(runId)) return yield* Effect.fail(new RunNotFound({ runId }))
    // A run in the ledger moves to its row first, where the cancel's own statement decides.
    yield* ledger.hold(sql, s, [runId])
    const rows = yield* cancelWhere(sql, s, sql`id = ${runId}::bigint`, actor)
    if (rows.length === 0) return yield* explain(sql, s, runId, "cancel")
  })

/** A failed or cancelled run back to pending with fresh attempts; the fence still rises. */
export const retry = (sql: SqlClient.SqlClient, s: StoreSchema, runId: string, actor?: OperatorActions.Actor) =>
  Effect.gen(function*() {
    if (!isRunId(runId)) return yield* Effect.fail(new RunNotFound({ runId }))
    const rows = yield* retryWhere(sql, s, sql`id = ${runId}::bigint`, actor)
    if (rows.length === 0) return yield* explain(sql, s, runId, "retry")
  })

/** Cancels every unfinished run the filter selects, in one statement; returns their ids. */
export const cancelMany = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  filter: RunFilter,
  actor?: OperatorActions.Actor
) =>
  Effect.andThen(
    holdMatching(sql, s, filter),
    Effect.map(cancelWhere(sql, s, filterCondition(sql, filter), actor), (rows) => rows.map((r) => r.id))
  )

/**
 * Moves to their rows the runs of the ledger a cancel by `filter` may take: those pending (their
 * ready rows, or waiting in their keys' lines) and those running (open in their batches). Completed ones stay where they are.
 */
const holdMatching = (sql: SqlClient.SqlClient, s: StoreSchema, filter: RunFilter) =>
  filter.state !== undefined && filter.state !== "pending" && filter.state !== "running"
    ? Effect.void
    : Effect.asVoid(sql`SELECT ${sql.literal(`"${s.schema}".hold`)}(ARRAY(
        SELECT r.id FROM ${s.runs(sql)} r
        WHERE r.id IN (
          SELECT y.id FROM ${s.ready(sql)} y WHERE y.ledger
          UNION ALL
          SELECT w.id FROM ${s.waiting(sql)} w
          UNION ALL
          SELECT o.id FROM ${openLedgerRuns(sql, s)} o
        ) AND r.state = 'ledger' AND ${filterCondition(sql, { ...filter, state: undefined })}), NULL)`)

/** Retries every failed or cancelled run the filter selects, in one statement; returns their ids. */
export const retryMany = (sql: SqlClient.SqlClient, s: StoreSchema, filter: RunFilter, actor?: OperatorActions.Actor) =>
  Effect.map(retryWhere(sql, s, filterCondition(sql, filter), actor), (rows) => rows.map((r) => r.id))
