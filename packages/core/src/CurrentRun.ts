/**
 * What the running handler knows about its run besides the fence: attempt, last checkpoint and
 * the outcomes of signals it has waited for.
 *
 * @since 0.1.0
 */
import { Context } from "effect"
import type { SignalOutcome } from "./RunRecord.js"

/** @category services */
export class CurrentRun extends Context.Service<CurrentRun, {
  readonly kind: string
  readonly queue: string
  readonly attempt: number
  readonly maxAttempts: number
  readonly checkpoint: unknown
  readonly signals: Readonly<Record<string, SignalOutcome>>
  /** The W3C `traceparent` stored when the run was enqueued, if it was traced (see `Telemetry`). */
  readonly traceParent?: string | null | undefined
}>()("@leasehold/core/CurrentRun") {}
