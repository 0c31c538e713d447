/**
 * Schedules: definitions in `schedules`, one row each, with the next tick not yet fired. A tick is
 * decided against the database's `now()` and fired in the transaction that advances the row: the
 * due rows are locked `FOR UPDATE SKIP LOCKED` (one ticker per schedule at a time), the runs are
 * enqueued with the tick's idempotency key (one run per tick even if two tickers ever met), and
 * `next_tick` moves on. Cron arithmetic is Effect's `Cron` (`ScheduleStorage.plan`), fed the database's
 * time, never the worker's.
 */
import { ScheduleNotFound, Schedules } from "@leasehold/core"
import { ScheduleStorage } from "@leasehold/core/store"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { enqueue } from "./enqueue.js"
import { toDate as date } from "./rows.js"

interface ScheduleRow {
  readonly name: string
  readonly cron: string
  readonly time_zone: string
  readonly kind: string
  readonly queue: string
  readonly payload: Record<string, unknown>
  readonly missed: Schedules.MissedTicks
  readonly max_backfill: number
  readonly backfill_window_ms: number | string
  readonly paused: boolean
  readonly next_tick: Date | string
  readonly last_tick: Date | string | null
}

const checkedOf = (row: ScheduleRow): Schedules.CheckedSchedule => ({
  name: row.name,
  cron: row.cron,
  timeZone: row.time_zone,
  kind: row.kind,
  payload: row.payload,
  queue: row.queue,
  missed: row.missed,
  maxBackfill: row.max_backfill,
  backfillWindowMs: Number(row.backfill_window_ms)
})

const infoOf = (row: ScheduleRow): Schedules.ScheduleInfo => ({
  ...checkedOf(row),
  paused: row.paused,
  nextTick: date(row.next_tick),
  lastTick: row.last_tick === null ? null : date(row.last_tick)
})

const dbNow = (sql: SqlClient.SqlClient) =>
  Effect.map(sql<{ now: Date | string }>`SELECT now() AS now`, (rows) => date(rows[0]!.now))

/** Registrations are serialized per store (a transaction-scoped advisory lock): they are rare. */
export const register = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  definitions: ReadonlyArray<Schedules.ScheduleDefinition>
) =>
  Effect.gen(function*() {
    const checked: Array<Schedules.CheckedSchedule> = []
    for (const definition of definitions) checked.push(yield* Schedules.check(definition))
    if (checked.length === 0) return [] as ReadonlyArray<Schedules.ScheduleRegistered>
    return yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`SELECT pg_advisory_xact_lock(hashtext(${"leasehold:schedules:" + s.schema}))`
      const now = yield* dbNow(sql)
      const outcomes: Array<Schedules.ScheduleRegistered> = []
      for (const schedule of checked) {
        // Locked: a tick or a resume committing meanwhile would otherwise have its next tick overwritten.
        const [stored] = yield* sql<ScheduleRow>`SELECT * FROM ${
          s.schedules(sql)
        } WHERE name = ${schedule.name} FOR UPDATE`
        const { nextTick, outcome } = ScheduleStorage.registration(
          stored === undefined ? undefined : { schedule: checkedOf(stored), nextTick: date(stored.next_tick) },
          schedule,
          now
        )
        outcomes.push({ name: schedule.name, outcome })
        if (outcome === "unchanged") continue
        yield* sql`
          INSERT INTO ${
          s.schedules(sql)
        } (name, cron, time_zone, kind, queue, payload, missed, max_backfill, backfill_window_ms, next_tick)
          VALUES (${schedule.name}, ${schedule.cron}, ${schedule.timeZone}, ${schedule.kind}, ${schedule.queue},
            ${
          JSON.stringify(schedule.payload)
        }::jsonb, ${schedule.missed}, ${schedule.maxBackfill}, ${schedule.backfillWindowMs}, ${nextTick})
          ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, time_zone = excluded.time_zone, kind = excluded.kind,
            queue = excluded.queue, payload = excluded.payload, missed = excluded.missed, max_backfill = excluded.max_backfill,
            backfill_window_ms = excluded.backfill_window_ms, next_tick = excluded.next_tick, updated_at = now()`
      }
      // Tickers sleep until the next tick they know of: a new or changed schedule wakes them.
      if (outcomes.some((o) => o.outcome !== "unchanged")) yield* sql`SELECT pg_notify(${s.channel}, 's:')`
      return outcomes
    }))
  })

/**
 * Fires what is due, for the schedules no other ticker holds right now, in tick order and by name
 * among schedules due at the same moment: the runs' ids follow that order.
 */
export const tick = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql.withTransaction(Effect.gen(function*() {
    const due = yield* sql<ScheduleRow & { now: Date | string }>`
      SELECT *, now() AS now FROM ${s.schedules(sql)} WHERE NOT paused AND next_tick <= now()
      ORDER BY next_tick, name COLLATE "C" FOR UPDATE SKIP LOCKED`
    const fired: Array<Schedules.FiredTick> = []
    for (const row of due) {
      const schedule = checkedOf(row)
      // A row this process cannot plan (a time zone its ICU lacks) is left for a ticker that can;
      // it does not hold up the other schedules.
      const plan = ScheduleStorage.planIfPossible(schedule, date(row.next_tick), date(row.now))
      if (plan === undefined) {
        yield* Effect.logWarning(`schedule "${schedule.name}" could not be planned here; skipped`)
        continue
      }
      // The definition was checked when registered: a request it yields cannot be invalid.
      const enqueued = yield* enqueue(
        sql,
        s,
        plan.fire.map(({ backfilled, tick }) => ScheduleStorage.tickRequest(schedule, tick, backfilled))
      ).pipe(
        Effect.catchTags({ InvalidConfig: Effect.die, UnstorableValue: Effect.die })
      )
      plan.fire.forEach(({ backfilled, tick }, i) =>
        fired.push({ schedule: schedule.name, tick, runId: enqueued[i]!.id, backfilled, created: enqueued[i]!.created })
      )
      yield* sql`
        UPDATE ${s.schedules(sql)} SET last_tick = ${plan.lastTick}, next_tick = ${plan.nextTick}, updated_at = now()
        WHERE name = ${schedule.name}`
    }
    const [next] = yield* sql<{ ms: number | null }>`
      SELECT (extract(epoch FROM min(next_tick) - now()) * 1000)::float8 AS ms FROM ${
      s.schedules(sql)
    } WHERE NOT paused`
    return { fired, nextInMs: next?.ms ?? null } satisfies Schedules.TickOutcome
  }))

export const list = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  Effect.map(sql<ScheduleRow>`SELECT * FROM ${s.schedules(sql)} ORDER BY name COLLATE "C"`, (rows) => rows.map(infoOf))

/** Pauses or resumes; a resumed schedule's next tick is the first after now (ticks while paused never came due). */
export const setPaused = (sql: SqlClient.SqlClient, s: StoreSchema, name: string, paused: boolean) =>
  sql.withTransaction(Effect.gen(function*() {
    const [row] = yield* sql<ScheduleRow & { now: Date | string }>`
      SELECT *, now() AS now FROM ${s.schedules(sql)} WHERE name = ${name} FOR UPDATE`
    if (row === undefined) return yield* new ScheduleNotFound({ name })
    if (row.paused === paused) return false
    const next = paused ? date(row.next_tick) : Schedules.nextTickAfter(checkedOf(row), date(row.now))
    yield* sql`UPDATE ${
      s.schedules(sql)
    } SET paused = ${paused}, next_tick = ${next}, updated_at = now() WHERE name = ${name}`
    if (!paused) yield* sql`SELECT pg_notify(${s.channel}, 's:')`
    return true
  }))
