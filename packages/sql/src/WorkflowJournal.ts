/**
 * The Postgres `WorkflowJournal` (the service is `@leasehold/core`'s): activity results under the
 * holder's fence, deferred outcomes and durable clocks, and the wake that resumes a suspended
 * execution, in the store's schema (migration `0011_workflows`). `PgRunStore.layer` provides it
 * beside the store; `layer` here builds it alone.
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { type StoreError, WorkflowJournal as Journal } from "@leasehold/core"
import { Effect, Layer } from "effect"
import type { SqlClient } from "effect/sql"
import * as statements from "./internal/statements/workflow.js"
import * as StoreErrors from "./StoreErrors.js"
import * as StoreSchema from "./StoreSchema.js"

/** The service, re-exported from `@leasehold/core`. @category services */
export const WorkflowJournal = Journal.WorkflowJournal
/** @category services */
export type WorkflowJournal = Journal.WorkflowJournal

/** @category models */
export type ExecutionRun = Journal.ExecutionRun
/** @category models */
export type Awaited = Journal.Awaited
/** @category models */
export type Wake = Journal.Wake
/** @category naming */
export const wakeSignal = Journal.wakeSignal
/** @category constructors */
export const succeeded = Journal.succeeded
/** @category models */
export type Outcome = Journal.Outcome
/** @category decoding */
export const outcomeOf = Journal.outcomeOf
/** @category naming */
export const waitEndedBy = Journal.waitEndedBy

/** @category models */
export interface WorkflowJournalOptions {
  /** The store's Postgres schema. Default `leasehold`. */
  readonly schema?: string | undefined
}

/** The journal over `sql`, in the schema `s` (checked). @category constructors */
export const makeWith = (sql: SqlClient.SqlClient, s: StoreSchema.StoreSchema): Journal.WorkflowJournal["Service"] => {
  const refail = StoreErrors.refail
  return Journal.WorkflowJournal.of({
    sqlClient: sql,
    execution: (execution) => refail("workflow execution")(statements.executionRun(sql, s, execution)),
    activityResult: (execution, activity, attempt) =>
      refail("activity result")(statements.activityResult(sql, s, execution, activity, attempt)),
    activityStart: (execution, activity, attempt) =>
      refail("activity start")(statements.activityStart(sql, s, execution, activity, attempt)),
    recordActivity: (lease, execution, activity, attempt, exit) =>
      refail("record activity")(statements.recordActivity(sql, s, lease, execution, activity, attempt, exit)),
    deferredResult: (execution, name) => refail("deferred result")(statements.deferredResult(sql, s, execution, name)),
    transaction: <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | StoreError, R> =>
      refail("activity transaction")(sql.withTransaction(effect)),
    deferredDone: (execution, name, exit) =>
      refail("deferred done")(statements.deferredDone(sql, s, execution, name, exit)),
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
}

/** Builds the journal over the PgClient in context. @category constructors */
export const make = Effect.fnUntraced(function*(options: WorkflowJournalOptions = {}) {
  const sql = yield* PgClient.PgClient
  const s = yield* Effect.fromResult(StoreSchema.validate(options.schema))
  return makeWith(sql, s)
})

/**
 * The journal alone, over the PgClient in context. `PgRunStore.layer` already provides it beside
 * the store, in the store's schema.
 *
 * @category layers
 */
export const layer = (options: WorkflowJournalOptions = {}) => Layer.effect(Journal.WorkflowJournal, make(options))
