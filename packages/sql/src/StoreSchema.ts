/**
 * Where the store lives: the Postgres schema (configurable, so several Leasehold installations or
 * test runs can share one database) and the names derived from it.
 *
 * @since 0.1.0
 */
import { InvalidConfig } from "@leasehold/core"
import { Result } from "effect"
import type { SqlClient } from "effect/sql"

/** @category models */
export interface StoreSchema {
  readonly schema: string
  /** Notification channel for wake-ups and cancels of this schema. */
  readonly channel: string
  readonly runs: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Stored history rows (exceptional transitions, superseded claims). */
  readonly events: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Kept log lines of attempts, one row per claim (migration 0029). */
  readonly attemptLogs: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Callback expiries by run and signal. */
  readonly callbacks: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Delivery ids of signals written (replayed webhooks are refused). */
  readonly deliveries: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Queues paused now, one row each while paused. */
  readonly pausedQueues: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Schedules: their definitions and next ticks. */
  readonly schedules: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  readonly keyLimits: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** The highest limit each kind and queue was ever declared under (migration 0015). */
  readonly keyLimitPeaks: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  readonly rateLimits: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  readonly rateStarts: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Idempotency keys, each naming its run (migration 0033: `runs` is partitioned and holds no unique key). */
  readonly idempotencyKeys: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Uniqueness windows' holds, one per kind and key (migration 0022). */
  readonly uniqueHolds: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Workflow journals: activity results, deferred outcomes and durable clocks, by execution. */
  readonly workflowActivities: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  readonly workflowDeferreds: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  readonly workflowClocks: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  readonly workflowAwaits: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** The worker registry: one row per worker process alive (migration 0019). */
  readonly workers: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** The operators' audit (migration 0028). */
  readonly operatorActions: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Runs a claim may take (migration 0018): pending in their rows or in the ledger. */
  readonly ready: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Held key slots, of row and ledger runs, and the ledger's keyed runs waiting for one (migration 0025). */
  readonly keyHolds: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  readonly waiting: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** The ledger's claim batches and completion batches (migration 0018). */
  readonly claimBatches: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  readonly completionBatches: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** Each run as it stands, a ledger run's state read from the ledger (migration 0018). */
  readonly runsNow: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
  /** The whole history: stored rows plus what each run row records (current claim, completion). */
  readonly history: (sql: SqlClient.SqlClient) => ReturnType<SqlClient.SqlClient["literal"]>
}

const validName = /^[a-z_][a-z0-9_]{0,40}$/

/**
 * Checks the schema name and derives table references. Only plain lower-case identifiers are
 * accepted, so the name can be spliced into statements without any quoting surprises.
 *
 * @category constructors
 */
export const validate = (schema: string = "leasehold"): Result.Result<StoreSchema, InvalidConfig> =>
  validName.test(schema)
    ? Result.succeed(derive(schema))
    : Result.fail(
      new InvalidConfig({
        option: "schema",
        issue: `"${schema}" is not a plain name: use lower-case letters, digits and _ (at most 41 characters)`
      })
    )

/** `validate`, throwing on an invalid name: for names fixed in code. @category constructors */
export const make = (schema: string = "leasehold"): StoreSchema => Result.getOrThrow(validate(schema))

const derive = (schema: string): StoreSchema => {
  return {
    schema,
    channel: `leasehold_${schema}`,
    runs: (sql) => sql.literal(`"${schema}".runs`),
    events: (sql) => sql.literal(`"${schema}".run_events`),
    attemptLogs: (sql) => sql.literal(`"${schema}".attempt_logs`),
    callbacks: (sql) => sql.literal(`"${schema}".callbacks`),
    deliveries: (sql) => sql.literal(`"${schema}".signal_deliveries`),
    history: (sql) => sql.literal(`"${schema}".run_history`),
    ready: (sql) => sql.literal(`"${schema}".ready`),
    keyHolds: (sql) => sql.literal(`"${schema}".key_holds`),
    waiting: (sql) => sql.literal(`"${schema}".waiting`),
    claimBatches: (sql) => sql.literal(`"${schema}".claim_batches`),
    completionBatches: (sql) => sql.literal(`"${schema}".completion_batches`),
    runsNow: (sql) => sql.literal(`"${schema}".runs_now`),
    operatorActions: (sql) => sql.literal(`"${schema}".operator_actions`),
    pausedQueues: (sql) => sql.literal(`"${schema}".paused_queues`),
    schedules: (sql) => sql.literal(`"${schema}".schedules`),
    keyLimits: (sql) => sql.literal(`"${schema}".key_limits`),
    keyLimitPeaks: (sql) => sql.literal(`"${schema}".key_limit_peaks`),
    rateLimits: (sql) => sql.literal(`"${schema}".rate_limits`),
    rateStarts: (sql) => sql.literal(`"${schema}".rate_starts`),
    idempotencyKeys: (sql) => sql.literal(`"${schema}".idempotency_keys`),
    uniqueHolds: (sql) => sql.literal(`"${schema}".unique_holds`),
    workflowActivities: (sql) => sql.literal(`"${schema}".workflow_activities`),
    workflowDeferreds: (sql) => sql.literal(`"${schema}".workflow_deferreds`),
    workflowClocks: (sql) => sql.literal(`"${schema}".workflow_clocks`),
    workflowAwaits: (sql) => sql.literal(`"${schema}".workflow_awaits`),
    workers: (sql) => sql.literal(`"${schema}".workers`)
  }
}
