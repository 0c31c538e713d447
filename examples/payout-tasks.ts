/**
 * A tasks module for the README's callback flow (`leasehold worker --tasks`): the handler hands out
 * a signed callback URL to the approver (here, the worker's log line stands for that message) and
 * waits for the callback. The URL resumes the run for whoever holds it, so it is not kept in a
 * checkpoint, which `leasehold runs show` and the console show to anyone who may read runs. Run by
 * the built CLI under Node 24's type stripping: erasable TypeScript.
 */
import { Handler, Run } from "@leasehold/core"
import { Callback } from "@leasehold/http"
import { Effect, Schema } from "effect"

export const approvePayout = Handler.make({
  kind: "approve-payout",
  payload: Schema.Struct({ order: Schema.String }),
  signals: { approval: Schema.Struct({ approved: Schema.Boolean }) }, // the callback body's schema
  handle: ({ order }) =>
    Effect.gen(function*() {
      const url = yield* Callback.url("approval", { expiresIn: "1 day" }) // the same URL after a crash
      // To the approver only (an email, a chat message): not into a checkpoint, which readers of runs see.
      yield* Effect.log(`ask the approver of ${order} to POST to ${url}`)
      return yield* Run.awaitSignal("approval") // suspends: no lease, no heartbeat, no slot
    })
})

export const handlers = [approvePayout]
