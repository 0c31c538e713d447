/**
 * Issue 13's schedule process test: three `leasehold worker` processes (one with its wall clock
 * five minutes ahead, by Debian's faketime) tick a schedule that fires every second, with
 * `missed: all`. Partway through the schedule is paused and resumed, one worker is killed and
 * started again, and then every worker is down for a few seconds. Afterwards, in the database:
 * every tick outside the pause has exactly one run, the ticks of the outage were fired late as
 * backfilled runs, and no tick inside the pause fired.
 */
import { assert, describe, it } from "@effect/vitest"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { ChildProcess } from "node:child_process"
import { background, connection, leasehold } from "./support/cli.js"
import { freshSchema, layerStore } from "./support/db.js"
import { eventually } from "./support/workers.js"

describe("schedule ticks across worker processes", () => {
  it.live(
    "restarts, a pause, an outage and a skewed clock: every tick has exactly one run, missed ticks are backfilled, none fires while paused",
    () =>
      Effect.gen(function*() {
        const schema = freshSchema("schedproc")
        const context = yield* Layer.build(layerStore(schema, 2))
        const sql = Context.get(context, SqlClient.SqlClient)
        const dbNow = Effect.map(sql<{ now: Date }>`SELECT clock_timestamp() AS now`, (rows) => new Date(rows[0]!.now))
        const set = yield* leasehold([
          "schedules",
          "set",
          "every-second",
          "--cron",
          "* * * * * *",
          "--kind",
          "resize-image",
          "--payload",
          "{\"image\":\"a.png\",\"width\":10}",
          "--missed",
          "all",
          "--max-backfill",
          "100",
          ...connection(schema)
        ])
        assert.strictEqual(set.code, 0, set.stderr)
        const worker = (skew?: string) =>
          background(
            ["worker", "--concurrency", "4", ...connection(schema)],
            skew === undefined ? {} : { env: WorkerProcess.skewedClock(skew) }
          )
        const stop = (w: { child: ChildProcess; exited: Promise<unknown> }) =>
          Effect.promise(() => (w.child.kill("SIGKILL"), w.exited))

        const ticks = Effect.map(
          sql.unsafe<{ at: string }>(`SELECT payload->'tick'->>'at' AS at FROM "${schema}".runs`),
          (rows) => rows.map((r) => Date.parse(r.at))
        )
        // Waits (on the real clock) until a tick at or after `since` has its run.
        const tickedSince = (what: string, since: Date) =>
          eventually(what, Effect.map(ticks, (all) => all.some((t) => t >= since.getTime())), "20 seconds")

        const a = yield* worker()
        let b = yield* worker()
        const c = yield* worker("+5m")
        const startedAt = yield* dbNow
        yield* tickedSince("the first ticks", new Date(startedAt.getTime() + 2_000))

        // Paused for about three seconds: those ticks never fire.
        assert.strictEqual((yield* leasehold(["schedules", "pause", "every-second", ...connection(schema)])).code, 0)
        const pausedAt = yield* dbNow
        yield* Effect.sleep("3 seconds")
        assert.strictEqual((yield* leasehold(["schedules", "resume", "every-second", ...connection(schema)])).code, 0)
        const resumedAt = yield* dbNow
        yield* tickedSince("ticks after the resume", resumedAt)

        // One worker killed and started again.
        yield* Effect.sleep("2 seconds")
        yield* stop(b)
        yield* Effect.sleep("1500 millis")
        b = yield* worker()
        yield* Effect.sleep("2 seconds")

        // Every worker down for a while: the ticks of the outage are missed, then backfilled.
        yield* stop(a)
        yield* stop(b)
        yield* stop(c)
        const downAt = yield* dbNow
        yield* Effect.sleep("3500 millis")
        const upAt = yield* dbNow
        const d = yield* worker()
        yield* tickedSince("ticks after the outage", new Date(upAt.getTime() + 1_000))
        yield* stop(d)
        const endAt = yield* dbNow

        const rows = yield* sql.unsafe<{ at: string; backfilled: boolean; n: number }>(
          `SELECT payload->'tick'->>'at' AS at, bool_or((payload->'tick'->>'backfilled')::boolean) AS backfilled, count(*)::int AS n
           FROM "${schema}".runs GROUP BY 1 ORDER BY 1`
        )
        const seconds = rows.map((r) => Date.parse(r.at) / 1000)
        for (const row of rows) assert.strictEqual(row.n, 1, `tick ${row.at} has ${row.n} runs`)

        // From the first tick to the last: every second has its run, except inside the pause (a
        // tick due just before the pause committed may have been left unfired: it then never fires).
        const first = seconds[0]!
        const last = seconds.at(-1)!
        assert.isAtLeast(last, Math.floor(endAt.getTime() / 1000) - 2, "ticks fired up to the end")
        const fired = new Set(seconds)
        const pauseFrom = Math.floor(pausedAt.getTime() / 1000) - 1
        const pauseTo = Math.floor(resumedAt.getTime() / 1000)
        const gaps: Array<number> = []
        for (let s = first; s <= last; s++) if (!fired.has(s)) gaps.push(s)
        for (const gap of gaps) {
          assert.isTrue(gap >= pauseFrom && gap <= pauseTo, `tick ${new Date(gap * 1000).toISOString()} has no run`)
        }
        for (const s of seconds) {
          assert.isFalse(
            s > pauseFrom + 1 && s <= pauseTo - 1,
            `tick ${new Date(s * 1000).toISOString()} fired while paused`
          )
        }
        assert.isAtLeast(
          gaps.length,
          2,
          `the pause left ticks unfired: ${JSON.stringify({ pausedAt, resumedAt, rows })}`
        )

        // The outage: its ticks fired late, as backfilled runs; the ticks around it on time.
        const outage = rows.filter((r) => {
          const s = Date.parse(r.at)
          return s > downAt.getTime() + 1_000 && s < upAt.getTime() - 1_000
        })
        const story = JSON.stringify({ pausedAt, resumedAt, downAt, upAt, endAt, rows })
        assert.isAtLeast(outage.length, 1, `ticks fell inside the outage: ${story}`)
        // Fired late, by the first worker back: backfilled (the last of them may be that worker's
        // current tick when it came back within the second the outage ended).
        assert.isTrue(
          outage.slice(0, -1).every((r) => r.backfilled),
          story
        )
        assert.isTrue(outage[0]!.backfilled, story)
        // Before the pause, from the first tick fired on time (the workers' start may have missed a few).
        const firstOnTime = rows.findIndex((r) => !r.backfilled)
        const onTime = rows.slice(firstOnTime).filter((r) => Date.parse(r.at) < pausedAt.getTime() - 1_000)
        assert.isAtLeast(onTime.length, 1, story)
        assert.isTrue(onTime.every((r) => !r.backfilled), story)
      }),
    { timeout: 60_000 }
  )
})
