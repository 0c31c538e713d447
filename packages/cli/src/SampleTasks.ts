/**
 * The handlers `leasehold worker` runs without `--tasks`, and an example of a tasks module: a
 * short job, and an agent-like run that records a checkpoint and suspends for a human approval.
 *
 * @since 0.1.0
 */
import { Fence, Handler, Run } from "@leasehold/core"
import { Effect, Schema } from "effect"

/** A short unit of work. */
export const resize = Handler.make({
  kind: "resize-image",
  payload: Schema.Struct({ image: Schema.String, width: Schema.Number }),
  handle: ({ image, width }) => Effect.as(Effect.sleep("50 millis"), { image, width, resized: true })
})

/** An agent step that needs a person to approve before it acts. */
export const approveRefund = Handler.make({
  kind: "approve-refund",
  payload: Schema.Struct({ order: Schema.String, amount: Schema.Number }),
  handle: ({ amount, order }) =>
    Effect.gen(function*() {
      const fence = yield* Fence
      yield* Run.checkpoint({ step: "drafted refund", order, amount })
      const decision = yield* Run.awaitSignal("approval", { token: `refund-${order}`, timeout: "1 hour" })
      return { order, amount, decision, decidedUnderFence: fence.fence }
    })
})

export const handlers = [resize, approveRefund]
