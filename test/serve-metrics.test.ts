/**
 * `/metrics` of the admin server (what `leasehold serve` answers): the store's live runs by state
 * and queue, due runs and the oldest one's wait, live leases and paused queues, as Prometheus
 * gauges that agree with the database; read from partial indexes only, however many ended runs
 * the table keeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { KeyLimits } from "@leasehold/core"
import { StoreSchema } from "@leasehold/sql"
import { Duration, Effect } from "effect"
import { liveRuns } from "../packages/sql/dist/internal/statements/sample.js"
import { setLeaseExpirySql } from "./support/db.js"
import { request, startServer } from "./support/http.js"
import { type Stores, twoStores } from "./support/stores.js"

const token = "admin-token-for-tests-0123456789"

const serve = (stores: Stores) => Effect.map(startServer(stores, { token }), (server) => server.origin)

/** `name{labels} value` lines of a scrape, by series. */
const series = (text: string): Map<string, number> =>
  new Map(
    text.split("\n").filter((l) => l !== "" && !l.startsWith("#")).map((l) => {
      const at = l.lastIndexOf(" ")
      return [l.slice(0, at), Number(l.slice(at + 1))] as const
    })
  )

const claim = (stores: Stores, queue: string, limit: number) =>
  stores.a.claim({ owner: "w", queues: [queue], kinds: ["k"], limit, ttl: Duration.minutes(5) })

describe("serve /metrics", () => {
  it.live("exports the store's live runs by state and queue, due runs, the oldest due run's wait, live leases and paused queues, agreeing with the database", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { a, sql, schema } = stores
      const runs = `"${schema}".runs`
      // Queue a: two due runs (the older waiting 90 s), one due in an hour, and a key limit of 1
      // with two runs of one key: one admitted (due), one waiting for the slot.
      yield* a.setKeyLimits([KeyLimits.perQueue("a", 1)])
      const [old] = yield* a.enqueue([{ kind: "k", payload: {}, queue: "a" }])
      yield* sql.unsafe(`UPDATE ${runs} SET run_at = now() - interval '90 seconds' WHERE id = ${Number(old!.id)}`)
      yield* a.enqueue([
        { kind: "k", payload: {}, queue: "a" },
        { kind: "k", payload: {}, queue: "a", delayMs: 3_600_000 },
        { kind: "k", payload: {}, queue: "a", concurrencyKey: "x" },
        { kind: "k", payload: {}, queue: "a", concurrencyKey: "x" }
      ])
      // Queue b: two running (one lease expired), one suspended, three completed, one failed.
      yield* a.enqueue(Array.from({ length: 7 }, () => ({ kind: "k", payload: {}, queue: "b", maxAttempts: 1 })))
      const held = yield* claim(stores, "b", 7)
      assert.strictEqual(held.length, 7)
      yield* sql.unsafe(setLeaseExpirySql(schema, held[1]!.id, "now() - interval '1 second'"))
      yield* a.suspend({
        runId: held[2]!.id,
        fence: held[2]!.fence,
        signal: "approval",
        token: "t-1",
        timeout: undefined
      })
      yield* a.completeBatch(held.slice(3, 6).map((r) => ({ runId: r.id, fence: r.fence, result: null })))
      yield* a.fail({ runId: held[6]!.id, fence: held[6]!.fence, error: { message: "no" }, retryDelayMs: undefined })
      yield* a.pauseQueue("c")

      const origin = yield* serve(stores)
      const scrape = yield* request(`${origin}/metrics`, { headers: { authorization: `Bearer ${token}` } })
      assert.strictEqual(scrape.status, 200)
      assert.match(scrape.headers.get("content-type")!, /^text\/plain; version=0\.0\.4/)
      const got = series(scrape.body as string)

      // What was built, as the gauges must say it.
      assert.strictEqual(got.get(`leasehold_queue_runs{queue="a",state="pending"}`), 5)
      assert.strictEqual(got.get(`leasehold_queue_runs{queue="b",state="running"}`), 2)
      assert.strictEqual(got.get(`leasehold_queue_runs{queue="b",state="suspended"}`), 1)
      assert.strictEqual(got.get(`leasehold_queue_due_runs{queue="a"}`), 3)
      assert.strictEqual(got.get("leasehold_live_leases"), 1)
      assert.strictEqual(got.get(`leasehold_queue_paused{queue="c"}`), 1)
      const oldest = got.get(`leasehold_queue_oldest_due_seconds{queue="a"}`)!
      assert.isAtLeast(oldest, 90)
      assert.isBelow(oldest, 120)
      assert.strictEqual(got.get("leasehold_oldest_due_seconds"), oldest)
      assert.isFalse(
        [...got.keys()].some((k) => /state="(completed|failed|cancelled)"/.test(k)),
        "ended runs are not sampled"
      )

      // And the database, read directly (the whole table, as a check may).
      const counts = yield* sql.unsafe<{ queue: string; state: string; n: number }>(
        `SELECT queue, state, count(*)::int AS n FROM ${runs}_now WHERE state IN ('pending', 'running', 'suspended') GROUP BY queue, state`
      )
      const runSeries = [...got.entries()].filter(([k]) => k.startsWith("leasehold_queue_runs{"))
      assert.strictEqual(runSeries.length, counts.length)
      for (const row of counts) {
        assert.strictEqual(got.get(`leasehold_queue_runs{queue="${row.queue}",state="${row.state}"}`), row.n)
      }
      const [live] = yield* sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${runs}_now WHERE state = 'running' AND lease_expires_at > now()`
      )
      assert.strictEqual(got.get("leasehold_live_leases"), live!.n)
    }))

  it.live("once a queue's runs have ended, its series are gone and the totals read 0: nothing stale", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* stores.a.enqueue([{ kind: "k", payload: {}, queue: "a" }, { kind: "k", payload: {}, queue: "a" }])
      const held = yield* claim(stores, "a", 1)
      const origin = yield* serve(stores)
      const scrape = Effect.map(
        request(`${origin}/metrics`, { headers: { authorization: `Bearer ${token}` } }),
        (response) => series(response.body as string)
      )
      const before = yield* scrape
      assert.strictEqual(before.get(`leasehold_queue_runs{queue="a",state="running"}`), 1)
      assert.strictEqual(before.get(`leasehold_queue_runs{queue="a",state="pending"}`), 1)
      yield* stores.a.completeBatch(held.map((r) => ({ runId: r.id, fence: r.fence, result: null })))
      const rest = yield* claim(stores, "a", 1)
      yield* stores.a.completeBatch(rest.map((r) => ({ runId: r.id, fence: r.fence, result: null })))
      const after = yield* scrape
      const sampled = [...after.entries()].filter(([name]) =>
        /^leasehold_(queue_runs|queue_due_runs|queue_oldest_due_seconds)\{/.test(name)
      )
      assert.deepStrictEqual(sampled, [], "no series for a queue with no live run")
      assert.strictEqual(after.get("leasehold_oldest_due_seconds"), 0)
      assert.strictEqual(after.get("leasehold_live_leases"), 0)
    }))

  it.live("exports the history the store keeps: its runs and bytes as the catalog estimates them, and the oldest range's age, which grows as it is kept", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { a, sql, schema } = stores
      yield* a.enqueue(Array.from({ length: 500 }, () => ({ kind: "k", payload: {}, queue: "h" })))
      yield* sql.unsafe(`ANALYZE "${schema}".runs`)
      // The oldest range kept was made an hour ago.
      yield* sql.unsafe(
        `UPDATE "${schema}".history_ranges SET created_at = now() - interval '1 hour'
         WHERE tbl = 'runs' AND lo = (SELECT min(lo) FROM "${schema}".history_ranges WHERE tbl = 'runs' AND lo < hi)`
      )
      const origin = yield* serve(stores)
      const scrape = yield* request(`${origin}/metrics`, { headers: { authorization: `Bearer ${token}` } })
      const got = series(scrape.body as string)
      const [catalog] = yield* sql.unsafe<{ runs: number; bytes: number }>(
        `SELECT sum(greatest(c.reltuples, 0))::int AS runs, sum(pg_total_relation_size(c.oid))::float8 AS bytes
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '"${schema}".runs'::regclass`
      )
      assert.strictEqual(got.get("leasehold_history_runs"), 500)
      assert.strictEqual(got.get("leasehold_history_runs"), catalog!.runs)
      assert.strictEqual(got.get("leasehold_history_bytes"), catalog!.bytes)
      const age = got.get("leasehold_history_oldest_kept_seconds")!
      assert.isTrue(age >= 3_600 && age < 3_700, `oldest kept ${age} s`)
      // The same through the API the console reads.
      const history = yield* request(`${origin}/api/history`, { headers: { authorization: `Bearer ${token}` } })
      assert.strictEqual(history.status, 200)
      const body = history.body as { runs: number; oldestKeptAt: string; ranges: ReadonlyArray<{ table: string }> }
      assert.strictEqual(body.runs, 500)
      assert.isTrue(body.ranges.some((r) => r.table === "runs"))
      assert.isTrue(Date.now() - Date.parse(body.oldestKeptAt) >= 3_600_000)
    }))

  it.live("the sample reads only partial indexes on a table of 30,000 ended runs (no sequential scan)", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue([{ kind: "k", payload: {}, queue: "a" }])
      yield* sql.unsafe(
        `INSERT INTO "${schema}".runs (queue, kind, state, finished_at) SELECT 'a', 'k', 'completed', now() FROM generate_series(1, 30000)`
      )
      yield* sql.unsafe(`ANALYZE "${schema}".runs`)
      const [text, params] = liveRuns(sql, StoreSchema.make(schema)).compile()
      const plan = yield* sql.withTransaction(Effect.andThen(
        sql`SET LOCAL enable_seqscan = off`,
        sql.unsafe<{ "QUERY PLAN": string }>(`EXPLAIN ${text}`, params as Array<unknown>)
      ))
      const lines = plan.map((r) => r["QUERY PLAN"]).join("\n")
      assert.notMatch(lines, /Seq Scan/, lines)
      // A partition's index is named after its partition (ADR 0028): each is read as the index of
      // the table it belongs to.
      const used = new Set(
        (yield* sql.unsafe<{ root: string }>(
          `SELECT DISTINCT coalesce(pg_partition_root(format('%I.%I', $1::text, name)::regclass), format('%I.%I', $1::text, name)::regclass)::text AS root
           FROM unnest($2::text[]) AS name`,
          [schema, [...lines.matchAll(/(?:using|Bitmap Index Scan on) (\w+)/g)].map((m) => m[1]!)]
        )).map((r) => r.root.replace(/^.*\./, ""))
      )
      for (
        const index of ["ready_due", "runs_waiting_kind", "runs_waiting_queue", "runs_running", "claim_batches_open"]
      ) {
        assert.isTrue(used.has(index), `${index} not in ${[...used].join(", ")}\n${lines}`)
      }
      // Suspended runs: either partial index that holds them only (runs_listed, runs_by_signal_token).
      assert.isTrue(used.has("runs_listed") || used.has("runs_by_signal_token"), lines)
    }))
})
