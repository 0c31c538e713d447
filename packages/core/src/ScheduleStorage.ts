/**
 * What every store does the same way with schedules (`RunStore.registerSchedules`,
 * `RunStore.tickSchedules`): whether a definition changed, what registering it does to its next
 * tick, the ticks due at the store's `now()` and the run each one enqueues. For store
 * implementers (`@leasehold/core/store`); users declare schedules with `Schedules`.
 *
 * @since 0.1.0
 */
import { Cron } from "effect"
import { type CheckedSchedule, nextTickAfter, type ScheduleRegistered, type TickInfo, tickKey } from "./Schedules.js"

const cronOf = (schedule: Pick<CheckedSchedule, "cron" | "timeZone">): Cron.Cron =>
  Cron.parseUnsafe(schedule.cron, schedule.timeZone)

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Key order does not matter: JSON text as a store hands it back may order keys differently. */
const canonical = (value: unknown): unknown =>
  Array.isArray(value)
    ? value.map(canonical)
    : isPlainObject(value)
    ? Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical(value[k])]))
    : value

/** Whether two checked definitions are the same (registering it again changes nothing). @category ticks */
export const sameDefinition = (a: CheckedSchedule, b: CheckedSchedule): boolean =>
  JSON.stringify(canonical(a)) === JSON.stringify(canonical(b))

/**
 * What registering `schedule` does, given what the store holds under its name: a new schedule's
 * first tick is the first after `now`; a changed cron or time zone counts from `now` too; any
 * other change keeps the next tick. Both stores decide by this one rule.
 *
 * @category ticks
 */
export const registration = (
  stored: { readonly schedule: CheckedSchedule; readonly nextTick: Date } | undefined,
  schedule: CheckedSchedule,
  now: Date
): { readonly outcome: ScheduleRegistered["outcome"]; readonly nextTick: Date } => {
  if (stored === undefined) return { outcome: "created", nextTick: nextTickAfter(schedule, now) }
  if (sameDefinition(stored.schedule, schedule)) return { outcome: "unchanged", nextTick: stored.nextTick }
  const retimed = stored.schedule.cron !== schedule.cron || stored.schedule.timeZone !== schedule.timeZone
  return { outcome: "updated", nextTick: retimed ? nextTickAfter(schedule, now) : stored.nextTick }
}

/** The run a tick enqueues. @category ticks */
export const tickRequest = (schedule: CheckedSchedule, tick: Date, backfilled: boolean) => ({
  kind: schedule.kind,
  queue: schedule.queue,
  payload: {
    ...schedule.payload,
    tick: { schedule: schedule.name, at: tick.toISOString(), backfilled } satisfies TickInfo
  },
  idempotencyKey: tickKey(schedule.name, tick)
})

/** What a ticker does with one due schedule at `now`. @category ticks */
export interface TickPlan {
  readonly fire: ReadonlyArray<{ readonly tick: Date; readonly backfilled: boolean }>
  /** The latest due tick (fired or dropped): the schedule's new `lastTick`. */
  readonly lastTick: Date
  /** The first tick after `now`: the schedule's new `nextTick`. */
  readonly nextTick: Date
}

/**
 * The ticks due at `now` from `nextTick` on (`nextTick <= now`): the latest fires; the earlier ones
 * were missed and follow the policy. At most `maxBackfill + 1` ticks are walked from the latest
 * back, however long the outage, so a ticker never loops over years of ticks.
 *
 * @category ticks
 */
export const plan = (schedule: CheckedSchedule, nextTick: Date, now: Date): TickPlan => {
  const cron = cronOf(schedule)
  const following = Cron.next(cron, now)
  // The latest due tick: the last occurrence at or before now (nextTick itself is one).
  const latest = Cron.prev(cron, following)
  const lastTick = latest.getTime() >= nextTick.getTime() ? latest : nextTick
  const missed: Array<Date> = []
  if (schedule.missed !== "skip") {
    const wanted = schedule.missed === "once" ? 1 : schedule.maxBackfill
    const oldest = Math.max(nextTick.getTime(), now.getTime() - schedule.backfillWindowMs)
    let cursor = lastTick
    while (missed.length < wanted) {
      const previous = Cron.prev(cron, cursor)
      if (previous.getTime() < oldest) break
      missed.unshift(previous)
      cursor = previous
    }
  }
  return {
    fire: [...missed.map((tick) => ({ tick, backfilled: true })), { tick: lastTick, backfilled: false }],
    lastTick,
    nextTick: following
  }
}

/**
 * `plan`, or undefined when this process cannot plan the schedule (a time zone its ICU lacks):
 * a ticker skips such a schedule and goes on with the others.
 *
 * @category ticks
 */
export const planIfPossible = (schedule: CheckedSchedule, nextTick: Date, now: Date): TickPlan | undefined => {
  try {
    return plan(schedule, nextTick, now)
  } catch {
    return undefined
  }
}
