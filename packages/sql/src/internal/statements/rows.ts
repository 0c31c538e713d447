/**
 * Row shapes as Postgres returns them and their mapping to the domain. bigint columns arrive as
 * JS bigint; fences are exposed as numbers (exact below 2^53, which no fence will reach).
 */
import { PgTypes } from "@effect/sql-pg"
import { type ClaimedRun, type RunEvent, type RunRecord, RunState, type SignalOutcome } from "@leasehold/core"
import { Effect, Result, Schema } from "effect"
import { MalformedRow } from "../../StoreErrors.js"

/** JSON for a jsonb parameter; `undefined` becomes SQL null. */
export const json = (value: unknown): string | null => value === undefined ? null : JSON.stringify(value)

/** A timestamp column as the driver hands it back: a `Date`, or its text. */
export const toDate = (value: Date | string): Date => (value instanceof Date ? value : new Date(value))

export const num = (value: unknown): number => typeof value === "bigint" ? Number(value) : Number(value)

export interface ClaimRow {
  readonly id: string
  readonly queue: string
  readonly kind: string
  readonly payload: unknown
  readonly attempt: number
  readonly max_attempts: number
  readonly fence: bigint
  readonly checkpoint: unknown
  readonly signals: Record<string, SignalOutcome>
  readonly concurrency_key: string | null
  readonly state: RunState
  /** 0 expired lease, 1 passed suspension deadline, 2 due (the full claim's branches). */
  readonly origin?: number
  readonly wait_ms: number
  readonly trace_parent: string | null
  /** The enqueue's attempt timeout, and the milliseconds left until the deadline by the database's `now()`. */
  readonly attempt_timeout_ms: number | null
  readonly deadline_in_ms: number | null
}

// A claim that returns no signals shares this one (a run's signals are read, never written, by its handler).
const noSignals: Readonly<Record<string, SignalOutcome>> = Object.freeze({})

export const toClaimed = (row: Omit<ClaimRow, "state">): ClaimedRun => ({
  id: row.id,
  queue: row.queue,
  kind: row.kind,
  payload: row.payload,
  attempt: row.attempt,
  maxAttempts: row.max_attempts,
  fence: num(row.fence),
  checkpoint: row.checkpoint,
  signals: row.signals ?? noSignals,
  concurrencyKey: row.concurrency_key,
  via: row.origin === 0 ? "expired" : row.origin === 1 ? "timed-out" : "due",
  waitMs: Math.max(0, Number(row.wait_ms)),
  traceParent: row.trace_parent,
  attemptTimeoutMs: row.attempt_timeout_ms,
  deadlineInMs: row.deadline_in_ms === null ? null : Number(row.deadline_in_ms)
})

/** A date column: a `Date` from the driver, or its text (as a JSON read would give it). */
const Timestamp = Schema.Union([Schema.Date, Schema.DateFromString])
const NullableTimestamp = Schema.NullOr(Timestamp)
const BigIntish = Schema.Union([Schema.BigInt, Schema.Number, Schema.BigIntFromString])

/** A run row as `read.ts` selects it (snake case, ids as text). */
const RunRow = Schema.Struct({
  id: Schema.String,
  queue: Schema.String,
  kind: Schema.String,
  payload: Schema.Unknown,
  priority: Schema.Number,
  run_at: Timestamp,
  state: RunState,
  attempt: Schema.Number,
  max_attempts: Schema.Number,
  fence: BigIntish,
  lease_owner: Schema.NullOr(Schema.String),
  lease_expires_at: NullableTimestamp,
  checkpoint: Schema.Unknown,
  result: Schema.Unknown,
  error: Schema.Unknown,
  signal_name: Schema.NullOr(Schema.String),
  signal_token: Schema.NullOr(Schema.String),
  suspend_deadline: NullableTimestamp,
  signals: Schema.NullOr(Schema.Record(Schema.String, Schema.Unknown)),
  idempotency_key: Schema.NullOr(Schema.String),
  concurrency_key: Schema.NullOr(Schema.String),
  key_slot: Schema.NullOr(Schema.Number),
  waiting_for_key: Schema.Boolean,
  trace_parent: Schema.NullOr(Schema.String),
  attempt_timeout_ms: Schema.NullOr(Schema.Number),
  deadline: NullableTimestamp,
  created_at: Timestamp,
  updated_at: Timestamp,
  finished_at: NullableTimestamp
})

/** A `run_history` row. */
const EventRow = Schema.Struct({
  id: Schema.Union([Schema.String, BigIntish]),
  run_id: BigIntish,
  fence: BigIntish,
  kind: Schema.String,
  owner: Schema.NullOr(Schema.String),
  detail: Schema.Unknown,
  at: Timestamp
})

const decodeRows = <S extends Schema.Top>(schema: S) => {
  const decode = Schema.decodeUnknownEffect(Schema.Array(schema))
  return (rows: ReadonlyArray<unknown>) =>
    decode(rows).pipe(
      Effect.mapError((error) => new MalformedRow({ message: error.message }))
    ) as Effect.Effect<ReadonlyArray<S["Type"]>, MalformedRow>
}

/** Decodes run rows into records. */
export const toRecords = (rows: ReadonlyArray<unknown>): Effect.Effect<ReadonlyArray<RunRecord>, MalformedRow> =>
  Effect.map(decodeRunRows(rows), (decoded) =>
    decoded.map((row): RunRecord => ({
      id: row.id,
      queue: row.queue,
      kind: row.kind,
      payload: row.payload,
      priority: row.priority,
      runAt: row.run_at,
      state: row.state,
      attempt: row.attempt,
      maxAttempts: row.max_attempts,
      fence: num(row.fence),
      leaseOwner: row.lease_owner,
      leaseExpiresAt: row.lease_expires_at,
      checkpoint: row.checkpoint,
      result: row.result,
      error: row.error,
      signalName: row.signal_name,
      signalToken: row.signal_token,
      suspendDeadline: row.suspend_deadline,
      signals: (row.signals ?? {}) as Record<string, SignalOutcome>,
      idempotencyKey: row.idempotency_key,
      concurrencyKey: row.concurrency_key,
      keySlot: row.key_slot,
      waitingForKey: row.waiting_for_key,
      traceParent: row.trace_parent,
      attemptTimeoutMs: row.attempt_timeout_ms,
      deadline: row.deadline,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
      finishedAt: row.finished_at
    })))
const decodeRunRows = decodeRows(RunRow)

/** Decodes history rows into events. */
export const toEvents = (rows: ReadonlyArray<unknown>): Effect.Effect<ReadonlyArray<RunEvent>, MalformedRow> =>
  Effect.map(decodeEventRows(rows), (decoded) =>
    decoded.map((row): RunEvent => ({
      id: String(row.id),
      runId: String(row.run_id),
      kind: row.kind,
      fence: num(row.fence),
      owner: row.owner,
      detail: row.detail,
      at: row.at
    })))
const decodeEventRows = decodeRows(EventRow)

/** Run ids are bigint in the database and decimal strings everywhere else. */
export const isRunId = (value: string): boolean => /^[0-9]{1,18}$/.test(value)

/** A text[] parameter whose type is stated, so an array of nulls still encodes. */
export const textArray = (values: ReadonlyArray<string | null>): PgTypes.Parameter =>
  Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))
