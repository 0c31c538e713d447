/**
 * The worker runtime's statements keep index-driven plans. They are planned once per runtime
 * connection (generic plans), so a plan made while the table was small must still be right once it
 * holds a backlog: no statement of the runtime may scan `runs` sequentially. Read from the
 * server's own counters (pg_stat_user_tables), not from timings.
 */
import { assert, describe, it } from "@effect/vitest"
import { RunStore } from "@leasehold/core"
import { Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, storeLayer } from "./support/db.js"
import { eventually } from "./support/workers.js"

const scans = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.map(
    sql<{ seq: string; idx: string }>`
      SELECT seq_scan::text AS seq, coalesce(idx_scan, 0)::text AS idx
      FROM pg_stat_user_tables WHERE schemaname = ${schema} AND relname = 'runs'`,
    (rows) => ({ seq: Number(rows[0]!.seq), idx: Number(rows[0]!.idx) })
  )

describe("runtime plans", () => {
  it.live("claims, renewals and completions planned on a small store never scan runs sequentially once it holds a backlog", () =>
    Effect.gen(function*() {
      const schema = freshSchema("plans")
      const context = yield* Layer.build(storeLayer(schema, 2))
      const store = Context.get(context, RunStore)
      const sql = Context.get(context, SqlClient.SqlClient)
      const request = { owner: "w", queues: ["default"], kinds: ["noop"], limit: 200, ttl: Duration.seconds(30) }

      // Plans made while the store is small: a few hundred runs, a handful of pages (each runtime
      // connection keeps its own plans, so every connection gets to make them).
      yield* store.enqueue(Array.from({ length: 600 }, (_, i) => ({ kind: "noop", payload: { i } })))
      for (let i = 0; i < 3; i++) {
        yield* Effect.all([
          store.claim({ ...request, limit: 100 }),
          store.claim({ ...request, limit: 100 })
        ], { concurrency: 2 }).pipe(
          Effect.flatMap(([x, y]) => {
            const leases = [...x, ...y].map((r) => ({ runId: r.id, fence: r.fence }))
            return Effect.andThen(
              store.renew("w", leases, Duration.seconds(30)),
              store.completeBatch(leases.map((l) => ({ ...l, result: null })))
            )
          })
        )
      }
      // Then a backlog arrives, and no ANALYZE follows (nothing replans).
      yield* store.enqueue(Array.from({ length: 20_000 }, (_, i) => ({ kind: "noop", payload: { i } })))
      yield* sql`SELECT pg_stat_force_next_flush()`
      const before = yield* eventually("counters readable", Effect.map(scans(sql, schema), (s) => s.idx >= 0 ? s : undefined))

      let claimed = 0
      for (let round = 0; round < 10; round++) {
        // Both claims the worker sends: the sweep and the due-only one.
        const runs = yield* store.claim({ ...request, dueOnly: round % 2 === 1 })
        claimed += runs.length
        const leases = runs.map((r) => ({ runId: r.id, fence: r.fence }))
        const renewed = yield* store.renew("w", leases, Duration.seconds(30))
        assert.strictEqual(renewed.length, runs.length)
        // Both completion shapes: with results, and without any (no results array is sent).
        const outcomes = yield* store.completeBatch(leases.map((l) => ({ ...l, result: round % 2 === 0 ? JSON.stringify({ ok: true }) : null })))
        assert.isTrue(outcomes.every((o) => o._tag === "Finalized"))
      }
      assert.strictEqual(claimed, 2_000)

      // Each backend publishes its counters when it goes idle (within about a second): wait until
      // the index scans of those 30 statements show, so that an unchanged seq_scan means something.
      const after = yield* eventually(
        "the runtime's index scans counted",
        Effect.andThen(sql`SELECT pg_stat_clear_snapshot()`, Effect.map(scans(sql, schema), (s) => s.idx >= before.idx + 30 ? s : undefined))
      )
      assert.strictEqual(after.seq - before.seq, 0, "a runtime statement scanned runs sequentially")
    }))
})
