/**
 * Testing a workflow without a database, as the testing guide shows it: a serving engine
 * (`LeaseholdWorkflows.layerServe`) on `MemoryRunStore.layer`, under `TestClock` (`it.effect`).
 * The engine's worker waits `shutdownGrace` for runs in flight when the test's scope closes, on
 * the clock the test holds still: give it `shutdownGrace: "0 millis"`, and the close releases them
 * at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { MemoryRunStore, RunStore } from "@leasehold/core"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Effect, Layer, Option, Schema } from "effect"
import { TestClock } from "effect/testing"
import { Activity, DurableClock, Workflow } from "effect/workflow"

// A workflow to test: send the invoice, wait a week durably, then remind.
const Dunning = Workflow.make("Dunning", {
  payload: { invoice: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ invoice }) => invoice
})
const DunningLayer = Dunning.toLayer(({ invoice }) =>
  Effect.gen(function*() {
    yield* Activity.make({ name: "send invoice", execute: Effect.void })
    yield* DurableClock.sleep({ name: "a week", duration: "7 days" })
    return `reminded ${invoice}`
  })
)

// Served in the test's scope; a grace of 0 lets the scope close without moving the clock.
const engine = DunningLayer.pipe(
  Layer.provideMerge(
    LeaseholdWorkflows.layerServe({ ttl: "1 day", pollInterval: "1 hour", shutdownGrace: "0 millis" })
  ),
  Layer.provideMerge(MemoryRunStore.layer)
)

describe("testing a workflow on the memory store, under TestClock", () => {
  it.effect("the workflow suspends for a week, then reminds", () =>
    Effect.gen(function*() {
      const executionId = yield* Dunning.execute({ invoice: "F-9" }, { discard: true })
      const polled = () => Effect.map(Dunning.poll(executionId), Option.map((result) => result._tag))
      while (Option.getOrUndefined(yield* polled()) !== "Suspended") yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("7 days") // the durable clock's deadline passes; the next sweep resumes it
      while (Option.getOrUndefined(yield* polled()) !== "Complete") yield* TestClock.adjust("10 minutes")
      assert.strictEqual(yield* Dunning.execute({ invoice: "F-9" }), "reminded F-9")
      const [run] = yield* (yield* RunStore).list({ limit: 1 })
      assert.deepInclude(run, { kind: "workflow/Dunning", state: "completed", fence: 2 })
    }).pipe(Effect.provide(engine)))
})
