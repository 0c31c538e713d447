/**
 * Closing a serving engine under `TestClock` (issue 42 item 3), on both stores, the two ways the
 * testing guide gives: a worker waits `shutdownGrace` for its runs in flight when it stops, on the
 * clock the test holds still; with `shutdownGrace: "0 millis"` it waits for nothing and the close
 * returns, or the test moves the clock by the grace while the close runs. Either way the run in
 * flight is released (the next holder replays it) and the caller waiting in `execute` is
 * interrupted, as Effect's engines do.
 */
import { assert, describe, it } from "@effect/vitest"
import { MemoryRunStore, RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Duration, Effect, Exit, Fiber, Latch, Layer, Schema, Scope } from "effect"
import { TestClock } from "effect/testing"
import { Workflow } from "effect/workflow"
import { databaseUrl, freshSchema } from "./support/db.js"

const started = Latch.makeUnsafe()
const Stuck = Workflow.make("close/Stuck", { payload: { id: Schema.String }, idempotencyKey: ({ id }) => id })
const StuckLayer = Stuck.toLayer(() => Effect.andThen(started.open, Effect.never))

const stores = {
  memory: () => MemoryRunStore.layer,
  postgres: () =>
    PgRunStore.layer({ schema: freshSchema("wfclose") }).pipe(
      Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 4 }))
    )
}

/** Builds a serving engine, starts an execution that never ends, and closes the engine with `close`. */
const closeInFlight = (
  store: () => Layer.Layer<any, any>,
  shutdownGrace: Duration.Input,
  close: (scope: Scope.Closeable) => Effect.Effect<void>
) =>
  Effect.gen(function*() {
    started.closeUnsafe()
    // The store outlives the engine, so the test can read the run after the close.
    const stored = yield* Layer.build(store())
    const scope = yield* Scope.make()
    const context = yield* Scope.provide(
      Layer.build(
        StuckLayer.pipe(Layer.provideMerge(LeaseholdWorkflows.layerServe({ ttl: "30 seconds", shutdownGrace })))
      ),
      scope
    ).pipe(Effect.provideContext(stored))
    const caller = yield* Stuck.execute({ id: "one" }).pipe(
      Effect.provideContext(context),
      Effect.forkChild({ startImmediately: true })
    )
    yield* started.await
    yield* close(scope)
    const exit = yield* Fiber.await(caller)
    assert(Exit.hasInterrupts(exit), `the caller ended otherwise: ${String(exit)}`)
    // Released, not failed: the run is pending again for the next holder.
    const [run] = yield* Context.get(stored, RunStore).list({ limit: 1 })
    assert.strictEqual(run?.state, "pending")
  })

describe("closing a serving engine under TestClock", () => {
  for (const [name, store] of Object.entries(stores)) {
    it.effect(`${name}: with shutdownGrace 0 the close returns with no clock moved, the run in flight released`, () =>
      closeInFlight(store, "0 millis", (scope) => Scope.close(scope, Exit.void)))

    it.effect(`${name}: with a grace, the close returns once the test moves the clock by it`, () =>
      closeInFlight(store, "10 seconds", (scope) =>
        Effect.gen(function*() {
          const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void), { startImmediately: true })
          // The grace's sleep starts only once the close has stopped the claim loop, which on
          // PostgreSQL waits on a query: a single adjust may land before it and move nothing. The
          // clock moves a second at a time: the release after the grace is bounded by the
          // worker's finalize timeout on this same clock, and a run claimed in the ledger is
          // released in two statements (moved to its row, then released), which larger steps
          // taken meanwhile would cut short.
          while (closing.pollUnsafe() === undefined) {
            yield* TestClock.adjust("1 second")
            yield* TestClock.withLive(Effect.sleep("20 millis"))
          }
          yield* Fiber.join(closing)
        })))
  }
})
