/**
 * What the memory store keeps of a run and of its history: the rows its state (State.ts) holds, its
 * transitions (Enqueue.ts, Claim.ts, Guarded.ts, ...) update and its read views (Read.ts) render, as
 * the Postgres store keeps `runs` and `run_events`.
 *
 * @internal
 */
import type { KeyLimitScope } from "../../KeyLimits.js"
import type { RateLimitScope } from "../../RateLimits.js"
import type { RunEvent, RunState } from "../../RunRecord.js"

/** One run as kept: times in epoch milliseconds, values as JSON text (`null`: SQL NULL). */
export interface StoredRun {
  readonly id: string
  readonly queue: string
  readonly kind: string
  readonly payload: string
  readonly priority: number
  readonly maxAttempts: number
  readonly idempotencyKey: string | null
  readonly concurrencyKey: string | null
  readonly traceParent: string | null
  /** The attempt timeout its enqueue set, in milliseconds. */
  readonly attemptTimeoutMs: number | null
  /** The run's deadline (epoch milliseconds), by the store's clock. */
  deadline: number | null
  /**
   * The key limit governing a keyed run (`KeyLimits`; decided as it becomes pending) and the slot
   * it holds while admitted (pending) or running; a governed pending run without one waits.
   */
  keyScope: KeyLimitScope | null
  keySlot: number | null
  /** The rate limit governing the run (`RateLimits`), decided at enqueue and when limits change. */
  rateScope: RateLimitScope | null
  readonly createdAt: number
  runAt: number
  state: RunState
  attempt: number
  fence: number
  leaseOwner: string | null
  leaseExpiresAt: number | null
  checkpoint: string | null
  result: string | null
  error: string | null
  signalName: string | null
  signalToken: string | null
  suspendDeadline: number | null
  signals: string
  updatedAt: number
  finishedAt: number | null
}

/** One line of a run's history as kept. */
export interface StoredEvent {
  readonly seq: number
  readonly runId: string
  readonly event: Omit<RunEvent, "id" | "runId">
}

/** One attempt's lines as kept (the lines as JSON text, as `attempt_logs.lines` holds them). */
export interface StoredAttemptLog {
  readonly fence: number
  readonly attempt: number
  readonly outcome: "failed" | "completed"
  readonly lines: string
  readonly dropped: number
  readonly at: number
}
