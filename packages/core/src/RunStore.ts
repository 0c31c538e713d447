/**
 * The storage service the worker runtime runs against. Every method that writes on behalf of a
 * lease holder takes the holder's fence and is guarded by it in the store. Stores speak only
 * Leasehold's errors (`StoreError` for the store itself), never their driver's. Implementations:
 * `PgRunStore` in `@leasehold/sql` (one statement per operation) and `MemoryRunStore`.
 *
 * The members are grouped by who calls them (ADR 0029), one interface per role: `RuntimeStore`
 * (the worker), `HandlerStore` (a handler's fenced writes), `ClientStore` (an application's
 * calls about one run), `OperatorStore` (operators' reads and bulk actions) and `ConfigStore`
 * (paused queues, limits and schedules). What implementations share to decide alike is in
 * `@leasehold/core/store`.
 *
 * @since 0.1.0
 */
import type { Duration, Effect, Exit, Stream } from "effect"
import { Context } from "effect"
import type { AttemptLog, AttemptLogInput } from "./AttemptLogs.js"
import type {
  DeleteCountChanged,
  FenceRejected,
  InvalidConfig,
  InvalidPayload,
  InvalidTransition,
  LeaseNotHeld,
  RunNotFound,
  RunsBusy,
  ScheduleNotFound,
  SignalTokenInUse,
  SignalTokenNotFound,
  StoreError,
  UnstorableValue
} from "./Errors.js"
import type { KeyLimit, KeyLimitInfo, KeyLimitScope, KeyUsage } from "./KeyLimits.js"
import type {
  ActionRecord,
  ActionsQuery,
  Actor,
  DeleteCount,
  DeleteOutcome,
  OperatorAction
} from "./OperatorActions.js"
import type { RateLimit, RateLimitInfo, RateLimitScope } from "./RateLimits.js"
import type * as Retention from "./Retention.js"
import type {
  ClaimedRun,
  Enqueued,
  EnqueueRequest,
  FailOutcome,
  FinalizeOutcome,
  LeaseKey,
  PausedQueue,
  RunEvent,
  RunRecord,
  RunState,
  SignalDelivery,
  SuspendOutcome,
  WorkerAnnouncement,
  WorkerInfo
} from "./RunRecord.js"
import type { ScheduleDefinition, ScheduleInfo, ScheduleRegistered, TickOutcome } from "./Schedules.js"
import type { Throughput, ThroughputRequest } from "./Throughput.js"

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
   * Due runs only, without the sweep for expired leases and passed suspension deadlines, and from
   * each queue's claim position (`ClaimPosition`): a run made due behind it is left to the sweep.
   * The worker asks for this on notifications and freed slots, and sweeps at least once per poll
   * interval and on every claim after a sweep that took expired leases or passed deadlines only. Default false: every kind of claimable run, every queue read from its head.
   */
  readonly dueOnly?: boolean | undefined
}

/** @category models */
export interface CompleteItem extends LeaseKey {
  /** The result as JSON text, encoded per run before it joins a batch; `null` stores JSON null. */
  readonly result: string | null
  /**
   * Whether the run carries a concurrency key. A completion gives its run's key slot back and the
   * store hands it on in the same statement; `false` spares the store reading the run's slot (the
   * worker says so of every unkeyed run). Unset, the store reads it.
   */
  readonly keyed?: boolean | undefined
  /**
   * The attempt's log lines to keep (`AttemptLogs`), written only if the completion is: by the
   * store after it, for the runs it completed under that fence.
   */
  readonly log?: AttemptLogInput | undefined
}

/**
 * Asked of a completion: the key slots it frees go to their keys' next waiting runs, and those of
 * `kinds` in (unpaused) `queues` are claimed at once for `owner`, as a claim would (fence raised,
 * a lease of `ttl`). Each comes back as the `next` of the completion whose slot it took. The
 * worker asks it of every batch while it claims, so a key's next run starts without a claim.
 *
 * @category models
 */
export interface ClaimNext {
  readonly owner: string
  readonly ttl: Duration.Duration
  readonly queues: ReadonlyArray<string>
  readonly kinds: ReadonlyArray<string>
}

/** @category models */
export interface FailRequest extends LeaseKey {
  readonly error: unknown
  /** Delay before the retry is due; `undefined` fails the run outright. Only used while attempts remain. */
  readonly retryDelayMs: number | undefined
  /** The attempt's log lines (`AttemptLogs`), written with the failure or not at all. */
  readonly log?: AttemptLogInput | undefined
}

/** @category models */
export interface SnoozeRequest extends LeaseKey {
  /** How long until the run is due again, counted from the store's `now()` (0 to `Limits.maxDelayMs`). */
  readonly delayMs: number
}

/** @category models */
export interface SuspendRequest extends LeaseKey {
  readonly signal: string
  readonly token: string
  readonly timeout: Duration.Duration | undefined
}

/** @category models */
export interface DeliverSignalRequest {
  readonly runId: string
  readonly signal: string
  readonly payload: unknown
  /** A delivery's own id (Standard Webhooks `webhook-id`): seen before is `Replayed`, nothing written. */
  readonly deliveryId?: string | undefined
  /** Who delivered it, recorded with the resume it makes (a signed callback: `{ name: "callback", via: "callback" }`). */
  readonly actor?: Actor | undefined
}

/** @category models */
export interface RunFilter {
  readonly state?: RunState | undefined
  readonly queue?: string | undefined
  readonly kind?: string | undefined
  /**
   * Payload fields that must equal a value: the field at `path` as text (a string as it is, a
   * number or boolean as JSON writes it; a missing field or JSON null never matches).
   */
  readonly payload?: ReadonlyArray<PayloadFieldFilter> | undefined
  /** Only these runs, by id (an operator's selection); ids that name no run select nothing. */
  readonly ids?: ReadonlyArray<string> | undefined
  /** The run's concurrency key (`KeyLimits`). */
  readonly concurrencyKey?: string | undefined
  /** The run's idempotency key (a schedule's tick: `Schedules.tickKey`). */
  readonly idempotencyKey?: string | undefined
  /** Runs whose stored error, as JSON text, contains this text (letter case ignored). */
  readonly errorText?: string | undefined
  /** Created at or after this time. */
  readonly createdFrom?: Date | undefined
  /** Created before this time. */
  readonly createdTo?: Date | undefined
}

/**
 * A delete of the runs a filter selects, confirmed by the count the caller was shown
 * (`countDeletable`): when the store counts otherwise now, nothing is deleted
 * (`DeleteCountChanged`).
 *
 * @category models
 */
export interface DeleteRequest {
  readonly filter: RunFilter
  readonly expected: number
  readonly actor?: Actor | undefined
}

/** @category models */
export interface PayloadFieldFilter {
  readonly path: ReadonlyArray<string>
  readonly value: string
}

/**
 * A page of runs, newest first (by the run's number). Page by keyset: `before` the last id of a
 * page gives the next one (older), `after` the first id gives the one before it (newer); each is
 * read from an index however deep the page. A cursor that is not a run id selects nothing.
 * `offset` skips runs one by one (kept for small pages; deep offsets read every run they skip).
 *
 * @category models
 */
export interface ListFilter extends RunFilter {
  readonly limit: number
  readonly offset?: number | undefined
  /** Only runs whose id is below this one. */
  readonly before?: string | undefined
  /** Only runs whose id is above this one: the `limit` nearest it, still newest first. */
  readonly after?: string | undefined
}

/**
 * What a resume checks before it writes, given the suspended run it would resume (its kind and the
 * signal it awaits): `Client.resume` with handlers decodes the payload with the signal's schema.
 *
 * @category models
 */
export type ResumeCheck = (target: {
  readonly kind: string
  readonly signal: string
}) => Exit.Exit<void, InvalidPayload>

/** A lease held now, as the database sees it. @category models */
export interface LiveLease {
  readonly owner: string
  readonly runId: string
  readonly fence: number
  readonly kind: string
  readonly queue: string
  readonly attempt: number
  /** Until the lease expires unless renewed, by the database's clock; never negative. */
  readonly expiresInMs: number
}

/**
 * The store's counters for operators. Every count is of live data (ADR 0030): the runs that have
 * not ended, by queue and state, read from the indexes that hold them only, so its cost does not
 * grow with history. Runs that ended are counted per minute over a window by `RunStore.activity`.
 *
 * @category models
 */
export interface Stats {
  /** Pending (waiting for a key included), running and suspended runs, by queue; never an ended state. */
  readonly byStateAndQueue: ReadonlyArray<{ readonly queue: string; readonly state: LiveState; readonly count: number }>
  readonly liveLeases: number
  readonly oldestPendingSeconds: number | null
  /** Due runs (pending, `run_at` passed) by queue, with how long the oldest has waited. */
  readonly dueByQueue: ReadonlyArray<
    { readonly queue: string; readonly due: number; readonly oldestDueSeconds: number }
  >
  readonly fenceRejections: number
  readonly reclaims: number
}

/**
 * The runs that have not ended, sampled from indexes only (`RunStore.sample`): cheap however many
 * ended runs the store keeps, so a scrape can read it every time. Ended runs are not counted here
 * (`activity` counts them per minute over a window).
 *
 * @category models
 */
export interface LiveSample {
  /** Pending (waiting for a key included), running and suspended runs, by queue. */
  readonly byStateAndQueue: ReadonlyArray<{ readonly queue: string; readonly state: LiveState; readonly count: number }>
  /** Due runs a claim may take now (not waiting for a key), by queue, with how long the oldest has waited. */
  readonly dueByQueue: ReadonlyArray<
    { readonly queue: string; readonly due: number; readonly oldestDueSeconds: number }
  >
  /** Leases held now, by the store's clock. */
  readonly liveLeases: number
}

/** The states of a run that has not ended. @category models */
export type LiveState = "pending" | "running" | "suspended"

/**
 * A wake-up the store pushes to idle workers. `Subscribed` comes first, once notifications sent
 * from then on are sure to arrive.
 *
 * @category models
 */
export type StoreNotification =
  | { readonly _tag: "Subscribed" }
  | { readonly _tag: "RunsAvailable"; readonly queue: string }
  | { readonly _tag: "RunCancelled"; readonly runId: string }
  | { readonly _tag: "SchedulesChanged" }

/**
 * The worker runtime's part of a store: claims and sweeps, lease renewal, the end of each attempt
 * (completion batches, failures, releases, with their attempt logs), schedule ticks, the worker
 * registry and the wake-ups of idle workers. `Worker.run` calls these; every write for a held run is
 * guarded by its holder's fence.
 *
 * @category services
 */
export interface RuntimeStore {
  /**
   * Claims up to `limit` runs in one statement; each claim raises the run's fence by exactly 1 (a
   * store on a promoted server may raise it further, never by less: `PgRunStore`'s timeline floor).
   */
  readonly claim: (request: ClaimRequest) => Effect.Effect<ReadonlyArray<ClaimedRun>, StoreError>
  /** Renews every listed lease in one statement; returns exactly the leases still held. */
  readonly renew: (
    owner: string,
    leases: ReadonlyArray<LeaseKey>,
    ttl: Duration.Duration
  ) => Effect.Effect<ReadonlyArray<LeaseKey>, StoreError>
  /**
   * Completes many runs in one statement, each guarded by id + fence + running. A run already
   * completed under the same fence answers `Finalized` (the holder's completion sent again).
   */
  readonly completeBatch: (
    items: ReadonlyArray<CompleteItem>,
    next?: ClaimNext
  ) => Effect.Effect<ReadonlyArray<FinalizeOutcome>, StoreError>
  readonly fail: (request: FailRequest) => Effect.Effect<FailOutcome, StaleWrite | StoreError>
  /** Gives a run back at once (shutdown, lost lease) without charging it an attempt. */
  readonly release: (lease: LeaseKey) => Effect.Effect<void, StaleWrite | StoreError>
  /**
   * Keeps the log lines of an attempt that completed the run under this fence (a fenced
   * transaction's completion), within `AttemptLogStorage.bound`. Written only while the run stands
   * completed under that fence; otherwise nothing is written and the answer is false.
   */
  readonly keepAttemptLog: (lease: LeaseKey, log: AttemptLogInput) => Effect.Effect<boolean, StoreError>
  /**
   * Fires the ticks that are due, by the store's clock, of every schedule that is not paused and
   * not being ticked by another caller at this moment: one run per tick (`ScheduleStorage.plan`).
   */
  readonly tickSchedules: Effect.Effect<TickOutcome, StoreError>
  /**
   * Records that a worker process is alive (`WorkerRegistry`): one row per owner, written again at
   * each of its heartbeats in place (no index covers what changes). A row not refreshed within its
   * announcement's `ttl` is no longer listed, and is deleted by the next announcement of another worker.
   */
  readonly announceWorker: (announcement: WorkerAnnouncement) => Effect.Effect<void, StoreError>
  /** Removes a worker's row (its shutdown); false when there was none. */
  readonly retireWorker: (owner: string) => Effect.Effect<boolean, StoreError>
  /** Wake-ups for idle workers (new runs, resumes, cancels), for as long as the stream is consumed. */
  readonly notifications: Stream.Stream<StoreNotification, StoreError>
}

/**
 * The writes a handler makes under its run's fence while it runs, through `Run` (checkpoint,
 * snooze, `awaitSignal`, fenced transaction), `Callback.url` and the workflow engine. Each is
 * refused with a `StaleWrite` once the holder's lease is lost.
 *
 * @category services
 */
export interface HandlerStore {
  readonly checkpoint: (
    lease: LeaseKey,
    value: unknown
  ) => Effect.Effect<void, StaleWrite | UnstorableValue | StoreError>
  /**
   * Ends the held attempt without failing it (`Run.snooze`): the run is pending again, due at the
   * store's `now()` + `delayMs`, its attempt given back and its lease and key slot let go, as
   * `release` does. Guarded by id + fence + running.
   */
  readonly snooze: (request: SnoozeRequest) => Effect.Effect<void, StaleWrite | StoreError>
  /**
   * Suspends the run and releases its lease outright; or, when the signal's outcome was delivered
   * while the run was still running (`deliverSignal` → `Recorded`), writes nothing and returns it.
   */
  readonly suspend: (
    request: SuspendRequest
  ) => Effect.Effect<SuspendOutcome, StaleWrite | SignalTokenInUse | StoreError>
  /**
   * The expiry of the callback for `signal` of the held run, fixed the first time it is asked for
   * (first write wins, under the fence): the same run and signal always yield the same callback.
   */
  readonly callbackExpiry: (
    lease: LeaseKey,
    signal: string,
    expiresIn: Duration.Duration
  ) => Effect.Effect<Date, StaleWrite | StoreError>
  /**
   * Runs `effect` and completes the run with its result in one transaction. If the fence is stale
   * the transaction rolls back, the caller's writes included; so does a result `encodeResult`
   * refuses. The caller's own failures pass through unchanged.
   *
   * `ttl`, the lease's TTL (a worker passes its own): a store with a server session ends the
   * transaction once it has sat idle there that long (its holder gone silent), so what it holds
   * is let go about one TTL after its last statement; the caller then gets a `StoreError` (or its
   * own statement's error) and nothing of the transaction is committed.
   */
  readonly completeInTransaction: <A, E, R>(
    lease: LeaseKey,
    effect: Effect.Effect<A, E, R>,
    encodeResult: (a: A) => Exit.Exit<string, UnstorableValue>,
    ttl?: Duration.Duration
  ) => Effect.Effect<A, E | StaleWrite | UnstorableValue | StoreError, R>
}

/**
 * What an application does to runs from outside them, through `Client` and callbacks: enqueue,
 * read one run, deliver a signal, resume, cancel and retry one run.
 *
 * @category services
 */
export interface ClientStore {
  /**
   * Enqueues a batch in one statement. A request with invalid options (`checkEnqueueRequest`) or
   * a payload JSON cannot hold fails the whole call, writing nothing.
   */
  readonly enqueue: (
    requests: ReadonlyArray<EnqueueRequest>
  ) => Effect.Effect<ReadonlyArray<Enqueued>, InvalidConfig | UnstorableValue | StoreError>
  readonly get: (runId: string) => Effect.Effect<RunRecord, RunNotFound | StoreError>
  /**
   * Delivers a signal's outcome to a run (a callback, a webhook): resumes it when it is suspended
   * on that signal, keeps it for the run's `awaitSignal` when it has not suspended yet. The first
   * outcome stands; anything else writes nothing and says why (see `SignalDelivery`).
   */
  readonly deliverSignal: (
    request: DeliverSignalRequest
  ) => Effect.Effect<SignalDelivery, RunNotFound | UnstorableValue | StoreError>
  /**
   * Resumes the suspended run with this id; returns its id. `actor`, an operator's (`OperatorActions`):
   * recorded with the run's `resumed` event, as with cancel and retry.
   * With `check`, the payload is checked against the run it would resume, that run held still
   * meanwhile: a refusal writes nothing.
   */
  readonly resumeById: (
    runId: string,
    payload: unknown,
    actor?: Actor,
    check?: ResumeCheck
  ) => Effect.Effect<string, RunNotFound | InvalidTransition | InvalidPayload | UnstorableValue | StoreError>
  /** Resumes the suspended run holding this signal token; returns its id. `actor` and `check` as for `resumeById`. */
  readonly resumeByToken: (
    token: string,
    payload: unknown,
    actor?: Actor,
    check?: ResumeCheck
  ) => Effect.Effect<string, SignalTokenNotFound | InvalidPayload | UnstorableValue | StoreError>
  /** Cancels a run; a running run's fence is advanced so its holder's writes are rejected. */
  readonly cancel: (runId: string, actor?: Actor) => Effect.Effect<void, RunNotFound | InvalidTransition | StoreError>
  /** A failed or cancelled run back to pending; the fence keeps rising. */
  readonly retry: (runId: string, actor?: Actor) => Effect.Effect<void, RunNotFound | InvalidTransition | StoreError>
}

/**
 * Operators' reads and bulk actions (the console, the admin API, the CLI, metrics): runs listed
 * and searched with their history and logs, leases, counts and throughput, workers, actions on
 * the runs a filter selects, and the audit.
 *
 * @category services
 */
export interface OperatorStore {
  readonly list: (filter: ListFilter) => Effect.Effect<ReadonlyArray<RunRecord>, StoreError>
  readonly history: (runId: string) => Effect.Effect<ReadonlyArray<RunEvent>, RunNotFound | StoreError>
  /** The kept log lines of the run's attempts, oldest claim first (`AttemptLogs`). */
  readonly attemptLogs: (runId: string) => Effect.Effect<ReadonlyArray<AttemptLog>, RunNotFound | StoreError>
  /** Every lease held now (not expired), by owner then run. */
  readonly leases: Effect.Effect<ReadonlyArray<LiveLease>, StoreError>
  readonly stats: Effect.Effect<Stats, StoreError>
  /** The runs that have not ended, by state and queue, read from indexes only (`LiveSample`). */
  readonly sample: Effect.Effect<LiveSample, StoreError>
  /**
   * Completions, failures and wait / run time percentiles per queue and minute over the last
   * minutes (`Throughput`), read from the runs that finished in that window only (bounded by
   * `ThroughputRequest.maxRuns`), never from the whole table.
   */
  readonly throughput: (request: ThroughputRequest) => Effect.Effect<Throughput, InvalidConfig | StoreError>
  /**
   * The keys of a key limit's scope that hold slots or have runs waiting for one, those waiting
   * longest first, at most `top` of them.
   */
  readonly keyUsage: (
    scope: KeyLimitScope,
    name: string,
    top: number
  ) => Effect.Effect<ReadonlyArray<KeyUsage>, StoreError>
  /** The workers alive now (announced within their ttl, by the store's clock), by owner. */
  readonly workers: Effect.Effect<ReadonlyArray<WorkerInfo>, StoreError>
  /**
   * The workers that died (their ttl passed without an announcement, and they did not retire) and
   * that the registry still remembers (up to 10 minutes past their expiry), by owner: what a
   * worker killed with `kill -9` leaves, for operators to see it gone and when it was last seen.
   */
  readonly goneWorkers: Effect.Effect<ReadonlyArray<WorkerInfo>, StoreError>
  /**
   * Cancels every run the filter selects that has not finished, in one statement; each one's fence
   * advances as `cancel` does. Returns the ids cancelled.
   */
  readonly cancelMany: (filter: RunFilter, actor?: Actor) => Effect.Effect<ReadonlyArray<string>, StoreError>
  /** Puts every failed or cancelled run the filter selects back to pending, as `retry` does. */
  readonly retryMany: (filter: RunFilter, actor?: Actor) => Effect.Effect<ReadonlyArray<string>, StoreError>
  /**
   * How many runs the filter selects for a delete, and how many of them may not be deleted now
   * (`DeleteCount.busy`): what an operator confirms before `deleteRuns`.
   */
  readonly countDeletable: (filter: RunFilter) => Effect.Effect<DeleteCount, StoreError>
  /**
   * Deletes the runs the filter selects, with everything kept of them (payload, result,
   * checkpoint, signals, history, key slot, unique window, idempotency key, callbacks, a
   * workflow's journal), when the filter still selects `expected` runs (`DeleteCountChanged`
   * otherwise, nothing deleted) and none of them is running (`RunsBusy`). At most
   * `RunStorage.deleteBatchSize` runs per statement, each statement its own transaction, so a
   * large delete holds no lock for long; runs enqueued after the count are not deleted. Each
   * statement records an audit line (`actions`) with the ids it deleted, never their payloads.
   */
  readonly deleteRuns: (
    request: DeleteRequest
  ) => Effect.Effect<DeleteOutcome, DeleteCountChanged | RunsBusy | StoreError>
  /**
   * The history's maintenance (`Retention`): creates the ranges ahead of the ids and reclaims
   * history older than the window, never a run that is not ended or whose unique window holds its
   * key. One caller at a time: a second concurrent caller returns at once with nothing done.
   */
  readonly maintainHistory: (
    request: Retention.MaintainRequest
  ) => Effect.Effect<ReadonlyArray<Retention.Action>, StoreError>
  /** What the history holds now: its ranges, runs and bytes, and when the oldest range kept was created. */
  readonly historyStatus: Effect.Effect<Retention.Status, StoreError>
  /** Records an operator's action that is not about one run (a queue, a schedule, a limit) in the audit. */
  readonly recordAction: (record: ActionRecord) => Effect.Effect<void, StoreError>
  /** The audit, newest first. */
  readonly actions: (query: ActionsQuery) => Effect.Effect<ReadonlyArray<OperatorAction>, StoreError>
}

/**
 * What claims obey, declared by an application or an operator: paused queues, per-key limits,
 * rate limits and schedules. A change applies to claims from the moment it commits.
 *
 * @category services
 */
export interface ConfigStore {
  /**
   * Pauses a queue: from the moment this commits no claim takes anything from it (due runs,
   * expired leases, passed suspension deadlines). Runs already running finish; enqueues are still
   * accepted and wait. Returns false when it was paused already.
   */
  readonly pauseQueue: (queue: string) => Effect.Effect<boolean, InvalidConfig | StoreError>
  /** Resumes a paused queue and wakes idle workers; false when it was not paused. */
  readonly resumeQueue: (queue: string) => Effect.Effect<boolean, InvalidConfig | StoreError>
  /** The paused queues, by name. */
  readonly pausedQueues: Effect.Effect<ReadonlyArray<PausedQueue>, StoreError>
  /**
   * Declares per-key limits (`KeyLimits.check` first: one invalid limit writes nothing); a limit
   * already declared for the same queue or kind is replaced. Claims apply it from the moment this
   * commits; runs already running keep running.
   */
  readonly setKeyLimits: (limits: ReadonlyArray<KeyLimit>) => Effect.Effect<void, InvalidConfig | StoreError>
  /** Removes the limit of a queue or kind; false when there was none. */
  readonly removeKeyLimit: (scope: KeyLimitScope, name: string) => Effect.Effect<boolean, StoreError>
  /** The declared limits, by scope and name, with how many keys run and how many keyed runs are due in each. */
  readonly keyLimits: Effect.Effect<ReadonlyArray<KeyLimitInfo>, StoreError>
  /**
   * Declares rate limits (`RateLimits.check` first: one invalid limit writes nothing); a limit
   * already declared for the same queue or kind is replaced. Claims apply it from the moment this
   * commits, to the runs that have not started (a run already running is not stopped).
   */
  readonly setRateLimits: (limits: ReadonlyArray<RateLimit>) => Effect.Effect<void, InvalidConfig | StoreError>
  /** Removes the rate limit of a queue or kind; false when there was none. Its runs start freely. */
  readonly removeRateLimit: (scope: RateLimitScope, name: string) => Effect.Effect<boolean, StoreError>
  /** The declared rate limits, by scope and name, with the starts in each one's last interval and its due runs. */
  readonly rateLimits: Effect.Effect<ReadonlyArray<RateLimitInfo>, StoreError>
  /**
   * Registers schedules (`Schedules.check` first: one invalid definition writes nothing). A new
   * schedule's first tick is the first after now; a changed definition takes effect from now on,
   * and no tick ever fires twice (`Schedules.tickKey`).
   */
  readonly registerSchedules: (
    definitions: ReadonlyArray<ScheduleDefinition>
  ) => Effect.Effect<ReadonlyArray<ScheduleRegistered>, InvalidConfig | StoreError>
  /** Every schedule, by name, with its next tick. */
  readonly schedules: Effect.Effect<ReadonlyArray<ScheduleInfo>, StoreError>
  /** Pauses a schedule: its ticks do not fire (nor count as missed) until it is resumed. */
  readonly pauseSchedule: (name: string) => Effect.Effect<boolean, ScheduleNotFound | StoreError>
  /** Resumes a schedule: its next tick is the first after now. */
  readonly resumeSchedule: (name: string) => Effect.Effect<boolean, ScheduleNotFound | StoreError>
}

/**
 * Every role of a store in one service: what `PgRunStore` and `MemoryRunStore` implement, and
 * what `RunStore` provides. A caller that needs one role may take that interface alone.
 *
 * @category services
 */
export interface RunStoreService extends RuntimeStore, HandlerStore, ClientStore, OperatorStore, ConfigStore {}

/**
 * The store, as a service (ADR 0029 groups its members by role: `RuntimeStore`, `HandlerStore`,
 * `ClientStore`, `OperatorStore`, `ConfigStore`).
 *
 * @category services
 */
export class RunStore extends Context.Service<RunStore, RunStoreService>()("@leasehold/core/RunStore") {}
