/**
 * The schedule ticker apart from the worker (`ScheduleTicker`), on `MemoryRunStore` under
 * `TestClock`: a worker ticks unless told not to, `ScheduleTicker.layer` ticks without a worker
 * and is woken by the store's notifications, and a definition the store refuses fails the layer.
 * The PostgreSQL versions (one run per tick across concurrent tickers) are in `schedules.test.ts`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Handler, MemoryRunStore, RunStore, type Schedules, ScheduleTicker, Worker } from "@leasehold/core"
import { Effect, Exit, Layer, Schema } from "effect"
import { TestClock } from "effect/testing"

/** Every second, of a kind no worker here handles: its runs stay pending, to be counted. */
const everySecond: Schedules.ScheduleDefinition = { name: "heartbeat-report", cron: "* * * * * *", kind: "report" }

// The worker serves another kind, so the scheduled runs are only fired, never claimed.
const other = Handler.make({ kind: "other", payload: Schema.Unknown, handle: () => Effect.void })

const fired = (store: RunStore["Service"]) =>
  Effect.map(store.list({ kind: "report", limit: 100 }), (runs) => runs.length)

/** Lets every fiber that can run without time passing run. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 50; i++) yield* Effect.yieldNow
})

const startWorker = (store: RunStore["Service"], options: Partial<Worker.WorkerOptions<never>>) =>
  Worker.run({ handlers: [other], pollInterval: "10 seconds", ...options }).pipe(
    Effect.provideService(RunStore, store),
    Effect.forkScoped,
    Effect.andThen(settle)
  )

describe("ScheduleTicker", () => {
  it.effect("a worker ticks the store's schedules by default: one run per second passed", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      yield* startWorker(store, { schedules: [everySecond] })
      assert.strictEqual(yield* fired(store), 0, "the first tick is the first after now")
      for (let second = 1; second <= 3; second++) {
        yield* TestClock.adjust("1 second")
        yield* settle
        assert.strictEqual(yield* fired(store), second, `runs after ${second} s`)
      }
    }))

  it.effect("with tickSchedules: false a worker registers its schedules but fires none; ScheduleTicker.layer fires them", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      yield* startWorker(store, { schedules: [everySecond], tickSchedules: false })
      const [registered] = yield* store.schedules
      assert.strictEqual(registered?.name, "heartbeat-report")
      yield* TestClock.adjust("5 seconds")
      yield* settle
      assert.strictEqual(yield* fired(store), 0, "no tick fired while only the non-ticking worker ran")

      yield* Layer.build(ScheduleTicker.layer()).pipe(Effect.provideService(RunStore, store))
      yield* settle
      const caughtUp = yield* fired(store)
      assert.isAtLeast(caughtUp, 1, "the ticker fires the tick that is due when it starts")
      yield* TestClock.adjust("2 seconds")
      yield* settle
      assert.strictEqual(yield* fired(store), caughtUp + 2, "then one run per second")
    }))

  it.effect("a standalone ticker is woken by a schedule registered after it started, not a minute later", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      // No schedule yet: the ticker's first round finds none and would sleep a minute.
      yield* Layer.build(ScheduleTicker.layer()).pipe(Effect.provideService(RunStore, store))
      yield* settle
      yield* store.registerSchedules([everySecond])
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.strictEqual(yield* fired(store), 1, "the SchedulesChanged notification woke the ticker")
    }))

  it.effect("a definition the store refuses fails the layer with InvalidConfig, and nothing is registered", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const built = yield* Layer.build(ScheduleTicker.layer({ schedules: [{ ...everySecond, cron: "every second" }] }))
        .pipe(
          Effect.provideService(RunStore, store),
          Effect.exit
        )
      assert.isTrue(Exit.isFailure(built))
      const error = Exit.isFailure(built) ? built.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
      assert.strictEqual((error as { _tag?: string })?._tag, "InvalidConfig")
      assert.match(String((error as Error).message), /cron/)
      assert.deepStrictEqual(yield* store.schedules, [])
    }))
})
