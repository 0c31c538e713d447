/**
 * Testing handlers without a database, as the testing guide shows it: `MemoryRunStore.layer` is a
 * `RunStore` in memory on Effect's `Clock`, so under `TestClock` (`it.effect`) leases, heartbeats,
 * retries and signal deadlines run as the test moves time, with no real time passing. It keeps the
 * same contract as the PostgreSQL store (test/contract/).
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, MemoryRunStore, Run, RunStore, Worker } from "@leasehold/core"
import { Effect, Fiber, Schema } from "effect"
import { TestClock } from "effect/testing"

// A handler to test: wait up to a day for the invoice to be paid, else remind.
const reminder = Handler.make({
  kind: "reminder",
  payload: Schema.Struct({ invoice: Schema.String }),
  handle: ({ invoice }) =>
    Effect.gen(function*() {
      const outcome = yield* Run.awaitSignal("paid", { token: `invoice-${invoice}`, timeout: "1 day" })
      return outcome._tag === "Signalled" ? "paid, nothing to do" : "send a reminder"
    })
})

// One that fails its first attempt: retried after the backoff, by the clock the test moves.
let attempts = 0
const flaky = Handler.make({
  kind: "flaky",
  payload: Schema.Struct({}),
  handle: () => attempts++ === 0 ? Effect.fail("the mail server said 421") : Effect.succeed("sent")
})

const worker = Worker.run({
  handlers: [reminder, flaky],
  pollInterval: "1 minute",
  retry: { base: "1 minute", max: "1 hour" }
})

/** Moves the test clock by `seconds`, one second at a time, letting the worker's fibers run at each step. */
const pass = (seconds: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < seconds; i++) yield* TestClock.adjust("1 second")
  })

describe("testing handlers on the memory store, under TestClock", () => {
  it.effect("a day without payment: the suspension times out and the handler sends a reminder", () =>
    Effect.gen(function*() {
      const running = yield* Effect.forkChild(worker)
      const { id } = yield* Client.enqueue(reminder, { invoice: "F-7" })
      yield* pass(1)
      const store = yield* RunStore
      assert.deepInclude(yield* store.get(id), { state: "suspended", signalToken: "invoice-F-7" })
      yield* TestClock.adjust("1 day") // the deadline passes; the next sweep (every pollInterval) takes the run back
      yield* pass(60)
      assert.deepInclude(yield* store.get(id), { state: "completed", fence: 2, result: "send a reminder" })
      yield* Fiber.interrupt(running)
    }).pipe(Effect.provide(MemoryRunStore.layer)))

  it.effect("paid before the day is out: resumed by its token, the handler does nothing", () =>
    Effect.gen(function*() {
      const running = yield* Effect.forkChild(worker)
      const { id } = yield* Client.enqueue(reminder, { invoice: "F-8" })
      yield* pass(1)
      yield* Client.resumeByToken("invoice-F-8", { paidAt: "2026-12-01" })
      yield* pass(1)
      assert.deepInclude(yield* (yield* RunStore).get(id), {
        state: "completed",
        fence: 2,
        result: "paid, nothing to do"
      })
      yield* Fiber.interrupt(running)
    }).pipe(Effect.provide(MemoryRunStore.layer)))

  it.effect("a failed attempt is retried after its backoff, not before", () =>
    Effect.gen(function*() {
      attempts = 0
      const running = yield* Effect.forkChild(worker)
      const { id } = yield* Client.enqueue(flaky, {})
      yield* pass(1)
      const store = yield* RunStore
      assert.deepInclude(yield* store.get(id), { state: "pending", attempt: 1 })
      yield* pass(5) // the backoff is about a minute (with jitter): still waiting
      assert.deepInclude(yield* store.get(id), { state: "pending", attempt: 1 })
      yield* pass(180) // due after 48–72 s, taken by the sweep after that (one per pollInterval)
      assert.deepInclude(yield* store.get(id), { state: "completed", attempt: 2, result: "sent" })
      yield* Fiber.interrupt(running)
    }).pipe(Effect.provide(MemoryRunStore.layer)))
})
