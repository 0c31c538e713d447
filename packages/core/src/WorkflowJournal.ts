/**
 * What a durable workflow engine keeps beside its runs (docs/adr/0015-workflow-engine.md):
 * activity results under the holder's fence, deferred outcomes and durable clocks, and the wake
 * that resumes a suspended execution. A service, as `RunStore` is: `PgRunStore.layer`
 * (`@leasehold/sql`) gives one in the store's schema, `MemoryRunStore.layer` one beside its runs.
 * `@leasehold/workflow`'s engine takes it from context.
 *
 * @since 0.1.0
 */
import { Context, type Effect, type Option } from "effect"
import type { SqlClient } from "effect/sql"
import type { FenceRejected, LeaseNotHeld, RunNotFound, StoreError } from "./Errors.js"
import type { LeaseKey, RunState } from "./RunRecord.js"

/** The run of an execution, as a poll or a wake sees it. @category models */
export interface ExecutionRun {
  readonly runId: string
  readonly state: RunState
  readonly fence: number
  readonly result: unknown
  readonly error: unknown
  /** The W3C `traceparent` stored when the execution was enqueued, if it was traced. */
  readonly traceParent?: string | null | undefined
}

/** A deferred an execution waits on (a durable clock's, with its deadline). @category models */
export interface Awaited {
  readonly execution: string
  readonly name: string
  /** A durable clock's deadline, when the deferred is a clock's. */
  readonly wakeAt: Date | null
}

/** One line of an execution's journal, as operators are shown it. @category models */
export type JournalEntry =
  | {
    readonly type: "activity"
    readonly name: string
    readonly attempt: number
    readonly fence: number
    readonly exit: unknown
    readonly at: Date
  }
  | {
    readonly type: "deferred"
    readonly name: string
    readonly exit: unknown
    readonly done: boolean
    readonly at: Date
  }
  | { readonly type: "clock"; readonly name: string; readonly wakeAt: Date; readonly fired: boolean }

/** What a wake did: resumed a suspended run, left a signal for a running one, or nothing. @category models */
export type Wake = "resumed" | "signalled" | "none"

/** The signal a holder of `fence` suspends on, and a wake leaves for it. @category naming */
export const wakeSignal = (fence: number): string => `wake/${fence}`

/** The name of the deferred the engine's interrupt completes (Effect's cluster engine's). @category naming */
export const interruptSignalName = "Workflow/InterruptSignal"

/**
 * A workflow run's result read as its workflow's outcome: the value it succeeded with, the error it
 * failed with, the defect it died of, or an interruption (`outcomeOf`). @category models
 */
export type Outcome =
  | { readonly _tag: "Succeeded"; readonly value: unknown }
  | { readonly _tag: "Failed"; readonly error: unknown }
  | { readonly _tag: "Died"; readonly defect: unknown }
  | { readonly _tag: "Interrupted" }

/**
 * Reads a workflow run's stored result, Effect's encoded `Workflow.Result` (`{"_tag":"Complete",
 * "exit":...}`), as its outcome; undefined for anything else. For operators' views: the engine
 * itself decodes results with the workflow's schemas.
 *
 * @category decoding
 */
export const outcomeOf = (result: unknown): Outcome | undefined => {
  const exit = (result as { _tag?: unknown; exit?: unknown } | null)?._tag === "Complete"
    ? (result as { exit: { _tag?: unknown; value?: unknown; cause?: unknown } | null }).exit
    : undefined
  if (exit === undefined || exit === null) return undefined
  if (exit._tag === "Success") return { _tag: "Succeeded", value: exit.value ?? null }
  if (exit._tag !== "Failure" || !Array.isArray(exit.cause)) return undefined
  const reasons = exit.cause as ReadonlyArray<{ _tag?: unknown; error?: unknown; defect?: unknown }>
  const failed = reasons.find((r) => r._tag === "Fail")
  if (failed !== undefined) return { _tag: "Failed", error: failed.error ?? null }
  const died = reasons.find((r) => r._tag === "Die")
  if (died !== undefined) return { _tag: "Died", defect: died.defect ?? null }
  return { _tag: "Interrupted" }
}

/**
 * What one suspension of a workflow's run waited for, named as the wake that ended it names it:
 * a deferred, a child workflow, a resume or an interrupt; a suspension that timed out waited for
 * a durable clock. Its run's signal (`wake/<fence>`) names none of them.
 *
 * @category naming
 */
export const waitEndedBy = (suspension: { readonly outcome: string; readonly payload: unknown }): string => {
  if (suspension.outcome === "timed_out") return "a durable clock"
  if (suspension.outcome !== "resumed") return suspension.outcome
  const reason = (suspension.payload as { wake?: unknown } | null)?.wake
  if (typeof reason !== "string") return "a resume"
  if (reason === "resume") return "a resume"
  if (reason === interruptSignalName) return "an interrupt"
  if (reason.startsWith("child ")) return reason.replace(/^child workflow\//, "child workflow ")
  return `deferred "${reason}"`
}

/** @category services */
export class WorkflowJournal extends Context.Service<WorkflowJournal, {
  /**
   * The SQL client the journal writes through, when it has one: an activity annotated
   * `WithTransaction` shares a transaction with its recorded result only on this client.
   */
  readonly sqlClient: SqlClient.SqlClient | undefined
  /** The run of an execution (by its key), if it was ever started. */
  readonly execution: (execution: string) => Effect.Effect<Option.Option<ExecutionRun>, StoreError>
  readonly activityResult: (
    execution: string,
    activity: string,
    attempt: number
  ) => Effect.Effect<Option.Option<unknown>, StoreError>
  /**
   * What an activity's start needs, in one read: its recorded result, and whether an interrupt of
   * the execution is pending (its deferred `interruptSignalName` done).
   */
  readonly activityStart: (
    execution: string,
    activity: string,
    attempt: number
  ) => Effect.Effect<{ readonly stored: Option.Option<unknown>; readonly interruptPending: boolean }, StoreError>
  /**
   * Records an activity's result (an encoded `Exit`) under the holder's fence and returns the
   * result that stands: this one, or the one an earlier holder recorded first.
   */
  readonly recordActivity: (
    lease: LeaseKey,
    execution: string,
    activity: string,
    attempt: number,
    exit: unknown
  ) => Effect.Effect<unknown, FenceRejected | LeaseNotHeld | RunNotFound | StoreError>
  /**
   * A deferred's outcome, or `"clockDue"` when it is a durable clock whose deadline has passed. A
   * deferred found not done is recorded as awaited (for `awaiting`).
   */
  readonly deferredResult: (
    execution: string,
    name: string
  ) => Effect.Effect<Option.Option<{ readonly exit: unknown } | "clockDue">, StoreError>
  /**
   * Runs `effect` in one transaction on the journal's client (a `WithTransaction` activity and the
   * recording of its result); the transaction's own statements failing is a `StoreError`.
   */
  readonly transaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | StoreError, R>
  /** Records a deferred's outcome (the first stands) and wakes its execution; false when done already. */
  readonly deferredDone: (execution: string, name: string, exit: unknown) => Effect.Effect<boolean, StoreError>
  /** Wakes an execution: resumes its run if suspended, or makes its holder's next suspension return. */
  readonly wake: (execution: string, reason: string) => Effect.Effect<Wake, StoreError>
  /** Takes the wake left for this holder (see `wake`). */
  readonly consumeWake: (
    lease: LeaseKey
  ) => Effect.Effect<void, FenceRejected | LeaseNotHeld | RunNotFound | StoreError>
  readonly scheduleClock: (execution: string, deferred: string, durationMs: number) => Effect.Effect<void, StoreError>
  /** The store's clock now, in microseconds since the epoch (for `nextClock`). */
  readonly now: Effect.Effect<string, StoreError>
  /**
   * Milliseconds to the earliest clock of the execution that had not fired at `since` and whose
   * deferred is not done, by the store's clock (negative: it fired since).
   */
  readonly nextClock: (execution: string, since: string) => Effect.Effect<Option.Option<number>, StoreError>
  /** Which of `names` are done: deferreds with an outcome, and durable clocks past their deadline. */
  readonly doneAmong: (
    execution: string,
    names: ReadonlyArray<string>
  ) => Effect.Effect<ReadonlyArray<string>, StoreError>
  /**
   * What these executions wait on: the deferreds their replays found not done (recorded by
   * `deferredResult`), durable clocks with their deadlines, oldest first.
   */
  readonly awaiting: (executions: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<Awaited>, StoreError>
  /**
   * An execution's journal in the order it was written, for operators: activity results with the
   * fence of their holder, deferreds done and awaited, durable clocks.
   */
  readonly journal: (execution: string) => Effect.Effect<ReadonlyArray<JournalEntry>, StoreError>
}>()("@leasehold/core/WorkflowJournal") {}

/**
 * A deferred's outcome as the engine records it (the JSON of an encoded `Exit`): a success whose
 * value is `value`, already in the deferred's encoded form. What Approve records for a deferred
 * meant for a person.
 *
 * @category constructors
 */
export const succeeded = (value: unknown): unknown => ({ _tag: "Success", value })
