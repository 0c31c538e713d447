/**
 * The worker runtime's statements keep index-driven plans. They are planned once per runtime
 * connection (generic plans), so a plan made while the table was small must still be right once it
 * holds a backlog: no statement of the runtime may scan `runs` sequentially. Read from the
 * server's own counters (pg_stat_user_tables), not from timings.
 */
import { PgTypes } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { KeyLimits, type ListFilter, RunState, RunStore } from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Duration, Effect, Layer } from "effect"
import { SqlClient, Statement } from "effect/sql"
import * as History from "../bench/src/history.js"
import { databaseUrl, freshSchema, layerStore } from "./support/db.js"
import { eventually } from "./support/workers.js"

// `runs` is partitioned (ADR 0028): its counters are its partitions'. A sequential scan of an empty
// partition (the range below the first id, the default one past every range) reads no row, so
// what is counted is the rows sequential scans read.
const partitionsOf = (schema: string, table: string) =>
  `SELECT relid FROM pg_partition_tree(format('%I.%I', '${schema}', '${table}')::regclass) WHERE isleaf`

const scans = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.map(
    sql.unsafe<{ seq: string; idx: string }>(
      `SELECT coalesce(sum(seq_tup_read), 0)::text AS seq, coalesce(sum(idx_scan), 0)::text AS idx
       FROM pg_stat_user_tables WHERE relid IN (${partitionsOf(schema, "runs")})`
    ),
    (rows) => ({ seq: Number(rows[0]!.seq), idx: Number(rows[0]!.idx) })
  )

/** The history tables' partitions that hold nothing: a plan may scan those sequentially. */
const emptyPartitions = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.map(
    sql.unsafe<{ name: string }>(
      ["runs", "claim_batches", "completion_batches", "run_events"].map((table) =>
        `SELECT relid::regclass::text AS name, pg_relation_size(relid) AS size FROM pg_partition_tree(format('%I.%I', '${schema}', '${table}')::regclass) WHERE isleaf`
      ).map((q) => `SELECT name FROM (${q}) t WHERE size = 0`).join(" UNION ALL ")
    ),
    (rows) => new Set(rows.map((r) => r.name.replace(/^.*\./, "").replace(/"/g, "")))
  )

// A backend that reported its counters less than a second ago keeps new ones pending until it has
// been idle for 10 s (PostgreSQL 15+, PGSTAT_IDLE_INTERVAL): waiting on them needs more than that.
const statsFlush = "30 seconds"

describe("runtime plans", () => {
  it.live("claims, renewals and completions planned on a small store never scan runs sequentially once it holds a backlog", () =>
    Effect.gen(function*() {
      const { schema, sql, store } = yield* freshStore("plans")
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
      const before = yield* eventually(
        "counters readable",
        Effect.map(scans(sql, schema), (s) => s.idx >= 0 ? s : undefined)
      )

      let claimed = 0
      for (let round = 0; round < 10; round++) {
        // Both claims the worker sends: the sweep and the due-only one.
        const runs = yield* store.claim({ ...request, dueOnly: round % 2 === 1 })
        claimed += runs.length
        const leases = runs.map((r) => ({ runId: r.id, fence: r.fence }))
        const renewed = yield* store.renew("w", leases, Duration.seconds(30))
        assert.strictEqual(renewed.length, runs.length)
        // Both completion shapes: with results, and without any (no results array is sent).
        const outcomes = yield* store.completeBatch(
          leases.map((l) => ({ ...l, result: round % 2 === 0 ? JSON.stringify({ ok: true }) : null }))
        )
        assert.isTrue(outcomes.every((o) => o._tag === "Finalized"))
      }
      assert.strictEqual(claimed, 2_000)

      // Each backend publishes its counters when it goes idle (within about a second): wait until
      // the index scans of those 30 statements show, so that an unchanged seq_scan means something.
      const after = yield* eventually(
        "the runtime's index scans counted",
        Effect.andThen(
          sql`SELECT pg_stat_clear_snapshot()`,
          Effect.map(scans(sql, schema), (s) => s.idx >= before.idx + 30 ? s : undefined)
        ),
        statsFlush
      )
      assert.strictEqual(after.seq - before.seq, 0, "a runtime statement read runs sequentially")
    }))

  it.live("keyed enqueues, admissions, claims and hand-offs planned on a small store never scan runs sequentially once it holds a keyed backlog", () =>
    Effect.gen(function*() {
      const { schema, sql, store } = yield* freshStore("plans_keys")
      yield* store.setKeyLimits([KeyLimits.perKind("noop", 1), KeyLimits.perQueue("default", 2)])
      const request = { owner: "w", queues: ["default"], kinds: ["noop"], limit: 100, ttl: Duration.seconds(30) }
      const keyed = (count: number, keys: number) =>
        store.enqueue(
          Array.from({ length: count }, (_, i) => ({ kind: "noop", payload: { i }, concurrencyKey: `k${i % keys}` }))
        )
      const round = (dueOnly: boolean) =>
        Effect.gen(function*() {
          const runs = yield* store.claim({ ...request, dueOnly })
          const leases = runs.map((r) => ({ runId: r.id, fence: r.fence }))
          // Keyed completions hand their slots on in the same statement (admit.ts › handOff).
          yield* store.completeBatch(leases.map((l) => ({ ...l, result: null, keyed: true })))
          return runs
        })

      // Plans made small (the runtime keeps one generic plan per statement and connection).
      yield* keyed(600, 50)
      for (let i = 0; i < 8; i++) yield* Effect.all([round(i % 2 === 1), round(i % 2 === 0)], { concurrency: 2 })
      // A keyed backlog: 1,000 keys, and one key with 2,000 runs ahead of everything else. They
      // wait outside the due index, so they hold back nothing behind them, however many they are.
      yield* store.enqueue(
        Array.from({ length: 2_000 }, (_, i) => ({ kind: "noop", payload: { i }, concurrencyKey: "hot" }))
      )
      yield* keyed(20_000, 1_000)
      yield* sql`SELECT pg_stat_force_next_flush()`
      const before = yield* eventually(
        "counters readable",
        Effect.map(scans(sql, schema), (s) => s.idx >= 0 ? s : undefined)
      )

      let claimed = 0
      for (let i = 0; i < 10; i++) {
        const runs = yield* round(i % 2 === 1)
        claimed += runs.length
        // One run of a key at a time (the kind's limit of 1 is the tighter one).
        assert.strictEqual(new Set(runs.map((r) => r.concurrencyKey)).size, runs.length)
      }
      assert.strictEqual(claimed, 1_000, "each claim filled its batch, one run per key, past the hot key's runs")

      const after = yield* eventually(
        "the claims' index scans counted",
        Effect.andThen(
          sql`SELECT pg_stat_clear_snapshot()`,
          Effect.map(scans(sql, schema), (s) => s.idx >= before.idx + 10 ? s : undefined)
        ),
        statsFlush
      )
      assert.strictEqual(after.seq - before.seq, 0, "a keyed statement read runs sequentially")
    }))

  it.live("a sweep admits waiting runs past the first RunStorage.scanPastLimit keys: each sweep goes on where the last one stopped", () =>
    Effect.gen(function*() {
      const { schema, sql, store } = yield* freshStore("plans_cursor")
      yield* store.setKeyLimits([KeyLimits.perKind("noop", 1)])
      // As many full keys as a sweep reads, each with a run waiting, sorted before "z".
      const keys = Array.from({ length: RunStorage.scanPastLimit }, (_, i) => `a${String(i).padStart(5, "0")}`)
      yield* store.enqueue(
        keys.flatMap((key) => [0, 1].map((n) => ({ kind: "noop", payload: { n }, concurrencyKey: key })))
      )
      // z has room, and a run that became due while it waited (no hand-off, no enqueue admits it).
      const [late] = yield* store.enqueue([{ kind: "noop", payload: {}, concurrencyKey: "z", delayMs: 60_000 }])
      yield* sql`UPDATE ${sql(schema)}.runs SET run_at = now() - interval '1 second' WHERE id = ${late!.id}::bigint`
      // Two separate claims, as a worker sends them (the store keeps the cursor between them).
      const sweep = () =>
        store.claim({ owner: "w", queues: ["default"], kinds: ["noop"], limit: 1, ttl: Duration.seconds(30) })
      yield* sweep()
      assert.deepInclude(
        yield* store.get(late!.id),
        { waitingForKey: true },
        "the first sweep read the first 1,000 keys"
      )
      yield* sweep()
      assert.deepInclude(
        yield* store.get(late!.id),
        { waitingForKey: false, keySlot: 0 },
        "the next sweep went on to z"
      )
    }))

  it.live("a keyed completion of 500 runs finds each freed slot by key, not by comparing every completed run with every slot (no join quadratic in the batch)", () =>
    Effect.gen(function*() {
      const batch = 500
      // Twenty runs per key: few of the table's runs hold a slot, and the planner, told so by the
      // statistics, guesses the completed runs' slots at one row.
      // Keyed runs on their rows (a store of storage "rows"; the ledger's keyed runs: the next test).
      const { sql, store } = yield* keyedBacklog("plans_handoff", batch, 20, { storage: "rows" })
      const request = { owner: "w", queues: ["default"], kinds: ["noop"], limit: batch, ttl: Duration.seconds(30) }
      const running = yield* store.claim(request)
      assert.strictEqual(running.length, batch)

      // The statement the worker sends for this batch (completions that also claim the keys' next
      // runs), planned and run as the runtime would, then rolled back (genericPlan).
      const plan = yield* genericPlan(
        sql,
        store.completeBatch(running.map((r) => ({ runId: r.id, fence: r.fence, result: null, keyed: true })), request),
        () => true
      )
      const nodes = flatten(plan)
      const handed = nodes.find((n) => n["Subplan Name"] === "CTE row_handed")
      assert.strictEqual(handed?.["Actual Rows"], batch, "the statement handed every key's slot to its next run")
      // A nested loop between the completed runs and their slots (both CTEs the planner guesses at
      // one row) compared every pair: 500 × 500 rows, all but 500 removed by its join filter.
      assert.isBelow(removedByJoins(nodes), batch, "a join compared the batch's runs pair by pair")
    }))

  it.live("in the ledger, a keyed completion of 500 runs gives each freed slot to its key's next run, claimed in one batch, each successor reporting its lease's place (no join quadratic in the batch)", () =>
    Effect.gen(function*() {
      const batch = 500
      const { sql, store } = yield* keyedBacklog("plans_ledger_handoff", batch, 20)
      const request = { owner: "w", queues: ["default"], kinds: ["noop"], limit: batch, ttl: Duration.seconds(30) }
      const running = yield* store.claim(request)
      assert.strictEqual(running.length, batch)
      const plan = yield* genericPlan(
        sql,
        store.completeBatch(running.map((r) => ({ runId: r.id, fence: r.fence, result: null, keyed: true })), request),
        (text) => text.includes("ledger_next AS")
      )
      const nodes = flatten(plan)
      assert.strictEqual(
        nodes.find((n) => n["Subplan Name"] === "CTE open_leases")?.["Actual Rows"],
        batch,
        "every run completed"
      )
      assert.strictEqual(
        nodes.find((n) => n["Subplan Name"] === "CTE ledger_next")?.["Actual Rows"],
        batch,
        "every key's slot went to its next run"
      )
      assert.strictEqual(
        nodes.find((n) => n["Subplan Name"] === "CTE ledger_batch")?.["Actual Rows"],
        1,
        "the successors claimed in one batch"
      )
      assert.isBelow(removedByJoins(nodes), batch, "a join compared the batch's runs pair by pair")
      // Joined back to the leases by a nested loop (both sides guessed at a row or two), the
      // successors were read again for each lease: 500 × 500 rows.
      const widest = Math.max(...nodes.map((n) => (n["Actual Rows"] ?? 0) * (n["Actual Loops"] ?? 1)))
      assert.isBelow(widest, 10 * batch, "a node read the batch's runs once per run")
    }))

  it.live("claims of 1,000 runs (a sweep's, a due-only one, a sweep's reclaims) and the renewal and completion of 1,000 leases reach each run by primary key once (no join quadratic in the batch)", () =>
    Effect.gen(function*() {
      const limit = 1_000
      // A hundred runs per key: the planner, told by the statistics that few runs are due, guesses
      // the picked runs at one row.
      // Keyed runs on their rows (a store of storage "rows"): the statements that claim in rows.
      const { sql, store } = yield* keyedBacklog("plans_claim", limit, 100, { storage: "rows" })
      const request = { owner: "w", queues: ["default"], kinds: ["noop"], limit, ttl: Duration.seconds(30) }
      for (const dueOnly of [false, true]) {
        // The claim itself (a sweep first admits and times out; those statements run as they are).
        const plan = yield* genericPlan(
          sql,
          store.claim({ ...request, dueOnly }),
          (text) => text.includes("claimed AS")
        )
        const nodes = flatten(plan)
        const claimed = nodes.find((n) => n["Subplan Name"] === "CTE row_claimed")
        assert.strictEqual(
          claimed?.["Actual Rows"],
          limit,
          `the ${dueOnly ? "due-only " : "sweep's "}claim took its limit`
        )
        // Joined to the CTE that picked them by a nested loop, the picked runs were read again
        // for each of them: 1,000 × 1,000 rows, all but 1,000 removed by its join filter.
        assert.isBelow(
          removedByJoins(nodes),
          limit,
          `the ${dueOnly ? "due-only " : "sweep's "}claim compared its runs pair by pair`
        )
      }
      // 1,000 leases held: their renewal and their completion (as a worker's heartbeat and batch
      // send them) reach each run once too.
      const held = (yield* store.claim({ ...request, ttl: Duration.millis(1) })).map((r) => ({
        runId: r.id,
        fence: r.fence
      }))
      assert.strictEqual(held.length, limit)
      const renewal = flatten(
        yield* genericPlan(sql, store.renew("w", held, Duration.seconds(30)), (text) => text.includes("renewed AS"))
      )
      assert.strictEqual(
        renewal.find((n) => n["Subplan Name"] === "CTE renewed")?.["Actual Rows"],
        limit,
        "the heartbeat renewed them all"
      )
      assert.isBelow(removedByJoins(renewal), limit, "the renewal compared its leases pair by pair")
      const completion = flatten(
        yield* genericPlan(
          sql,
          store.completeBatch(held.map((l) => ({ ...l, result: null, keyed: false }))),
          (text) => text.includes("done AS")
        )
      )
      assert.strictEqual(
        completion.find((n) => n["Subplan Name"] === "CTE done")?.["Actual Rows"],
        limit,
        "the batch completed them all"
      )
      assert.isBelow(removedByJoins(completion), limit, "the completion compared its runs pair by pair")
      // Then the worker dies holding them: the next sweep reclaims them all.
      yield* Effect.sleep("50 millis")
      const reclaim = flatten(yield* genericPlan(sql, store.claim(request), (text) => text.includes("claimed AS")))
      assert.strictEqual(
        reclaim.find((n) => n["Subplan Name"] === "CTE claimed_other")?.["Actual Rows"],
        limit,
        "the sweep reclaimed them all"
      )
      assert.isBelow(removedByJoins(reclaim), limit, "the sweep's reclaims were compared pair by pair")
    }))

  it.live("in the ledger, a claim of 1,000 runs, their renewal and their completion each write one batch row and reach each run once (no join quadratic in the batch)", () =>
    Effect.gen(function*() {
      const limit = 1_000
      const { schema, sql, store } = yield* freshStore("plans_ledger")
      yield* store.enqueue(Array.from({ length: 3 * limit }, (_, i) => ({ kind: "noop", payload: { i } })))
      yield* sql`ANALYZE ${sql(schema)}.runs`
      const request = { owner: "w", queues: ["default"], kinds: ["noop"], limit, ttl: Duration.seconds(30) }
      for (const dueOnly of [false, true]) {
        const nodes = flatten(
          yield* genericPlan(sql, store.claim({ ...request, dueOnly }), (text) => text.includes("granted AS"))
        )
        assert.strictEqual(
          nodes.find((n) => n["Subplan Name"] === "CTE granted")?.["Actual Rows"],
          limit,
          `the ${dueOnly ? "due-only " : "sweep's "}claim took its limit`
        )
        assert.strictEqual(nodes.find((n) => n["Subplan Name"] === "CTE batch")?.["Actual Rows"], 1, "one claim batch")
        assert.isBelow(
          removedByJoins(nodes),
          limit,
          `the ${dueOnly ? "due-only " : "sweep's "}claim compared its runs pair by pair`
        )
      }
      const held = (yield* store.claim(request)).map((r) => ({ runId: r.id, fence: r.fence }))
      assert.strictEqual(held.length, limit)
      // The renewal names the batch and its held ids as one range: no node reads the runs one by one.
      const renewal = flatten(
        yield* genericPlan(sql, store.renew("w", held, Duration.seconds(30)), (text) => text.includes("renewed AS"))
      )
      assert.strictEqual(renewal.find((n) => n["Subplan Name"] === "CTE named")?.["Actual Rows"], 1, "one batch named")
      assert.strictEqual(
        renewal.find((n) => n["Subplan Name"] === "CTE renewed")?.["Actual Rows"],
        1,
        "one batch row renewed"
      )
      const widest = Math.max(...renewal.map((n) => (n["Actual Rows"] ?? 0) * (n["Actual Loops"] ?? 1)))
      assert.isBelow(widest, 10, "the renewal read the batch's runs one by one")
      const completion = flatten(
        yield* genericPlan(
          sql,
          store.completeBatch(held.map((l) => ({ ...l, result: null, keyed: false }))),
          (text) => text.includes("done AS")
        )
      )
      assert.strictEqual(
        completion.find((n) => n["Subplan Name"] === "CTE open_leases")?.["Actual Rows"],
        limit,
        "every run completed"
      )
      assert.strictEqual(
        completion.find((n) => n["Subplan Name"] === "CTE done")?.["Actual Rows"],
        1,
        "one completion batch"
      )
      assert.isBelow(removedByJoins(completion), limit, "the completion compared its runs pair by pair")
    }))

  it.live("a heartbeat renewal rewrites each lease in place (a HOT update): no index names the lease's expiry", () =>
    Effect.gen(function*() {
      // Leases kept in the run rows: the ledger's renewal has its own test, below.
      const { schema, sql, store } = yield* freshStore("plans_hot", { storage: "rows" })
      const updates = Effect.map(
        sql.unsafe<{ upd: string; hot: string }>(
          `SELECT coalesce(sum(n_tup_upd), 0)::text AS upd, coalesce(sum(n_tup_hot_upd), 0)::text AS hot
           FROM pg_stat_user_tables WHERE relid IN (${partitionsOf(schema, "runs")})`
        ),
        (rows) => ({ upd: Number(rows[0]?.upd ?? 0), hot: Number(rows[0]?.hot ?? 0) })
      )
      // History partitions are made full (fillfactor 100: a ledger run's row is written once, ADR
      // 0028); a row store's runs are rewritten at each renewal and need room on their page to be
      // HOT, as `runs` had before (70).
      yield* sql.unsafe(
        `SELECT format('ALTER TABLE %s SET (fillfactor = 70)', relid::regclass) FROM (${
          partitionsOf(schema, "runs")
        }) p`
      ).pipe(Effect.flatMap((rows) => Effect.forEach(rows, (r) => sql.unsafe(Object.values(r)[0] as string))))
      const indexed = yield* sql.unsafe<{ def: string }>(
        `SELECT pg_get_indexdef(indexrelid) AS def FROM pg_index WHERE indrelid IN (${partitionsOf(schema, "runs")})`
      )
      assert.deepStrictEqual(indexed.filter((i) => i.def.includes("lease_expires_at")).map((i) => i.def), [])
      yield* store.enqueue(Array.from({ length: 400 }, (_, i) => ({ kind: "noop", payload: { i } })))
      const runs = yield* store.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["noop"],
        limit: 400,
        ttl: Duration.seconds(30)
      })
      const leases = runs.map((r) => ({ runId: r.id, fence: r.fence }))
      // The claims' updates are counted first, so the difference below is the renewals' alone.
      const before = yield* eventually(
        "the claims counted",
        Effect.andThen(sql`SELECT pg_stat_clear_snapshot()`, Effect.map(updates, (u) => u.upd >= 400 ? u : undefined)),
        statsFlush
      )
      for (let round = 0; round < 3; round++) {
        assert.strictEqual((yield* store.renew("w", leases, Duration.seconds(30))).length, 400)
      }
      const after = yield* eventually(
        "the renewals counted",
        Effect.andThen(
          sql`SELECT pg_stat_clear_snapshot()`,
          Effect.map(updates, (u) => u.upd >= before.upd + 1_200 ? u : undefined)
        ),
        statsFlush
      )
      assert.strictEqual(after.upd - before.upd, 1_200)
      // With an index on lease_expires_at (migration 0001's runs_leases) not one of them is HOT.
      // Without it, how many are depends on room on the page: a version that does not fit goes
      // elsewhere, non-HOT, and other sessions' snapshots can keep pages from being pruned (alone
      // on the server about three in four were HOT; beside the whole suite on PostgreSQL 18, 559).
      assert.isAbove(after.hot - before.hot, 0, `HOT renewals: ${after.hot - before.hot} of 1200`)
    }))
})

describe("list plans", () => {
  it.live("run lists on a 24,000-run store, newest first by id in every state and from deep cursors, never scan runs sequentially nor sort more than a page", () =>
    Effect.gen(function*() {
      const { schema, sql, store } = yield* freshStore("plans_lists")
      const ttl = Duration.seconds(30)
      // Interleaved, so every state's runs are spread over the whole id range.
      const shares = [["done", 15], ["todo", 4], ["bad", 2], ["cancel", 1], ["wait", 1], ["busy", 1]] as const
      const pattern = shares.flatMap(([kind, n]) => Array.from({ length: n }, () => kind))
      yield* store.enqueue(
        Array.from(
          { length: 24_000 },
          (_, i) => ({ kind: pattern[i % pattern.length]!, payload: { i }, maxAttempts: 1 })
        )
      )
      const claimAll = (kind: string, leaseTtl: Duration.Duration) =>
        Effect.gen(function*() {
          const claimed: Array<{ runId: string; fence: number }> = []
          while (true) {
            const runs = yield* store.claim({
              owner: "w",
              queues: ["default"],
              kinds: [kind],
              limit: 1_000,
              ttl: leaseTtl,
              dueOnly: true
            })
            if (runs.length === 0) return claimed
            claimed.push(...runs.map((r) => ({ runId: r.id, fence: r.fence })))
          }
        })
      yield* store.completeBatch((yield* claimAll("done", ttl)).map((l) => ({ ...l, result: null })))
      // Claimed on their last attempt under a lease that expires at once: the next sweep fails them.
      yield* claimAll("bad", Duration.millis(1))
      yield* Effect.sleep("20 millis")
      yield* store.claim({ owner: "w", queues: ["default"], kinds: ["bad"], limit: 10_000, ttl })
      yield* store.cancelMany({ kind: "cancel" })
      const waiting = yield* claimAll("wait", ttl)
      yield* Effect.forEach(
        waiting,
        (l, i) => store.suspend({ ...l, signal: "approval", token: `t${i}`, timeout: undefined }),
        { concurrency: 2, discard: true }
      )
      yield* claimAll("busy", ttl)
      yield* sql`ANALYZE ${sql(schema)}.runs`
      const counts = yield* sql<{ state: string; n: string }>`SELECT state, count(*)::text AS n FROM ${
        sql(schema)
      }.runs_now GROUP BY state`
      assert.deepStrictEqual(
        Object.fromEntries(counts.map((c) => [c.state, Number(c.n)])),
        { completed: 15_000, pending: 4_000, failed: 2_000, cancelled: 1_000, suspended: 1_000, running: 1_000 }
      )

      const empty = yield* emptyPartitions(sql, schema)
      const limit = 50
      const deep = "4000" // below five in six of every state's runs
      const filters: ReadonlyArray<ListFilter> = [
        { limit },
        { limit, before: deep },
        { limit, after: deep },
        { limit, kind: "todo", before: deep },
        ...RunState.literals.flatMap((
          state
        ) => [{ limit, state }, { limit, state, before: deep }, { limit, state, after: deep }]),
        { limit: 200, state: "suspended" }
      ]
      for (const filter of filters) {
        const runs = yield* store.list(filter)
        const ids = runs.map((r) => BigInt(r.id))
        assert.deepStrictEqual(
          ids,
          [...ids].sort((a, b) => a < b ? 1 : a > b ? -1 : 0),
          `newest first: ${JSON.stringify(filter)}`
        )
        assert.strictEqual(runs.length, filter.limit, JSON.stringify(filter))
        for (const mode of ["force_custom_plan", "force_generic_plan"]) {
          const plan = flatten(yield* listPlan(sql, store.list(filter), mode))
          const what = `${JSON.stringify(filter)} (${mode}): ${
            plan.map((n) => `${n["Node Type"]}${n["Index Name"] ? ` ${n["Index Name"]}` : ""}`).join(" > ")
          }`
          // A run's claim batch is found through the span index, which the planner may read as a
          // bitmap (one or two batches): only a bitmap read of the runs themselves is a scan. An
          // empty partition's sequential scan reads nothing.
          assert.deepStrictEqual(
            plan.filter((n) =>
              (n["Node Type"] === "Seq Scan" && !empty.has(n["Relation Name"] ?? "")) ||
              (n["Node Type"] === "Bitmap Heap Scan" && /^runs(_|$)/.test(n["Relation Name"] ?? ""))
            )
              .map((n) => `${n["Node Type"]} ${n["Relation Name"]}`),
            [],
            what
          )
          // Running runs are read from runs_running and sorted: all of them, as many as the
          // workers' slots, never the table. Every other sort is of the page itself (the page
          // after a cursor, turned round).
          const sortable = filter.state === "running" ? 1_000 : filter.limit
          for (const sort of plan.filter((n) => n["Node Type"] === "Sort")) {
            assert.isAtMost(sort.Plans!.reduce((sum, n) => sum + n["Actual Rows"]!, 0), sortable, what)
          }
          // Index-driven: what the scans read is of the order of the page, not of the table.
          const read = plan.filter((n) => n["Node Type"].includes("Index"))
            .reduce((sum, n) => sum + (n["Actual Rows"] ?? 0) + (n["Rows Removed by Filter"] ?? 0), 0)
          // A state one run in 24 is in may be read off the primary key (about 24 entries per run
          // listed) where the planner finds the table's pages in id order: the ledger leaves the
          // rows of routine runs where they were inserted. Still a bound of the page's order.
          assert.isAtMost(read, Math.max(sortable, 25 * filter.limit), `read ${read} rows: ${what}`)
        }
      }
    }))
})

describe("operator reads on a large store", () => {
  // 200,000 ended runs written as the routine path leaves them (bench/src/history.ts), spread over
  // 30 days, beside a few live ones: every read an operator's screen or scrape sends is planned
  // and run under EXPLAIN, custom and generic, and must reach history only by index, reading a
  // bounded number of pages (ADR 0030).
  const historyRuns = 200_000
  // Small batches, so claim_batches holds 40,000 rows: enough for the planner to give up its span
  // index for the primary key read backwards, as it did at 20 million runs (issue 41).
  const historyBatch = 5
  // The history tables and their partitions (ADR 0028).
  const historyTable = /^(runs|claim_batches|completion_batches|run_events)(_from_\d+|_beyond)?$/
  const maxBuffers = 1_000

  it.live(
    "stats, the live sample, throughput, the queues' and console overview's reads, a run's page and a default search never scan history",
    () =>
      Effect.gen(function*() {
        const { schema, sql, store } = yield* freshStore("plans_history")
        for (const text of History.statements(schema, { runs: historyRuns, days: 30, batch: historyBatch })) {
          yield* sql.unsafe(text)
        }
        // Live runs beside the history: pending, running, one failed a moment ago with an error.
        yield* store.enqueue(
          Array.from({ length: 300 }, (_, i) => ({ kind: "live", payload: { i }, queue: "q1", maxAttempts: 1 }))
        )
        const request = { owner: "w", queues: ["q1"], kinds: ["live"], ttl: Duration.seconds(30) }
        const claimed = yield* store.claim({ ...request, limit: 50 })
        yield* store.completeBatch(claimed.slice(0, 40).map((r) => ({ runId: r.id, fence: r.fence, result: null })))
        yield* store.fail({
          runId: claimed[40]!.id,
          fence: claimed[40]!.fence,
          error: { message: "upstream refused the card" },
          retryDelayMs: undefined
        })
        const [clock] = yield* sql<{ now: Date }>`SELECT now() AS now`
        const hourAgo = new Date(clock!.now.getTime() - 3_600_000)
        const oldRun = "1234"
        // The throughput reads each run that finished in its window (its claim and its row, by primary
        // key: a few pages each) and a BRIN range of rows: bounded by the window, not by history.
        const throughput = yield* store.throughput({ minutes: 60 })
        const finished = throughput.series.reduce((n, m) => n + m.completed + m.failed, 0)
        assert.isAbove(finished, 100, "the window holds runs of the history")
        assert.isBelow(finished, 1_000, "the window holds an hour of the history only")
        const reads: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>, number?]> = [
          ["stats", store.stats],
          ["sample (/metrics)", store.sample],
          ["throughput of the overview's 60 minutes", store.throughput({ minutes: 60 }), 400 + 8 * finished],
          ["runs show: get", store.get(oldRun)],
          ["runs show: history", store.history(oldRun)],
          ["the runs list's first page", store.list({ limit: 50 })],
          [
            "a search by error text in the default window",
            store.list({ limit: 50, errorText: "card", createdFrom: hourAgo })
          ],
          [
            "a search by a payload field in the default window",
            store.list({ limit: 50, payload: [{ path: ["customer"], value: "c7" }], createdFrom: hourAgo })
          ],
          ["the failed runs", store.list({ limit: 50, state: "failed" })],
          ["the running runs", store.list({ limit: 50, state: "running" })],
          ["workers", store.workers]
        ]
        // What they answer, as on a store without history: the live runs only, the recent failure.
        const stats = yield* store.stats
        assert.deepStrictEqual(stats.byStateAndQueue, [
          { queue: "q1", state: "pending", count: 250 },
          { queue: "q1", state: "running", count: 9 }
        ])
        const found = yield* store.list({ limit: 50, errorText: "card", createdFrom: hourAgo })
        assert.deepStrictEqual(found.map((r) => r.id), [claimed[40]!.id])
        assert.strictEqual((yield* store.get(oldRun)).state, "completed")
        assert.deepStrictEqual((yield* store.history(oldRun)).map((e) => e.kind), ["claimed", "completed"])

        const empty = yield* emptyPartitions(sql, schema)
        for (const [name, read, bound = maxBuffers] of reads) {
          for (const mode of ["force_custom_plan", "force_generic_plan"]) {
            const plans = yield* plansOf(sql, read, { plan_cache_mode: mode })
            assert.isAbove(plans.length, 0, name)
            const nodes = plans.flatMap(flatten)
            const what = `${name} (${mode}): ${
              nodes.map((n) =>
                `${n["Node Type"]}${n["Relation Name"] ? ` ${n["Relation Name"]}` : ""} (${
                  (n["Shared Hit Blocks"] ?? 0) + (n["Shared Read Blocks"] ?? 0)
                })`
              ).join(" > ")
            }`
            assert.deepStrictEqual(
              nodes.filter((n) =>
                n["Node Type"] === "Seq Scan" && historyTable.test(n["Relation Name"] ?? "") &&
                !empty.has(n["Relation Name"] ?? "")
              ).map((n) => n["Relation Name"]),
              [],
              what
            )
            const buffers = plans.reduce(
              (sum, p) => sum + (p["Shared Hit Blocks"] ?? 0) + (p["Shared Read Blocks"] ?? 0),
              0
            )
            assert.isAtMost(buffers, bound, `${buffers} buffers: ${what}`)
          }
        }
      }),
    300_000
  )
})

/**
 * The plan `store.list` is run with, with the plan cache mode given: a custom plan for the
 * parameters, or the generic plan a long-lived connection may settle on.
 */
const listPlan = <A, E, R>(sql: SqlClient.SqlClient, effect: Effect.Effect<A, E, R>, mode: string) =>
  planOf(sql, effect, () => true, { plan_cache_mode: mode })

interface PlanNode {
  readonly "Node Type": string
  readonly "Subplan Name"?: string
  readonly "Index Name"?: string
  readonly "Relation Name"?: string
  readonly "Rows Removed by Filter"?: number
  readonly "Actual Rows"?: number
  readonly "Rows Removed by Join Filter"?: number
  readonly "Actual Loops"?: number
  readonly "Shared Hit Blocks"?: number
  readonly "Shared Read Blocks"?: number
  readonly Plans?: ReadonlyArray<PlanNode>
}

const flatten = (node: PlanNode): ReadonlyArray<PlanNode> => [node, ...(node.Plans ?? []).flatMap(flatten)]

/** A statement parameter as an SQL literal of unknown type (EXECUTE casts it to the parameter's). */
const literal = (value: unknown): string => {
  const quoted = (text: string) => `'${text.replaceAll("'", "''")}'`
  if (value === null || value === undefined) return "NULL"
  // A parameter whose type the statement states (PgTypes.array): its values, as an array would be.
  if (PgTypes.isParameter(value)) return literal(value.value)
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return quoted(String(value))
  if (value instanceof Date) return quoted(value.toISOString())
  if (Array.isArray(value)) {
    const element = (e: unknown) =>
      e === null ? "NULL" : `"${String(e).replaceAll("\\", "\\\\").replaceAll("\"", "\\\"")}"`
    return quoted(`{${value.map(element).join(",")}}`)
  }
  return quoted(String(value))
}

/** A store in a fresh schema (two connections), with its SQL client. */
const freshStore = (prefix: string, options: PgRunStore.PgRunStoreOptions = {}) => {
  const schema = freshSchema(prefix)
  const layer = Object.keys(options).length === 0
    ? layerStore(schema, 2)
    : PgRunStore.layer({ ...options, schema }).pipe(
      Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 2 }))
    )
  return Effect.map(Layer.build(layer), (context) => ({
    schema,
    sql: Context.get(context, SqlClient.SqlClient),
    store: Context.get(context, RunStore)
  }))
}

/**
 * A store (in a fresh schema) holding a keyed backlog: `keys` keys at one running run each (the
 * kind's limit), `perKey` runs each, with statistics (ANALYZE).
 */
const keyedBacklog = (prefix: string, keys: number, perKey: number, options: PgRunStore.PgRunStoreOptions = {}) =>
  Effect.gen(function*() {
    const { schema, sql, store } = yield* freshStore(prefix, options)
    yield* store.setKeyLimits([KeyLimits.perKind("noop", 1)])
    yield* store.enqueue(
      Array.from(
        { length: keys * perKey },
        (_, i) => ({ kind: "noop", payload: { i }, concurrencyKey: `k${i % keys}` })
      )
    )
    yield* sql`ANALYZE ${sql(schema)}.runs`
    return { sql, store }
  })

/** Rows join filters removed, in all (EXPLAIN gives a node's count per loop). */
const removedByJoins = (nodes: ReadonlyArray<PlanNode>) =>
  nodes.reduce((sum, n) => sum + (n["Rows Removed by Join Filter"] ?? 0) * (n["Actual Loops"] ?? 1), 0)

/**
 * The plan of the first statement `effect` sends that `pick` accepts, as the runtime's connections
 * plan it (their settings: once, for any batch, a generic plan that knows nothing of the arrays'
 * lengths).
 */
const genericPlan = <A, E, R>(
  sql: SqlClient.SqlClient,
  effect: Effect.Effect<A, E, R>,
  pick: (text: string) => boolean
) => planOf(sql, effect, pick, PgRunStore.runtimeSettings)

/**
 * The plan of the first statement `effect` sends that `pick` accepts (the ones before it run as
 * usual; it does not), under the session settings given. Run under EXPLAIN ANALYZE in a
 * transaction that is rolled back.
 */
let probes = 0
const planOf = <A, E, R>(
  sql: SqlClient.SqlClient,
  effect: Effect.Effect<A, E, R>,
  pick: (text: string) => boolean,
  settings: Readonly<Record<string, string>>
) =>
  Effect.gen(function*() {
    let statement: readonly [string, ReadonlyArray<unknown>] | undefined
    const capture: Statement.Transformer = (self) =>
      Effect.suspend(() => {
        const compiled = self.compile()
        if (statement !== undefined || !pick(compiled[0])) return Effect.succeed(self)
        statement = compiled
        return Effect.die("captured")
      })
    yield* effect.pipe(Effect.provideService(Statement.CurrentTransformer, capture), Effect.exit)
    assert.isDefined(statement, "the statement was sent")
    const [text, params] = statement!
    let plan: PlanNode | undefined
    yield* sql.withTransaction(Effect.gen(function*() {
      // Prepared statements outlive a rollback: each probe has its own name.
      const name = `probed_${++probes}`
      yield* sql.unsafe(`PREPARE ${name} AS ${text}`)
      for (const [setting, value] of Object.entries(settings)) {
        yield* sql`SELECT set_config(${setting}, ${value}, true)`
      }
      const rows = yield* sql.unsafe<{ "QUERY PLAN": ReadonlyArray<{ Plan: PlanNode }> }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ${name}(${params.map(literal).join(", ")})`
      )
      plan = rows[0]!["QUERY PLAN"][0]!.Plan
      return yield* Effect.fail("roll back")
    })).pipe(Effect.exit)
    assert.isDefined(plan, "the statement was explained")
    return plan!
  })

/**
 * The plans of every statement `effect` sends, each run under EXPLAIN (ANALYZE, BUFFERS) after it
 * ran as usual, with the session settings given, in one transaction that is rolled back. A `SET`
 * the effect sends is applied again before the statements that follow it.
 */
const plansOf = <A, E>(
  sql: SqlClient.SqlClient,
  effect: Effect.Effect<A, E>,
  settings: Readonly<Record<string, string>>
) =>
  Effect.gen(function*() {
    const sent: Array<readonly [string, ReadonlyArray<unknown>]> = []
    const record: Statement.Transformer = (self) =>
      Effect.sync(() => {
        sent.push(self.compile())
        return self
      })
    yield* effect.pipe(Effect.provideService(Statement.CurrentTransformer, record))
    const plans: Array<PlanNode> = []
    yield* sql.withTransaction(Effect.gen(function*() {
      for (const [setting, value] of Object.entries(settings)) {
        yield* sql`SELECT set_config(${setting}, ${value}, true)`
      }
      for (const [text, params] of sent) {
        if (/^\s*SET\b/i.test(text)) {
          yield* sql.unsafe(text)
          continue
        }
        const name = `probed_${++probes}`
        yield* sql.unsafe(`PREPARE ${name} AS ${text}`)
        const rows = yield* sql.unsafe<{ "QUERY PLAN": ReadonlyArray<{ Plan: PlanNode }> }>(
          `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE ${name}${
            params.length === 0 ? "" : `(${params.map(literal).join(", ")})`
          }`
        )
        plans.push(rows[0]!["QUERY PLAN"][0]!.Plan)
      }
      return yield* Effect.fail("roll back" as const)
    })).pipe(Effect.catch((e) => e === "roll back" ? Effect.void : Effect.fail(e)))
    return plans
  })
