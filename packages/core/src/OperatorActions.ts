/**
 * Who did an operator's action, and the audit of those actions: every resume, cancel, retry and
 * delete made by an operator records its `Actor` in the run's history (or, for a delete, in the
 * audit, the run being gone), and the actions that are not about one run (queues, schedules,
 * limits) go to the audit alone (`RunStore.recordAction`, `RunStore.actions`).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** Where an operator's action came from. @category models */
export const Via = Schema.Literals(["console", "api", "cli", "callback"])
/** @category models */
export type Via = typeof Via.Type

/**
 * Who acted: a credential's name (never its secret), the CLI's OS user or its `--as`, or
 * "callback" for a signed callback; and where from.
 *
 * @category models
 */
export interface Actor {
  readonly name: string
  readonly via: Via
}

/** The most bytes an actor's name may have (it is recorded with every action). @category constants */
export const maxActorNameBytes = 200

/** An actor's name that is empty, too long or carries control characters is refused. @category predicates */
export const actorNameIssue = (name: string): string | undefined =>
  name.length === 0
    ? "is empty"
    : Buffer.byteLength(name, "utf8") > maxActorNameBytes
    ? `is longer than ${maxActorNameBytes} bytes`
    // oxlint-disable-next-line no-control-regex
    : /[\u0000-\u001f\u007f]/.test(name)
    ? "contains a control character"
    : undefined

/**
 * One line of the audit: an action not about one run (a queue paused, a schedule changed, a
 * limit set), or a delete (whose runs are gone, and whose payloads are not kept here).
 *
 * @category models
 */
export interface OperatorAction {
  readonly id: string
  readonly at: Date
  readonly by: string
  readonly via: Via
  /** What was done: `queue.pause`, `schedule.register`, `rate-limit.remove`, `runs.delete`, ... */
  readonly action: string
  /** What it was done to: a queue's, schedule's or limit's name, or for a delete the filter as text (payload fields by path only). */
  readonly target: string
  /** What else the action records (a delete: how many runs and their ids; never a payload). */
  readonly detail: unknown
}

/** An action to record (`RunStore.recordAction`). @category models */
export interface ActionRecord {
  readonly actor: Actor
  readonly action: string
  readonly target: string
  readonly detail?: unknown
}

/** The audit newest first, `limit` lines before the line `before` (an id) when given. @category models */
export interface ActionsQuery {
  readonly limit: number
  readonly before?: string | undefined
}

/** What a filter selects for a delete: how many runs, and how many of them may not be deleted now. @category models */
export interface DeleteCount {
  readonly count: number
  /**
   * Running runs (cancel them first), and runs of a ledger claim batch whose other runs are still
   * running (deletable once that batch settles). A delete is refused while this is not 0.
   */
  readonly busy: number
}

/** How many runs a delete removed. @category models */
export interface DeleteOutcome {
  readonly deleted: number
}
