/**
 * Deleting runs on PostgreSQL, beyond the contract suite: a deleted run leaves nothing behind in
 * any table of the store's schema, read from the catalog (so a table added later is checked too),
 * on both layouts; and the ledger's own rule, a run whose claim batch still has a run open is
 * refused until the batch settles.
 */
import { assert, describe, it } from "@effect/vitest"
import { KeyLimits, type OperatorActions, RateLimits, RunStore } from "@leasehold/core"
import type { PgRunStore } from "@leasehold/sql"
import { Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, layerStore } from "./support/db.js"

const marker = "erase-me-7f3a"
const alice: OperatorActions.Actor = { name: "alice", via: "api" }

const open = (storage: PgRunStore.PgRunStoreOptions["storage"]) =>
  Effect.gen(function*() {
    const schema = freshSchema("del")
    const context = yield* Layer.build(layerStore(schema, 4, { storage }))
    const sql = Context.get(context, SqlClient.SqlClient)
    // Run ids far above any fence, attempt or batch number, so a column that holds one of those
    // never reads as a reference to a run.
    yield* sql.unsafe(`ALTER SEQUENCE "${schema}".runs_id_seq RESTART WITH 1000000`)
    return { schema, sql, store: Context.get(context, RunStore) }
  })

/**
 * Every table of the schema (from pg_class) and every column that may name a run: a bigint (not
 * another table's own identity, GENERATED ALWAYS), an array or multirange of bigints, and any text or JSON that holds
 * the payloads' marker. Returns the tables where one of `ids` (or the marker) is found.
 */
const referencing = (sql: SqlClient.SqlClient, schema: string, ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const columns = yield* sql<{ table: string; column: string; type: string }>`
      SELECT c.relname AS table, a.attname AS column, format_type(a.atttypid, a.atttypmod) AS type
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE n.nspname = ${schema} AND c.relkind IN ('r', 'p') AND a.attidentity <> 'a'
      ORDER BY 1, 2`
    const found = new Set<string>()
    for (const { column, table, type } of columns) {
      const col = `"${column}"`
      const condition = type === "bigint"
        ? `${col} = ANY($1::bigint[])`
        : type === "bigint[]"
        ? `${col} && $1::bigint[]`
        : type === "int8multirange"
        ? `${col} && (SELECT range_agg(int8range(w, w + 1)) FROM unnest($1::bigint[]) w)`
        : type === "text" || type === "jsonb" || type === "jsonb[]" || type === "text[]"
        ? `${col}::text LIKE '%${marker}%'`
        : undefined
      if (condition === undefined) continue
      const rows = yield* sql.unsafe<{ n: bigint }>(
        `SELECT count(*) AS n FROM "${schema}"."${table}" WHERE ${condition}`,
        [ids]
      )
      if (Number(rows[0]!.n) > 0) found.add(`${table}.${column}`)
    }
    return [...found].sort()
  })

describe("deleting runs on PostgreSQL", () => {
  for (const storage of ["ledger", "rows"] as const) {
    it.live(`a deleted run leaves no row in any table of the schema (catalog scan), storage ${storage}`, () =>
      Effect.gen(function*() {
        const { schema, sql, store } = yield* open(storage)
        yield* store.setKeyLimits([KeyLimits.perKind("keyed", 1)])
        yield* store.setRateLimits([RateLimits.perKind("rated", 100, "1 hour")])
        const ttl = Duration.minutes(1)
        const claim = (kinds: Array<string>) => store.claim({ owner: "w1", queues: ["default"], kinds, limit: 1, ttl })
        // A keyed, rated run completed with a result (in the ledger: a settled batch).
        const [done] = yield* store.enqueue([{
          kind: "keyed",
          payload: { who: marker },
          idempotencyKey: `${marker}-key`,
          concurrencyKey: `${marker}-acct`
        }])
        const [waiting] = yield* store.enqueue([{
          kind: "keyed",
          payload: { who: marker },
          concurrencyKey: `${marker}-acct`
        }])
        const [held] = yield* claim(["keyed"])
        assert.strictEqual(held!.id, done!.id)
        yield* store.checkpoint({ runId: held!.id, fence: held!.fence }, { step: marker })
        yield* store.completeBatch([{ runId: held!.id, fence: held!.fence, result: JSON.stringify({ out: marker }) }])
        // A rated run in a unique window, suspended with a callback, then resumed by a delivery.
        const [rated] = yield* store.enqueue([{
          kind: "rated",
          payload: { who: marker },
          unique: { key: `${marker}-u` }
        }])
        const [lease] = yield* claim(["rated"])
        assert.strictEqual(lease!.id, rated!.id)
        const key = { runId: lease!.id, fence: lease!.fence }
        yield* store.callbackExpiry(key, "approval", Duration.hours(1))
        yield* store.suspend({ ...key, signal: "approval", token: `${marker}-token`, timeout: undefined })
        yield* store.deliverSignal({
          runId: rated!.id,
          signal: "approval",
          payload: { note: marker },
          deliveryId: "d-1"
        })
        // A workflow's run, with its journal (as the journal writes it, keyed by its execution).
        const execution = `workflow/w/${marker}`
        const [flow] = yield* store.enqueue([{ kind: "workflow/w", payload: {}, idempotencyKey: execution }])
        for (const table of ["workflow_awaits (execution, name)", "workflow_clocks (execution, deferred, wake_at)"]) {
          yield* sql.unsafe(
            table.startsWith("workflow_awaits")
              ? `INSERT INTO "${schema}".workflow_awaits (execution, name) VALUES ($1, 'd')`
              : `INSERT INTO "${schema}".workflow_clocks (execution, deferred, wake_at) VALUES ($1, 'c', now())`,
            [execution]
          )
        }
        yield* sql.unsafe(
          `INSERT INTO "${schema}".workflow_deferreds (execution, name, exit) VALUES ($1, 'd', '{}'),
          ($1, 'e', '{}')`,
          [execution]
        )
        yield* sql.unsafe(
          `INSERT INTO "${schema}".workflow_activities (execution, activity, attempt, fence, exit) VALUES ($1, 'a', 1, 1, '{}')`,
          [execution]
        )
        // A run completed where it was claimed (in the ledger: its claim and completion batches).
        const [plain] = yield* store.enqueue([{ kind: "plain", payload: { who: marker } }])
        const [taken] = yield* claim(["plain"])
        yield* store.completeBatch([{ runId: taken!.id, fence: taken!.fence, result: JSON.stringify({ out: marker }) }])
        // A run failed for good with its attempt's log lines kept (attempt_logs).
        const [failing] = yield* store.enqueue([{ kind: "flaky", payload: { who: marker }, maxAttempts: 1 }])
        const [failed] = yield* claim(["flaky"])
        assert.strictEqual(failed!.id, failing!.id)
        yield* store.fail({
          runId: failed!.id,
          fence: failed!.fence,
          error: { message: marker },
          retryDelayMs: undefined,
          log: {
            attempt: 1,
            dropped: 0,
            lines: [{ level: "Info", at: new Date(), message: marker, annotations: {}, cut: 0 }]
          }
        })
        // A run that stays: its rows must stay too.
        const [kept] = yield* store.enqueue([{ kind: "job", payload: { who: "kept" } }])
        const ids = [done!.id, waiting!.id, rated!.id, flow!.id, plain!.id, failing!.id]
        const before = yield* referencing(sql, schema, ids)
        for (
          const table of [
            "runs.id",
            "run_events.run_id",
            "attempt_logs.run_id",
            "callbacks.run_id",
            "signal_deliveries.run_id",
            "unique_holds.run_id",
            "rate_starts.run_id",
            "workflow_awaits.execution",
            "workflow_deferreds.execution",
            "workflow_activities.execution",
            "workflow_clocks.execution"
          ]
        ) assert.include(before, table, "the scan sees the runs where they are kept")
        if (storage === "ledger") assert.includeMembers(before, ["claim_batches.ids", "completion_batches.ids"])
        const counted = yield* store.countDeletable({ ids })
        assert.deepStrictEqual(counted, { count: 6, busy: 0 })
        assert.deepStrictEqual(yield* store.deleteRuns({ filter: { ids }, expected: 6, actor: alice }), { deleted: 6 })
        assert.deepStrictEqual(yield* referencing(sql, schema, ids), [], "nothing of the deleted runs is left")
        for (const view of ["run_history", "runs_now"]) {
          const column = view === "run_history" ? "run_id" : "id"
          const rows = yield* sql.unsafe<{ n: bigint }>(
            `SELECT count(*) AS n FROM "${schema}".${view} WHERE ${column} = ANY($1::bigint[])`,
            [ids]
          )
          assert.strictEqual(Number(rows[0]!.n), 0, `${view} shows none of them`)
        }
        assert.strictEqual((yield* store.get(kept!.id)).state, "pending")
        // The audit line names who deleted which runs, and holds none of their data.
        const [line] = yield* store.actions({ limit: 1 })
        assert.deepInclude(line, { by: "alice", action: "runs.delete" })
        assert.notInclude(JSON.stringify(line), marker)
      }))
  }

  it.live("a completed run whose ledger claim batch still has a run open is refused until the batch settles", () =>
    Effect.gen(function*() {
      const { store } = yield* open("ledger")
      const [a, b] = yield* store.enqueue([{ kind: "job", payload: {} }, { kind: "job", payload: {} }])
      const claimed = yield* store.claim({
        owner: "w1",
        queues: ["default"],
        kinds: ["job"],
        limit: 2,
        ttl: Duration.minutes(1)
      })
      assert.lengthOf(claimed, 2)
      const first = claimed.find((c) => c.id === a!.id)!
      const second = claimed.find((c) => c.id === b!.id)!
      yield* store.completeBatch([{ runId: first.id, fence: first.fence, result: null }])
      assert.strictEqual((yield* store.get(a!.id)).state, "completed")
      const refused = yield* Effect.flip(store.deleteRuns({ filter: { ids: [a!.id] }, expected: 1, actor: alice }))
      assert.deepInclude(refused, { _tag: "RunsBusy", busy: 1, deleted: 0 })
      assert.strictEqual((yield* store.get(a!.id)).state, "completed", "nothing deleted")
      yield* store.completeBatch([{ runId: second.id, fence: second.fence, result: null }])
      assert.deepStrictEqual(yield* store.deleteRuns({ filter: { ids: [a!.id] }, expected: 1, actor: alice }), {
        deleted: 1
      })
      // Its batch-mate reads as it did: completed, its history whole.
      assert.strictEqual((yield* store.get(b!.id)).state, "completed")
      assert.deepStrictEqual((yield* store.history(b!.id)).map((e) => e.kind), ["claimed", "completed"])
    }))

  it.live(
    "a delete of 1,500 runs in batches beside a drain of the same queue: both finish, the drain's runs all completed, none of them deleted",
    () =>
      Effect.gen(function*() {
        const { store } = yield* open("ledger")
        const ttl = Duration.minutes(1)
        // Runs of a kind no drainer takes, interleaved with the drained ones in one queue.
        for (let i = 0; i < 3; i++) {
          yield* store.enqueue(Array.from({ length: 500 }, (_, n) => ({ kind: "junk", payload: { n } })))
          yield* store.enqueue(Array.from({ length: 100 }, (_, n) => ({ kind: "job", payload: { n } })))
        }
        const drain = Effect.gen(function*() {
          let done = 0
          while (done < 300) {
            const claimed = yield* store.claim({
              owner: "drainer",
              queues: ["default"],
              kinds: ["job"],
              limit: 20,
              ttl
            })
            yield* store.completeBatch(claimed.map((c) => ({ runId: c.id, fence: c.fence, result: null })))
            done += claimed.length
          }
          return done
        })
        const [drained, deleted] = yield* Effect.all([
          drain,
          store.deleteRuns({ filter: { kind: "junk" }, expected: 1500, actor: alice })
        ], { concurrency: 2 })
        assert.strictEqual(drained, 300)
        assert.deepStrictEqual(deleted, { deleted: 1500 })
        assert.deepStrictEqual(yield* store.countDeletable({ kind: "job", state: "completed" }), {
          count: 300,
          busy: 0
        })
        assert.deepStrictEqual(yield* store.countDeletable({ kind: "junk" }), { count: 0, busy: 0 })
        // One audit line per statement: three of 500.
        const lines = yield* store.actions({ limit: 10 })
        assert.deepStrictEqual(lines.map((l) => (l.detail as { count: number }).count), [500, 500, 500])
      }),
    { timeout: 120_000 }
  )
})
