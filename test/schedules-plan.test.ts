/**
 * Schedules without a database: the tick plan (pure, on fixed instants: skip/once/all, the
 * backfill window, time zones, bad definitions) and the memory store's schedules under TestClock.
 * `schedules.test.ts` runs them against PostgreSQL.
 */
import { assert, describe, it } from "@effect/vitest"
import { MemoryRunStore, Schedules } from "@leasehold/core"
import { ScheduleStorage } from "@leasehold/core/store"
import { Effect, Exit } from "effect"
import { TestClock } from "effect/testing"

const valueOf = <A>(exit: Exit.Exit<A, unknown>): A => {
  if (Exit.isSuccess(exit)) return exit.value
  throw new Error(`not a valid definition: ${String(exit.cause)}`)
}
const everyMinute = (extra: Partial<Schedules.ScheduleDefinition> = {}): Schedules.CheckedSchedule =>
  valueOf(Schedules.check({ name: "m", cron: "* * * * *", kind: "job", ...extra }))
const at = (iso: string) => new Date(iso)
const fired = (plan: ScheduleStorage.TickPlan) =>
  plan.fire.map((f) => `${f.tick.toISOString().slice(11, 16)}${f.backfilled ? " backfilled" : ""}`)

describe("ScheduleStorage.plan: which ticks fire", () => {
  it("on time: the due tick fires, not backfilled; the next is the first after now", () => {
    const plan = ScheduleStorage.plan(everyMinute(), at("2026-01-01T12:01:00Z"), at("2026-01-01T12:01:00.500Z"))
    assert.deepStrictEqual(fired(plan), ["12:01"])
    assert.strictEqual(plan.lastTick.toISOString(), "2026-01-01T12:01:00.000Z")
    assert.strictEqual(plan.nextTick.toISOString(), "2026-01-01T12:02:00.000Z")
  })

  it("after an outage: skip fires the latest tick only, once adds one backfilled run, all adds the latest maxBackfill", () => {
    const outage = (missed: Schedules.MissedTicks, maxBackfill?: number) =>
      fired(
        ScheduleStorage.plan(
          everyMinute({ missed, maxBackfill }),
          at("2026-01-01T12:01:00Z"),
          at("2026-01-01T12:05:30Z")
        )
      )
    assert.deepStrictEqual(outage("skip"), ["12:05"])
    assert.deepStrictEqual(outage("once"), ["12:04 backfilled", "12:05"])
    assert.deepStrictEqual(outage("all", 3), ["12:02 backfilled", "12:03 backfilled", "12:04 backfilled", "12:05"])
    assert.deepStrictEqual(outage("all", 10), [
      "12:01 backfilled",
      "12:02 backfilled",
      "12:03 backfilled",
      "12:04 backfilled",
      "12:05"
    ])
  })

  it("missed ticks older than the backfill window never fire; an outage of years walks only maxBackfill ticks", () => {
    const windowed = ScheduleStorage.plan(
      everyMinute({ missed: "all", backfillWindow: "150 seconds" }),
      at("2026-01-01T12:01:00Z"),
      at("2026-01-01T12:05:30Z")
    )
    assert.deepStrictEqual(fired(windowed), ["12:03 backfilled", "12:04 backfilled", "12:05"])
    const years = ScheduleStorage.plan(
      everyMinute({ missed: "all", maxBackfill: 2, backfillWindow: "3650 days" }),
      at("2016-01-01T00:00:00Z"),
      at("2026-01-01T12:05:30Z")
    )
    assert.deepStrictEqual(fired(years), ["12:03 backfilled", "12:04 backfilled", "12:05"])
  })

  it("time zones: 09:00 in New York is 14:00 UTC in January and 13:00 UTC in July", () => {
    const nine = valueOf(Schedules.check({ name: "n", cron: "0 9 * * *", timeZone: "America/New_York", kind: "job" }))
    assert.strictEqual(
      Schedules.nextTickAfter(nine, at("2026-01-10T00:00:00Z")).toISOString(),
      "2026-01-10T14:00:00.000Z"
    )
    assert.strictEqual(
      Schedules.nextTickAfter(nine, at("2026-07-10T00:00:00Z")).toISOString(),
      "2026-07-10T13:00:00.000Z"
    )
  })

  it("bad definitions are InvalidConfig, naming the option", () => {
    const option = (definition: Schedules.ScheduleDefinition) => {
      const exit = Schedules.check(definition)
      assert.isTrue(Exit.isFailure(exit))
      return Exit.isFailure(exit) ? (exit.cause.reasons[0] as any).error.option : undefined
    }
    assert.strictEqual(option({ name: "x", cron: "61 * * * *", kind: "job" }), "cron")
    assert.strictEqual(option({ name: "x", cron: "not a cron", kind: "job" }), "cron")
    assert.strictEqual(option({ name: "x", cron: "* * * * *", timeZone: "Mars/Olympus", kind: "job" }), "timeZone")
    assert.strictEqual(option({ name: "x", cron: "* * * * *", kind: "job", maxBackfill: 0 }), "maxBackfill")
    assert.strictEqual(option({ name: "x", cron: "* * * * *", kind: "job", missed: "sometimes" as any }), "missed")
    assert.strictEqual(option({ name: "", cron: "* * * * *", kind: "job" }), "name")
    assert.strictEqual(option({ name: "x", cron: "* * * * *", kind: "job", payload: { tick: 1 } }), "payload")
    assert.strictEqual(
      option({ name: "x", cron: "0 0 30 2 *", kind: "job" }),
      "cron",
      "the 30th of February never comes"
    )
    assert.strictEqual(
      option({ name: "x", cron: "* * * * *", kind: "job", backfillWindow: "-1 seconds" as any }),
      "backfillWindow"
    )
    // A window in fractions of a millisecond is kept in whole milliseconds.
    assert.strictEqual(
      valueOf(Schedules.check({ name: "x", cron: "* * * * *", kind: "job", backfillWindow: "1500 micros" }))
        .backfillWindowMs,
      2
    )
    assert.deepStrictEqual(Schedules.upcoming(everyMinute(), at("2026-01-01T12:00:00Z"), 0), [])
  })
})

describe("schedules in the memory store (TestClock)", () => {
  it.effect("the same plan: one run per tick, missed ticks by policy, pauses", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      yield* TestClock.setTime(Date.parse("2026-01-01T12:00:30Z"))
      yield* store.registerSchedules([{ name: "m", cron: "* * * * *", kind: "job", missed: "once" }])
      assert.deepStrictEqual((yield* store.tickSchedules).fired, [])
      yield* TestClock.adjust("31 seconds")
      const onTime = yield* store.tickSchedules
      assert.deepStrictEqual(onTime.fired.map((f) => [f.tick.toISOString(), f.backfilled]), [[
        "2026-01-01T12:01:00.000Z",
        false
      ]])
      assert.strictEqual(onTime.nextInMs, 59_000)
      yield* TestClock.adjust("5 minutes")
      const late = yield* store.tickSchedules
      assert.deepStrictEqual(late.fired.map((f) => [f.tick.toISOString().slice(11, 16), f.backfilled]), [[
        "12:05",
        true
      ], ["12:06", false]])
      const run = yield* store.get(late.fired[1]!.runId)
      assert.deepStrictEqual(run.payload, {
        tick: { schedule: "m", at: "2026-01-01T12:06:00.000Z", backfilled: false }
      })
      assert.isTrue(yield* store.pauseSchedule("m"))
      yield* TestClock.adjust("10 minutes")
      assert.deepStrictEqual((yield* store.tickSchedules).fired, [])
      assert.isTrue(yield* store.resumeSchedule("m"))
      assert.strictEqual((yield* store.schedules)[0]!.nextTick.toISOString(), "2026-01-01T12:17:00.000Z")
    }))
})
