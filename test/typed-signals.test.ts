/**
 * Typed signals: a handler that declares its signals' schemas awaits them by a declared name only,
 * and gets the outcome decoded with the schema (its `Type`), through `handle`'s second argument or
 * `Run.awaitSignal(schemas, name)`. The `@ts-expect-error` lines are checked by `tsc -b` (the
 * build): each would compile without the types this module proves.
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, MemoryRunStore, Run, RunStore, Worker } from "@leasehold/core"
import { Effect, Fiber, Schema } from "effect"
import { TestClock } from "effect/testing"

// The amount travels as a string (what the approval form posts) and is decoded to a number.
const Decision = Schema.Struct({ approved: Schema.Boolean, amount: Schema.FiniteFromString })
const signals = { approval: Decision }

const refund = Handler.make({
  kind: "typed-refund",
  payload: Schema.Struct({ order: Schema.String }),
  signals,
  handle: ({ order }, declared) =>
    Effect.gen(function*() {
      const outcome = yield* declared.await("approval", { token: `refund-${order}` })
      if (outcome._tag === "TimedOut") return "timed out"
      const amount: number = outcome.payload.amount
      // @ts-expect-error: the decoded amount is a number, not the string that was delivered
      const asDelivered: string = outcome.payload.amount
      void asDelivered
      return outcome.payload.approved ? `refund ${amount + 1}` : "declined"
    })
})

// The same through `Run.awaitSignal`, given the declaration.
const viaRun = Handler.make({
  kind: "typed-via-run",
  payload: Schema.Struct({}),
  signals,
  handle: () =>
    Effect.map(
      Run.awaitSignal(signals, "approval"),
      (outcome) => outcome._tag === "Signalled" ? outcome.payload.amount * 2 : 0
    )
})

// Names not declared do not compile.
export const undeclared = Handler.make({
  kind: "typed-undeclared",
  payload: Schema.Struct({}),
  signals,
  handle: (_, declared) =>
    Effect.gen(function*() {
      // @ts-expect-error: "aproval" is not a declared signal
      yield* declared.await("aproval")
      // @ts-expect-error: nor through Run.awaitSignal with the declaration
      yield* Run.awaitSignal(signals, "aproval")
    })
})

// Without a declaration, handle's signals accept no name at all (Run.awaitSignal(name) stays untyped).
export const none = Handler.make({
  kind: "typed-none",
  payload: Schema.Struct({}),
  handle: (_, declared) =>
    Effect.gen(function*() {
      // @ts-expect-error: this handler declares no signals
      yield* declared.await("approval")
      const outcome = yield* Run.awaitSignal("approval")
      return outcome._tag === "Signalled" ? outcome.payload : undefined
    })
})

const handlers = Effect.runSync(Handler.registry([refund, viaRun]))
const worker = Worker.run({ handlers: [refund, viaRun], pollInterval: "1 second" })
const pass = (seconds: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < seconds; i++) yield* TestClock.adjust("1 second")
  })

describe("typed signals", () => {
  it.effect("the outcome is decoded with the declared schema, by handle's signals and by Run.awaitSignal", () =>
    Effect.gen(function*() {
      const running = yield* Effect.forkChild(worker)
      const store = yield* RunStore
      const first = yield* Client.enqueue(refund, { order: "A-1" })
      const second = yield* Client.enqueue(viaRun, {})
      yield* pass(2)
      assert.deepInclude(yield* store.get(first.id), { state: "suspended", signalName: "approval" })
      assert.deepInclude(yield* store.get(second.id), { state: "suspended", signalName: "approval" })
      yield* Client.resume(first.id, { approved: true, amount: "41" }, { handlers })
      yield* Client.resume(second.id, { approved: true, amount: "21" }, { handlers })
      yield* pass(3)
      assert.deepInclude(yield* store.get(first.id), { state: "completed", result: "refund 42" })
      assert.deepInclude(yield* store.get(second.id), { state: "completed", result: 42 })
      yield* Fiber.interrupt(running)
    }).pipe(Effect.provide(MemoryRunStore.layer)))

  it.effect("a payload that does not decode is refused at delivery: the run stays suspended, nothing written", () =>
    Effect.gen(function*() {
      const running = yield* Effect.forkChild(worker)
      const store = yield* RunStore
      const { id } = yield* Client.enqueue(refund, { order: "A-2" })
      yield* pass(2)
      const before = yield* store.get(id)
      const refused = yield* Effect.flip(Client.resume(id, { approved: true, amount: "forty" }, { handlers }))
      assert.deepInclude(refused, { _tag: "InvalidPayload", kind: "typed-refund (signal approval)" })
      assert.deepStrictEqual(yield* store.get(id), before)
      yield* Fiber.interrupt(running)
    }).pipe(Effect.provide(MemoryRunStore.layer)))

  it.effect("a payload written around the checks (straight to the store) fails the attempt when awaited, naming the signal", () =>
    Effect.gen(function*() {
      const running = yield* Effect.forkChild(worker)
      const store = yield* RunStore
      const { id } = yield* Client.enqueue(refund, { order: "A-3" })
      yield* pass(2)
      yield* store.resumeById(id, { approved: "maybe" })
      yield* pass(3)
      const run = yield* store.get(id)
      assert.notStrictEqual(run.state, "completed")
      assert.match(JSON.stringify(run.error), /signal approval/)
      yield* Fiber.interrupt(running)
    }).pipe(Effect.provide(MemoryRunStore.layer)))
})
