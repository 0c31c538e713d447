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
  | {
    readonly _tag: "Claimed"
    readonly owner: string
    readonly runId: string
    readonly fence: number
    readonly kind: string
    readonly queue: string
    readonly attempt: number
    /** Due, a reclaim of an expired lease, or a suspension whose deadline passed. */
    readonly via: "due" | "expired" | "timed-out"
    /** From when the run became claimable to this claim, by the store's clock. */
    readonly waitMs: number
  }
  /** One claim statement: how many runs it took and how long it took. */
  | {
    readonly _tag: "ClaimBatch"
    readonly owner: string
    readonly count: number
    readonly durationMs: number
    readonly sweep: boolean
  }
  /** One batched completion statement, answered (`ok`) or failed. */
  | {
    readonly _tag: "CompletionFlush"
    readonly owner: string
    readonly count: number
    readonly durationMs: number
    readonly ok: boolean
  }
  | { readonly _tag: "HeartbeatSent"; readonly owner: string; readonly leases: ReadonlyArray<LeaseKey> }
  | {
    readonly _tag: "HeartbeatConfirmed"
    readonly owner: string
    readonly renewed: ReadonlyArray<LeaseKey>
    readonly lost: ReadonlyArray<LeaseKey>
    readonly durationMs: number
  }
  | {
    readonly _tag: "HeartbeatFailed"
    readonly owner: string
    readonly leases: ReadonlyArray<LeaseKey>
    readonly error: string
  }
  | {
    readonly _tag: "LeaseLost"
    readonly owner: string
    readonly runId: string
    readonly fence: number
    readonly reason: LeaseLossReason
  }
  | {
    readonly _tag: "WriteRejected"
    readonly owner: string
    readonly runId: string
    readonly operation: string
    readonly presentedFence: number
    readonly storedFence: number
  }
  | {
    readonly _tag: "RunSettled"
    readonly owner: string
    readonly runId: string
    readonly fence: number
    readonly kind: string
    readonly queue: string
    /** From the claim to the settlement, on the worker's monotonic clock. */
    readonly durationMs: number
    readonly outcome: "completed" | "retry-scheduled" | "failed" | "released" | "snoozed" | "suspended" | "abandoned"
  }
  | { readonly _tag: "StoreError"; readonly owner: string; readonly operation: string; readonly error: string }
  /** Notifications (new runs, cancels) reach this worker from now on. */
  | { readonly _tag: "Listening"; readonly owner: string }

/** @category models */
export interface Sink {
  readonly emit: (event: WorkerEvent) => Effect.Effect<void>
}

/**
 * The sink a worker has when none is provided: it drops every event. A worker given this one
 * builds no per-run event at all (`isSilent`); any other sink sees every event.
 *
 * @category constructors
 */
export const silent: Sink = { emit: () => Effect.void }

/** Whether nothing listens on `sink` (it is `silent`). @category predicates */
export const isSilent = (sink: Sink): boolean => sink === silent

/** Where a worker reports its events. @category services */
export const WorkerEvents = Context.Reference<Sink>(
  "@leasehold/core/WorkerEvents",
  { defaultValue: () => silent }
)

/** @category accessors */
export const emit = (event: WorkerEvent): Effect.Effect<void> =>
  Effect.flatMap(WorkerEvents, (sink) => sink.emit(event))
