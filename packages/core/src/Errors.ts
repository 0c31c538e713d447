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
  known: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `unknown kind "${this.kind}" (known: ${this.known.join(", ") || "none"})`
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
