/**
 * Attempt logs through workers on PostgreSQL: a failed attempt's lines are written by its failure's
 * own statement and a completed attempt writes nothing by default (the table stays empty however
 * many runs complete); with `keepLogs: "always"` a batched completion's lines and a fenced
 * transaction's (the lines logged after it committed included) are kept; with
 * `completedRuns: "delete"` a run's lines go with it, a failed run keeps its own.
 */
import { assert, describe, it } from "@effect/vitest"
import { CurrentRun, Handler, Run } from "@leasehold/core"
import { Deferred, Duration, Effect, Schema } from "effect"
import { expireLease, readRun, type Stores, twoStores, twoStoresWith } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

class Declined extends Schema.TaggedError<Declined>()("Declined", { reason: Schema.String }) {}

/** Fails its first attempt, completes the next; logs a line on each. */
const flaky = (keepLogs?: "always") =>
  Handler.make({
    kind: "flaky",
    payload: Schema.Struct({ order: Schema.String }),
    ...(keepLogs === undefined ? {} : { keepLogs }),
    handle: ({ order }) =>
      Effect.gen(function*() {
        const run = yield* CurrentRun
        yield* Effect.logInfo(`attempt ${run.attempt} for ${order}`)
        if (run.attempt === 1) return yield* new Declined({ reason: "first attempt" })
        return "done"
      }).pipe(Effect.annotateLogs({ order }))
  })

const plain = Handler.make({
  kind: "plain",
  payload: Schema.Struct({ n: Schema.Number }),
  handle: ({ n }) => Effect.logInfo(`plain ${n}`)
})

const rows = (stores: Stores, where = "true") =>
  stores.sql.unsafe<{ run_id: string; fence: string; attempt: number; outcome: string; lines: unknown }>(
    `SELECT run_id::text, fence::text, attempt, outcome, lines FROM "${stores.schema}".attempt_logs WHERE ${where}
     ORDER BY run_id, fence`
  )

const options = {
  owner: "logs-test",
  pollInterval: "50 millis",
  retry: { base: "10 millis", max: "10 millis" }
} as const

describe("attempt logs on PostgreSQL", () => {
  it.live("a failed attempt's lines are written with its failure; completed attempts write nothing by default", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const [run] = yield* stores.a.enqueue([{ kind: "flaky", payload: { order: "o-1" }, maxAttempts: 3 }])
      const plains = yield* stores.a.enqueue(Array.from({ length: 20 }, (_, n) => ({ kind: "plain", payload: { n } })))
      yield* startWorker(stores.a, stores.sql, { ...options, handlers: [flaky(), plain] })
      for (const r of [run!, ...plains]) {
        yield* eventually(`run ${r.id} completed`, Effect.map(readRun(stores, r.id), (x) => x.state === "completed"))
      }
      const kept = yield* rows(stores)
      assert.deepStrictEqual(kept.map((r) => [r.run_id, r.fence, r.attempt, r.outcome]), [[run!.id, "1", 1, "failed"]])
      const [log] = yield* stores.b.attemptLogs(run!.id)
      assert.deepStrictEqual(log!.lines.map((l) => [l.level, l.message, l.annotations]), [
        ["Info", "attempt 1 for o-1", { order: "o-1" }]
      ])
    }))

  it.live("keepLogs always: a batched completion's lines and a fenced transaction's, lines logged after its commit included", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const refund = Handler.make({
        kind: "refund",
        payload: Schema.Struct({ order: Schema.String }),
        keepLogs: "always",
        handle: ({ order }) =>
          Effect.gen(function*() {
            yield* Effect.logInfo(`refunding ${order}`)
            yield* Run.transaction(Effect.succeed({ order }))
            yield* Effect.logInfo("committed")
          })
      })
      const [a, b] = yield* stores.a.enqueue([
        { kind: "flaky", payload: { order: "o-2" }, maxAttempts: 3 },
        { kind: "refund", payload: { order: "o-3" } }
      ])
      yield* startWorker(stores.a, stores.sql, { ...options, handlers: [flaky("always"), refund] })
      for (const r of [a!, b!]) {
        yield* eventually(`run ${r.id} completed`, Effect.map(readRun(stores, r.id), (x) => x.state === "completed"))
      }
      yield* eventually(
        "the completed attempts' lines",
        Effect.map(rows(stores, "outcome = 'completed'"), (r) => r.length === 2)
      )
      const logsOf = (id: string) =>
        Effect.map(stores.b.attemptLogs(id), (logs) => logs.map((l) => [l.outcome, l.lines.map((x) => x.message)]))
      assert.deepStrictEqual(yield* logsOf(a!.id), [
        ["failed", ["attempt 1 for o-2"]],
        ["completed", ["attempt 2 for o-2"]]
      ])
      assert.deepStrictEqual(yield* logsOf(b!.id), [["completed", ["refunding o-3", "committed"]]])
    }))

  it.live("with completedRuns delete a run's lines are deleted with it; a run that failed for good keeps its own", () =>
    Effect.gen(function*() {
      const stores = yield* twoStoresWith({ completedRuns: "delete" })
      const [gone, kept] = yield* stores.a.enqueue([
        { kind: "flaky", payload: { order: "o-4" }, maxAttempts: 3 },
        { kind: "flaky", payload: { order: "o-5" }, maxAttempts: 1 }
      ])
      yield* startWorker(stores.a, stores.sql, { ...options, handlers: [flaky()] })
      yield* eventually(
        "the first run deleted by its completion",
        Effect.map(
          stores.sql.unsafe(`SELECT 1 FROM "${stores.schema}".runs WHERE id = ${Number(gone!.id)}`),
          (r) => r.length === 0
        )
      )
      yield* eventually("the second run failed", Effect.map(readRun(stores, kept!.id), (x) => x.state === "failed"))
      const left = yield* rows(stores)
      assert.deepStrictEqual(left.map((r) => [r.run_id, r.outcome]), [[kept!.id, "failed"]])
    }))

  it.live("a superseded holder's failure is refused by the fence and keeps none of its lines; the new holder's failure keeps its own", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const release = yield* Deferred.make<void>()
      const slow = Handler.make({
        kind: "slow",
        payload: Schema.Struct({}),
        handle: () =>
          Effect.gen(function*() {
            yield* Effect.logInfo("the superseded holder's line")
            yield* Deferred.await(release)
            return yield* new Declined({ reason: "late" })
          })
      })
      const [run] = yield* stores.a.enqueue([{ kind: "slow", payload: {}, maxAttempts: 3 }])
      const events = yield* startWorker(stores.a, stores.sql, {
        ...options,
        handlers: [slow],
        // One slot, which its run keeps taken: the worker cannot reclaim its own expired run first.
        concurrency: 1,
        // No renewal before the handler ends: the holder does not learn it was superseded.
        ttl: "60 seconds",
        heartbeat: "30 seconds"
      })
      yield* eventually("claimed", Effect.map(readRun(stores, run!.id), (r) => r.state === "running"))
      yield* expireLease(stores, run!.id)
      const [taken] = yield* stores.b.claim({
        owner: "other",
        queues: ["default"],
        kinds: ["slow"],
        limit: 1,
        ttl: Duration.minutes(1)
      })
      assert.strictEqual(taken!.fence, 2)
      yield* Deferred.succeed(release, undefined)
      yield* eventually(
        "the stale failure refused",
        Effect.sync(() => events.some((e) => e._tag === "WriteRejected" && e.operation === "fail")),
        "10 seconds",
        Effect.sync(() => JSON.stringify(events.filter((e) => e._tag !== "ClaimBatch")))
      )
      assert.deepStrictEqual(yield* rows(stores), [], "no line of the superseded attempt")
      yield* stores.b.fail({
        runId: run!.id,
        fence: 2,
        error: { m: "x" },
        retryDelayMs: 0,
        log: {
          attempt: 2,
          dropped: 0,
          lines: [{ level: "Info", at: new Date(), message: "own", annotations: {}, cut: 0 }]
        }
      })
      assert.deepStrictEqual((yield* rows(stores)).map((r) => [r.fence, r.outcome]), [["2", "failed"]])
    }))
})
