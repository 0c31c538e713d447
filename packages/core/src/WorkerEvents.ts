/**
 * What a worker does, as structured events: claims with fences, heartbeats sent and confirmed,
 * RunScope interruptions and rejected writes. Tests and the multi-process harness observe a worker
 * through these; the default sink drops them.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import type { LeaseLossReason } from "./Errors.js"
import type { LeaseKey } from "./RunRecord.js"

/** @category models */
export type WorkerEvent =
  | { readonly _tag: "Claimed"; readonly owner: string; readonly runId: string; readonly fence: number; readonly kind: string; readonly attempt: number }
  | { readonly _tag: "HeartbeatSent"; readonly owner: string; readonly leases: ReadonlyArray<LeaseKey> }
  | { readonly _tag: "HeartbeatConfirmed"; readonly owner: string; readonly renewed: ReadonlyArray<LeaseKey>; readonly lost: ReadonlyArray<LeaseKey> }
  | { readonly _tag: "HeartbeatFailed"; readonly owner: string; readonly leases: ReadonlyArray<LeaseKey>; readonly error: string }
  | { readonly _tag: "LeaseLost"; readonly owner: string; readonly runId: string; readonly fence: number; readonly reason: LeaseLossReason }
  | { readonly _tag: "WriteRejected"; readonly owner: string; readonly runId: string; readonly operation: string; readonly presentedFence: number; readonly storedFence: number }
  | {
    readonly _tag: "RunSettled"
    readonly owner: string
    readonly runId: string
    readonly fence: number
    readonly outcome: "completed" | "retry-scheduled" | "failed" | "released" | "suspended" | "abandoned"
  }
  | { readonly _tag: "StoreError"; readonly owner: string; readonly operation: string; readonly error: string }
  /** Notifications (new runs, cancels) reach this worker from now on. */
  | { readonly _tag: "Listening"; readonly owner: string }

/** @category models */
export interface Sink {
  readonly emit: (event: WorkerEvent) => Effect.Effect<void>
}

/** Where a worker reports its events. @category services */
export const WorkerEvents = Context.Reference<Sink>(
  "@leasehold/core/WorkerEvents",
  { defaultValue: () => ({ emit: () => Effect.void }) }
)

/** @category accessors */
export const emit = (event: WorkerEvent): Effect.Effect<void> => Effect.flatMap(WorkerEvents, (sink) => sink.emit(event))
