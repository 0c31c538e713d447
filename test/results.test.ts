/**
 * Results, checkpoints and payloads are encoded per run before they reach a statement: a value
 * JSON cannot hold (a BigInt, a cycle) fails its own run or call with `UnstorableValue` and never
 * the batch it would have shared with other runs. A handler's result schema encodes its result.
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, Run, RunStore } from "@leasehold/core"
import { Duration, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { readRun, twoStores } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

const fast = {
  ttl: "2 seconds",
  heartbeat: "300 millis",
  pollInterval: "50 millis",
  shutdownGrace: "200 millis"
} as const

describe("results that cannot be stored", () => {
  it.live("fail their own run at once; the other runs of the batch complete once each", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const executions = new Map<number, number>()
      const plain = Handler.make({
        kind: "plain",
        payload: Schema.Struct({ i: Schema.Number }),
        handle: ({ i }) => Effect.sync(() => (executions.set(i, (executions.get(i) ?? 0) + 1), { i }))
      })
      const bigint = Handler.make({
        kind: "bigint",
        payload: Schema.Unknown,
        handle: () => Effect.succeed({ big: 10n })
      })
      const cyclic = Handler.make({
        kind: "cyclic",
        payload: Schema.Unknown,
        handle: () =>
          Effect.sync(() => {
            const node: { self?: unknown } = {}
            node.self = node
            return node
          })
      })
      const enqueue = <P>(handler: Handler.Handler<P>, payload: P) =>
        Client.enqueue(handler, payload).pipe(Effect.provideService(RunStore, stores.a), Effect.map((e) => e.id))
      // The bad runs are enqueued among the good ones, so they are claimed into the same batches.
      const ids: Array<string> = []
      for (let i = 0; i < 200; i++) ids.push(yield* enqueue(plain, { i }))
      const big = yield* enqueue(bigint, null)
      const cycle = yield* enqueue(cyclic, null)
      for (let i = 200; i < 210; i++) ids.push(yield* enqueue(plain, { i }))

      yield* startWorker(stores.a, stores.sql, { ...fast, concurrency: 50, handlers: [plain, bigint, cyclic] })
      yield* eventually(
        "every run ended",
        Effect.map(
          stores.a.stats,
          // Stats count the runs not ended only (ADR 0030): none is left.
          (s) => s.byStateAndQueue.length === 0
        ),
        "30 seconds"
      )

      for (const id of ids) assert.deepInclude(yield* readRun(stores, id), { state: "completed", fence: 1, attempt: 1 })
      assert.strictEqual(executions.size, 210)
      assert.isTrue([...executions.values()].every((n) => n === 1), "no innocent run executed twice")
      for (const [id, reason] of [[big, /BigInt/], [cycle, /circular/i]] as const) {
        const run = yield* stores.a.get(id)
        assert.deepInclude(run, { state: "failed", fence: 1, attempt: 1 })
        const error = run.error as { tag: string; message: string; permanent: boolean }
        assert.deepInclude(error, { tag: "UnstorableValue", permanent: true })
        assert.include(error.message, `run ${id}: result cannot be stored`)
        assert.match(error.message, reason)
      }
    }))

  it.live("a handler's result schema encodes the stored result; a result it rejects fails that run", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const refund = Handler.make({
        kind: "refund",
        payload: Schema.Struct({ amount: Schema.Number }),
        result: Schema.Struct({ cents: Schema.BigIntFromString }),
        handle: ({ amount }) => Effect.succeed({ cents: BigInt(amount) * 100n })
      })
      const wrong = Handler.make({
        kind: "wrong",
        payload: Schema.Unknown,
        result: Schema.Struct({ cents: Schema.BigIntFromString }),
        handle: () => Effect.succeed({ cents: "a string" } as unknown as { cents: bigint })
      })
      const ok = yield* Client.enqueue(refund, { amount: 7 }).pipe(Effect.provideService(RunStore, stores.a))
      const bad = yield* Client.enqueue(wrong, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* startWorker(stores.a, stores.sql, { ...fast, handlers: [refund, wrong] })
      yield* eventually(
        "both ended",
        Effect.map(
          Effect.all([stores.a.get(ok.id), stores.a.get(bad.id)]),
          (runs) => runs.every((r) => r.state === "completed" || r.state === "failed")
        )
      )
      assert.deepInclude(yield* stores.a.get(ok.id), { state: "completed", result: { cents: "700" } })
      const failed = yield* stores.a.get(bad.id)
      assert.deepInclude(failed, { state: "failed", attempt: 1 })
      assert.deepInclude(failed.error as object, { tag: "UnstorableValue", permanent: true })
    }))

  it.live("a fenced transaction whose result cannot be stored rolls back the application's rows and fails the run", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* stores.sql.unsafe(`CREATE TABLE "${stores.schema}".ledger (note text)`)
      const book = Handler.make({
        kind: "book",
        payload: Schema.Unknown,
        handle: () =>
          Run.transaction(Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            yield* sql.unsafe(`INSERT INTO "${stores.schema}".ledger VALUES ('booked')`)
            return { total: 5n }
          }))
      })
      const { id } = yield* Client.enqueue(book, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* startWorker(stores.a, stores.sql, { ...fast, handlers: [book] })
      yield* eventually("failed", Effect.map(stores.a.get(id), (r) => r.state === "failed"))
      assert.deepStrictEqual(yield* stores.sql.unsafe(`SELECT * FROM "${stores.schema}".ledger`), [])
      const run = yield* stores.a.get(id)
      assert.deepInclude(run, { attempt: 1, fence: 1, result: null })
      assert.deepInclude(run.error as object, { tag: "UnstorableValue", permanent: true })
    }))
})

describe("other values that cannot be stored", () => {
  it.live("a checkpoint, an enqueue payload and a resume payload fail with UnstorableValue and write nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const count = Effect.map(
        stores.sql.unsafe<{ runs: number }>(`SELECT count(*)::int AS runs FROM "${stores.schema}".runs`),
        (rows) => rows[0]!.runs
      )
      const enqueued = yield* Effect.flip(
        stores.a.enqueue([{ kind: "job", payload: null }, { kind: "job", payload: { n: 1n } }])
      )
      assert.deepInclude(enqueued, { _tag: "UnstorableValue", what: "payload" })
      assert.strictEqual(yield* count, 0, "neither run of the batch was written")
      // Through the client, a payload its schema lets through but JSON cannot hold is InvalidPayload.
      const loose = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const invalid = yield* Effect.flip(
        Client.enqueue(loose, { n: 1n }).pipe(Effect.provideService(RunStore, stores.a))
      )
      assert.deepInclude(invalid, { _tag: "InvalidPayload", kind: "job" })
      assert.strictEqual(yield* count, 0)

      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      const [claimed] = yield* stores.a.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["job"],
        limit: 1,
        ttl: Duration.minutes(1)
      })
      yield* stores.a.checkpoint({ runId: run!.id, fence: claimed!.fence }, { step: 1 })
      const checkpoint = yield* Effect.flip(
        stores.a.checkpoint({ runId: run!.id, fence: claimed!.fence }, { step: 2n })
      )
      assert.deepInclude(checkpoint, { _tag: "UnstorableValue", what: "checkpoint", runId: run!.id })
      assert.deepStrictEqual((yield* stores.a.get(run!.id)).checkpoint, { step: 1 })
    }))
})
