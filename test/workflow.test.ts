/**
 * Issue 14: Effect workflows (`effect/workflow`) on Leasehold, against PostgreSQL. Each execution
 * is a run; activity results are recorded under the run's fence; deferreds, durable clocks and
 * interrupts suspend and resume the run. The ledger counts what each step really did.
 */
import { assert, describe, it } from "@effect/vitest"
import { CurrentRun, Fence, FenceRejected, RunStore } from "@leasehold/core"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Option, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { DurableDeferred, type Workflow } from "effect/workflow"
import { WorkflowEngine } from "effect/workflow/WorkflowEngine"
import {
  appLayer,
  Approved,
  Booking,
  createLedger,
  EarlyBird,
  Gate,
  ledger,
  Nap,
  NapThenApproval,
  RacingBooking,
  Refund,
  Shipment,
  Trip
} from "./fixtures/workflows.js"
import { databaseUrl, freshSchema, setLeaseExpirySql } from "./support/db.js"
import { eventually } from "./support/workers.js"

const fast = {
  ttl: "2 seconds",
  heartbeat: "300 millis",
  pollInterval: "50 millis",
  shutdownGrace: "300 millis"
} as const

const setUp = (prefix: string, engine: LeaseholdWorkflows.LeaseholdWorkflowsOptions = {}) =>
  Effect.gen(function*() {
    const schema = freshSchema(prefix)
    const context = yield* Layer.build(appLayer(databaseUrl(), schema, 0, 8, engine))
    const sql = Context.get(context, SqlClient.SqlClient)
    yield* createLedger(sql, schema)
    return { schema, context, sql, store: Context.get(context, RunStore) }
  })

/** A worker serving the registered workflows until `scope` closes. */
const startWorker = (context: Context.Context<any>, scope: Scope.Scope, owner: string) =>
  LeaseholdWorkflows.worker({ ...fast, owner }).pipe(Effect.provideContext(context), Effect.forkIn(scope))

const runOf = (sql: SqlClient.SqlClient, schema: string, workflow: Workflow.Any, executionId: string) =>
  Effect.map(
    sql.unsafe<{ id: string; state: string; fence: string; lease_owner: string | null; suspend_deadline: Date | null }>(
      `SELECT id::text AS id, state, fence::text AS fence, lease_owner, suspend_deadline FROM "${schema}".runs_now WHERE idempotency_key = $1`,
      [LeaseholdWorkflows.executionKey(workflow._tag, executionId)]
    ),
    (rows) => rows[0] === undefined ? undefined : { ...rows[0], fence: Number(rows[0].fence) }
  )

/**
 * Holder A (fence 1) runs `workflow` until it has booked and waits at the gate; B takes the run
 * over (fence 2); the gate opens. Returns what A's handler failed with.
 */
const supersededWhileBooking = (
  setup: Effect.Success<ReturnType<typeof setUp>>,
  workflow: Workflow.Any,
  id: string
) =>
  Effect.gen(function*() {
    const { context, schema, sql, store } = setup
    const kind = LeaseholdWorkflows.kindOf(workflow._tag)
    const executionId = yield* (workflow as typeof Booking).executionId({ id })
    yield* (workflow as typeof Booking).execute({ id }, { discard: true }).pipe(Effect.provideContext(context))
    const claim = (owner: string) =>
      store.claim({ owner, queues: ["default"], kinds: [kind], limit: 1, ttl: "1 minute" as any })
    const [first] = yield* claim("a")
    const handler = Context.get(context, LeaseholdWorkflows.WorkflowHandlers).handlers().find((h) => h.kind === kind)!
    const holderA = yield* handler.handle({ executionId, payload: { id } }).pipe(
      Effect.provideService(Fence, { runId: first!.id, fence: 1, owner: "a" }),
      Effect.provideService(CurrentRun, {
        kind,
        queue: "default",
        attempt: 1,
        maxAttempts: 5,
        checkpoint: null,
        signals: {}
      }),
      Effect.provideContext(context),
      Effect.flip,
      Effect.forkScoped
    )
    yield* eventually("A has booked", Effect.map(ledger(sql, schema), (lines) => lines.length === 1))
    yield* sql.unsafe(setLeaseExpirySql(schema, first!.id, "now() - interval '1 second'"))
    assert.strictEqual((yield* claim("b"))[0]!.fence, 2)
    yield* Deferred.succeed(Context.get(context, Gate), void 0)
    return yield* Fiber.join(holderA)
  })

describe("workflows on Leasehold", () => {
  it.live("three activities run once each, and executing the same id again yields the one execution's result", () =>
    Effect.gen(function*() {
      const { context, schema, sql } = yield* setUp("wf")
      yield* startWorker(context, yield* Effect.scope, "w1")
      const execute = Shipment.execute({ order: "A-1" }).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(yield* execute, { order: "A-1", steps: 3 })
      assert.deepStrictEqual(yield* execute, { order: "A-1", steps: 3 })
      const executionId = yield* Shipment.executionId({ order: "A-1" })
      assert.deepStrictEqual((yield* ledger(sql, schema)).map((l) => [l.execution, l.step, l.fence]), [
        [executionId, "reserve", 1],
        [executionId, "charge", 1],
        [executionId, "ship", 1]
      ])
      const runs = yield* sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".runs WHERE kind = 'workflow/Shipment'`
      )
      assert.strictEqual(runs[0]!.n, 1)
      const polled = yield* Shipment.poll(executionId).pipe(Effect.provideContext(context))
      assert.isTrue(Option.isSome(polled) && polled.value._tag === "Complete" && Exit.isSuccess(polled.value.exit))
      const never = yield* Shipment.poll("no-such-execution").pipe(Effect.provideContext(context))
      assert.isTrue(Option.isNone(never))
    }))

  it.live("a workflow awaiting a deferred suspends its run; the deferred's token resumes it under fence 2, and the first completion stands", () =>
    Effect.gen(function*() {
      const { context, schema, sql } = yield* setUp("wfdef")
      yield* startWorker(context, yield* Effect.scope, "w1")
      const payload = { order: "R-1", cents: 4200 }
      const executionId = yield* Refund.executionId(payload)
      assert.strictEqual(
        yield* Refund.execute(payload, { discard: true }).pipe(Effect.provideContext(context)),
        executionId
      )

      const suspended = yield* eventually(
        "the refund suspends",
        Effect.map(runOf(sql, schema, Refund, executionId), (run) => run?.state === "suspended" && run)
      )
      // No lease and no heartbeat while it waits.
      assert.deepInclude(suspended, { fence: 1, lease_owner: null })
      assert.deepStrictEqual((yield* ledger(sql, schema)).map((l) => [l.step, l.fence]), [["propose", 1]])

      const token = DurableDeferred.tokenFromExecutionId(Approved, { workflow: Refund, executionId })
      yield* DurableDeferred.done(Approved, { token, exit: Exit.succeed({ by: "sam@example.com" }) }).pipe(
        Effect.provideContext(context)
      )
      // A second, different decision is not taken: the first stands.
      yield* DurableDeferred.done(Approved, { token, exit: Exit.succeed({ by: "mallory@example.com" }) }).pipe(
        Effect.provideContext(context)
      )

      const result = yield* Refund.execute(payload).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(result, { order: "R-1", approvedBy: "sam@example.com" })
      const run = (yield* runOf(sql, schema, Refund, executionId))!
      assert.deepInclude(run, { state: "completed", fence: 2 })
      // The proposal was replayed from its recorded result, not run again.
      assert.deepStrictEqual((yield* ledger(sql, schema)).map((l) => [l.step, l.fence]), [["propose", 1], [
        "pay by sam@example.com",
        2
      ]])
      const store = Context.get(context, RunStore)
      const history = (yield* store.history(run.id)).map((e) => [e.kind, e.fence])
      assert.deepStrictEqual(history, [["claimed", 1], ["suspended", 1], ["resumed", 1], ["claimed", 2], [
        "completed",
        2
      ]])
    }))

  it.live("a durable sleep suspends the run and survives a worker restart; it wakes by the database's clock", () =>
    Effect.gen(function*() {
      const { context, schema, sql } = yield* setUp("wfnap")
      const first = yield* Scope.make()
      yield* startWorker(context, first, "first")
      const payload = { id: "nap-1", millis: 1500 }
      const executionId = yield* Nap.executionId(payload)
      yield* Nap.execute(payload, { discard: true }).pipe(Effect.provideContext(context))
      const suspended = yield* eventually(
        "the nap suspends",
        Effect.map(runOf(sql, schema, Nap, executionId), (run) => run?.state === "suspended" && run)
      )
      assert.deepInclude(suspended, { fence: 1, lease_owner: null })
      assert.isNotNull(suspended.suspend_deadline)
      yield* Scope.close(first, Exit.void)

      const second = yield* Scope.make()
      yield* startWorker(context, second, "second")
      const done = yield* eventually(
        "the nap completes on the second worker",
        Effect.map(runOf(sql, schema, Nap, executionId), (run) => run?.state === "completed" && run),
        "20 seconds"
      )
      assert.strictEqual(done.fence, 2)
      assert.deepStrictEqual((yield* ledger(sql, schema)).map((l) => [l.step, l.fence]), [["before", 1], ["after", 2]])
      // It completed after the clock's deadline, both read from the database.
      const [timing] = yield* sql.unsafe<{ after_deadline: boolean }>(
        `SELECT r.finished_at >= c.wake_at AS after_deadline FROM "${schema}".runs_now r
         JOIN "${schema}".workflow_clocks c ON c.execution = r.idempotency_key WHERE r.id = ${Number(done.id)}`
      )
      assert.isTrue(timing!.after_deadline)
      const history = (yield* Context.get(context, RunStore).history(done.id)).map((e) => e.kind)
      assert.include(history, "signal_timed_out")
      yield* Scope.close(second, Exit.void)
    }))

  it.live("a clock that fired before the replay reads as done: the replay is not stopped for it while it reads it", () =>
    Effect.gen(function*() {
      // The watcher asks every millisecond, so it asks while each replay's read of its clock is in
      // flight (Effect registers the await before the read): stopping the replay then would
      // suspend the run with nothing left to wake it.
      const { context, schema, sql } = yield* setUp("wfnapread", { wakePollInterval: "1 millis" })
      yield* startWorker(context, yield* Effect.scope, "w1")
      const naps = Array.from({ length: 5 }, (_, i) => ({ id: `nap-read-${i}`, millis: 300 }))
      const executions = yield* Effect.forEach(
        naps,
        (payload) =>
          Effect.andThen(
            Nap.execute(payload, { discard: true }).pipe(Effect.provideContext(context)),
            Nap.executionId(payload)
          )
      )
      for (const executionId of executions) {
        const done = yield* eventually(
          `nap ${executionId} completes`,
          Effect.map(runOf(sql, schema, Nap, executionId), (run) => run?.state === "completed" && run),
          "20 seconds"
        )
        // Claimed once, and woken by its clock's deadline at most once: fence 2, or fence 1 when the
        // clock had already fired by the time the first replay read it (a slow machine's replay).
        assert.isAtMost(done.fence, 2)
      }
      const lines = yield* ledger(sql, schema)
      assert.strictEqual(lines.filter((l) => l.step === "after").length, naps.length)
    }))

  it.live("interrupt runs the workflow's compensations, under the fence of the run that applies it", () =>
    Effect.gen(function*() {
      const { context, schema, sql } = yield* setUp("wfint")
      yield* startWorker(context, yield* Effect.scope, "w1")
      const executionId = yield* Trip.executionId({ id: "trip-1" })
      yield* Trip.execute({ id: "trip-1" }, { discard: true }).pipe(Effect.provideContext(context))
      yield* eventually(
        "the trip suspends",
        Effect.map(runOf(sql, schema, Trip, executionId), (run) => run?.state === "suspended")
      )
      yield* Trip.interrupt(executionId).pipe(Effect.provideContext(context))
      const done = yield* eventually(
        "the trip ends",
        Effect.map(runOf(sql, schema, Trip, executionId), (run) => run?.state === "completed" && run)
      )
      assert.strictEqual(done.fence, 2)
      assert.deepStrictEqual((yield* ledger(sql, schema)).map((l) => [l.step, l.fence]), [["book", 1], [
        "cancel booking-1",
        2
      ]])
      const polled = yield* Trip.poll(executionId).pipe(Effect.provideContext(context))
      assert.isTrue(Option.isSome(polled) && polled.value._tag === "Complete" && Exit.hasInterrupts(polled.value.exit))
      // Interrupting a finished execution changes nothing.
      yield* Trip.interrupt(executionId).pipe(Effect.provideContext(context))
      assert.strictEqual((yield* ledger(sql, schema)).length, 2)
    }))

  it.live("interruptUnsafe cancels the run: no compensation runs, and the execution reads as interrupted", () =>
    Effect.gen(function*() {
      const { context, schema, sql } = yield* setUp("wfcancel")
      yield* startWorker(context, yield* Effect.scope, "w1")
      const executionId = yield* Trip.executionId({ id: "trip-2" })
      yield* Trip.execute({ id: "trip-2" }, { discard: true }).pipe(Effect.provideContext(context))
      yield* eventually(
        "the trip suspends",
        Effect.map(runOf(sql, schema, Trip, executionId), (run) => run?.state === "suspended")
      )
      const engine = Context.get(context, WorkflowEngine)
      yield* engine.interruptUnsafe(Trip, executionId)
      const run = (yield* runOf(sql, schema, Trip, executionId))!
      // Cancelling advances the fence, so a holder's writes would be refused from here on.
      assert.deepInclude(run, { state: "cancelled", fence: 2 })
      yield* Effect.sleep("300 millis")
      assert.deepStrictEqual((yield* ledger(sql, schema)).map((l) => l.step), ["book"])
      const polled = yield* Trip.poll(executionId).pipe(Effect.provideContext(context))
      assert.isTrue(Option.isSome(polled) && polled.value._tag === "Complete" && Exit.hasInterrupts(polled.value.exit))
    }))

  it.live("after a durable clock fires, the workflow's next wait suspends the run again (it does not replay in a loop)", () =>
    Effect.gen(function*() {
      const { context, schema, sql } = yield* setUp("wfclock")
      yield* startWorker(context, yield* Effect.scope, "w1")
      const executionId = yield* NapThenApproval.executionId({ id: "n-1" })
      yield* NapThenApproval.execute({ id: "n-1" }, { discard: true }).pipe(Effect.provideContext(context))
      const waiting = yield* eventually(
        "suspended on the approval, after the clock",
        Effect.map(
          runOf(sql, schema, NapThenApproval, executionId),
          (run) => run?.state === "suspended" && run.fence === 2 && run
        ),
        "10 seconds"
      )
      // Waiting on the deferred alone: no deadline.
      assert.isNull(waiting.suspend_deadline)
      yield* Effect.sleep("300 millis")
      assert.deepInclude(yield* runOf(sql, schema, NapThenApproval, executionId), { state: "suspended", fence: 2 })
      const token = DurableDeferred.tokenFromExecutionId(Approved, { workflow: NapThenApproval, executionId })
      yield* DurableDeferred.succeed(Approved, { token, value: { by: "sam" } }).pipe(Effect.provideContext(context))
      assert.strictEqual(yield* NapThenApproval.execute({ id: "n-1" }).pipe(Effect.provideContext(context)), "sam")
    }))

  it.live("a deferred completed after the replay read it and before the run suspends wakes it: the run never suspends", () =>
    Effect.gen(function*() {
      const { context, schema, sql, store } = yield* setUp("wfearly")
      yield* startWorker(context, yield* Effect.scope, "w1")
      const result = yield* EarlyBird.execute({ id: "e-1" }).pipe(Effect.provideContext(context))
      assert.strictEqual(result, "early@example.com")
      const executionId = yield* EarlyBird.executionId({ id: "e-1" })
      const run = (yield* runOf(sql, schema, EarlyBird, executionId))!
      const history = (yield* store.history(run.id)).map((e) => [e.kind, e.fence])
      assert.deepStrictEqual(history, [["claimed", 1], ["completed", 1]])
      // The wake the replay consumed is gone from the run's signals.
      const [signals] = yield* sql.unsafe<{ signals: Record<string, unknown> }>(
        `SELECT signals FROM "${schema}".runs WHERE id = ${Number(run.id)}`
      )
      assert.deepStrictEqual(Object.keys(signals!.signals), [])
    }))

  it.live("a fence rejection inside a replay abandons it: the holder stops with FenceRejected and no compensation runs", () =>
    Effect.gen(function*() {
      const setup = yield* setUp("wfabandon")
      const rejected = yield* supersededWhileBooking(setup, Booking, "b-1")
      assert.instanceOf(rejected, FenceRejected)
      assert.deepInclude(rejected, { presentedFence: 1, storedFence: 2, operation: "activity" })
      // The booking stands (B replays it); A's confirmation rolled back and its compensation never ran.
      assert.deepStrictEqual((yield* ledger(setup.sql, setup.schema)).map((l) => [l.step, l.fence]), [["book", 1]])
    }))

  it.live("a fence rejection met in a race branch stops the whole replay: no other branch, no catchCause fallback, no compensation", () =>
    Effect.gen(function*() {
      const setup = yield* setUp("wfrace")
      const rejected = yield* supersededWhileBooking(setup, RacingBooking, "rb-1")
      assert.deepInclude(rejected, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2, operation: "activity" })
      // Past the slow branch's time: it was stopped with the replay, and nothing else ran.
      yield* Effect.sleep("1700 millis")
      assert.deepStrictEqual((yield* ledger(setup.sql, setup.schema)).map((l) => [l.step, l.fence]), [["book", 1]])
    }))

  it.live("an execution whose payload its schema refuses ends with an InvalidPayload defect, runs nothing and is not retried", () =>
    Effect.gen(function*() {
      const { context, schema, sql, store } = yield* setUp("wfbad")
      yield* startWorker(context, yield* Effect.scope, "w1")
      const [run] = yield* store.enqueue([{
        kind: "workflow/Shipment",
        payload: { executionId: "bad-1", payload: { order: 42 } },
        idempotencyKey: LeaseholdWorkflows.executionKey("Shipment", "bad-1")
      }])
      const done = yield* eventually(
        "the run ends",
        Effect.map(store.get(run!.id), (r) => r.state === "completed" && r)
      )
      assert.strictEqual(done.attempt, 1)
      const polled = yield* Shipment.poll("bad-1").pipe(Effect.provideContext(context))
      assert.isTrue(Option.isSome(polled) && polled.value._tag === "Complete" && Exit.isFailure(polled.value.exit))
      const exit = (polled as Option.Some<any>).value.exit
      assert.include(JSON.stringify(exit.cause), "InvalidPayload")
      assert.deepStrictEqual(yield* ledger(sql, schema), [])
      assert.strictEqual((yield* sql.unsafe(`SELECT 1 FROM "${schema}".workflow_activities`)).length, 0)
    }))

  it.live("a superseded holder's activity result is refused by the fence: its transaction rolls back and nothing is recorded", () =>
    Effect.gen(function*() {
      const { context, schema, sql, store } = yield* setUp("wfstale")
      const executionId = yield* Shipment.executionId({ order: "S-1" })
      yield* Shipment.execute({ order: "S-1" }, { discard: true }).pipe(Effect.provideContext(context))
      const claim = (owner: string) =>
        store.claim({ owner, queues: ["default"], kinds: ["workflow/Shipment"], limit: 1, ttl: "1 minute" as any })
      const [first] = yield* claim("a")
      yield* sql.unsafe(setLeaseExpirySql(schema, first!.id, "now() - interval '1 second'"))
      const [second] = yield* claim("b")
      assert.strictEqual(second!.fence, 2)

      const handler = Context.get(context, LeaseholdWorkflows.WorkflowHandlers).handlers().find((h) =>
        h.kind === "workflow/Shipment"
      )!
      const asHolder = (fence: number, owner: string) => (effect: Effect.Effect<any, any, any>) =>
        effect.pipe(
          Effect.provideService(Fence, { runId: first!.id, fence, owner }),
          Effect.provideService(CurrentRun, {
            kind: "workflow/Shipment",
            queue: "default",
            attempt: 1,
            maxAttempts: 5,
            checkpoint: null,
            signals: {}
          }),
          Effect.provideContext(context)
        )
      const input = { executionId, payload: { order: "S-1" } }
      const stale = yield* handler.handle(input).pipe(asHolder(1, "a"), Effect.flip)
      assert.instanceOf(stale, FenceRejected)
      assert.deepInclude(stale, { presentedFence: 1, storedFence: 2, operation: "activity" })
      assert.deepStrictEqual(yield* ledger(sql, schema), [])
      const recorded = yield* sql.unsafe(`SELECT 1 FROM "${schema}".workflow_activities`)
      assert.strictEqual(recorded.length, 0)

      // The current holder runs every step, once, under its own fence.
      yield* handler.handle(input).pipe(asHolder(2, "b"))
      assert.deepStrictEqual((yield* ledger(sql, schema)).map((l) => [l.step, l.fence]), [
        ["reserve", 2],
        ["charge", 2],
        ["ship", 2]
      ])
      const fences = yield* sql.unsafe<{ fence: string }>(
        `SELECT DISTINCT fence::text AS fence FROM "${schema}".workflow_activities`
      )
      assert.deepStrictEqual(fences.map((f) => Number(f.fence)), [2])
    }))
})
