/**
 * The storage service the worker runtime runs against. Every method that writes on behalf of a
 * lease holder takes the holder's fence and is guarded by it in the store; the Postgres store in
 * `@leasehold/sql` implements this with one statement per operation.
 *
 * @since 0.1.0
 */
import type { Duration, Effect, Queue, Scope } from "effect"
import { Context } from "effect"
import type { SqlError as SqlErrorModule } from "effect/sql"
type SqlError = SqlErrorModule.SqlError
import type { FenceRejected, InvalidTransition, LeaseNotHeld, RunNotFound, SignalTokenInUse } from "./Errors.js"
import type {
  ClaimedRun,
  Enqueued,
  EnqueueRequest,
  FailOutcome,
  FinalizeOutcome,
  LeaseKey,
  RunEvent,
  RunRecord,
  RunState
} from "./RunRecord.js"

/** A guarded write failed because the writer no longer holds the run. @category models */
export type StaleWrite = FenceRejected | LeaseNotHeld | RunNotFound

/** @category models */
export interface ClaimRequest {
  readonly owner: string
  readonly queues: ReadonlyArray<string>
  readonly kinds: ReadonlyArray<string>
  readonly limit: number
  readonly ttl: Duration.Duration
  /**
   * Due runs only, without the sweep for expired leases and passed suspension deadlines. The
   * worker asks for this on notifications and freed slots, and sweeps at least once per poll
   * interval. Default false: every kind of claimable run.
   */
  readonly dueOnly?: boolean | undefined
}

/** @category models */
export interface CompleteItem extends LeaseKey {
  readonly result: unknown
}

/** @category models */
export interface FailRequest extends LeaseKey {
  readonly error: unknown
  /** Delay before the retry is due; `undefined` fails the run outright. Only used while attempts remain. */
  readonly retryDelayMs: number | undefined
}

/** @category models */
export interface SuspendRequest extends LeaseKey {
  readonly signal: string
  readonly token: string
  readonly timeout: Duration.Duration | undefined
}

/** @category models */
export interface ListFilter {
  readonly state?: RunState | undefined
  readonly queue?: string | undefined
  readonly kind?: string | undefined
  readonly limit: number
  readonly offset: number
}

/** @category models */
export interface Stats {
  readonly byStateAndQueue: ReadonlyArray<{ readonly queue: string; readonly state: RunState; readonly count: number }>
  readonly liveLeases: number
  readonly oldestPendingSeconds: number | null
  readonly fenceRejections: number
  readonly reclaims: number
}

/** A wake-up the store pushes to idle workers. @category models */
export type StoreNotification =
  | { readonly _tag: "RunsAvailable"; readonly queue: string }
  | { readonly _tag: "RunCancelled"; readonly runId: string }

/**
 * @category services
 */
export class RunStore extends Context.Service<RunStore, {
  readonly enqueue: (requests: ReadonlyArray<EnqueueRequest>) => Effect.Effect<ReadonlyArray<Enqueued>, SqlError>
  /** Claims up to `limit` runs in one statement; each claim raises the run's fence by exactly 1. */
  readonly claim: (request: ClaimRequest) => Effect.Effect<ReadonlyArray<ClaimedRun>, SqlError>
  /** Renews every listed lease in one statement; returns exactly the leases still held. */
  readonly renew: (
    owner: string,
    leases: ReadonlyArray<LeaseKey>,
    ttl: Duration.Duration
  ) => Effect.Effect<ReadonlyArray<LeaseKey>, SqlError>
  /**
   * Completes many runs in one statement, each guarded by id + fence + running. A run already
   * completed under the same fence answers `Finalized` (the holder's completion sent again).
   */
  readonly completeBatch: (items: ReadonlyArray<CompleteItem>) => Effect.Effect<ReadonlyArray<FinalizeOutcome>, SqlError>
  readonly fail: (request: FailRequest) => Effect.Effect<FailOutcome, StaleWrite | SqlError>
  /** Gives a run back at once (shutdown, lost lease) without charging it an attempt. */
  readonly release: (lease: LeaseKey) => Effect.Effect<void, StaleWrite | SqlError>
  readonly checkpoint: (lease: LeaseKey, value: unknown) => Effect.Effect<void, StaleWrite | SqlError>
  /** Suspends the run and releases its lease outright. */
  readonly suspend: (request: SuspendRequest) => Effect.Effect<void, StaleWrite | SignalTokenInUse | SqlError>
  /**
   * Runs `effect` and completes the run with its result in one transaction. If the fence is stale
   * the transaction rolls back, the caller's writes included.
   */
  readonly completeInTransaction: <A, E, R>(
    lease: LeaseKey,
    effect: Effect.Effect<A, E, R>,
    encodeResult: (a: A) => unknown
  ) => Effect.Effect<A, E | StaleWrite | SqlError, R>
  /** Resumes a suspended run by id or by its signal token. */
  readonly resume: (
    idOrToken: string,
    payload: unknown
  ) => Effect.Effect<string, RunNotFound | InvalidTransition | SqlError>
  /** Cancels a run; a running run's fence is advanced so its holder's writes are rejected. */
  readonly cancel: (runId: string) => Effect.Effect<void, RunNotFound | InvalidTransition | SqlError>
  /** A failed or cancelled run back to pending; the fence keeps rising. */
  readonly retry: (runId: string) => Effect.Effect<void, RunNotFound | InvalidTransition | SqlError>
  readonly get: (runId: string) => Effect.Effect<RunRecord, RunNotFound | SqlError>
  readonly list: (filter: ListFilter) => Effect.Effect<ReadonlyArray<RunRecord>, SqlError>
  readonly history: (runId: string) => Effect.Effect<ReadonlyArray<RunEvent>, RunNotFound | SqlError>
  readonly stats: Effect.Effect<Stats, SqlError>
  /** Wake-ups for idle workers (new runs, resumes, cancels). */
  readonly notifications: Effect.Effect<Queue.Dequeue<StoreNotification, SqlError>, SqlError, Scope.Scope>
}>()("@leasehold/core/RunStore") {}
