/**
 * Traces across workflows (issue 42 item 2), exported over OTLP/HTTP to a receiver inside the
 * test: an execution's first attempt is in the trace of the span that executed it; its activities,
 * its children's attempts and the replays after its suspensions are in that trace too; and a
 * deferred completed from outside (another trace) is recorded in it, linked to its completer.
 */
import { assert, describe, it } from "@effect/vitest"
import { MemoryRunStore } from "@leasehold/core"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Effect, Layer, Option, Schema } from "effect"
import { Activity, DurableDeferred, Workflow } from "effect/workflow"
import { exported, type OtlpSpan, receiver } from "./support/otlp.js"
import { eventually } from "./support/workers.js"

const Approval = DurableDeferred.make("traced/approval", { success: Schema.String })

const Ship = Workflow.make("traced/Ship", {
  payload: { order: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ order }) => order
})
const ShipLayer = Ship.toLayer(({ order }) =>
  Activity.make({ name: "book courier", success: Schema.String, execute: Effect.succeed(`shipped ${order}`) })
)

const Order = Workflow.make("traced/Order", {
  payload: { order: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ order }) => order
})
const OrderLayer = Order.toLayer(({ order }) =>
  Effect.gen(function*() {
    yield* Activity.make({ name: "reserve stock", execute: Effect.void })
    const shipped = yield* Ship.execute({ order })
    const approvedBy = yield* DurableDeferred.await(Approval)
    yield* Activity.make({ name: "charge card", execute: Effect.void })
    return `${shipped}, approved by ${approvedBy}`
  })
)

const engine = Layer.mergeAll(OrderLayer, ShipLayer).pipe(
  Layer.provideMerge(
    LeaseholdWorkflows.layerServe({ ttl: "5 seconds", pollInterval: "50 millis", shutdownGrace: "0 millis" })
  ),
  Layer.provideMerge(MemoryRunStore.layer)
)

describe("traces across workflows", () => {
  it.live("execution, activities, child, replays after a suspension and an outside completion share the caller's trace", () =>
    Effect.gen(function*() {
      const otlp = yield* receiver
      const spans = otlp.spans
      const byName = (name: string) => spans.filter((span) => span.name === name)
      yield* exported(
        otlp.url,
        Effect.gen(function*() {
          const executionId = yield* Order.execute({ order: "o-1" }, { discard: true }).pipe(
            Effect.withSpan("test.start", { root: true })
          )
          // Until the order suspends on its approval.
          while (true) {
            const polled = yield* Order.poll(executionId)
            if (Option.isSome(polled) && polled.value._tag === "Suspended") break
            yield* Effect.sleep("20 millis")
          }
          // Completed from another trace: a person's approval.
          const token = DurableDeferred.tokenFromExecutionId(Approval, { workflow: Order, executionId })
          yield* DurableDeferred.succeed(Approval, { token, value: "ana" }).pipe(
            Effect.withSpan("test.approve", { root: true })
          )
          assert.strictEqual(yield* Order.execute({ order: "o-1" }), "shipped o-1, approved by ana")
        }).pipe(Effect.provide(engine))
      )
      yield* eventually("the last activity's span is exported", Effect.sync(() => byName("charge card").length > 0))
      const [start] = byName("test.start")
      const [approve] = byName("test.approve")
      assert(start !== undefined && approve !== undefined)
      assert.notStrictEqual(approve.traceId, start.traceId, "the approval is a trace of its own")
      const inTrace = (span: OtlpSpan | undefined, what: string) => {
        assert(span !== undefined, `no ${what} span exported`)
        assert.strictEqual(span.traceId, start.traceId, `${what} is in another trace`)
      }
      inTrace(byName("leasehold.run workflow/traced/Order")[0], "the execution's first attempt")
      inTrace(byName("reserve stock")[0], "the first activity")
      inTrace(byName("leasehold.run workflow/traced/Ship")[0], "the child's attempt")
      inTrace(byName("book courier")[0], "the child's activity")
      inTrace(byName("charge card")[0], "the activity after the resume")
      // The replay after the resume: its attempt is a new trace, its replay is in the execution's.
      const replays = byName("leasehold.workflow traced/Order")
      assert.isAtLeast(replays.length, 2)
      for (const replay of replays) inTrace(replay, "a replay")
      const completion = byName("leasehold.workflow.deferred traced/approval")[0]
      inTrace(completion, "the outside completion")
      // Linked to the completer's span (Effect's `WorkflowEngine.deferredDone`, in the approval's trace).
      assert.deepStrictEqual((completion!.links ?? []).map((link) => link.traceId), [approve.traceId])
    }))
})
