/**
 * Attempt logs through the worker on `MemoryRunStore` under `TestClock`: what a handler logs
 * during an attempt (its level, time, message and annotations, its forked fibers' lines too, no
 * other run's, not the worker's own) is kept with a failed attempt; a completed attempt writes
 * nothing unless its handler says `keepLogs: "always"`; `"never"` keeps nothing; the ring keeps the
 * last 100 lines and counts the rest. The PostgreSQL versions are in `attempt-logs.test.ts`.
 */
import { assert, describe, it } from "@effect/vitest"
import { AttemptLogs, CurrentRun, Handler, MemoryRunStore, RunStore, Worker } from "@leasehold/core"
import { Cause, Clock, Effect, Fiber, Schema } from "effect"
import { TestClock } from "effect/testing"

class Declined extends Schema.TaggedError<Declined>()("Declined", { reason: Schema.String }) {}

type Store = RunStore["Service"]

/** Runs a worker on `store` until `done` holds, moving the test clock 100 ms at a time. */
const workUntil = (
  store: Store,
  handlers: ReadonlyArray<Handler.Handler<any, any, any, any>>,
  done: Effect.Effect<boolean, unknown>
): Effect.Effect<void, unknown> =>
  Effect.gen(function*() {
    const fiber = yield* Worker.run({
      handlers,
      concurrency: 4,
      ttl: "30 seconds",
      pollInterval: "100 millis",
      retry: { base: "100 millis", max: "100 millis" }
    }).pipe(Effect.provideService(RunStore, store), Effect.forkDetach) as Effect.Effect<Fiber.Fiber<never, unknown>>
    for (let i = 0; i < 200 && !(yield* done); i++) {
      for (let j = 0; j < 20; j++) yield* Effect.yieldNow
      yield* TestClock.adjust("100 millis")
    }
    assert.isTrue(yield* done, "the runs did not settle")
    const stopping = yield* Effect.forkDetach(Fiber.interrupt(fiber))
    for (let i = 0; i < 300 && stopping.pollUnsafe() === undefined; i++) yield* TestClock.adjust("100 millis")
  })

const stateOf = (store: Store, id: string) => Effect.map(store.get(id), (r) => r.state)

describe("attempt logs (memory store, TestClock)", () => {
  it.effect("a failed attempt keeps what its handler and its forked fibers logged, with level, time and annotations; no other run's lines and not the worker's own", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const charge = Handler.make({
        kind: "charge",
        payload: Schema.Struct({ order: Schema.String }),
        handle: ({ order }) =>
          Effect.gen(function*() {
            const { attempt } = yield* CurrentRun
            yield* Effect.logInfo(`charging ${order}`, { amount: 12 })
            yield* Effect.forkChild(Effect.logDebug("not at the minimum level"))
            yield* Fiber.join(yield* Effect.forkChild(Effect.logWarning("from a forked fiber")))
            yield* Effect.logError("card declined", Cause.fail("insufficient funds"))
            return yield* new Declined({ reason: `attempt ${attempt}` })
          }).pipe(Effect.annotateLogs({ order }))
      })
      const quiet = Handler.make({
        kind: "quiet",
        payload: Schema.Struct({}),
        handle: () => Effect.logInfo("another run's line")
      })
      const [run, other] = yield* store.enqueue([
        { kind: "charge", payload: { order: "o-7" }, maxAttempts: 2 },
        { kind: "quiet", payload: {} }
      ])
      const startedAt = yield* Clock.currentTimeMillis
      yield* workUntil(
        store,
        [charge, quiet],
        Effect.map(
          Effect.all([stateOf(store, run!.id), stateOf(store, other!.id)]),
          ([a, b]) => a === "failed" && b === "completed"
        )
      )
      const logs = yield* store.attemptLogs(run!.id)
      assert.deepStrictEqual(logs.map((l) => [l.fence, l.attempt, l.outcome, l.dropped]), [
        [1, 1, "failed", 0],
        [2, 2, "failed", 0]
      ])
      const lines = logs[0]!.lines
      assert.deepStrictEqual(lines.map((l) => [l.level, l.message.split("\n")[0]]), [
        ["Info", `charging o-7 {"amount":12}`],
        ["Warn", "from a forked fiber"],
        ["Error", "card declined"]
      ])
      assert.include(lines[2]!.message, "insufficient funds", "the cause is rendered with the line")
      for (const line of lines) {
        assert.deepStrictEqual(line.annotations, { order: "o-7" })
        assert.isAtLeast(line.at.getTime(), Number(startedAt))
      }
      assert.deepStrictEqual(yield* store.attemptLogs(other!.id), [], "a completed attempt keeps nothing by default")
    }))

  it.effect("keepLogs always keeps a completed attempt's lines, keepLogs never none of a failed one's; the ring keeps the last 100 lines and counts the rest", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const chatty = Handler.make({
        kind: "chatty",
        payload: Schema.Struct({}),
        keepLogs: "always",
        handle: () => Effect.forEach(Array.from({ length: 250 }, (_, i) => i), (i) => Effect.log(`line ${i}`))
      })
      const secret = Handler.make({
        kind: "secret",
        payload: Schema.Struct({}),
        keepLogs: "never",
        maxAttempts: 1,
        handle: () => Effect.andThen(Effect.logInfo("token abc"), Effect.fail(new Declined({ reason: "no" })))
      })
      const [a, b] = yield* store.enqueue([{ kind: "chatty", payload: {} }, {
        kind: "secret",
        payload: {},
        maxAttempts: 1
      }])
      yield* workUntil(
        store,
        [chatty, secret],
        Effect.map(
          Effect.all([stateOf(store, a!.id), stateOf(store, b!.id)]),
          ([x, y]) => x === "completed" && y === "failed"
        )
      )
      const [kept] = yield* store.attemptLogs(a!.id)
      assert.strictEqual(kept!.outcome, "completed")
      assert.strictEqual(kept!.lines.length, AttemptLogs.maxLines)
      assert.strictEqual(kept!.dropped, 150)
      assert.strictEqual(kept!.lines[0]!.message, "line 150")
      assert.strictEqual(kept!.lines.at(-1)!.message, "line 249")
      assert.deepStrictEqual(yield* store.attemptLogs(b!.id), [])
    }))

  it.effect("a keepLogs that is not one of its values is refused when the worker starts", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const wrong = Handler.make({
        kind: "wrong",
        payload: Schema.Struct({}),
        keepLogs: "sometimes" as never,
        handle: () => Effect.void
      })
      const error = yield* Effect.flip(Worker.run({ handlers: [wrong] }).pipe(Effect.provideService(RunStore, store)))
      assert.deepInclude(error, { _tag: "InvalidConfig", option: "keepLogs" })
      assert.include(error.issue, `"sometimes" (handler wrong)`)
    }))
})
