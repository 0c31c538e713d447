/**
 * The transitions of the memory store not yet in a module of their own (a step of the split).
 *
 * @internal
 */
import { RunNotFound, ScheduleNotFound } from "../../Errors.js"
import type { LeaseKey, RunEvent, RunRecord } from "../../RunRecord.js"
import * as Schedules from "../../Schedules.js"
import { order, parse, toRecord } from "./Read.js"
import * as Read from "./Read.js"
import type { StoredRun } from "./StoredRun.js"
import type { ListFilter, LiveLease, LiveSample, StaleWrite, Stats } from "../../RunStore.js"
import { err, ok, type Outcome, type State } from "./State.js"
import { enqueue } from "./Enqueue.js"
import { guarded } from "./Guarded.js"

/** The run enqueued under this idempotency key, if any (an execution's run). */
export const byIdempotencyKey = (state: State, key: string): StoredRun | undefined => {
  const id = state.keys.get(key)
  return id === undefined ? undefined : state.runs.get(id)
}

/** Leaves a signal for a running run's holder, whose next suspension on it then returns at once. */
export const leaveSignal = (run: StoredRun, signal: string, payload: string, now: number): void => {
  run.signals = JSON.stringify({ ...(parse(run.signals) as object), [signal]: { _tag: "Signalled", payload: parse(payload) } })
  run.updatedAt = now
}

/** Takes a signal left for the holder, under its fence. */
export const takeSignal = (
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

export const leases = (state: State, now: number): Array<LiveLease> => {
  return [...state.runs.values()]
    .filter((r) => r.state === "running" && r.leaseExpiresAt! > now)
    .sort((a, b) => (a.leaseOwner! < b.leaseOwner! ? -1 : a.leaseOwner! > b.leaseOwner! ? 1 : Number(a.id) - Number(b.id)))
    .map((r): LiveLease => ({
      owner: r.leaseOwner!,
      runId: r.id,
      fence: r.fence,
      kind: r.kind,
      queue: r.queue,
      attempt: r.attempt,
      expiresInMs: Math.max(0, r.leaseExpiresAt! - now)
    }))
}

export const get = (state: State, runId: string): Outcome<RunRecord, RunNotFound> => {
  const run = state.find(runId)
  return run === undefined ? err(new RunNotFound({ runId })) : ok(toRecord(run))
}

export const list = (state: State, filter: ListFilter): Array<RunRecord> => {
  return Read.list(state.runs.values(), filter)
}

/** The run's history in the order it happened. */
export const history = (state: State, runId: string): Outcome<Array<RunEvent>, RunNotFound> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  return ok(state.events.filter((e) => e.runId === run.id).map((e): RunEvent => ({ id: String(e.seq), runId: run.id, ...e.event })))
}

export const stats = (state: State, now: number): Stats => {
  return Read.stats(state.runs.values(), state.events, now)
}

export const sample = (state: State, now: number): LiveSample => {
  return Read.sample(state.runs.values(), now)
}

export const registerSchedules = (
  state: State,
  checked: ReadonlyArray<Schedules.CheckedSchedule>,
  now: number
): Array<Schedules.ScheduleRegistered> => {
  const outcomes = checked.map((schedule): Schedules.ScheduleRegistered => {
    const stored = state.schedulesByName.get(schedule.name)
    const { nextTick, outcome } = Schedules.registration(
      stored === undefined ? undefined : { schedule: stored.schedule, nextTick: new Date(stored.nextTick) },
      schedule,
      new Date(now)
    )
    if (outcome !== "unchanged") {
      state.schedulesByName.set(schedule.name, {
        schedule,
        paused: stored?.paused ?? false,
        nextTick: nextTick.getTime(),
        lastTick: stored?.lastTick ?? null
      })
    }
    return { name: schedule.name, outcome }
  })
  if (outcomes.some((o) => o.outcome !== "unchanged")) state.outbox.push({ _tag: "SchedulesChanged" })
  return outcomes
}

export const tickSchedules = (state: State, now: number): Schedules.TickOutcome => {
  const fired: Array<Schedules.FiredTick> = []
  for (const entry of [...state.schedulesByName.values()].sort((a, b) => a.nextTick - b.nextTick)) {
    if (entry.paused || entry.nextTick > now) continue
    const plan = Schedules.planIfPossible(entry.schedule, new Date(entry.nextTick), new Date(now))
    if (plan === undefined) continue
    for (const { backfilled, tick } of plan.fire) {
      const request = Schedules.tickRequest(entry.schedule, tick, backfilled)
      // The payload is a checked JSON object with the tick added: its text is plain JSON.
      const [enqueued] = enqueue(state, [request], [JSON.stringify(request.payload)], now)
      fired.push({ schedule: entry.schedule.name, tick, runId: enqueued!.id, backfilled, created: enqueued!.created })
    }
    entry.lastTick = plan.lastTick.getTime()
    entry.nextTick = plan.nextTick.getTime()
  }
  const next = [...state.schedulesByName.values()].filter((e) => !e.paused).map((e) => e.nextTick)
  return { fired, nextInMs: next.length === 0 ? null : Math.min(...next) - now }
}

export const schedules = (state: State): Array<Schedules.ScheduleInfo> => {
  return [...state.schedulesByName.values()]
    .sort((a, b) => order(a.schedule.name, b.schedule.name))
    .map((e) => ({ ...e.schedule, paused: e.paused, nextTick: new Date(e.nextTick), lastTick: e.lastTick === null ? null : new Date(e.lastTick) }))
}

export const setSchedulePaused = (
  state: State,
  name: string,
  paused: boolean,
  now: number
): Outcome<boolean, ScheduleNotFound> => {
  const entry = state.schedulesByName.get(name)
  if (entry === undefined) return err(new ScheduleNotFound({ name }))
  if (entry.paused === paused) return ok(false)
  entry.paused = paused
  // Ticks that came due while paused were never due: the next one is the first after now.
  if (!paused) {
    entry.nextTick = Schedules.nextTickAfter(entry.schedule, new Date(now)).getTime()
    state.outbox.push({ _tag: "SchedulesChanged" })
  }
  return ok(true)
}

/** Sets a schedule's next tick (tests: the memory twin of an UPDATE on `schedules.next_tick`). */
export const setNextTick = (state: State, name: string, at: number): void => {
  const entry = state.schedulesByName.get(name)
  if (entry !== undefined) entry.nextTick = at
}
