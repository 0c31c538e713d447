/**
 * The workflow journal (docs/adr/0015-workflow-engine.md): what a workflow's replays find again.
 * An execution is a run, named by its idempotency key (`execution` below). Activity results are
 * written under the holder's fence; deferred outcomes and clock deadlines are first-write-wins.
 * A wake resumes the execution's run when it is suspended, and otherwise leaves a signal its
 * holder's next suspension finds, in one transaction holding the run's row.
 */
import { type LeaseKey, type RunState, WorkflowJournal } from "@leasehold/core"
import { Effect, Option } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { resumeWhere } from "./admin.js"
import { diagnose, inRow, toError } from "./guarded.js"
import * as ledger from "./ledger.js"

type Awaited = WorkflowJournal.Awaited
type ExecutionRun = WorkflowJournal.ExecutionRun
type Wake = WorkflowJournal.Wake
const { interruptSignalName, wakeSignal } = WorkflowJournal

export const executionRun = (sql: SqlClient.SqlClient, s: StoreSchema, execution: string) =>
  Effect.map(
    sql<{ id: string; state: RunState; fence: string; result: unknown; error: unknown; trace_parent: string | null }>`
      SELECT id::text AS id, state, fence::text AS fence, result, error, trace_parent FROM ${s.runsNow(sql)}
      WHERE id = (SELECT run_id FROM ${s.idempotencyKeys(sql)} WHERE key = ${execution})`,
    (rows) =>
      Option.map(Option.fromNullishOr(rows[0]), (row): ExecutionRun => ({
        runId: row.id,
        state: row.state,
        fence: Number(row.fence),
        result: row.result,
        error: row.error,
        traceParent: row.trace_parent
      }))
  )

export const activityResult = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  execution: string,
  activity: string,
  attempt: number
) =>
  Effect.map(
    sql<{ exit: unknown }>`
      SELECT exit FROM ${s.workflowActivities(sql)}
      WHERE execution = ${execution} AND activity = ${activity} AND attempt = ${attempt}`,
    (rows) => Option.map(Option.fromNullishOr(rows[0]), (row) => row.exit)
  )

/** An activity's recorded result and whether an interrupt of its execution is pending, in one read. */
export const activityStart = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  execution: string,
  activity: string,
  attempt: number
) =>
  Effect.map(
    sql<{ exit: unknown; interrupt_pending: boolean }>`
      SELECT
        (SELECT exit FROM ${
      s.workflowActivities(sql)
    } WHERE execution = ${execution} AND activity = ${activity} AND attempt = ${attempt}) AS exit,
        EXISTS (SELECT 1 FROM ${
      s.workflowDeferreds(sql)
    } WHERE execution = ${execution} AND name = ${interruptSignalName}) AS interrupt_pending`,
    (rows) => ({
      stored: Option.fromNullishOr(rows[0]?.exit ?? null),
      interruptPending: rows[0]?.interrupt_pending === true
    })
  )

/**
 * Records an activity's result under the holder's fence and returns the result that stands: this
 * one, or one an earlier holder recorded first. The holder's row is locked in share mode, so a
 * claim that would supersede it waits for this transaction, and a holder superseded first records
 * nothing (`FenceRejected`).
 */
export const recordActivity = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  lease: LeaseKey,
  execution: string,
  activity: string,
  attempt: number,
  exit: unknown
) =>
  Effect.gen(function*() {
    const rows = yield* inRow(
      sql,
      s,
      lease,
      sql<{ exit: unknown }>`
      WITH holder AS (
        SELECT id FROM ${s.runs(sql)}
        WHERE id = ${lease.runId}::bigint AND fence = ${lease.fence}::bigint AND state = 'running' COLLATE "C"
        FOR SHARE
      ), recorded AS (
        INSERT INTO ${s.workflowActivities(sql)} (execution, activity, attempt, fence, exit)
        SELECT ${execution}, ${activity}, ${attempt}, ${lease.fence}::bigint, ${JSON.stringify(exit)}::jsonb FROM holder
        ON CONFLICT (execution, activity, attempt) DO NOTHING
        RETURNING exit
      )
      SELECT exit FROM recorded
      UNION ALL
      SELECT a.exit FROM ${s.workflowActivities(sql)} a, holder
      WHERE a.execution = ${execution} AND a.activity = ${activity} AND a.attempt = ${attempt}`
    )
    if (rows.length > 0) return rows[0]!.exit
    // Not the holder, or a result recorded by a transaction this statement's snapshot predates.
    const stored = yield* activityResult(sql, s, execution, activity, attempt)
    const [diagnosis] = yield* diagnose(sql, s, "activity", [lease])
    if (
      diagnosis!.stored === diagnosis!.presented && diagnosis!.state === "running" && Option.isSome(stored)
    ) return stored.value
    return yield* Effect.fail(toError("activity", diagnosis!))
  })

/**
 * A deferred's outcome, or a clock's deadline passed by the database's clock (`clockDue`: the
 * clock's deferred is done without anyone completing it).
 */
export const deferredResult = (sql: SqlClient.SqlClient, s: StoreSchema, execution: string, name: string) =>
  Effect.map(
    // Not done: recorded as awaited (once), for the operator tools to name (`awaiting`). The
    // engine's own interrupt signal is read by every poll, never awaited by the workflow's code.
    sql<{ exit: unknown; clock_due: boolean }>`
      WITH found AS (
        SELECT exit, false AS clock_due FROM ${
      s.workflowDeferreds(sql)
    } WHERE execution = ${execution} AND name = ${name}
        UNION ALL
        SELECT NULL, true FROM ${s.workflowClocks(sql)}
        WHERE execution = ${execution} AND deferred = ${name} AND wake_at <= now()
        ORDER BY clock_due
        LIMIT 1
      ), awaited AS (
        INSERT INTO ${s.workflowAwaits(sql)} (execution, name)
        SELECT ${execution}, ${name} WHERE ${name}::text <> ${interruptSignalName}::text AND NOT EXISTS (SELECT 1 FROM found)
        ON CONFLICT (execution, name) DO NOTHING
      )
      SELECT exit, clock_due FROM found`,
    (rows): Option.Option<{ readonly exit: unknown } | "clockDue"> =>
      rows.length === 0 ? Option.none() : Option.some(rows[0]!.clock_due ? "clockDue" : { exit: rows[0]!.exit })
  )

/**
 * Wakes the execution's run, holding its row: resumed when suspended; when running, a signal
 * `wake/<fence>` is left that makes its holder's next suspension return at once. A pending run
 * needs nothing (its next claim replays), nor does a finished one.
 *
 * A run the ledger records (state `ledger` on its row) is first moved to its row (`ledger.hold`),
 * so that its row's lock orders the wake with its claim and its holder's writes as for any row
 * run. The move is a statement of its own before the row's lock: `hold` locks the run's claim
 * batch before its row, as every writer of the ledger does. The batch stays locked until the
 * wake's transaction, a few statements long, commits.
 */
const wakeLocked = (sql: SqlClient.SqlClient, s: StoreSchema, execution: string, reason: string) =>
  Effect.gen(function*() {
    const [recorded] = yield* sql<{ id: string; state: string }>`
      SELECT id::text AS id, state FROM ${s.runs(sql)} WHERE id = (SELECT run_id FROM ${
      s.idempotencyKeys(sql)
    } WHERE key = ${execution})`
    if (recorded === undefined) return "none" satisfies Wake as Wake
    if (recorded.state === "ledger") yield* ledger.hold(sql, s, [recorded.id])
    // Still `ledger` once held: it ended in the ledger (completed), and `none` answers below.
    const [run] = yield* sql<{ id: string; state: RunState; fence: string }>`
      SELECT id::text AS id, state, fence::text AS fence FROM ${
      s.runs(sql)
    } WHERE id = ${recorded.id}::bigint FOR UPDATE`
    if (run === undefined) return "none" satisfies Wake as Wake
    const payload = JSON.stringify({ wake: reason })
    if (run.state === "suspended") {
      yield* resumeWhere(sql, s, sql`id = ${run.id}::bigint`, payload)
      return "resumed" satisfies Wake as Wake
    }
    if (run.state !== "running") return "none" satisfies Wake as Wake
    const signal = wakeSignal(Number(run.fence))
    yield* sql`
      UPDATE ${s.runs(sql)} SET signals = signals || jsonb_build_object(${signal}::text,
        jsonb_build_object('_tag', 'Signalled', 'payload', ${payload}::jsonb)), updated_at = now()
      WHERE id = ${run.id}::bigint`
    return "signalled" satisfies Wake as Wake
  })

export const wake = (sql: SqlClient.SqlClient, s: StoreSchema, execution: string, reason: string) =>
  sql.withTransaction(wakeLocked(sql, s, execution, reason))

/** Records a deferred's outcome (the first stands) and wakes its run; false when it was done already. */
export const deferredDone = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  execution: string,
  name: string,
  exit: unknown
) =>
  sql.withTransaction(Effect.gen(function*() {
    const inserted = yield* sql`
      INSERT INTO ${s.workflowDeferreds(sql)} (execution, name, exit) VALUES (${execution}, ${name}, ${
      JSON.stringify(exit)
    }::jsonb)
      ON CONFLICT (execution, name) DO NOTHING RETURNING name`
    if (inserted.length === 0) return false
    yield* wakeLocked(sql, s, execution, name)
    return true
  }))

/** Takes a wake left for this holder, under its fence, so its next suspension waits again. */
export const consumeWake = (sql: SqlClient.SqlClient, s: StoreSchema, lease: LeaseKey) =>
  Effect.gen(function*() {
    const rows = yield* inRow(
      sql,
      s,
      lease,
      sql`
      UPDATE ${s.runs(sql)} SET signals = signals - ${wakeSignal(lease.fence)}::text, updated_at = now()
      WHERE id = ${lease.runId}::bigint AND fence = ${lease.fence}::bigint AND state = 'running' COLLATE "C"
      RETURNING id`
    )
    if (rows.length > 0) return
    const [diagnosis] = yield* diagnose(sql, s, "wake", [lease])
    return yield* Effect.fail(toError("wake", diagnosis!))
  })

/** A clock's deadline, counted by the database from now; the first schedule of a clock stands. */
export const scheduleClock = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  execution: string,
  deferred: string,
  durationMs: number
) =>
  sql`
    INSERT INTO ${s.workflowClocks(sql)} (execution, deferred, wake_at)
    VALUES (${execution}, ${deferred}, now() + ${durationMs}::float8 * interval '1 millisecond')
    ON CONFLICT (execution, deferred) DO NOTHING`.pipe(Effect.asVoid)

/** The database's clock, as an instant a later `nextClock` can be asked from. */
export const now = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<{ at: string }>`SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text AS at`,
    (rows) => rows[0]!.at
  )

/**
 * Milliseconds until the execution's earliest clock whose deferred is not done and that had not
 * fired at `since` (a replay's start: one that had fired read as done during the replay), by the
 * database's clock. Negative when it fired since.
 */
export const nextClock = (sql: SqlClient.SqlClient, s: StoreSchema, execution: string, since: string) =>
  Effect.map(
    sql<{ ms: number | null }>`
      SELECT (extract(epoch FROM min(c.wake_at) - now()) * 1000)::float8 AS ms
      FROM ${s.workflowClocks(sql)} c
      WHERE c.execution = ${execution} AND c.wake_at > timestamptz 'epoch' + ${since}::bigint * interval '1 microsecond' AND NOT EXISTS (
        SELECT 1 FROM ${s.workflowDeferreds(sql)} d WHERE d.execution = c.execution AND d.name = c.deferred)`,
    (rows) => Option.fromNullishOr(rows[0]?.ms ?? null)
  )

/**
 * Which of `names` are done for the execution: a deferred with an outcome, or a durable clock whose
 * deadline the database's clock has passed. A running replay asks this about the deferreds it is
 * parked on, to be woken where it stands.
 */
export const doneAmong = (sql: SqlClient.SqlClient, s: StoreSchema, execution: string, names: ReadonlyArray<string>) =>
  Effect.map(
    sql<{ name: string }>`
      SELECT name FROM ${s.workflowDeferreds(sql)} WHERE execution = ${execution} AND name = ANY(${names as Array<
      string
    >}::text[])
      UNION
      SELECT deferred FROM ${s.workflowClocks(sql)}
      WHERE execution = ${execution} AND deferred = ANY(${names as Array<string>}::text[]) AND wake_at <= now()`,
    (rows) => rows.map((row) => row.name)
  )

/** The awaited deferreds of these executions that are not done, oldest first, clocks with their deadlines. */
export const awaiting = (sql: SqlClient.SqlClient, s: StoreSchema, executions: ReadonlyArray<string>) =>
  Effect.map(
    sql<{ execution: string; name: string; wake_at: Date | null }>`
      SELECT a.execution, a.name, c.wake_at FROM ${s.workflowAwaits(sql)} a
      LEFT JOIN ${s.workflowClocks(sql)} c ON c.execution = a.execution AND c.deferred = a.name
      WHERE a.execution = ANY(${executions as Array<string>}::text[])
        AND NOT EXISTS (SELECT 1 FROM ${s.workflowDeferreds(sql)} d WHERE d.execution = a.execution AND d.name = a.name)
        AND (c.wake_at IS NULL OR c.wake_at > now())
      ORDER BY a.execution, a.first_awaited_at, a.name`,
    (rows) => rows.map((r): Awaited => ({ execution: r.execution, name: r.name, wakeAt: r.wake_at }))
  )

/** One line of an execution's journal (core's `WorkflowJournal.JournalEntry`). */
export type JournalEntry = WorkflowJournal.JournalEntry

/**
 * An execution's journal in the order it was written: activity results (with the fence each was
 * recorded under), deferreds done and awaited, durable clocks with their deadlines (by the
 * database's clock, whether each has fired).
 */
export const journal = (sql: SqlClient.SqlClient, s: StoreSchema, execution: string) =>
  Effect.map(
    sql<
      {
        type: "activity" | "deferred" | "clock"
        name: string
        attempt: number | null
        fence: string | null
        exit: unknown
        done: boolean
        at: Date
        fired: boolean
      }
    >`
      SELECT * FROM (
        SELECT 'activity' AS type, activity AS name, attempt, fence::text AS fence, exit, true AS done, recorded_at AS at, false AS fired
        FROM ${s.workflowActivities(sql)} WHERE execution = ${execution}
        UNION ALL
        SELECT 'deferred', name, NULL, NULL, exit, true, recorded_at, false
        FROM ${s.workflowDeferreds(sql)} WHERE execution = ${execution}
          AND name NOT IN (SELECT deferred FROM ${s.workflowClocks(sql)} WHERE execution = ${execution})
        UNION ALL
        SELECT 'deferred', a.name, NULL, NULL, NULL, false, a.first_awaited_at, false
        FROM ${s.workflowAwaits(sql)} a WHERE a.execution = ${execution}
          AND NOT EXISTS (SELECT 1 FROM ${
      s.workflowDeferreds(sql)
    } d WHERE d.execution = a.execution AND d.name = a.name)
          AND NOT EXISTS (SELECT 1 FROM ${
      s.workflowClocks(sql)
    } c WHERE c.execution = a.execution AND c.deferred = a.name)
        UNION ALL
        SELECT 'clock', deferred, NULL, NULL, NULL, true, wake_at, wake_at <= now()
        FROM ${s.workflowClocks(sql)} WHERE execution = ${execution}
      ) j ORDER BY j.at, j.type, j.name COLLATE "C", j.attempt`,
    (rows) =>
      rows.map((r): JournalEntry =>
        r.type === "activity"
          ? { type: "activity", name: r.name, attempt: r.attempt!, fence: Number(r.fence), exit: r.exit, at: r.at }
          : r.type === "deferred"
          ? { type: "deferred", name: r.name, exit: r.exit, done: r.done, at: r.at }
          : { type: "clock", name: r.name, wakeAt: r.at, fired: r.fired }
      )
  )
