/**
 * The `WorkflowJournal` service on both stores, as River runs one suite against each driver: the
 * Postgres journal (`PgRunStore.layer` gives it in the store's schema) and the memory twin
 * (`MemoryRunStore.layer` gives it beside its runs). Then the workflow engine on the memory store
 * alone, with no database: the engine takes the journal from context.
 */
import { assert, describe, it } from "@effect/vitest"
import { FenceRejected, MemoryRunStore, RunStore, WorkflowJournal } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Duration, Effect, Exit, Fiber, Layer, Option, Schema, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { Activity, DurableDeferred, Workflow } from "effect/workflow"
import { databaseUrl, freshSchema, setLeaseExpirySql } from "./support/db.js"

interface Target {
  readonly name: string
  /** A store and its journal, and a way to make a run's lease expire now. */
  readonly make: Effect.Effect<
    {
      readonly store: RunStore["Service"]
      readonly journal: WorkflowJournal.WorkflowJournal["Service"]
      readonly expire: (runId: string) => Effect.Effect<void>
    },
    unknown,
    Scope.Scope
  >
}

const postgres: Target = {
  name: "PgRunStore",
  make: Effect.gen(function*() {
    const schema = freshSchema("wfj")
    const context = yield* Layer.build(
      PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.clientLayer(databaseUrl(), { maxConnections: 3 })))
    )
    const sql = Context.get(context, SqlClient.SqlClient)
    return {
      store: Context.get(context, RunStore),
      journal: Context.get(context, WorkflowJournal.WorkflowJournal),
      expire: (runId) =>
        Effect.orDie(
          // The run moved to its row first (a claim in the ledger holds it there).
          sql.unsafe(setLeaseExpirySql(schema, runId, "now() - interval '1 second'"))
        )
    }
  })
}

const memory: Target = {
  name: "MemoryRunStore",
  make: Effect.map(MemoryRunStore.makeControlled, ({ journal, moveTime, store }) => ({
    store,
    journal,
    expire: (runId) => moveTime(runId, "leaseExpiresAt", new Date(Date.now() - 1_000))
  }))
}

const claimOne = (store: RunStore["Service"], owner: string) =>
  Effect.map(
    store.claim({ owner, queues: ["default"], kinds: ["wf"], limit: 1, ttl: Duration.seconds(30) }),
    (runs) => {
      assert.strictEqual(runs.length, 1)
      return { runId: runs[0]!.id, fence: runs[0]!.fence }
    }
  )

for (const target of [postgres, memory]) {
  describe(`WorkflowJournal on ${target.name}`, () => {
    it.live("an activity result is recorded under the holder's fence and the first stands; a superseded holder's is refused and not recorded", () =>
      Effect.gen(function*() {
        const { expire, journal, store } = yield* target.make
        yield* store.enqueue([{ kind: "wf", payload: null, idempotencyKey: "exec/1" }])
        const first = yield* claimOne(store, "a")
        assert.deepStrictEqual(yield* journal.recordActivity(first, "exec/1", "step", 1, { v: 1 }), { v: 1 })
        assert.deepStrictEqual(yield* journal.recordActivity(first, "exec/1", "step", 1, { v: 2 }), { v: 1 })
        const execution = yield* journal.execution("exec/1")
        assert(Option.isSome(execution) && execution.value.state === "running" && execution.value.fence === first.fence)

        yield* expire(first.runId)
        const second = yield* claimOne(store, "b")
        assert.strictEqual(second.fence, first.fence + 1)
        const refused = yield* Effect.flip(journal.recordActivity(first, "exec/1", "other", 1, { v: 3 }))
        assert(refused instanceof FenceRejected)
        assert.strictEqual(refused.presentedFence, first.fence)
        assert.strictEqual(refused.storedFence, second.fence)
        assert(Option.isNone(yield* journal.activityResult("exec/1", "other", 1)))
        assert.deepStrictEqual(yield* journal.activityResult("exec/1", "step", 1), Option.some({ v: 1 }))
        // An activity's start reads its result and a pending interrupt together.
        assert.deepStrictEqual(yield* journal.activityStart("exec/1", "step", 1), {
          stored: Option.some({ v: 1 }),
          interruptPending: false
        })
        yield* journal.deferredDone("exec/1", WorkflowJournal.interruptSignalName, { _tag: "Success", value: null })
        assert.deepStrictEqual(yield* journal.activityStart("exec/1", "next", 1), {
          stored: Option.none(),
          interruptPending: true
        })
      }))

    it.live("a deleted workflow run's journal is gone with it: activities, deferreds, clocks", () =>
      Effect.gen(function*() {
        const { journal, store } = yield* target.make
        const execution = "workflow/w/exec-del"
        yield* store.enqueue([{ kind: "workflow/w", payload: null, idempotencyKey: execution }])
        const [claimed] = yield* store.claim({
          owner: "a",
          queues: ["default"],
          kinds: ["workflow/w"],
          limit: 1,
          ttl: Duration.seconds(30)
        })
        const lease = { runId: claimed!.id, fence: claimed!.fence }
        yield* journal.recordActivity(lease, execution, "step", 1, { v: 1 })
        yield* journal.deferredDone(execution, "d", { _tag: "Success", value: "x" })
        yield* journal.scheduleClock(execution, "later", 60_000)
        assert.isNotEmpty(yield* journal.journal(execution))
        yield* store.release(lease)
        assert.deepStrictEqual(yield* store.deleteRuns({ filter: { ids: [lease.runId] }, expected: 1 }), { deleted: 1 })
        assert.deepStrictEqual(yield* journal.journal(execution), [])
        assert(Option.isNone(yield* journal.activityResult(execution, "step", 1)))
        assert(Option.isNone(yield* journal.deferredResult(execution, "d")))
      }))

    it.live("a deferred's first outcome stands and wakes the execution: a running holder's next suspension returns, a suspended run is resumed", () =>
      Effect.gen(function*() {
        const { journal, store } = yield* target.make
        yield* store.enqueue([{ kind: "wf", payload: null, idempotencyKey: "exec/2" }])
        const lease = yield* claimOne(store, "a")
        const suspendOnWake = (token: string) =>
          store.suspend({ ...lease, signal: WorkflowJournal.wakeSignal(lease.fence), token, timeout: undefined })

        assert(Option.isNone(yield* journal.deferredResult("exec/2", "d")))
        assert.isTrue(yield* journal.deferredDone("exec/2", "d", { _tag: "Success", value: "first" }))
        assert.isFalse(yield* journal.deferredDone("exec/2", "d", { _tag: "Success", value: "second" }))
        assert.deepStrictEqual(
          yield* journal.deferredResult("exec/2", "d"),
          Option.some({ exit: { _tag: "Success", value: "first" } })
        )
        // Woken while running: the suspension returns at once, until the holder takes the wake.
        assert.strictEqual((yield* suspendOnWake("t1"))._tag, "AlreadySignalled")
        yield* journal.consumeWake(lease)
        assert.strictEqual((yield* suspendOnWake("t2"))._tag, "Suspended")
        assert.strictEqual(yield* journal.wake("exec/2", "test"), "resumed")
        assert.strictEqual((yield* store.get(lease.runId)).state, "pending")
        assert.strictEqual(yield* journal.wake("exec/none", "test"), "none")
      }))

    it.live("clocks: one due reads as done, a later one is the next deadline and is awaited; awaits done are not listed", () =>
      Effect.gen(function*() {
        const { journal, store } = yield* target.make
        yield* store.enqueue([{ kind: "wf", payload: null, idempotencyKey: "exec/3" }])
        const since = yield* journal.now
        yield* Effect.sleep(2)
        yield* journal.scheduleClock("exec/3", "due", 0)
        yield* journal.scheduleClock("exec/3", "later", 60_000)
        yield* journal.scheduleClock("exec/3", "later", 1)
        assert.deepStrictEqual(yield* journal.deferredResult("exec/3", "due"), Option.some("clockDue" as const))
        assert(Option.isNone(yield* journal.deferredResult("exec/3", "later")))
        assert(Option.isNone(yield* journal.deferredResult("exec/3", "gate")))
        assert.deepStrictEqual([...(yield* journal.doneAmong("exec/3", ["due", "later", "gate"]))].sort(), ["due"])
        // Asked from before the due clock was scheduled, it fired since (negative); asked from now,
        // the later clock is next.
        const fired = yield* journal.nextClock("exec/3", since)
        assert(Option.isSome(fired) && fired.value <= 0, `next clock ${JSON.stringify(fired)}`)
        yield* Effect.sleep(2)
        const next = yield* journal.nextClock("exec/3", yield* journal.now)
        assert(Option.isSome(next) && next.value > 55_000 && next.value <= 60_000, `next clock ${JSON.stringify(next)}`)
        yield* journal.deferredDone("exec/3", "gate", { _tag: "Success", value: null })
        const awaited = yield* journal.awaiting(["exec/3"])
        assert.deepStrictEqual(awaited.map((a) => a.name), ["later"])
        assert(awaited[0]!.wakeAt instanceof Date)
      }))
  })
}

describe("LeaseholdWorkflows on MemoryRunStore.layer (no database)", () => {
  const Gate = DurableDeferred.make("memory/gate", { success: Schema.String })
  const Approval = Workflow.make("memory/Approval", {
    payload: { id: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ id }) => id
  })
  let stepRuns = 0
  const ApprovalLayer = Approval.toLayer(() =>
    Effect.gen(function*() {
      const step = yield* Activity.make({
        name: "step",
        success: Schema.Number,
        execute: Effect.sync(() => ++stepRuns)
      })
      const answer = yield* DurableDeferred.await(Gate)
      return `${answer} after step ${step}`
    })
  )

  it.live("a deferred suspends the run and its completion resumes it under the next fence; the activity ran once", () =>
    Effect.gen(function*() {
      const journal = yield* WorkflowJournal.WorkflowJournal
      const store = yield* RunStore
      const executionId = yield* Approval.execute({ id: "one" }, { discard: true })
      let polled = yield* Approval.poll(executionId)
      while (Option.isNone(polled) || polled.value._tag !== "Suspended") {
        yield* Effect.sleep(5)
        polled = yield* Approval.poll(executionId)
      }
      const token = DurableDeferred.tokenFromExecutionId(Gate, { workflow: Approval, executionId })
      yield* DurableDeferred.succeed(Gate, { token, value: "approved" })
      let result = yield* Approval.poll(executionId)
      while (Option.isNone(result) || result.value._tag !== "Complete") {
        yield* Effect.sleep(5)
        result = yield* Approval.poll(executionId)
      }
      assert.deepStrictEqual(result.value, new Workflow.Complete({ exit: Exit.succeed("approved after step 1") }))
      assert.strictEqual(stepRuns, 1)
      const run = yield* journal.execution(LeaseholdWorkflows.executionKey(Approval._tag, executionId))
      assert(Option.isSome(run) && run.value.state === "completed")
      assert.strictEqual((yield* store.get(run.value.runId)).fence, 2)
    }).pipe(Effect.provide(ApprovalLayer.pipe(
      Layer.provideMerge(
        LeaseholdWorkflows.layerServe({ ttl: "2 seconds", pollInterval: "50 millis", shutdownGrace: "100 millis" })
      ),
      Layer.provideMerge(MemoryRunStore.layer)
    ))))

  const Double = Workflow.make("memory/Double", {
    payload: { n: Schema.Number },
    success: Schema.Number,
    idempotencyKey: ({ n }) => String(n)
  })
  const DoubleLayer = Double.toLayer(({ n }) =>
    Activity.make({ name: "double", success: Schema.Number, execute: Effect.succeed(n * 2) })
  )
  const serve = { ttl: "2 seconds", pollInterval: "50 millis", shutdownGrace: "0 millis" } as const

  it.effect("under TestClock, execute returns the result its own worker stored without the clock moving: the settlement wakes it", () =>
    Effect.gen(function*() {
      const fiber = yield* Double.execute({ n: 21 }).pipe(Effect.forkChild({ startImmediately: true }))
      // Real work only (the store, the worker, the replay): no TestClock.adjust.
      for (let i = 0; i < 5_000 && fiber.pollUnsafe() === undefined; i++) yield* Effect.yieldNow
      const exit = fiber.pollUnsafe()
      assert(exit !== undefined, "execute is still waiting: it was not woken by the settlement")
      assert.deepStrictEqual(exit, Exit.succeed(42))
    }).pipe(Effect.provide(DoubleLayer.pipe(
      Layer.provideMerge(LeaseholdWorkflows.layerServe(serve)),
      Layer.provideMerge(MemoryRunStore.layer)
    ))))

  it.live("shutting the engine down interrupts a caller still waiting on an execution", () =>
    Effect.gen(function*() {
      const Stuck = Workflow.make("memory/Stuck", { payload: { id: Schema.String }, idempotencyKey: ({ id }) => id })
      const scope = yield* Scope.make()
      const context = yield* Scope.provide(
        Layer.build(
          Stuck.toLayer(() => Effect.never).pipe(
            Layer.provideMerge(LeaseholdWorkflows.layerServe(serve)),
            Layer.provideMerge(MemoryRunStore.layer)
          )
        ),
        scope
      )
      const store = Context.get(context, RunStore)
      const fiber = yield* Stuck.execute({ id: "one" }).pipe(
        Effect.provideContext(context),
        Effect.forkChild({ startImmediately: true })
      )
      while ((yield* store.list({ limit: 1, state: "running" })).length === 0) yield* Effect.sleep(5)
      yield* Scope.close(scope, Exit.void)
      const exit = yield* Fiber.await(fiber).pipe(Effect.timeout("5 seconds"))
      assert(Exit.hasInterrupts(exit), `the caller ended otherwise: ${String(exit)}`)
    }))
})
