/**
 * The Postgres journal behind `@leasehold/workflow`'s engine: activity results under the holder's
 * fence, deferred outcomes and durable clocks, and the wake that resumes a suspended execution.
 * It lives in the store's schema (migration `0011_workflows`); build it beside `PgRunStore`.
 *
 * @since 0.1.0
 */
import type { FenceRejected, LeaseKey, LeaseNotHeld, RunNotFound, StoreError } from "@leasehold/core"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, type Option } from "effect"
import * as StoreErrors from "./StoreErrors.js"
import * as StoreSchema from "./StoreSchema.js"
import * as statements from "./internal/statements/workflow.js"

/** @category models */
export type ExecutionRun = statements.ExecutionRun

/** A deferred an execution waits on (a durable clock's, with its deadline). @category models */
export type Awaited = statements.Awaited

/** One line of an execution's journal (`journal`). @category models */
export type JournalEntry = statements.JournalEntry

/** What a wake did: resumed a suspended run, left a signal for a running one, or nothing. @category models */
export type Wake = statements.Wake

/** The signal a holder of `fence` suspends on, and a wake leaves for it. @category naming */
export const wakeSignal = statements.wakeSignal

/** @category services */
export class WorkflowJournal extends Context.Service<WorkflowJournal, {
  /** The run of an execution (by its key), if it was ever started. */
  readonly execution: (execution: string) => Effect.Effect<Option.Option<ExecutionRun>, StoreError>
  readonly activityResult: (execution: string, activity: string, attempt: number) => Effect.Effect<Option.Option<unknown>, StoreError>
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
  /** A deferred's outcome, or `"clockDue"` when it is a durable clock whose deadline has passed. */
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
  readonly consumeWake: (lease: LeaseKey) => Effect.Effect<void, FenceRejected | LeaseNotHeld | RunNotFound | StoreError>
  readonly scheduleClock: (execution: string, deferred: string, durationMs: number) => Effect.Effect<void, StoreError>
  /** The database's clock now, in microseconds since the epoch (for `nextClock`). */
  readonly now: Effect.Effect<string, StoreError>
  /**
   * Milliseconds to the earliest clock of the execution that had not fired at `since` and whose
   * deferred is not done, by the database's clock (negative: it fired since).
   */
  readonly nextClock: (execution: string, since: string) => Effect.Effect<Option.Option<number>, StoreError>
  /** Which of `names` are done: deferreds with an outcome, and durable clocks past their deadline. */
  readonly doneAmong: (execution: string, names: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, StoreError>
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
}>()("@leasehold/sql/WorkflowJournal") {}

/**
 * A deferred's outcome as the engine records it (the JSON of an encoded `Exit`): a success whose
 * value is `value`, already in the deferred's encoded form. What Approve records for a deferred
 * meant for a person (`isForPerson`).
 *
 * @category constructors
 */
export const succeeded = (value: unknown): unknown => ({ _tag: "Success", value })

/** @category models */
export interface WorkflowJournalOptions {
  /** The store's Postgres schema. Default `leasehold`. */
  readonly schema?: string | undefined
}

/** Builds the journal over the PgClient in context. @category constructors */
export const make = Effect.fnUntraced(function*(options: WorkflowJournalOptions = {}) {
  const sql = yield* PgClient.PgClient
  const s = yield* Effect.fromResult(StoreSchema.validate(options.schema))
  const refail = StoreErrors.refail
  return WorkflowJournal.of({
    execution: (execution) => refail("workflow execution")(statements.executionRun(sql, s, execution)),
    activityResult: (execution, activity, attempt) =>
      refail("activity result")(statements.activityResult(sql, s, execution, activity, attempt)),
    recordActivity: (lease, execution, activity, attempt, exit) =>
      refail("record activity")(statements.recordActivity(sql, s, lease, execution, activity, attempt, exit)),
    deferredResult: (execution, name) => refail("deferred result")(statements.deferredResult(sql, s, execution, name)),
    transaction: (effect) => refail("activity transaction")(sql.withTransaction(effect)),
    deferredDone: (execution, name, exit) => refail("deferred done")(statements.deferredDone(sql, s, execution, name, exit)),
    wake: (execution, reason) => refail("wake")(statements.wake(sql, s, execution, reason)),
    consumeWake: (lease) => refail("wake")(statements.consumeWake(sql, s, lease)),
    scheduleClock: (execution, deferred, durationMs) =>
      refail("schedule clock")(statements.scheduleClock(sql, s, execution, deferred, durationMs)),
    now: refail("now")(statements.now(sql)),
    nextClock: (execution, since) => refail("next clock")(statements.nextClock(sql, s, execution, since)),
    doneAmong: (execution, names) => refail("deferreds done")(statements.doneAmong(sql, s, execution, names)),
    awaiting: (executions) => refail("awaiting")(statements.awaiting(sql, s, executions)),
    journal: (execution) => refail("journal")(statements.journal(sql, s, execution))
  })
})

/** @category layers */
export const layer = (options: WorkflowJournalOptions = {}) => Layer.effect(WorkflowJournal, make(options))
