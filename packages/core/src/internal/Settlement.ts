/**
 * How a handler settled its run itself (a fenced transaction committed, it suspended or snoozed), so the
 * lease finalizer has nothing left to write. Kept off the public `CurrentRun` service: only
 * `Run.transaction`, `Run.awaitSignal` and `Run.snooze` may report a settlement, never handler code (the link to
 * the lease is a private field).
 */
import type { Duration } from "effect"
import type { KeepLogs } from "../AttemptLogs.js"
import type { CurrentRun } from "../CurrentRun.js"
import type { ClaimedRun, SignalOutcome } from "../RunRecord.js"
import type { LogBuffer } from "./LogBuffer.js"

/** @internal */
export type SelfSettlement = "completed" | "suspended" | "snoozed"

/** What a lease records of a self-settlement. @internal */
export interface Settleable {
  settled: SelfSettlement | undefined
  /** Which attempts' log lines its handler keeps (`Handler.keepLogs`). */
  readonly keepLogs: KeepLogs
  /** The attempt's log lines so far (LogCapture), made on its first line. */
  logs: LogBuffer | undefined
}

type CurrentRunShape = CurrentRun["Service"]

/** The `CurrentRun` a worker hands each run, tied to its lease and the worker's lease TTL. @internal */
export class WorkerRun implements CurrentRunShape {
  readonly kind: string
  readonly queue: string
  readonly attempt: number
  readonly maxAttempts: number
  readonly checkpoint: unknown
  readonly signals: Readonly<Record<string, SignalOutcome>>
  readonly traceParent: string | null
  readonly #lease: Settleable
  readonly #ttl: Duration.Duration

  constructor(run: ClaimedRun, lease: Settleable, ttl: Duration.Duration) {
    this.kind = run.kind
    this.queue = run.queue
    this.attempt = run.attempt
    this.maxAttempts = run.maxAttempts
    this.checkpoint = run.checkpoint
    this.signals = run.signals
    this.traceParent = run.traceParent
    this.#lease = lease
    this.#ttl = ttl
  }

  /** Reports a settlement for the run whose `CurrentRun` this is (a no-op outside a worker). */
  static report(current: CurrentRun["Service"], how: SelfSettlement): void {
    if (#lease in current) current.#lease.settled = how
  }

  /** The lease of the run whose `CurrentRun` this is (undefined outside a worker): where its log lines go. */
  static leaseOf(current: CurrentRun["Service"]): Settleable | undefined {
    return #lease in current ? current.#lease : undefined
  }

  /** The TTL of the lease the run is held under (undefined outside a worker). */
  static ttl(current: CurrentRun["Service"]): Duration.Duration | undefined {
    return #ttl in current ? current.#ttl : undefined
  }
}

/** @internal */
export const report = WorkerRun.report

/** @internal */
export const leaseTtl = WorkerRun.ttl

/** @internal */
export const leaseOf = WorkerRun.leaseOf
