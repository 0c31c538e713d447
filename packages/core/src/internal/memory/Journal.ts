/**
 * The memory store's workflow journal (`packages/sql/src/internal/statements/workflow.ts`): beside
 * the runs of the same `State`, so a fenced write checks the holder and writes in one step, as the
 * statement does holding the run's row. Values are kept as JSON text and parsed afresh on read.
 *
 * @internal
 */
import type { LeaseKey } from "../../RunRecord.js"
import type { StaleWrite } from "../../RunStore.js"
import {
  type Awaited,
  type ExecutionRun,
  interruptSignalName,
  type JournalEntry,
  type Wake,
  wakeSignal
} from "../../WorkflowJournal.js"
import { resumeById } from "./Admin.js"
import { diagnose, guarded, holder } from "./Guarded.js"
import { parse } from "./Read.js"
import type { Outcome, State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

// Composite keys of the journal's maps, as the tables' primary keys.
const keyOf = (...parts: ReadonlyArray<string | number>) => JSON.stringify(parts)

/** The run enqueued under this idempotency key, if any (an execution's run). */
const byIdempotencyKey = (state: State, key: string): StoredRun | undefined => {
  const id = state.keys.get(key)
  return id === undefined ? undefined : state.runs.get(id)
}

/** Leaves a signal for a running run's holder, whose next suspension on it then returns at once. */
const leaveSignal = (run: StoredRun, signal: string, payload: string, now: number): void => {
  run.signals = JSON.stringify({
    ...(parse(run.signals) as object),
    [signal]: { _tag: "Signalled", payload: parse(payload) }
  })
  run.updatedAt = now
}

/** Takes a signal left for the holder, under its fence. */
const takeSignal = (
  state: State,
  lease: LeaseKey,
  signal: string,
  operation: string,
  now: number
): Outcome<void, StaleWrite> => {
  return guarded(state, lease, operation, now, (run) => {
    const { [signal]: _taken, ...rest } = parse(run.signals) as Record<string, unknown>
    run.signals = JSON.stringify(rest)
  })
}

interface AwaitedRow {
  readonly execution: string
  readonly name: string
  readonly firstAwaitedAt: number
}

export class Journal {
  private readonly activities = new Map<string, string>()
  private readonly deferreds = new Map<string, string>()
  private readonly clocks = new Map<
    string,
    { readonly execution: string; readonly deferred: string; readonly wakeAt: number }
  >()
  private readonly awaits = new Map<string, AwaitedRow>()
  // When each result and outcome was recorded, and under which fence (for `journal`).
  private readonly recorded = new Map<string, { readonly fence: number; readonly at: number }>()

  constructor(private readonly state: State) {}

  /** Forgets everything kept of these executions (their runs deleted: `Delete.ts`). */
  forget(executions: ReadonlySet<string>): void {
    for (const map of [this.activities, this.deferreds, this.clocks, this.awaits, this.recorded]) {
      for (const key of map.keys()) {
        if (executions.has((JSON.parse(key) as ReadonlyArray<string>)[0]!)) map.delete(key)
      }
    }
  }

  execution(execution: string): ExecutionRun | undefined {
    const run = byIdempotencyKey(this.state, execution)
    if (run === undefined) return undefined
    return {
      runId: run.id,
      state: run.state,
      fence: run.fence,
      result: parse(run.result),
      error: parse(run.error),
      traceParent: run.traceParent
    }
  }

  activityResult(execution: string, activity: string, attempt: number): unknown | undefined {
    const exit = this.activities.get(keyOf(execution, activity, attempt))
    return exit === undefined ? undefined : parse(exit)
  }

  /** Under the holder's fence; the first result recorded stands. */
  recordActivity(
    lease: LeaseKey,
    execution: string,
    activity: string,
    attempt: number,
    exit: string,
    now: number
  ): Outcome<unknown, StaleWrite> {
    if (holder(this.state, lease) === undefined) {
      return { ok: false, error: diagnose(this.state, lease, "activity", now) }
    }
    const key = keyOf(execution, activity, attempt)
    const stored = this.activities.get(key) ?? exit
    if (!this.activities.has(key)) this.recorded.set(key, { fence: lease.fence, at: now })
    this.activities.set(key, stored)
    return { ok: true, value: parse(stored) }
  }

  /** Whether the deferred has an outcome. */
  isDone(execution: string, name: string): boolean {
    return this.deferreds.has(keyOf(execution, name))
  }

  private clockDue(execution: string, name: string, now: number): boolean {
    const clock = this.clocks.get(keyOf(execution, name))
    return clock !== undefined && clock.wakeAt <= now
  }

  /** Not done: recorded as awaited, once (never the engine's own interrupt signal). */
  deferredResult(execution: string, name: string, now: number): { readonly exit: unknown } | "clockDue" | undefined {
    const exit = this.deferreds.get(keyOf(execution, name))
    if (exit !== undefined) return { exit: parse(exit) }
    if (this.clockDue(execution, name, now)) return "clockDue"
    const key = keyOf(execution, name)
    if (name !== interruptSignalName && !this.awaits.has(key)) {
      this.awaits.set(key, { execution, name, firstAwaitedAt: now })
    }
    return undefined
  }

  /** The first outcome stands; a new one wakes the execution. */
  deferredDone(execution: string, name: string, exit: string, now: number): boolean {
    const key = keyOf(execution, name)
    if (this.deferreds.has(key)) return false
    this.deferreds.set(key, exit)
    this.recorded.set(key, { fence: 0, at: now })
    this.wake(execution, name, now)
    return true
  }

  /** Resumes the execution's run when suspended; when running, leaves `wake/<fence>` for its holder. */
  wake(execution: string, reason: string, now: number): Wake {
    const run = byIdempotencyKey(this.state, execution)
    if (run === undefined) return "none"
    const payload = JSON.stringify({ wake: reason })
    if (run.state === "suspended") {
      resumeById(this.state, run.id, payload, now)
      return "resumed"
    }
    if (run.state !== "running") return "none"
    leaveSignal(run, wakeSignal(run.fence), payload, now)
    return "signalled"
  }

  consumeWake(lease: LeaseKey, now: number): Outcome<void, StaleWrite> {
    return takeSignal(this.state, lease, wakeSignal(lease.fence), "wake", now)
  }

  /** The first schedule of a clock stands. */
  scheduleClock(execution: string, deferred: string, durationMs: number, now: number): void {
    const key = keyOf(execution, deferred)
    if (!this.clocks.has(key)) this.clocks.set(key, { execution, deferred, wakeAt: now + durationMs })
  }

  /** `since` in microseconds since the epoch; the answer in milliseconds from now. */
  nextClock(execution: string, since: string, now: number): number | undefined {
    const sinceMs = Number(since) / 1000
    let earliest: number | undefined
    for (const clock of this.clocks.values()) {
      if (
        clock.execution !== execution || clock.wakeAt <= sinceMs || this.deferreds.has(keyOf(execution, clock.deferred))
      ) continue
      if (earliest === undefined || clock.wakeAt < earliest) earliest = clock.wakeAt
    }
    return earliest === undefined ? undefined : earliest - now
  }

  doneAmong(execution: string, names: ReadonlyArray<string>, now: number): Array<string> {
    return [...new Set(names)].filter((name) =>
      this.deferreds.has(keyOf(execution, name)) || this.clockDue(execution, name, now)
    )
  }

  awaiting(executions: ReadonlyArray<string>, now: number): Array<Awaited> {
    const wanted = new Set(executions)
    const rows: Array<Awaited & { readonly firstAwaitedAt: number }> = []
    for (const row of this.awaits.values()) {
      if (!wanted.has(row.execution) || this.deferreds.has(keyOf(row.execution, row.name))) continue
      const clock = this.clocks.get(keyOf(row.execution, row.name))
      if (clock !== undefined && clock.wakeAt <= now) continue
      rows.push({
        execution: row.execution,
        name: row.name,
        wakeAt: clock === undefined ? null : new Date(clock.wakeAt),
        firstAwaitedAt: row.firstAwaitedAt
      })
    }
    rows.sort((a, b) =>
      a.execution < b.execution
        ? -1
        : a.execution > b.execution
        ? 1
        : a.firstAwaitedAt - b.firstAwaitedAt || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
    )
    return rows.map(({ execution, name, wakeAt }) => ({ execution, name, wakeAt }))
  }

  /** The execution's journal in the order it was written (the statement's `journal`). */
  journal(execution: string, now: number): Array<JournalEntry> {
    const entries: Array<JournalEntry & { readonly order: number }> = []
    for (const [key, exit] of this.activities) {
      const [ex, name, attempt] = JSON.parse(key) as [string, string, number]
      if (ex !== execution) continue
      const meta = this.recorded.get(key)!
      entries.push({
        type: "activity",
        name,
        attempt,
        fence: meta.fence,
        exit: parse(exit),
        at: new Date(meta.at),
        order: meta.at
      })
    }
    const clockNames = new Set(
      [...this.clocks.values()].filter((c) => c.execution === execution).map((c) => c.deferred)
    )
    for (const [key, exit] of this.deferreds) {
      const [ex, name] = JSON.parse(key) as [string, string]
      if (ex !== execution || clockNames.has(name)) continue
      const at = this.recorded.get(key)!.at
      entries.push({ type: "deferred", name, exit: parse(exit), done: true, at: new Date(at), order: at })
    }
    for (const row of this.awaits.values()) {
      if (row.execution !== execution || this.deferreds.has(keyOf(execution, row.name)) || clockNames.has(row.name)) {
        continue
      }
      entries.push({
        type: "deferred",
        name: row.name,
        exit: null,
        done: false,
        at: new Date(row.firstAwaitedAt),
        order: row.firstAwaitedAt
      })
    }
    for (const clock of this.clocks.values()) {
      if (clock.execution !== execution) continue
      entries.push({
        type: "clock",
        name: clock.deferred,
        wakeAt: new Date(clock.wakeAt),
        fired: clock.wakeAt <= now,
        order: clock.wakeAt
      })
    }
    return entries.sort((a, b) => a.order - b.order).map(({ order: _, ...entry }) => entry as JournalEntry)
  }
}
