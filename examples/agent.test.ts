/**
 * The agent example, run as written against the test PostgreSQL: the refund lands exactly once,
 * the run completes under fence 2 after the approval, the tool is not called again on resume, and
 * a superseded holder running the handler again is stopped by the fence.
 */
import { assert, describe, it } from "@effect/vitest"
import { CurrentRun, Fence, RunStore } from "@leasehold/core"
import { Cause, Context, Effect, Exit, Layer } from "effect"
import { databaseUrl, freshSchema } from "../test/support/db.js"
import { appLayer, main, refundAgent, Refunds, toolCallCount } from "./agent.js"

describe("examples/agent.ts", () => {
  it.live("the refund lands exactly once and the run completes under fence 2 after the approval", () =>
    Effect.gen(function*() {
      const options = { url: databaseUrl(), schema: freshSchema("agent") }
      const said: Array<string> = []
      const toolCallsBefore = toolCallCount()
      const outcome = yield* Effect.promise(() =>
        main({ ...options, order: "A-1001", say: (line) => void said.push(line) })
      )
      const runId = outcome.run.id

      const context = yield* Layer.build(appLayer(options))
      const store = Context.get(context, RunStore)
      const refunds = Context.get(context, Refunds)

      const run = yield* store.get(runId)
      assert.strictEqual(run.state, "completed")
      assert.strictEqual(run.fence, 2)
      assert.deepStrictEqual(run.result, {
        order: "A-1001",
        refunded: true,
        amountCents: 4200,
        approvedBy: "sam@example.com"
      })
      const history = (yield* store.history(runId)).map((e) => [e.kind, e.fence])
      assert.deepStrictEqual(history, [["claimed", 1], ["suspended", 1], ["resumed", 1], ["claimed", 2], [
        "completed",
        2
      ]])
      assert.deepStrictEqual(yield* refunds.forOrder("A-1001"), [{ run_id: runId, fence: 2 }])
      // The first attempt checkpointed the tool's answer; the resumed attempt reused it.
      assert.strictEqual(toolCallCount() - toolCallsBefore, 1)
      assert.deepStrictEqual(run.checkpoint, {
        step: "proposed",
        proposal: { order: "A-1001", customer: "ana@example.com", amountCents: 4200 }
      })
      assert.include(said.join("\n"), `run ${runId} is suspended (lease owner: none, fence 1)`)

      // The holder of fence 1 wakes up late, with the approval in hand, and runs the handler
      // again: its fenced transaction is refused, the handler stops (FenceRejected is caught and
      // turned into an interruption), and no second refund lands.
      const staleHolder = Layer.mergeAll(
        Layer.succeed(Fence, { runId, fence: 1, owner: "stale-worker" }),
        Layer.succeed(CurrentRun, {
          kind: "refund-agent",
          queue: "default",
          attempt: 1,
          maxAttempts: 5,
          checkpoint: run.checkpoint,
          signals: { approval: { _tag: "Signalled", payload: { approved: true, by: "sam@example.com" } } }
        })
      )
      const exit = yield* Effect.exit(
        refundAgent.handle({ order: "A-1001", reason: "arrived broken" }).pipe(
          Effect.provide(staleHolder),
          Effect.provideContext(context)
        )
      )
      assert.isTrue(Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause), `the stale handler stopped: ${exit}`)
      const rejections = (yield* store.history(runId)).filter((e) => e.kind === "stale_write_rejected")
      assert.deepStrictEqual(rejections.map((e) => [e.fence, e.detail]), [[1, {
        operation: "transaction",
        storedFence: 2,
        state: "completed"
      }]])
      assert.lengthOf(yield* refunds.forOrder("A-1001"), 1, "still exactly one refund")
      assert.strictEqual(toolCallCount() - toolCallsBefore, 1, "and no second tool call")
    }))
})
