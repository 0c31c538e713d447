/**
 * Issue 33's rate-limit process test: three `leasehold worker` processes drain runs of a kind that
 * allows 5 starts per second per tenant (three tenants, 30 runs each, enqueued first, so they are
 * at the head of the claim order), beside 300 runs of a kind no limit governs. The database's
 * record of every claim (the claim times `run_history` keeps) must show no window of one second
 * with more than 5 starts of a tenant, while the unlimited runs drain meanwhile instead of waiting
 * behind the held-back ones. And a worker that polls once an hour starts each held-back run as its
 * window opens (the claim's wake, RateWakes), not at its next poll.
 */
import { assert, describe, it } from "@effect/vitest"
import { Handler, RateLimits, RunStore, Worker } from "@leasehold/core"
import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { fileURLToPath } from "node:url"
import { background, connection } from "./support/cli.js"
import { freshSchema, layerStore } from "./support/db.js"
import { eventually } from "./support/workers.js"

const tasks = fileURLToPath(new URL("./fixtures/rated-tasks.ts", import.meta.url))
const tenants = ["tenant-a", "tenant-b", "tenant-c"]
const perTenant = 30
const limit = 5
const free = 300

describe("rate limits across worker processes", () => {
  it.live(
    "3 workers, 5 starts per second per tenant over 3 tenants × 30 runs, beside 300 unlimited runs: no second of a tenant sees more than 5 starts, and the unlimited runs drain meanwhile",
    () =>
      Effect.gen(function*() {
        const schema = freshSchema("rateproc")
        const context = yield* Layer.build(layerStore(schema, 4))
        const sql = Context.get(context, SqlClient.SqlClient)
        const store = Context.get(context, RunStore)
        yield* store.setRateLimits([RateLimits.perKind("rated-step", limit, "1 second", { perKey: true })])
        yield* store.enqueue(tenants.flatMap((tenant) =>
          Array.from(
            { length: perTenant },
            (_, n) => ({ kind: "rated-step", payload: { tenant, n }, concurrencyKey: tenant })
          )
        ))
        yield* store.enqueue(Array.from({ length: free }, (_, n) => ({ kind: "free-step", payload: { n } })))
        const worker = () =>
          background(["worker", "--tasks", tasks, "--concurrency", "20", "--ttl", "10 seconds", ...connection(schema)])
        const workers = [yield* worker(), yield* worker(), yield* worker()]
        const completed = (kind: string) =>
          Effect.map(
            sql<{ n: number }>`SELECT count(*)::int AS n FROM ${
              sql.literal(`"${schema}".runs_now`)
            } WHERE state = 'completed' AND kind = ${kind}`,
            (rows) => rows[0]!.n
          )
        yield* eventually(
          "every run completes",
          Effect.map(
            Effect.all([completed("rated-step"), completed("free-step")]),
            ([r, f]) => r === tenants.length * perTenant && f === free
          ),
          "90 seconds"
        )
        for (const w of workers) w.child.kill("SIGTERM")
        yield* Effect.promise(() => Promise.all(workers.map((w) => w.exited)))

        // Every claim of a governed run, at the time the database recorded it.
        const starts = yield* sql<{ tenant: string; at: Date }>`
          SELECT r.concurrency_key AS tenant, h.at FROM ${sql.literal(`"${schema}".run_history`)} h
          JOIN ${sql.literal(`"${schema}".runs`)} r ON r.id = h.run_id
          WHERE h.kind = 'claimed' AND r.kind = 'rated-step' ORDER BY h.at`
        assert.strictEqual(starts.length, tenants.length * perTenant, "each governed run started once")
        for (const tenant of tenants) {
          const times = starts.filter((s) => s.tenant === tenant).map((s) => s.at.getTime())
          // The busiest window of one second opens at some start: count from each.
          const busiest = Math.max(...times.map((t) => times.filter((u) => u >= t && u < t + 1000).length))
          assert.isAtMost(busiest, limit, `${tenant}: ${busiest} starts within one second`)
          assert.strictEqual(busiest, limit, `${tenant}: the limit was used, not just respected`)
          assert.isAtLeast(
            times[times.length - 1]! - times[0]!,
            5000,
            `${tenant}: 30 starts at 5 a second span at least 5 seconds`
          )
        }
        // The unlimited runs did not wait behind the held-back ones: most of them were done before
        // the last governed run started (they are claimed between the governed runs' windows).
        const [drained] = yield* sql<{ before: number; last_rated: Date }>`
          WITH last AS (
            SELECT max(h.at) AS at FROM ${sql.literal(`"${schema}".run_history`)} h JOIN ${
          sql.literal(`"${schema}".runs`)
        } r ON r.id = h.run_id
            WHERE h.kind = 'claimed' AND r.kind = 'rated-step'
          )
          SELECT (SELECT count(*)::int FROM ${
          sql.literal(`"${schema}".runs_now`)
        } WHERE kind = 'free-step' AND finished_at < last.at) AS before,
            last.at AS last_rated
          FROM last`
        assert.isAtLeast(
          drained!.before,
          free / 2,
          `${drained!.before} of ${free} unlimited runs finished before the last governed start`
        )
        // Nothing updated a row per start: the starts are appended, at most a window's worth kept.
        const [kept] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${
          sql.literal(`"${schema}".rate_starts`)
        }`
        assert.isAtMost(kept!.n, tenants.length * perTenant)
      }),
    150_000
  )
})

describe("rate limits: the wake as a window opens", () => {
  it.live("a worker polling once an hour starts each run its window held back once the window opens, by the database's clock", () =>
    Effect.gen(function*() {
      const schema = freshSchema("ratewake")
      const context = yield* Layer.build(layerStore(schema, 4))
      const store = Context.get(context, RunStore)
      const sql = Context.get(context, SqlClient.SqlClient)
      yield* store.setRateLimits([RateLimits.perKind("job", 1, "1 second")])
      const runs = yield* store.enqueue(Array.from({ length: 3 }, (_, n) => ({ kind: "job", payload: { n } })))
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      // The poll would start the held-back runs an hour later: only the wake starts them sooner.
      yield* Worker.run({
        ttl: "30 seconds",
        heartbeat: "10 seconds",
        pollInterval: "1 hour",
        shutdownGrace: "1 second",
        concurrency: 5,
        handlers: [job]
      }).pipe(
        Effect.provide(context),
        Effect.forkScoped
      )
      yield* eventually(
        "every run completes",
        Effect.map(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM ${
            sql.literal(`"${schema}".runs_now`)
          } WHERE state = 'completed'`,
          (rows) => rows[0]!.n === runs.length
        ),
        "60 seconds"
      )
      // The database's claim times: one start per second, the window respected.
      const starts = yield* sql<{ at: Date }>`
        SELECT h.at FROM ${sql.literal(`"${schema}".run_history`)} h WHERE h.kind = 'claimed' ORDER BY h.at`
      const times = starts.map((s) => s.at.getTime())
      assert.strictEqual(times.length, runs.length)
      for (let i = 1; i < times.length; i++) {
        assert.isAtLeast(times[i]! - times[i - 1]!, 1000, `start ${i} came a second after the one before`)
      }
    }))
})
