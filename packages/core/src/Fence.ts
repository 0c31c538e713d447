/**
 * The fence a handler writes under: the run it holds and the fence value its claim was granted.
 * Every write Leasehold makes for a handler requires this service and is compared with the
 * stored fence, so a holder that was superseded gets `FenceRejected` instead of a silent write.
 *
 * @since 0.1.0
 */
import { Context } from "effect"
import type { LeaseKey } from "./RunRecord.js"

/** @category services */
export class Fence extends Context.Service<Fence, {
  readonly runId: string
  readonly fence: number
  readonly owner: string
}>()("@leasehold/core/Fence") {}

/** The store-facing key of a fence. @category accessors */
export const leaseKey = (fence: Fence["Service"]): LeaseKey => ({ runId: fence.runId, fence: fence.fence })
