/**
 * The run record: what the store keeps for one unit of work, and the shapes that cross the store
 * boundary (a claimed run, an enqueue request, a history event).
 *
 * @since 0.1.0
 */
import { type Duration, Exit, Schema } from "effect"
import { InvalidConfig } from "./Errors.js"
import * as KeyLimits from "./KeyLimits.js"
import * as Limits from "./Limits.js"

/** @category models */
export const RunState = Schema.Literals(["pending", "running", "suspended", "completed", "failed", "cancelled"])
/** @category models */
export type RunState = typeof RunState.Type

/** States a run never leaves on its own. @category models */
export const terminalStates: ReadonlyArray<RunState> = ["completed", "failed", "cancelled"]

/** The outcome a suspended run is resumed with: a signal's payload, or its deadline passing. @category models */
export type SignalOutcome<A = unknown> =
  | { readonly _tag: "Signalled"; readonly payload: A }
  | { readonly _tag: "TimedOut" }

/** A run as stored. Fences are per run, start at 0 and only ever rise. @category models */
export interface RunRecord {
  readonly id: string
  readonly queue: string
  readonly kind: string
  readonly payload: unknown
  readonly priority: number
  readonly runAt: Date
  readonly state: RunState
  readonly attempt: number
  readonly maxAttempts: number
  readonly fence: number
  readonly leaseOwner: string | null
  readonly leaseExpiresAt: Date | null
  readonly checkpoint: unknown
  readonly result: unknown
  readonly error: unknown
  readonly signalName: string | null
  readonly signalToken: string | null
  readonly suspendDeadline: Date | null
  readonly signals: Readonly<Record<string, SignalOutcome>>
  readonly idempotencyKey: string | null
  /** The run's concurrency key (`KeyLimits`), if it has one. */
  readonly concurrencyKey: string | null
  /**
   * The slot of its key's limit the run holds: a keyed run takes one when it is admitted (pending,
   * then running) and gives it back when it stops running. Null for a run that holds none.
   */
  readonly keySlot: number | null
  /** Pending but held back by its key's limit: it is admitted when a slot of its key is free. */
  readonly waitingForKey: boolean
  /** The W3C `traceparent` stored when it was enqueued, if it was traced (see `Telemetry`). */
  readonly traceParent: string | null
  /** The attempt timeout set at enqueue (overriding its handler's), in milliseconds; null: the handler's, if any. */
  readonly attemptTimeoutMs: number | null
  /** When the run fails for good if it has not finished, by the store's clock (`EnqueueRequest.deadlineAt`). */
  readonly deadline: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
  readonly finishedAt: Date | null
}

/** What a successful claim hands the worker: the run as of the claim, under its new fence. @category models */
export interface ClaimedRun {
  readonly id: string
  readonly queue: string
  readonly kind: string
  readonly payload: unknown
  readonly attempt: number
  readonly maxAttempts: number
  readonly fence: number
  readonly checkpoint: unknown
  readonly signals: Readonly<Record<string, SignalOutcome>>
  /** Its concurrency key (`KeyLimits`), if it has one. */
  readonly concurrencyKey: string | null
  /** Why it was claimable: due, its lease expired (a reclaim), or its suspension timed out. */
  readonly via: "due" | "expired" | "timed-out"
  /** Milliseconds from when it became claimable to this claim, by the store's clock. */
  readonly waitMs: number
  /** The W3C `traceparent` stored when it was enqueued, if it was traced. */
  readonly traceParent: string | null
  /** The attempt timeout its enqueue set (overriding its handler's), in milliseconds; null when none. */
  readonly attemptTimeoutMs: number | null
  /**
   * Milliseconds from the claim to the run's deadline, by the store's clock at the claim (0 or less:
   * passed); null when it has none. The worker counts it down on its own monotonic clock.
   */
  readonly deadlineInMs: number | null
}

/**
 * The attempt a handler saw last, as operators are shown it. A suspension gives its attempt back
 * (waiting is not failing: `attempt` counts the attempts spent against `maxAttempts`), and the
 * resumed run continues under the same number; so a suspended run's is one more than its `attempt`.
 *
 * @category accessors
 */
export const attemptSeen = (run: { readonly state: RunState; readonly attempt: number }): number =>
  run.state === "suspended" ? run.attempt + 1 : run.attempt

/**
 * Whether the run is a workflow execution (`@leasehold/workflow`: kind `workflow/<name>`, keyed by
 * `workflow/<name>/<execution>`). A suspended one waits on its journal (a deferred, a durable
 * clock, a child), not on its run's signal: resuming the run only replays it, so operator tools
 * neither offer nor accept it as an approval.
 *
 * @category predicates
 */
export const isWorkflowRun = (run: { readonly kind: string; readonly idempotencyKey: string | null }): boolean =>
  run.kind.startsWith("workflow/") && run.idempotencyKey !== null && run.idempotencyKey.startsWith(`${run.kind}/`)

/**
 * Whether a workflow's deferred is meant for a person: its name begins with `person/` (for
 * example `DurableDeferred.make("person/approve-payout", { success: ... })`). The operator tools
 * offer a suspended workflow that awaits one as an approval, and Approve completes that deferred
 * with the decision (`{ approved, note }` from the console) as its value. Other deferreds are
 * completed by code (`DurableDeferred.done`, a callback URL), never from the approvals inbox.
 *
 * @category predicates
 */
export const isForPerson = (deferredName: string): boolean => deferredName.startsWith("person/")

/** A claim that was superseded or finished elsewhere is identified by this pair, never by id alone. @category models */
export interface LeaseKey {
  readonly runId: string
  readonly fence: number
}

/** @category models */
export interface EnqueueRequest {
  readonly kind: string
  readonly payload: unknown
  readonly queue?: string | undefined
  readonly priority?: number | undefined
  /** Delay before the run is due, counted from the database's `now()`. */
  readonly delayMs?: number | undefined
  readonly maxAttempts?: number | undefined
  /** Enqueueing the same key twice yields one run. */
  readonly idempotencyKey?: string | undefined
  /**
   * The run's concurrency key: at most the limit its queue or kind declares (`KeyLimits`) of the
   * runs with this key run at once, across every worker.
   */
  readonly concurrencyKey?: string | undefined
  /** The W3C `traceparent` of the span that enqueued it (see `Telemetry`). */
  readonly traceParent?: string | undefined
  /**
   * Enqueue only if no run of this kind with the same key (or payload) holds the window: a
   * duplicate yields the existing run (`created: false`), as an idempotency key does. Not with an
   * idempotency key (which is unique for ever). docs/adr/0020-uniqueness-windows.md.
   */
  readonly unique?: UniqueWindow | undefined
  /**
   * This run's attempt timeout, overriding its handler's (`Handler.make({ attemptTimeout })`):
   * an attempt running longer is interrupted and fails with `AttemptTimedOut`, then is retried.
   */
  readonly attemptTimeoutMs?: number | undefined
  /**
   * The run's deadline across attempts, as a time: once the store's clock passes it, the run fails
   * for good (`RunDeadlinePassed`). Not with `deadlineAfterMs`.
   */
  readonly deadlineAt?: Date | undefined
  /** The run's deadline as a duration from the enqueue, counted from the store's `now()`. */
  readonly deadlineAfterMs?: number | undefined
}

/**
 * How an enqueue is unique (`EnqueueRequest.unique`): by kind and `key` (or, without one, by
 * payload, compared as JSON values), while the run holding the key is in one of `states`, and for
 * `periodMs` after it was enqueued. A run holds the window while both hold.
 *
 * @category models
 */
export interface UniqueWindow {
  /** What makes two runs of a kind the same; without it, their payloads. */
  readonly key?: string | undefined
  /**
   * The states the existing run holds the key in. Default: `unfinishedStates` without a period, or
   * every state (even once the run is deleted) with one.
   */
  readonly states?: ReadonlyArray<RunState> | undefined
  /** For how long after the existing run was enqueued it holds the key, in milliseconds (more than 0). */
  readonly periodMs?: number | undefined
}

/** The states of a run not yet finished: a unique window's default. @category models */
export const unfinishedStates: ReadonlyArray<RunState> = ["pending", "running", "suspended"]

const checkUnique = (request: EnqueueRequest, window: UniqueWindow): Exit.Exit<void, InvalidConfig> => {
  const invalid = (option: string, issue: string) => Exit.fail(new InvalidConfig({ option, issue }))
  if (typeof window !== "object" || window === null) return invalid("unique", "must be an object")
  if (request.idempotencyKey !== undefined) {
    return invalid("unique", "cannot be combined with an idempotencyKey (a key that is unique for ever)")
  }
  if (window.key !== undefined) {
    const key = Limits.checkText("unique.key", window.key, Limits.maxUniqueKeyBytes)
    if (Exit.isFailure(key)) return key
  }
  if (window.states !== undefined) {
    if (!Array.isArray(window.states) || window.states.length === 0) {
      return invalid("unique.states", "must be a non-empty list of run states")
    }
    const unknown = window.states.filter((s) => !(RunState.literals as ReadonlyArray<unknown>).includes(s))
    if (unknown.length > 0) {
      return invalid(
        "unique.states",
        `${unknown.map((s) => JSON.stringify(s)).join(", ")} is not a run state (${RunState.literals.join(", ")})`
      )
    }
  }
  if (window.periodMs !== undefined) {
    const period = Limits.checkDelay("unique.periodMs", window.periodMs)
    if (Exit.isFailure(period)) return period
    if (window.periodMs <= 0) return invalid("unique.periodMs", `${window.periodMs} ms is not a period of more than 0`)
  }
  return Exit.void
}

const positiveInteger = (n: number) => Number.isInteger(n) && n >= 1

/** A duration of more than 0 and at most `Limits.maxDelayMs`, or `InvalidConfig` naming the option. */
const checkPositiveDuration = (option: string, ms: number): Exit.Exit<void, InvalidConfig> => {
  const delay = Limits.checkDelay(option, ms)
  if (Exit.isFailure(delay)) return delay
  return ms > 0
    ? Exit.void
    : Exit.fail(new InvalidConfig({ option, issue: `${ms} ms is not a duration of more than 0` }))
}

const checkTimeouts = (request: EnqueueRequest): Exit.Exit<void, InvalidConfig> => {
  const invalid = (option: string, issue: string) => Exit.fail(new InvalidConfig({ option, issue }))
  if (request.attemptTimeoutMs !== undefined) {
    const timeout = checkPositiveDuration("attemptTimeout", request.attemptTimeoutMs)
    if (Exit.isFailure(timeout)) return timeout
  }
  if (request.deadlineAt !== undefined) {
    if (request.deadlineAfterMs !== undefined) {
      return invalid("deadline", "give a deadline as a time or as a duration from the enqueue, not both")
    }
    if (!(request.deadlineAt instanceof Date) || Number.isNaN(request.deadlineAt.getTime())) {
      return invalid("deadline", `${String(request.deadlineAt)} is not a valid time`)
    }
  }
  if (request.deadlineAfterMs !== undefined) {
    const deadline = checkPositiveDuration("deadline", request.deadlineAfterMs)
    if (Exit.isFailure(deadline)) return deadline
    if ((request.delayMs ?? 0) >= request.deadlineAfterMs) {
      return invalid("deadline", `the run would be due (in ${request.delayMs} ms) only once its deadline had passed`)
    }
  }
  return Exit.void
}

/**
 * Checks an enqueue request's options before anything is written: a kind, queue, idempotency key
 * and concurrency key within `Limits` (non-empty, no NUL, not too long), a whole priority, a
 * delay from 0 to `Limits.maxDelayMs` and at least one attempt. Every store runs it on each
 * request of a batch.
 *
 * @category validation
 */
export const checkEnqueueRequest = (request: EnqueueRequest): Exit.Exit<void, InvalidConfig> => {
  const invalid = (option: string, issue: string) => Exit.fail(new InvalidConfig({ option, issue }))
  const kind = Limits.checkText("kind", request.kind, Limits.maxKindBytes)
  if (Exit.isFailure(kind)) return kind
  if (request.queue !== undefined) {
    const queue = Limits.checkText("queue", request.queue, Limits.maxQueueBytes)
    if (Exit.isFailure(queue)) return queue
  }
  if (request.priority !== undefined && !(Number.isInteger(request.priority) && Math.abs(request.priority) < 2 ** 31)) {
    return invalid("priority", `${request.priority} is not a whole number`)
  }
  if (request.delayMs !== undefined) {
    const delay = Limits.checkDelay("delay", request.delayMs)
    if (Exit.isFailure(delay)) return delay
  }
  if (request.maxAttempts !== undefined && !(positiveInteger(request.maxAttempts) && request.maxAttempts < 2 ** 31)) {
    return invalid("maxAttempts", `${request.maxAttempts} is not a whole number of at least 1`)
  }
  if (request.idempotencyKey !== undefined) {
    const key = Limits.checkText("idempotencyKey", request.idempotencyKey, Limits.maxIdempotencyKeyBytes)
    if (Exit.isFailure(key)) return key
  }
  const timeouts = checkTimeouts(request)
  if (Exit.isFailure(timeouts)) return timeouts
  const key = KeyLimits.checkKey(request.concurrencyKey)
  if (Exit.isFailure(key) || request.unique === undefined) return key
  return checkUnique(request, request.unique)
}

/**
 * A paused queue: nothing in it is claimed (due runs, expired leases, passed suspension deadlines)
 * until it is resumed. Runs already running finish.
 *
 * @category models
 */
export interface PausedQueue {
  readonly queue: string
  /** When it was paused, by the store's clock. */
  readonly since: Date
}

/** @category models */
export interface Enqueued {
  readonly id: string
  /** False when an earlier enqueue with the same idempotency key already created the run. */
  readonly created: boolean
}

/** One line of a run's history, written in the same transaction as the transition it records. @category models */
export interface RunEvent {
  readonly id: string
  readonly runId: string
  readonly kind: string
  readonly fence: number
  readonly owner: string | null
  readonly detail: unknown
  readonly at: Date
}

/** Outcome of one item of a batched finalization. @category models */
export type FinalizeOutcome =
  | {
    readonly _tag: "Finalized"
    readonly runId: string
    readonly fence: number
    /**
     * The run that took this run's key slot in the completion's own statement, claimed for the
     * same owner (`ClaimNext`); only when the completion asked for it.
     */
    readonly next?: ClaimedRun | undefined
  }
  | {
    readonly _tag: "Rejected"
    readonly runId: string
    readonly fence: number
    readonly storedFence: number
    readonly state: RunState | "missing"
  }

/**
 * What delivering a signal (a callback) to a run did. Only `Resumed` and `Recorded` wrote
 * anything; every other answer left the run as it was.
 *
 * @category models
 */
export type SignalDelivery =
  /** The run was suspended on this signal: it is pending again, with the outcome recorded. */
  | { readonly _tag: "Resumed"; readonly runId: string }
  /** The run had not suspended yet: the outcome is kept, and its `awaitSignal` returns it at once. */
  | { readonly _tag: "Recorded"; readonly runId: string }
  /** This same outcome was delivered before. */
  | { readonly _tag: "Duplicate"; readonly runId: string }
  /** A different outcome was delivered before: the first one stands. */
  | { readonly _tag: "Conflict"; readonly runId: string }
  /** The signal timed out, or the run finished without it. */
  | { readonly _tag: "Gone"; readonly runId: string; readonly reason: "timed-out" | "finished" }
  /** This delivery id was seen before (a replayed webhook). */
  | { readonly _tag: "Replayed"; readonly runId: string }

/** What a suspension did: suspended, or found the signal's outcome already delivered. @category models */
export type SuspendOutcome =
  | { readonly _tag: "Suspended" }
  | { readonly _tag: "AlreadySignalled"; readonly outcome: SignalOutcome }

/** What a failed attempt turned into. @category models */
export type FailOutcome = { readonly _tag: "RetryScheduled"; readonly delayMs: number } | { readonly _tag: "Failed" }

/** What a worker says of itself. @category models */
export interface WorkerAnnouncement {
  readonly owner: string
  readonly host: string
  readonly pid: number
  /** The version of `@leasehold/core` it runs. */
  readonly version: string
  readonly queues: ReadonlyArray<string>
  readonly kinds: ReadonlyArray<string>
  readonly concurrency: number
  /** Runs it holds now (leases in flight). */
  readonly runsHeld: number
  /** When the worker started, by its own clock (shown only, never compared with the store's). */
  readonly startedAt: Date
  /** How long the row counts as alive without a new announcement, by the store's clock. */
  readonly ttl: Duration.Duration
}

/** A worker as the store lists it. @category models */
export interface WorkerInfo {
  readonly owner: string
  readonly host: string
  readonly pid: number
  readonly version: string
  readonly queues: ReadonlyArray<string>
  readonly kinds: ReadonlyArray<string>
  readonly concurrency: number
  readonly runsHeld: number
  readonly startedAt: Date
  /** Its last announcement, by the store's clock. */
  readonly lastHeartbeatAt: Date
  /** When it stops being listed as alive (and starts being listed as gone) unless it announces itself again, by the store's clock. */
  readonly expiresAt: Date
}
