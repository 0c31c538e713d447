/**
 * What the running handler knows about its run besides the fence: attempt, last checkpoint, the
 * outcomes of signals it has waited for, and a way to tell the lease it has settled the run itself.
 *
 * @since 0.1.0
 */
import { Context } from "effect"
import type { SignalOutcome } from "./RunRecord.js"

/** How a handler settled its run itself, so the lease finalizer has nothing left to write. @category models */
export type SelfSettlement = "completed" | "suspended"

/** @category services */
export class CurrentRun extends Context.Service<CurrentRun, {
  readonly kind: string
  readonly queue: string
  readonly attempt: number
  readonly maxAttempts: number
  readonly checkpoint: unknown
  readonly signals: Readonly<Record<string, SignalOutcome>>
  readonly settle: (how: SelfSettlement) => void
}>()("@leasehold/core/CurrentRun") {}
