/**
 * The memory store's data: its runs and their history, and what the Postgres tables beside them
 * keep (idempotency keys, unique windows, key and rate limits, paused queues, schedules, callback
 * expiries). The transitions the Postgres statements make (`packages/sql/src/internal/statements/`)
 * are in one module per statement family beside this one (Enqueue.ts, Claim.ts, Guarded.ts, ...),
 * one synchronous function per statement. Each takes the store's `now()` and applies the whole
 * transition or nothing, so the effect that calls it (`MemoryRunStore`'s `apply`) is atomic with
 * respect to every other caller. Values are JSON text (encoded by the caller), parsed afresh on
 * every read, as a database hands back copies.
 *
 * @internal
 */
import * as ClaimPosition from "../../ClaimPosition.js"
import * as KeyLimits from "../../KeyLimits.js"
import type { OperatorAction } from "../../OperatorActions.js"
import * as RateLimits from "../../RateLimits.js"
import type * as RateWake from "../../RateWakes.js"
import type { RunState } from "../../RunRecord.js"
import type { StoreNotification } from "../../RunStore.js"
import * as Schedules from "../../Schedules.js"
import type { StoredAttemptLog, StoredEvent, StoredRun } from "./StoredRun.js"

/** A time column the tests may move (as they move the database's columns). */
export type TimeColumn = "runAt" | "leaseExpiresAt" | "suspendDeadline" | "deadline"

/** What a transition failed with, or the value it produced. */
export type Outcome<A, E> = { readonly ok: true; readonly value: A } | { readonly ok: false; readonly error: E }

export const ok = <A>(value: A): Outcome<A, never> => ({ ok: true, value })

export const err = <E>(error: E): Outcome<never, E> => ({ ok: false, error })

/** Run ids are decimal strings of a bigint, as Postgres reads them (`007` is run 7). */
export const canonicalId = (value: string): string | undefined =>
  /^[0-9]{1,18}$/.test(value) ? String(BigInt(value)) : undefined

/** A slot a run gave back as it stopped holding it: its scope and number, with the run. */
export interface Released {
  readonly run: StoredRun
  readonly scope: KeyLimits.KeyLimitScope
  readonly slot: number
}

export class State {
  readonly runs = new Map<string, StoredRun>()
  readonly events: Array<StoredEvent> = []
  /** Kept log lines of attempts, by run (`attempt_logs`). */
  readonly attemptLogs = new Map<string, Array<StoredAttemptLog>>()
  readonly keys = new Map<string, string>()
  /** Unique windows by kind and key (or payload): the run holding each (migration 0022's unique_holds). */
  readonly uniqueHolds = new Map<
    string,
    { runId: string; states: ReadonlySet<RunState> | undefined; until: number | undefined }
  >()
  nextRunId = 1
  nextEventId = 1
  /** The operators' audit (migration 0028's operator_actions), oldest first. */
  readonly actions: Array<OperatorAction> = []
  nextActionId = 1
  /** Notifications of the transition under way, published once it has been applied. */
  outbox: Array<StoreNotification> = []
  /** Slots given back by this statement's rows, handed on at its end (`key_slot_hand_off`). */
  handOffs: Array<Released> = []
  /** Callback expiries by run and signal, fixed on first request. */
  readonly callbacks = new Map<string, number>()
  /** Delivery ids seen (replayed webhooks). */
  readonly deliveries = new Set<string>()
  /** The keyed runs a many-run retry put back to pending, admitted once it is done. */
  retried: Array<StoredRun> | undefined = undefined
  /** Paused queues and when each was paused. */
  readonly paused = new Map<string, number>()
  readonly rateLimitsByScope = new Map<string, RateLimits.CheckedRateLimit>()
  /** Starts of governed runs, oldest first (`rate_starts`). */
  rateStarts: Array<{ readonly scope: string; readonly name: string; readonly key: string; readonly at: number }> = []
  /** When the last claim's held-back governed runs may start (`RateWake`), for the store to wake their workers. */
  rateWake: RateWake.Wake | undefined = undefined
  /** Declared per-key limits by scope and name. */
  readonly keyLimitsByScope = new Map<string, KeyLimits.KeyLimit>()
  /** Where due-only claims stand in each queue (ClaimPosition), as `PgRunStore` keeps them. */
  readonly positions = new ClaimPosition.Positions()
  readonly schedulesByName = new Map<
    string,
    { schedule: Schedules.CheckedSchedule; paused: boolean; nextTick: number; lastTick: number | null }
  >()

  record(run: StoredRun, kind: string, fence: number, owner: string | null, detail: unknown, at: number): void {
    const seq = this.nextEventId++
    this.events.push({ seq, runId: run.id, event: { kind, fence, owner, detail, at: new Date(at) } })
  }

  find(runId: string): StoredRun | undefined {
    const id = canonicalId(runId)
    return id === undefined ? undefined : this.runs.get(id)
  }

  /** Moves a time column of a run (tests: the memory twin of an UPDATE on the database's column). */
  setTime(runId: string, column: TimeColumn, at: number): void {
    const run = this.find(runId)
    if (run === undefined) return
    if (column === "runAt") run.runAt = at
    else if (column === "leaseExpiresAt" && run.leaseExpiresAt !== null) run.leaseExpiresAt = at
    else if (column === "suspendDeadline" && run.suspendDeadline !== null) run.suspendDeadline = at
    else if (column === "deadline" && run.deadline !== null) run.deadline = at
  }
}
