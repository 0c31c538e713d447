/**
 * Schedules (`packages/sql/src/internal/statements/schedules.ts`): definitions with the next tick
 * not yet fired; a tick fires as an enqueue in the transition that advances the schedule.
 *
 * @internal
 */
import { ScheduleNotFound } from "../../Errors.js"
import * as Schedules from "../../Schedules.js"
import * as ScheduleStorage from "../../ScheduleStorage.js"
import { enqueue } from "./Enqueue.js"
import { order } from "./Read.js"
import { err, ok, type Outcome, type State } from "./State.js"

export const registerSchedules = (
  state: State,
  checked: ReadonlyArray<Schedules.CheckedSchedule>,
  now: number
): Array<Schedules.ScheduleRegistered> => {
  const outcomes = checked.map((schedule): Schedules.ScheduleRegistered => {
    const stored = state.schedulesByName.get(schedule.name)
    const { nextTick, outcome } = ScheduleStorage.registration(
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
  // In tick order, and by name among schedules due at the same moment, as PgRunStore fires them.
  for (
    const entry of [...state.schedulesByName.values()].sort((a, b) =>
      a.nextTick - b.nextTick || order(a.schedule.name, b.schedule.name)
    )
  ) {
    if (entry.paused || entry.nextTick > now) continue
    const plan = ScheduleStorage.planIfPossible(entry.schedule, new Date(entry.nextTick), new Date(now))
    if (plan === undefined) continue
    for (const { backfilled, tick } of plan.fire) {
      const request = ScheduleStorage.tickRequest(entry.schedule, tick, backfilled)
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
    .map((e) => ({
      ...e.schedule,
      paused: e.paused,
      nextTick: new Date(e.nextTick),
      lastTick: e.lastTick === null ? null : new Date(e.lastTick)
    }))
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
