/**
 * A worker's in-flight leases, one entry per claim: a claim superseded by a newer one of the same
 * run is a different lease (its key is run id and fence). A slot stays taken until the lease's
 * final write is acknowledged.
 *
 * @since 0.1.0
 */
import type { Exit, Fiber, Schedule, Tracer } from "effect"
import type { KeepLogs } from "../AttemptLogs.js"
import type { LeaseLossReason, UnstorableValue } from "../Errors.js"
import type { ClaimedRun, LeaseKey } from "../RunRecord.js"
import type { LogBuffer } from "./LogBuffer.js"
import type { SelfSettlement } from "./Settlement.js"

/** @category models */
export interface LeaseEntry {
  readonly run: ClaimedRun
  /** The result's JSON text, by its handler's result schema; per run, before any batch. */
  readonly encodeResult: (runId: string, value: unknown) => Exit.Exit<string, UnstorableValue>
  /** Its handler's own retry policy (`Handler.retry`), overriding the worker's backoff. */
  readonly retrySchedule: Schedule.Schedule<unknown, unknown> | undefined
  /** When its claim was sent, on the monotonic clock (ms). */
  readonly claimedAt: number
  /** Local lease deadline on the monotonic clock (ms): last confirmed renewal's send time + TTL. */
  deadline: number
  /** Which attempts' log lines its handler keeps (`Handler.keepLogs`). */
  readonly keepLogs: KeepLogs
  /** The attempt's log lines so far (LogCapture), made on its first line. */
  logs: LogBuffer | undefined
  /** Set when the handler settled the run itself (fenced transaction, suspension). */
  settled: SelfSettlement | undefined
  /** Set once the final write is under way; a renewal that misses it then is expected. */
  finalizing: boolean
  /** Set when the worker stopped the run locally, with why. */
  lost: LeaseLossReason | undefined
  fiber: Fiber.Fiber<unknown, unknown> | undefined
  /** The attempt's consumer span, when runs are traced. */
  span?: Tracer.Span | undefined
  /** Why the attempt was abandoned (its settlement "abandoned"), for its span's error status. */
  abandoned?: string | undefined
}

/** @category constructors */
export const keyOf = (lease: LeaseKey): string => `${lease.runId}:${lease.fence}`

/**
 * The entries themselves, not a map from their keys: nothing looks a lease up by its key on the
 * per-run path, and an entry is added and removed by identity without building a key string.
 *
 * @category models
 */
export type InFlight = Set<LeaseEntry>

/** Leases a heartbeat must renew: held and not being finalized. @category accessors */
export const renewable = (inFlight: InFlight): Array<LeaseEntry> =>
  [...inFlight].filter((entry) => entry.settled === undefined && entry.lost === undefined)
