/**
 * Row shapes as Postgres returns them and their mapping to the domain. bigint columns arrive as
 * JS bigint; fences are exposed as numbers (exact below 2^53, which no fence will reach).
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { ClaimedRun, RunEvent, RunRecord, RunState, SignalOutcome } from "@leasehold/core"

/** JSON for a jsonb parameter; `undefined` becomes SQL null. */
export const json = (value: unknown): string | null => value === undefined ? null : JSON.stringify(value)

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
  readonly state: RunState
}

export const toClaimed = (row: ClaimRow): ClaimedRun => ({
  id: row.id,
  queue: row.queue,
  kind: row.kind,
  payload: row.payload,
  attempt: row.attempt,
  maxAttempts: row.max_attempts,
  fence: num(row.fence),
  checkpoint: row.checkpoint,
  signals: row.signals ?? {}
})

export const toRecord = (row: any): RunRecord => ({
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
  signals: row.signals ?? {},
  idempotencyKey: row.idempotency_key,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  finishedAt: row.finished_at
})

export const toEvent = (row: any): RunEvent => ({
  id: String(row.id),
  runId: String(row.run_id),
  kind: row.kind,
  fence: num(row.fence),
  owner: row.owner,
  detail: row.detail,
  at: row.at
})

/** Run ids are bigint in the database and decimal strings everywhere else. */
export const isRunId = (value: string): boolean => /^[0-9]{1,18}$/.test(value)

/** A text[] parameter whose type is stated, so an array of nulls still encodes. */
export const textArray = (values: ReadonlyArray<string | null>): PgTypes.Parameter =>
  Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))
