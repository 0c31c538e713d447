/**
 * Schedules against PostgreSQL: exactly one run per tick whatever the number of concurrent
 * tickers, registration (idempotent, typed errors, nothing written on bad input), pauses, and
 * workers ticking a per-second schedule together. `schedules-plan.test.ts` has the tick plan and
 * the memory store under TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import { Handler, RunStore, Schedules } from "@leasehold/core"
import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, layerStore } from "./support/db.js"
import { eventually, startWorker } from "./support/workers.js"

/** A fresh PG store, its SqlClient, and a way to make a schedule's next tick an occurrence minutes ago. */
const pgStore = Effect.gen(function*() {
  const schema = freshSchema("sched")
  const context = yield* Layer.build(layerStore(schema, 8))
  const store = Context.get(context, RunStore)
  const sql = Context.get(context, SqlClient.SqlClient)
  // As if the tickers had been down: the next tick becomes the occurrence `minutes` whole minutes back.
  const rewind = (name: string, minutes: number) =>
    sql.unsafe(
      `UPDATE "${schema}".schedules SET next_tick = date_trunc('minute', now()) - ${minutes} * interval '1 minute' WHERE name = '${name}'`
    )
  const runsOf = (name: string) =>
    sql.unsafe<{ id: string; key: string; tick: string; backfilled: boolean }>(
      `SELECT id::text AS id, idempotency_key AS key, payload->'tick'->>'at' AS tick, (payload->'tick'->>'backfilled')::boolean AS backfilled
       FROM "${schema}".runs WHERE payload->'tick'->>'schedule' = '${name}' ORDER BY payload->'tick'->>'at'`
    )
  return { store, sql, schema, rewind, runsOf }
})

describe("schedules on PostgreSQL", () => {
  it.live("every tick yields exactly one run across six concurrent tickers, and a tick replayed finds its run instead of adding one", () =>
    Effect.gen(function*() {
      const { rewind, runsOf, schema, sql, store } = yield* pgStore
      yield* store.registerSchedules([{
        name: "reports",
        cron: "* * * * *",
        kind: "job",
        payload: { report: "daily" },
        missed: "all"
      }])
      yield* rewind("reports", 3)
      const outcomes = yield* Effect.all(Array.from({ length: 6 }, () => store.tickSchedules), { concurrency: 6 })
      const all = outcomes.flatMap((o) => o.fired)
      const runs = yield* runsOf("reports")
      // Three missed minutes and the current one: four ticks, four runs, one per tick.
      assert.strictEqual(runs.length, 4, JSON.stringify(runs))
      assert.strictEqual(new Set(runs.map((r) => r.tick)).size, 4)
      assert.deepStrictEqual(runs.map((r) => r.backfilled), [true, true, true, false])
      assert.deepStrictEqual(all.filter((f) => f.created).map((f) => f.runId).sort(), runs.map((r) => r.id).sort())
      for (const run of runs) assert.strictEqual(run.key, Schedules.tickKey("reports", new Date(run.tick)))
      const [payload] = yield* sql.unsafe<{ payload: any }>(
        `SELECT payload FROM "${schema}".runs WHERE id = ${runs[3]!.id}`
      )
      assert.deepStrictEqual(payload!.payload, {
        report: "daily",
        tick: { schedule: "reports", at: runs[3]!.tick, backfilled: false }
      })

      // Nothing is due now; the answer says when the next tick is, by the database's clock.
      const idle = yield* store.tickSchedules
      assert.deepStrictEqual(idle.fired, [])
      assert.isAbove(idle.nextInMs!, 0)
      assert.isAtMost(idle.nextInMs!, 60_000)

      // The same ticks again (a schedule row rewound, as a lost update would): the runs are found, not added.
      yield* rewind("reports", 3)
      const replay = yield* store.tickSchedules
      assert.strictEqual(replay.fired.length, 4)
      assert.isTrue(replay.fired.every((f) => !f.created))
      assert.strictEqual((yield* runsOf("reports")).length, 4)
    }))

  it.live("schedules due at the same tick fire by name, whatever order they were registered or rewound in: their runs' ids follow", () =>
    Effect.gen(function*() {
      const { rewind, store } = yield* pgStore
      for (const name of ["zeta", "alpha", "mid"]) {
        yield* store.registerSchedules([{ name, cron: "* * * * *", kind: "job", missed: "skip" }])
      }
      for (const name of ["mid", "zeta", "alpha"]) yield* rewind(name, 2)
      const { fired } = yield* store.tickSchedules
      assert.deepStrictEqual(fired.map((f) => f.schedule), ["alpha", "mid", "zeta"])
      const ids = fired.map((f) => Number(f.runId))
      assert.deepStrictEqual(ids, [...ids].sort((a, b) => a - b), "ids drawn in firing order")
    }))

  it.live("registering the same schedule from two workers yields one; a changed payload keeps the next tick, a changed cron counts from now", () =>
    Effect.gen(function*() {
      const { schema, sql, store } = yield* pgStore
      // Keys out of order: jsonb hands them back sorted, and the same definition is still the same.
      const definition = { name: "sync", cron: "0 * * * *", kind: "job", payload: { v: 1, a: { z: 1, b: 2 } } }
      const [a, b] = yield* Effect.all([store.registerSchedules([definition]), store.registerSchedules([definition])], {
        concurrency: 2
      })
      assert.deepStrictEqual([a![0]!.outcome, b![0]!.outcome].sort(), ["created", "unchanged"])
      assert.deepStrictEqual((yield* store.registerSchedules([definition]))[0]!.outcome, "unchanged")
      const [before] = yield* store.schedules
      assert.strictEqual(before!.nextTick.getUTCMinutes(), 0)
      assert.deepStrictEqual(
        (yield* store.registerSchedules([{ ...definition, payload: { v: 2 } }]))[0]!.outcome,
        "updated"
      )
      const [payloadChanged] = yield* store.schedules
      assert.strictEqual(payloadChanged!.nextTick.getTime(), before!.nextTick.getTime())
      assert.deepStrictEqual(payloadChanged!.payload, { v: 2 })
      yield* store.registerSchedules([{ ...definition, cron: "30 * * * *", payload: { v: 2 } }])
      const [retimed] = yield* store.schedules
      assert.strictEqual(retimed!.nextTick.getUTCMinutes(), 30)
      const [{ n }] = (yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".schedules`)) as any
      assert.strictEqual(n, 1)
    }))

  it.live("bad definitions write nothing, not even the good ones beside them; unknown schedules are ScheduleNotFound", () =>
    Effect.gen(function*() {
      const { schema, sql, store } = yield* pgStore
      const error = yield* Effect.flip(store.registerSchedules([
        { name: "good", cron: "* * * * *", kind: "job" },
        { name: "bad", cron: "* * * * *", timeZone: "Nowhere/Atlantis", kind: "job" }
      ]))
      assert.deepInclude(error, { _tag: "InvalidConfig", option: "timeZone" })
      const rows = yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".schedules`)
      assert.strictEqual(rows[0]!.n, 0)
      assert.deepInclude(yield* Effect.flip(store.pauseSchedule("nope")), { _tag: "ScheduleNotFound", name: "nope" })
    }))

  it.live("a paused schedule fires nothing however late it is; resumed, its next tick is the first after now (ticks while paused are not missed)", () =>
    Effect.gen(function*() {
      const { rewind, runsOf, store } = yield* pgStore
      yield* store.registerSchedules([{ name: "p", cron: "* * * * *", kind: "job", missed: "all" }])
      assert.isTrue(yield* store.pauseSchedule("p"))
      assert.isFalse(yield* store.pauseSchedule("p"))
      yield* rewind("p", 5)
      assert.deepStrictEqual((yield* store.tickSchedules).fired, [])
      assert.isTrue(yield* store.resumeSchedule("p"))
      const [resumed] = yield* store.schedules
      assert.isFalse(resumed!.paused)
      assert.isAbove(resumed!.nextTick.getTime(), Date.now() - 1_000)
      assert.deepStrictEqual((yield* store.tickSchedules).fired, [])
      assert.strictEqual((yield* runsOf("p")).length, 0)
    }))

  it.live("two workers ticking a per-second schedule together run every tick once", () =>
    Effect.gen(function*() {
      const { runsOf, sql, store } = yield* pgStore
      const seen: Array<string> = []
      const handler = Handler.make({
        kind: "tick-job",
        payload: Schema.Struct({ tick: Schema.Struct({ at: Schema.String }) }),
        handle: (payload) => Effect.sync(() => void seen.push(payload.tick.at))
      })
      const schedule = { name: "fast", cron: "* * * * * *", kind: "tick-job" }
      yield* startWorker(store, sql, {
        handlers: [handler],
        schedules: [schedule],
        owner: "a",
        pollInterval: "200 millis"
      })
      yield* startWorker(store, sql, {
        handlers: [handler],
        schedules: [schedule],
        owner: "b",
        pollInterval: "200 millis"
      })
      yield* eventually("four ticks handled", Effect.sync(() => seen.length >= 4), "15 seconds")
      const runs = yield* runsOf("fast")
      const ticks = runs.map((r) => r.tick)
      assert.strictEqual(new Set(ticks).size, ticks.length, `a tick ran twice: ${ticks}`)
      // Consecutive seconds, none skipped while both workers were up.
      const seconds = ticks.map((t) => Date.parse(t) / 1000)
      for (let i = 1; i < seconds.length; i++) assert.strictEqual(seconds[i]! - seconds[i - 1]!, 1, ticks.join(", "))
      assert.strictEqual(new Set(seen).size, seen.length)
    }), { timeout: 30_000 })
})
