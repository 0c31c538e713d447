/**
 * The typed failures of Leasehold. Each one names a distinct reason, so callers can tell a stale
 * writer (`FenceRejected`) apart from a lost connection (`SqlError`), a lost lease, or bad input.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * A write presented a fence lower than the one stored for the run: another claim superseded the
 * writer. Decided by comparing fences only, never clocks.
 *
 * @category errors
 */
export class FenceRejected extends Schema.TaggedError<FenceRejected>()("FenceRejected", {
  runId: Schema.String,
  presentedFence: Schema.Number,
  storedFence: Schema.Number,
  operation: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId}: ${this.operation} rejected by the fence (presented ${this.presentedFence}, stored ${this.storedFence})`
  }
}

/**
 * The writer still holds the current fence but has already given the run up (completed, suspended,
 * released it or scheduled its retry), so there is nothing left for it to write.
 *
 * @category errors
 */
export class LeaseNotHeld extends Schema.TaggedError<LeaseNotHeld>()("LeaseNotHeld", {
  runId: Schema.String,
  fence: Schema.Number,
  state: Schema.String,
  operation: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId}: ${this.operation} under fence ${this.fence} but the run is ${this.state}, not running`
  }
}

/** No run has this id (or signal token). @category errors */
export class RunNotFound extends Schema.TaggedError<RunNotFound>()("RunNotFound", {
  runId: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId} not found`
  }
}

/** No schedule has this name. @category errors */
export class ScheduleNotFound extends Schema.TaggedError<ScheduleNotFound>()("ScheduleNotFound", {
  name: Schema.String
}) {
  override get message(): string {
    return `schedule "${this.name}" not found`
  }
}

/** An admin transition was asked of a run in a state that does not allow it. @category errors */
export class InvalidTransition extends Schema.TaggedError<InvalidTransition>()("InvalidTransition", {
  runId: Schema.String,
  state: Schema.String,
  operation: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId} is ${this.state}: cannot ${this.operation} it`
  }
}

/**
 * A run tried to suspend with a signal token another suspended run already holds: a token names
 * exactly one waiting run. Nothing was written; the run is still held by its worker.
 *
 * @category errors
 */
export class SignalTokenInUse extends Schema.TaggedError<SignalTokenInUse>()("SignalTokenInUse", {
  runId: Schema.String,
  token: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId}: signal token "${this.token}" is already held by another suspended run`
  }
}

/** No handler is registered for the kind. @category errors */
export class UnknownKind extends Schema.TaggedError<UnknownKind>()("UnknownKind", {
  kind: Schema.String,
  known: Schema.Array(Schema.String),
  /** In a batch (`Client.enqueueUnknownMany`): the index of the run that names it. */
  index: Schema.optional(Schema.Number)
}) {
  override get message(): string {
    const where = this.index === undefined ? "" : `run ${this.index}: `
    return `${where}unknown kind "${this.kind}" (known: ${this.known.join(", ") || "none"})`
  }
}

/** A payload does not match its kind's schema. Nothing was written. @category errors */
export class InvalidPayload extends Schema.TaggedError<InvalidPayload>()("InvalidPayload", {
  kind: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `invalid payload for kind "${this.kind}": ${this.issue}`
  }
}

/**
 * Why a worker stopped a run locally. Carried as the reason a RunScope was interrupted; never a
 * decision about ownership, which only the fence makes.
 *
 * @category models
 */
export type LeaseLossReason =
  | "superseded" // a renewal came back without this (run, fence): reclaimed, cancelled or finished elsewhere
  | "renewal-failed" // the renewal statement failed
  | "deadline" // no renewal confirmed before the local lease deadline (monotonic clock)
  | "cancelled" // a cancel notification named this run
  | "shutdown" // the worker's grace period ran out

/**
 * The store itself failed (the database is unreachable, a statement timed out, a connection was
 * reset): nothing is known about the write, and nothing about who holds the run. Distinct from
 * `FenceRejected`, which is a definite answer. Stores map their driver's errors to this one, so
 * the core never sees a driver type (as Effect cluster's storage speaks only `PersistenceError`).
 *
 * @category errors
 */
export class StoreError extends Schema.TaggedError<StoreError>()("StoreError", {
  operation: Schema.String,
  /**
   * The driver's classification when it has one (`ConnectionError`, `StatementTimeoutError`, ...).
   * `ValueRefused`: the database refused a value of the request (see `isValueRefused`).
   * `TransactionIdleTimeout`: the server ended a transaction that sat idle longer than its bound
   * (a fenced transaction's is its lease TTL, see `RunStore.completeInTransaction`); nothing of it
   * was committed.
   */
  reason: Schema.String,
  cause: Schema.Defect()
}) {
  override get message(): string {
    // A driver's error may come from another realm or have no prototype: read its message as data.
    const cause = this.cause as { readonly message?: unknown } | null | undefined
    const detail = typeof cause === "object" && cause !== null && typeof cause.message === "string"
      ? cause.message
      : typeof cause === "object" && cause !== null
      ? Object.prototype.toString.call(cause)
      : String(cause)
    return `${this.operation}: ${this.reason}: ${detail}`
  }
}

/**
 * Whether a failure is the database refusing a value of the request (a NUL, a number out of
 * range, a key too large): the statement wrote nothing and the same request can never succeed, so
 * it is the caller's fault (HTTP 400, CLI exit 2), not the store's. Matched by tag and reason, so
 * another copy of `@leasehold/core` is recognised too.
 *
 * @category predicates
 */
export const isValueRefused = (error: unknown): boolean =>
  typeof error === "object" && error !== null && (error as { _tag?: unknown })._tag === "StoreError" &&
  (error as { reason?: unknown }).reason === "ValueRefused"

/** No suspended run holds this signal token (a token exists only while its run waits). @category errors */
export class SignalTokenNotFound extends Schema.TaggedError<SignalTokenNotFound>()("SignalTokenNotFound", {
  token: Schema.String
}) {
  override get message(): string {
    return `no suspended run holds signal token "${this.token}"`
  }
}

/**
 * A value the store must keep as JSON cannot be encoded (a BigInt, a cyclic object, a value its
 * schema rejects). Nothing was written.
 *
 * @category errors
 */
export class UnstorableValue extends Schema.TaggedError<UnstorableValue>()("UnstorableValue", {
  /** What the value was: `result`, `checkpoint`, `payload`, `resume payload`. */
  what: Schema.String,
  runId: Schema.optional(Schema.String),
  issue: Schema.String
}) {
  override get message(): string {
    return `${this.runId === undefined ? "" : `run ${this.runId}: `}${this.what} cannot be stored: ${this.issue}`
  }
}

/** A worker or store option is invalid. Nothing was started. @category errors */
export class InvalidConfig extends Schema.TaggedError<InvalidConfig>()("InvalidConfig", {
  option: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `invalid option ${this.option}: ${this.issue}`
  }
}

/**
 * An attempt ran longer than its attempt timeout (`Handler.make({ attemptTimeout })`, or the
 * enqueue's `attemptTimeoutMs`), counted by the worker's monotonic clock from the handler's start:
 * its RunScope was interrupted and the attempt failed with this. Retried under the handler's retry
 * policy, as any failure.
 *
 * @category errors
 */
export class AttemptTimedOut extends Schema.TaggedError<AttemptTimedOut>()("AttemptTimedOut", {
  runId: Schema.String,
  attempt: Schema.Number,
  timeoutMs: Schema.Number
}) {
  override get message(): string {
    return `run ${this.runId}: attempt ${this.attempt} ran past its timeout of ${this.timeoutMs} ms and was interrupted`
  }
}

/**
 * A delete was confirmed for `expected` runs but the filter selects `found` now: nothing was
 * deleted. Count again and confirm the new count.
 *
 * @category errors
 */
export class DeleteCountChanged extends Schema.TaggedError<DeleteCountChanged>()("DeleteCountChanged", {
  expected: Schema.Number,
  found: Schema.Number
}) {
  override get message(): string {
    return `the filter selects ${this.found} runs now, not the ${this.expected} confirmed: nothing deleted; count again`
  }
}

/**
 * The run's deadline (`EnqueueRequest.deadlineAt` / `deadlineAfterMs`, decided by the store's clock)
 * passed: the run fails for good, whatever attempts remain. A running attempt is interrupted with
 * this when the deadline passes.
 *
 * @category errors
 */
export class RunDeadlinePassed extends Schema.TaggedError<RunDeadlinePassed>()("RunDeadlinePassed", {
  runId: Schema.String,
  attempt: Schema.Number
}) {
  override get message(): string {
    return `run ${this.runId}: its deadline passed during attempt ${this.attempt}; the run has failed for good`
  }
}

/**
 * A delete selected runs that are running (or claimed with others still running in a ledger
 * batch): it stopped before them. `deleted` runs were deleted before it met them.
 *
 * @category errors
 */
export class RunsBusy extends Schema.TaggedError<RunsBusy>()("RunsBusy", {
  busy: Schema.Number,
  deleted: Schema.Number
}) {
  override get message(): string {
    return `${this.busy} of the selected runs are running: cancel them first (or wait for them to end)` +
      (this.deleted > 0 ? `; ${this.deleted} runs were deleted before` : "")
  }
}
