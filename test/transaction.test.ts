/**
 * The caller-owned fenced transaction, local lease deadlines and graceful shutdown.
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, CurrentRun, Fence, FenceRejected, Handler, Run, RunStore, Worker, WorkerEvents } from "@leasehold/core"
import { Deferred, Duration, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { expireLease, readRun, type Stores, twoStores } from "./support/stores.js"
import { type Event, eventually, startWorker } from "./support/workers.js"

const fast = {
  ttl: "1 second",
  heartbeat: "150 millis",
  pollInterval: "50 millis",
  shutdownGrace: "200 millis"
} as const

const ledgerTable = (stores: Stores) =>
  stores.sql.unsafe(`CREATE TABLE "${stores.schema}".ledger (run_id bigint NOT NULL, fence bigint NOT NULL, note text)`)
const ledger = (stores: Stores) =>
  Effect.map(
    stores.sql.unsafe<{ run_id: string; fence: string }>(
      `SELECT run_id::text, fence::text FROM "${stores.schema}".ledger ORDER BY fence`
    ),
    (rows) => rows.map((r) => [r.run_id, Number(r.fence)])
  )
/** The application's write, through the same SqlClient, under the handler's fence. */
const writeLedger = (schema: string, note: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const fence = yield* Fence
    yield* sql.unsafe(`INSERT INTO "${schema}".ledger VALUES (${fence.runId}, ${fence.fence}, '${note}')`)
    return note
  })
const asHolder = (runId: string, fence: number) => (effect: Effect.Effect<any, any, any>) =>
  effect.pipe(
    Effect.provideService(Fence, { runId, fence, owner: "test" }),
    Effect.provideService(CurrentRun, {
      kind: "job",
      queue: "default",
      attempt: 1,
      maxAttempts: 5,
      checkpoint: null,
      signals: {}
    })
  )

describe("fenced transaction", () => {
  it.live("a stale holder's transaction rolls back its own rows and fails with FenceRejected", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* ledgerTable(stores)
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      yield* stores.a.claim({ owner: "a", queues: ["default"], kinds: ["job"], limit: 1, ttl: Duration.minutes(1) })
      yield* expireLease(stores, run!.id)
      yield* stores.b.claim({ owner: "b", queues: ["default"], kinds: ["job"], limit: 1, ttl: Duration.minutes(1) })

      const stale = yield* Run.transaction(writeLedger(stores.schema, "from a")).pipe(
        asHolder(run!.id, 1),
        Effect.provideService(RunStore, stores.a),
        Effect.provideService(SqlClient.SqlClient, stores.sql),
        Effect.flip
      )
      assert.instanceOf(stale, FenceRejected)
      assert.deepInclude(stale, { presentedFence: 1, storedFence: 2, operation: "transaction" })
      assert.deepStrictEqual(yield* ledger(stores), [])

      const fresh = yield* Run.transaction(writeLedger(stores.schema, "from b")).pipe(
        asHolder(run!.id, 2),
        Effect.provideService(RunStore, stores.b),
        Effect.provideService(SqlClient.SqlClient, stores.sql)
      )
      assert.strictEqual(fresh, "from b")
      assert.deepStrictEqual(yield* ledger(stores), [[run!.id, 2]])
      const record = yield* stores.a.get(run!.id)
      assert.strictEqual(record.state, "completed")
      assert.strictEqual(record.result, "from b")
    }))

  it.live("a fence that moves while the transaction is open rolls the application's rows back", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* ledgerTable(stores)
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      yield* stores.a.claim({ owner: "a", queues: ["default"], kinds: ["job"], limit: 1, ttl: Duration.minutes(1) })
      // A run in the batch ledger cannot be taken over while its holder's transaction is open (the
      // transaction holds its batch row FOR KEY SHARE; a takeover's hold waits for it): the fence
      // moves mid-transaction only on a run's row, where this run is put first.
      yield* stores.sql.unsafe(`SELECT "${stores.schema}".hold(ARRAY[${Number(run!.id)}]::bigint[])`)
      // Inside A's transaction, after its first check and its own write, B takes the run over on
      // another connection.
      const takeover = Effect.gen(function*() {
        yield* expireLease(stores, run!.id)
        return yield* stores.b.claim({
          owner: "b",
          queues: ["default"],
          kinds: ["job"],
          limit: 1,
          ttl: Duration.minutes(1)
        })
      })
      const body = Effect.gen(function*() {
        yield* writeLedger(stores.schema, "from a")
        // A fresh runtime, so the takeover does not inherit A's transaction connection.
        const [taken] = yield* Effect.promise(() => Effect.runPromise(takeover))
        assert.strictEqual(taken!.fence, 2)
      })
      const error = yield* Run.transaction(body).pipe(
        asHolder(run!.id, 1),
        Effect.provideService(RunStore, stores.a),
        Effect.provideService(SqlClient.SqlClient, stores.sql),
        Effect.flip
      )
      assert.deepInclude(error, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 })
      assert.deepStrictEqual(yield* ledger(stores), [])
      assert.strictEqual((yield* readRun(stores, run!.id)).lease_owner, "b")
    }))

  it.live("inside a worker, the handler's rows and the completion commit together, once", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* ledgerTable(stores)
      const pay = Handler.make({
        kind: "pay",
        payload: Schema.Struct({ to: Schema.String }),
        handle: ({ to }) => Run.transaction(writeLedger(stores.schema, `paid ${to}`))
      })
      const events = yield* startWorker(stores.a, stores.sql, { ...fast, handlers: [pay] })
      const { id } = yield* Client.enqueue(pay, { to: "ana" }).pipe(Effect.provideService(RunStore, stores.a))
      yield* eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed"))
      assert.deepStrictEqual(yield* ledger(stores), [[id, 1]])
      assert.strictEqual((yield* stores.a.get(id)).result, "paid ana")
      yield* eventually("settled", Effect.sync(() => events.some((e) => e._tag === "RunSettled")))
      assert.deepInclude(events.find((e) => e._tag === "RunSettled"), { outcome: "completed" })
      assert.isEmpty(events.filter((e) => e._tag === "WriteRejected"))
    }))
})

describe("local lease deadline", () => {
  it.live("a renewal that never answers stops the run at its local deadline", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const hanging: RunStore["Service"] = { ...stores.a, renew: () => Effect.never }
      const interrupted = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const job = Handler.make({
        kind: "job",
        payload: Schema.Unknown,
        handle: () =>
          Effect.andThen(Deferred.succeed(started, undefined), Effect.never).pipe(
            Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
          )
      })
      const events = yield* startWorker(hanging, stores.sql, { ...fast, handlers: [job] })
      yield* stores.a.enqueue([{ kind: "job", payload: null }])
      yield* Deferred.await(started)
      yield* Deferred.await(interrupted).pipe(Effect.timeout("3 seconds"))
      const lost = events.find((e): e is Extract<Event, { _tag: "LeaseLost" }> => e._tag === "LeaseLost")
      assert.include(["deadline", "renewal-failed"], lost?.reason)
      assert.isTrue(events.some((e) => e._tag === "HeartbeatSent"))
      assert.isFalse(events.some((e) => e._tag === "HeartbeatConfirmed" && e.renewed.length > 0))
    }))
})

describe("graceful shutdown", () => {
  it.live("stops claiming, lets short runs finish, releases the rest without charging an attempt", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const quick = Handler.make({
        kind: "quick",
        payload: Schema.Unknown,
        handle: () => Effect.as(Effect.sleep("100 millis"), "done")
      })
      const slow = Handler.make({ kind: "slow", payload: Schema.Unknown, handle: () => Effect.never })
      const events: Array<Event> = []
      const worker = yield* Effect.scoped(Effect.gen(function*() {
        yield* startWorker(
          stores.a,
          stores.sql,
          { ...fast, shutdownGrace: "500 millis", handlers: [quick, slow] },
          events
        )
        const [q, s] = yield* stores.a.enqueue([{ kind: "quick", payload: null }, { kind: "slow", payload: null }])
        yield* eventually("both claimed", Effect.sync(() => events.filter((e) => e._tag === "Claimed").length === 2))
        return { q: q!.id, s: s!.id }
      }))
      // The scope closed: the worker shut down.
      const quickRow = yield* readRun(stores, worker.q)
      const slowRow = yield* readRun(stores, worker.s)
      assert.strictEqual(quickRow.state, "completed")
      assert.strictEqual(slowRow.state, "pending")
      assert.strictEqual(slowRow.lease_owner, null)
      assert.strictEqual(slowRow.attempt, 0)
      assert.deepInclude(events.find((e) => e._tag === "LeaseLost"), { reason: "shutdown", runId: worker.s })
      // Nothing was claimed after shutdown began.
      yield* stores.a.enqueue([{ kind: "quick", payload: null }])
      yield* Effect.sleep("200 millis")
      assert.strictEqual(events.filter((e) => e._tag === "Claimed").length, 2)
    }))

  it.live("a completion being written when shutdown begins is finished and settled, not abandoned", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const writing = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      // The completion statement is held open until the test lets it through.
      const gated: RunStore["Service"] = {
        ...stores.a,
        completeBatch: (items) =>
          Effect.andThen(
            Deferred.succeed(writing, undefined),
            Effect.andThen(Deferred.await(gate), stores.a.completeBatch(items))
          )
      }
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.succeed("done") })
      const events: Array<Event> = []
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      const worker = yield* Effect.forkDetach(
        Effect.scoped(
          startWorker(gated, stores.sql, { ...fast, handlers: [job] }, events).pipe(
            Effect.andThen(Effect.never)
          )
        )
      )
      yield* Deferred.await(writing)
      // Shutdown begins while the write is under way; the write then goes through.
      const stopping = yield* Effect.forkDetach(Fiber.interrupt(worker))
      yield* Effect.sleep("300 millis")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(stopping)
      assert.deepInclude(yield* readRun(stores, run!.id), { state: "completed", fence: 1 })
      assert.deepStrictEqual(
        events.filter((e) => e._tag === "RunSettled").map((e) => [(e as any).runId, (e as any).outcome]),
        [[run!.id, "completed"]]
      )
      assert.isUndefined(events.find((e) => e._tag === "StoreError"))
    }))

  it.live("a settlement that fails (an event sink that throws) neither strands the other runs nor stops completions", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const [first, second] = yield* stores.a.enqueue([{ kind: "job", payload: null }, { kind: "job", payload: null }])
      const settledRuns: Array<string> = []
      const sink = {
        emit: (event: Event) =>
          Effect.sync(() => {
            if (event._tag !== "RunSettled") return
            settledRuns.push(event.runId)
            if (event.runId === first!.id) throw new Error("sink failure")
          })
      }
      // One slot: the second run is claimed only if the first one's slot is freed despite the defect.
      yield* Worker.run({ ...fast, concurrency: 1, handlers: [job] }).pipe(
        Effect.provideService(RunStore, stores.a),
        Effect.provideService(SqlClient.SqlClient, stores.sql),
        Effect.provideService(WorkerEvents.WorkerEvents, sink),
        Effect.forkScoped
      )
      yield* eventually(
        "both completed",
        Effect.map(
          Effect.all([readRun(stores, first!.id), readRun(stores, second!.id)]),
          ([a, b]) => a.state === "completed" && b.state === "completed"
        )
      )
      assert.includeMembers(settledRuns, [first!.id, second!.id])
    }))
})
