/**
 * Recurring runs: a schedule is a cron expression in a time zone that enqueues a run of `kind` on
 * `queue` at each tick. Every tick yields exactly one run, whatever the number of workers ticking,
 * their restarts or their clocks: the run's idempotency key is the schedule's name and the tick's
 * instant (`tickKey`), and which ticks are due is decided against the store's `now()`.
 *
 * Ticks a ticker did not fire before the following tick came due are *missed* (the workers were
 * down). `missed` says what becomes of them: `skip` (none fires), `once` (the latest missed tick
 * fires, once, for all of them), `all` (each fires, the latest `maxBackfill` of them). Missed ticks
 * older than `backfillWindow` never fire. A run fired for a missed tick says so in its payload.
 *
 * @since 0.1.0
 */
import { Cause, Cron, Duration, Exit, Option, Result } from "effect"
import { InvalidConfig, type UnstorableValue } from "./Errors.js"
import * as Json from "./Json.js"
import * as Limits from "./Limits.js"

/** @category models */
export type MissedTicks = "skip" | "once" | "all"

/**
 * A schedule as registered from code, the CLI or the store API.
 *
 * @category models
 */
export interface ScheduleDefinition {
  /** Unique; registering the same name again updates the schedule. */
  readonly name: string
  /** Five fields (minute precision) or six (seconds first), as Effect's `Cron.parse` reads them. */
  readonly cron: string
  /** An IANA time zone; UTC when left out. */
  readonly timeZone?: string | undefined
  readonly kind: string
  /** A JSON object; each run gets it with a `tick` field added (`TickInfo`). */
  readonly payload?: Record<string, unknown> | undefined
  readonly queue?: string | undefined
  /** Default `skip`. */
  readonly missed?: MissedTicks | undefined
  /** With `all`, at most this many missed ticks fire (the latest ones). Default 10. */
  readonly maxBackfill?: number | undefined
  /** Missed ticks older than this never fire. Default 1 day. */
  readonly backfillWindow?: Duration.Input | undefined
}

/** A definition checked and with its defaults filled in. @category models */
export interface CheckedSchedule {
  readonly name: string
  readonly cron: string
  readonly timeZone: string
  readonly kind: string
  readonly payload: Record<string, unknown>
  readonly queue: string
  readonly missed: MissedTicks
  readonly maxBackfill: number
  readonly backfillWindowMs: number
}

/** What the payload of a scheduled run carries under `tick`. @category models */
export interface TickInfo {
  readonly schedule: string
  /** The tick's instant, ISO 8601 in UTC. */
  readonly at: string
  /** True when the tick was missed and fired late by the missed-tick policy. */
  readonly backfilled: boolean
}

/** A schedule as stored, with where it stands. @category models */
export interface ScheduleInfo extends CheckedSchedule {
  readonly paused: boolean
  /** The next tick that has not fired yet. */
  readonly nextTick: Date
  /** The last tick fired, if any. */
  readonly lastTick: Date | null
}

/** One run a tick enqueued (or found already enqueued, `created: false`). @category models */
export interface FiredTick {
  readonly schedule: string
  readonly tick: Date
  readonly runId: string
  readonly backfilled: boolean
  readonly created: boolean
}

/**
 * What a ticker did: the runs it fired, and how long until the next tick of a schedule that is not
 * paused, by the store's clock (null: none), so that it sleeps until then without its own clock
 * deciding anything.
 *
 * @category models
 */
export interface TickOutcome {
  readonly fired: ReadonlyArray<FiredTick>
  readonly nextInMs: number | null
}

/** What registering a definition did. @category models */
export interface ScheduleRegistered {
  readonly name: string
  /** `created`: new; `updated`: its definition changed; `unchanged`: the same definition again. */
  readonly outcome: "created" | "updated" | "unchanged"
}

const DEFAULT_WINDOW_MS = 24 * 3600 * 1000

const nonEmpty = (value: unknown) => typeof value === "string" && value !== ""
const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * Checks a definition before anything is written: a parsable cron expression in a known time
 * zone, names and kind non-empty, a payload object without its own `tick`, a backfill cap of at
 * least 1 and a window of at least 0.
 *
 * @category validation
 */
export const check = (definition: ScheduleDefinition): Exit.Exit<CheckedSchedule, InvalidConfig> => {
  const invalid = (option: string, issue: string) => Exit.fail(new InvalidConfig({ option, issue }))
  for (
    const [option, value, max] of [
      ["name", definition.name, Limits.maxScheduleNameBytes],
      ["kind", definition.kind, Limits.maxKindBytes],
      ["queue", definition.queue ?? "default", Limits.maxQueueBytes]
    ] as const
  ) {
    const issue = Limits.textIssue(value, max)
    if (issue !== undefined) return invalid(option, issue)
  }
  const timeZone = definition.timeZone ?? "UTC"
  if (!nonEmpty(timeZone)) return invalid("timeZone", "must be a non-empty string")
  if (typeof definition.cron !== "string") return invalid("cron", "must be a string")
  const parsed = parseCron(definition.cron, timeZone)
  if (Result.isFailure(parsed)) {
    return /time zone/i.test(parsed.failure.message)
      ? invalid("timeZone", `"${timeZone}" is not a known time zone`)
      : invalid("cron", `"${definition.cron}": ${parsed.failure.message}`)
  }
  // A valid expression can still name no instant at all (the 30th of February).
  try {
    Cron.next(parsed.success, new Date())
  } catch {
    return invalid("cron", `"${definition.cron}" never fires`)
  }
  const payload = definition.payload ?? {}
  if (!isPlainObject(payload)) return invalid("payload", "must be a JSON object")
  if ("tick" in payload) return invalid("payload", "its \"tick\" field is reserved for the tick's own description")
  const encoded = Json.encode(payload, "schedule payload")
  if (Exit.isFailure(encoded)) {
    return invalid("payload", `cannot be stored as JSON: ${(Cause.squash(encoded.cause) as UnstorableValue).issue}`)
  }
  const missed = definition.missed ?? "skip"
  if (missed !== "skip" && missed !== "once" && missed !== "all") {
    return invalid("missed", `${JSON.stringify(missed)} is not skip, once or all`)
  }
  const maxBackfill = definition.maxBackfill ?? 10
  if (!(Number.isInteger(maxBackfill) && maxBackfill >= 1 && maxBackfill < 2 ** 31)) {
    return invalid("maxBackfill", `${maxBackfill} is not a whole number of at least 1`)
  }
  // Whole milliseconds, as the store keeps them.
  const window = definition.backfillWindow === undefined
    ? DEFAULT_WINDOW_MS
    : Math.round(
      Option.match(Duration.fromInput(definition.backfillWindow), {
        onNone: () => Number.NaN,
        onSome: Duration.toMillis
      })
    )
  if (!(Number.isSafeInteger(window) && window >= 0)) {
    return invalid("backfillWindow", "must be a finite duration of at least 0")
  }
  return Exit.succeed({
    name: definition.name,
    cron: definition.cron,
    timeZone,
    kind: definition.kind,
    payload,
    queue: definition.queue ?? "default",
    missed,
    maxBackfill,
    backfillWindowMs: window
  })
}

const parseCron = (expression: string, timeZone: string) => {
  try {
    return Cron.parse(expression, timeZone)
  } catch (error) {
    return Result.fail(new Error(String(error)))
  }
}

const cronOf = (schedule: Pick<CheckedSchedule, "cron" | "timeZone">): Cron.Cron =>
  Cron.parseUnsafe(schedule.cron, schedule.timeZone)

/** The first tick strictly after `after`. @category ticks */
export const nextTickAfter = (schedule: Pick<CheckedSchedule, "cron" | "timeZone">, after: Date): Date =>
  Cron.next(cronOf(schedule), after)

/** The next `count` ticks strictly after `after`. @category ticks */
export const upcoming = (
  schedule: Pick<CheckedSchedule, "cron" | "timeZone">,
  after: Date,
  count: number
): Array<Date> => {
  const ticks: Array<Date> = []
  if (count <= 0) return ticks
  const sequence = Cron.sequence(cronOf(schedule), after)
  for (const tick of sequence) {
    ticks.push(tick)
    if (ticks.length >= count) break
  }
  return ticks
}

/** The idempotency key of a tick's run: one run per schedule and instant. @category ticks */
export const tickKey = (schedule: string, tick: Date): string => `schedule:${schedule}:${tick.toISOString()}`
