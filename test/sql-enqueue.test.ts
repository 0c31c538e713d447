/**
 * Enqueue from SQL (migration 0021, docs/guides/enqueue-from-sql.md) against a real PostgreSQL:
 * the function from psql and from an application's trigger inside its transaction (a rollback
 * enqueues nothing), the same runs and the same refusals as the TypeScript enqueue, a worker woken
 * by its notification, and a payload its handler's schema refuses failing its run alone.
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, type EnqueueRequest, Handler, InvalidConfig, RunStore } from "@leasehold/core"
import { Effect, Exit, Schema } from "effect"
import { execFileSync } from "node:child_process"
import { databaseUrl } from "./support/db.js"
import { type Stores, twoStores } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

/**
 * What a run's row, its ready row, its key's line (`waiting`) and its held slots (`key_holds`,
 * migration 0025) record, beside its id and times: the two paths must agree.
 */
const recorded = (stores: Stores, id: string) =>
  Effect.map(
    stores.sql.unsafe<Record<string, unknown>>(
      `SELECT r.queue, r.kind, r.payload, r.priority, r.state, r.attempt, r.max_attempts, r.fence,
         r.idempotency_key IS NOT NULL AS idempotent, r.concurrency_key IS NOT NULL AS keyed, r.key_scope, r.key_slot,
         r.trace_parent, r.signals, r.checkpoint, extract(epoch FROM r.run_at - r.created_at) * 1000 AS delay_ms,
         y.id IS NOT NULL AS ready, y.ledger, y.priority AS ready_priority, y.queue AS ready_queue,
         EXISTS (SELECT 1 FROM "${stores.schema}".waiting w WHERE w.id = r.id) AS waiting,
         ARRAY(SELECT h.slot FROM "${stores.schema}".key_holds h WHERE h.run_id = r.id ORDER BY h.slot) AS held
       FROM "${stores.schema}".runs r LEFT JOIN "${stores.schema}".ready y ON y.id = r.id WHERE r.id = ${Number(id)}`
    ),
    (rows) => rows[0]
  )

/** Every row the store keeps for runs: a refused enqueue must leave these as they were. */
const written = (stores: Stores) =>
  Effect.map(
    stores.sql.unsafe<{ runs: number; ready: number }>(
      `SELECT (SELECT count(*) FROM "${stores.schema}".runs)::int AS runs, (SELECT count(*) FROM "${stores.schema}".ready)::int AS ready`
    ),
    (rows) => rows[0]!
  )

/** The SQL error a statement failed with: its SQLSTATE and message. */
const sqlFailure = (statement: Effect.Effect<unknown, unknown>) =>
  Effect.map(Effect.exit(statement), (exit) => {
    assert.isTrue(Exit.isFailure(exit), "the statement was refused")
    const cause = JSON.stringify(exit, (_, v) => typeof v === "bigint" ? String(v) : v)
    const error = Exit.isFailure(exit) ? exit.cause : undefined
    const found = (function find(e: unknown, depth = 0): { code?: string; message?: string } | undefined {
      if (e === null || typeof e !== "object" || depth > 8) return undefined
      const o = e as Record<string, unknown>
      if (typeof o.code === "string" && typeof o.message === "string" && /^[0-9A-Z]{5}$/.test(o.code)) return o as never
      for (const k of ["cause", "reason", "error", "failures", "reasons"]) {
        const inner = o[k]
        const list = Array.isArray(inner) ? inner : [inner]
        for (const item of list) {
          const hit = find(item, depth + 1)
          if (hit) return hit
        }
      }
      return undefined
    })(error)
    assert.isDefined(found, `an SQL error in ${cause.slice(0, 400)}`)
    return found!
  })

const enqueueTs = (stores: Stores, request: EnqueueRequest) => Effect.map(stores.a.enqueue([request]), ([e]) => e!)

describe("enqueue from SQL", () => {
  it.live("from psql, in a session of its own: a run in the ledger, ready at once", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const out = execFileSync("psql", [
        databaseUrl(),
        "-v",
        "ON_ERROR_STOP=1",
        "-At",
        "-c",
        `SELECT "${stores.schema}".enqueue('send-email', '{"to": "ana@example.com"}', queue => 'mail', priority => 5)`
      ], { encoding: "utf8" })
      const id = out.trim()
      assert.match(id, /^[0-9]+$/)
      const run = yield* stores.a.get(id)
      assert.deepInclude(run, {
        kind: "send-email",
        queue: "mail",
        priority: 5,
        state: "pending",
        attempt: 0,
        fence: 0,
        maxAttempts: 5
      })
      assert.deepStrictEqual(run.payload, { to: "ana@example.com" })
      assert.deepInclude(yield* recorded(stores, id), { state: "ledger", ready: true, ledger: true })
    }))

  it.live("a run enqueued by each path is recorded alike: defaults, options, idempotency, keys and their admission", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* stores.a.setKeyLimits([{ scope: "kind", name: "limited", perKey: 1 }])
      const s = `"${stores.schema}"`
      const viaSql = (args: string) =>
        Effect.map(
          stores.sql.unsafe<{ id: string; created: boolean }>(
            `SELECT id::text, created FROM ${s}.enqueue_run(${args})`
          ),
          (r) => r[0]!
        )
      const pairs: Array<[EnqueueRequest, string]> = [
        [{ kind: "plain", payload: { n: 1 } }, `'plain', '{"n": 1}'`],
        [{ kind: "plain", payload: undefined }, `'plain', NULL`],
        [
          {
            kind: "opts",
            payload: [1, "two"],
            queue: "q2",
            priority: -7,
            maxAttempts: 3,
            traceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
          },
          `'opts', '[1, "two"]', queue => 'q2', priority => -7, max_attempts => 3, trace_parent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'`
        ],
        [{ kind: "later", payload: {}, delayMs: 60_000 }, `'later', '{}', run_at => now() + interval '60 seconds'`],
        [{ kind: "idem", payload: {}, idempotencyKey: "ts-1" }, `'idem', '{}', idempotency_key => 'sql-1'`],
        [{ kind: "unlimited", payload: {}, concurrencyKey: "ts" }, `'unlimited', '{}', concurrency_key => 'sql'`],
        // A unique run is recorded in the ledger, as a run without a window (migration 0031).
        [
          { kind: "once", payload: {}, unique: { key: "ts", periodMs: 60_000 } },
          `'once', '{}', unique_key => 'sql', unique_for => '1 minute'`
        ],
        // Under a limit of 1: the first of a key is admitted (holds slot 0), the second waits. In
        // the ledger (migration 0025): the slot a key_holds row, the wait a waiting row.
        [{ kind: "limited", payload: {}, concurrencyKey: "ts" }, `'limited', '{}', concurrency_key => 'sql'`],
        [{ kind: "limited", payload: {}, concurrencyKey: "ts" }, `'limited', '{}', concurrency_key => 'sql'`],
        // With an idempotency key, in the ledger too (migration 0034): the key in idempotency_keys.
        [
          { kind: "limited", payload: {}, concurrencyKey: "ts-idem", idempotencyKey: "ts-idem-1" },
          `'limited', '{}', concurrency_key => 'sql-idem', idempotency_key => 'sql-idem-1'`
        ],
        [
          { kind: "limited", payload: {}, concurrencyKey: "ts-idem", idempotencyKey: "ts-idem-2" },
          `'limited', '{}', concurrency_key => 'sql-idem', idempotency_key => 'sql-idem-2'`
        ]
      ]
      for (const [request, args] of pairs) {
        const ts = yield* enqueueTs(stores, request)
        const sql = yield* viaSql(args)
        assert.isTrue(ts.created && sql.created)
        const a = yield* recorded(stores, ts.id)
        const b = yield* recorded(stores, sql.id)
        assert.deepStrictEqual(b, a, `${request.kind}: SQL ${args} records what the TypeScript enqueue records`)
        // Every run without a key's limit is ready in the ledger: unique (migration 0031) and
        // idempotent (0034) ones as plain ones.
        if (request.concurrencyKey === undefined) assert.deepInclude(a, { state: "ledger", ready: true, ledger: true })
      }
      // Each key's runs in id order, on both paths: the first admitted (ready, holding slot 0 in
      // key_holds, the ledger's slot domain), the second waiting (out of the ready set, in its
      // key's line), with an idempotency key or without.
      const keyed = yield* stores.sql.unsafe<
        {
          key: string
          states: Array<string>
          rowSlots: Array<number | null>
          ledgerSlots: Array<number | null>
          ready: Array<boolean>
          waiting: Array<boolean>
        }
      >(
        `SELECT r.concurrency_key AS key, array_agg(r.state ORDER BY r.id) AS states,
           array_agg(r.key_slot ORDER BY r.id) AS "rowSlots",
           array_agg((SELECT h.slot FROM ${s}.key_holds h WHERE h.scope = 'kind' AND h.name = r.kind AND h.key = r.concurrency_key
             AND h.run_id = r.id) ORDER BY r.id) AS "ledgerSlots",
           array_agg(y.id IS NOT NULL ORDER BY r.id) AS ready,
           array_agg(EXISTS (SELECT 1 FROM ${s}.waiting w WHERE w.id = r.id) ORDER BY r.id) AS waiting
         FROM ${s}.runs r LEFT JOIN ${s}.ready y ON y.id = r.id WHERE r.kind = 'limited' GROUP BY 1 ORDER BY 1`
      )
      assert.deepStrictEqual(keyed.map((k) => [k.key, k.states, k.ledgerSlots, k.rowSlots, k.ready, k.waiting]), [
        ["sql", ["ledger", "ledger"], [0, null], [null, null], [true, false], [false, true]],
        ["sql-idem", ["ledger", "ledger"], [0, null], [null, null], [true, false], [false, true]],
        ["ts", ["ledger", "ledger"], [0, null], [null, null], [true, false], [false, true]],
        ["ts-idem", ["ledger", "ledger"], [0, null], [null, null], [true, false], [false, true]]
      ])
      // The limit is exact in the one slot domain: per key, one held slot (the limit), held by its
      // admitted run alone; no slot held by a run of another key or by none.
      const holds = yield* stores.sql.unsafe<{ key: string; slots: Array<number>; holders: number; admitted: number }>(
        `SELECT h.key, array_agg(h.slot ORDER BY h.slot) AS slots, count(DISTINCT h.run_id)::int AS holders,
           count(*) FILTER (WHERE r.concurrency_key = h.key AND r.kind = h.name AND y.id IS NOT NULL)::int AS admitted
         FROM ${s}.key_holds h LEFT JOIN ${s}.runs r ON r.id = h.run_id LEFT JOIN ${s}.ready y ON y.id = h.run_id
         GROUP BY h.scope, h.name, h.key ORDER BY h.key`
      )
      assert.deepStrictEqual(holds.map((h) => [h.key, h.slots, h.holders, h.admitted]), [
        ["sql", [0], 1, 1],
        ["sql-idem", [0], 1, 1],
        ["ts", [0], 1, 1],
        ["ts-idem", [0], 1, 1]
      ])

      // A key names one run, whichever path enqueued it first.
      const first = yield* viaSql(`'idem', '{}', idempotency_key => 'ts-1'`)
      const tsFirst = yield* stores.a.get(
        (yield* enqueueTs(stores, { kind: "idem", payload: {}, idempotencyKey: "sql-1" })).id
      )
      assert.isFalse(first.created)
      assert.strictEqual(tsFirst.idempotencyKey, "sql-1")
      const again = yield* enqueueTs(stores, { kind: "idem", payload: { other: true }, idempotencyKey: "sql-1" })
      assert.deepStrictEqual(again, { id: tsFirst.id, created: false })
      const runsOfKeys = yield* stores.sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${s}.runs WHERE kind = 'idem'`
      )
      assert.strictEqual(runsOfKeys[0]!.n, 2)
    }))

  it.live("bad values are refused as the TypeScript enqueue refuses them, naming the option, and nothing is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const s = `"${stores.schema}"`
      const long = "x".repeat(256)
      const cases: Array<[EnqueueRequest | undefined, string, string, string]> = [
        // [TypeScript request (if it can say it), SQL arguments, the SQL option named, the TypeScript option]
        [{ kind: "", payload: {} }, `'', '{}'`, "kind", "kind"],
        [undefined, `NULL, '{}'`, "kind", "kind"],
        [{ kind: long, payload: {} }, `'${long}', '{}'`, "kind", "kind"],
        [{ kind: "k", payload: {}, queue: "" }, `'k', '{}', queue => ''`, "queue", "queue"],
        [undefined, `'k', '{}', queue => NULL`, "queue", "queue"],
        [{ kind: "k", payload: {}, maxAttempts: 0 }, `'k', '{}', max_attempts => 0`, "max_attempts", "maxAttempts"],
        [{ kind: "k", payload: {}, maxAttempts: -3 }, `'k', '{}', max_attempts => -3`, "max_attempts", "maxAttempts"],
        [
          { kind: "k", payload: {}, priority: -(2 ** 31) },
          `'k', '{}', priority => -2147483648`,
          "priority",
          "priority"
        ],
        [
          { kind: "k", payload: {}, delayMs: 101 * 365.25 * 24 * 3600 * 1000 },
          `'k', '{}', run_at => now() + interval '101 years'`,
          "run_at",
          "delay"
        ],
        [undefined, `'k', '{}', run_at => 'infinity'`, "run_at", "delay"],
        [
          { kind: "k", payload: {}, idempotencyKey: "" },
          `'k', '{}', idempotency_key => ''`,
          "idempotency_key",
          "idempotencyKey"
        ],
        [
          { kind: "k", payload: {}, idempotencyKey: "i".repeat(1025) },
          `'k', '{}', idempotency_key => '${"i".repeat(1025)}'`,
          "idempotency_key",
          "idempotencyKey"
        ],
        [
          { kind: "k", payload: {}, concurrencyKey: "" },
          `'k', '{}', concurrency_key => ''`,
          "concurrency_key",
          "concurrencyKey"
        ],
        // Uniqueness windows (migration 0022): the same refusals, worded for SQL's types.
        [undefined, `'k', '{}', unique_for => '0 seconds'`, "unique_for", "unique.periodMs"],
        [undefined, `'k', '{}', unique_for => '-1 hour'`, "unique_for", "unique.periodMs"],
        [undefined, `'k', '{}', unique_states => '{}'`, "unique_states", "unique.states"],
        [
          { kind: "k", payload: {}, unique: { states: ["pending", "done" as never] } },
          `'k', '{}', unique_states => '{pending,done}'`,
          "unique_states",
          "unique.states"
        ],
        [{ kind: "k", payload: {}, unique: { key: "" } }, `'k', '{}', unique_key => ''`, "unique_key", "unique.key"],
        [
          { kind: "k", payload: {}, idempotencyKey: "i", unique: { key: "u" } },
          `'k', '{}', idempotency_key => 'i', unique_key => 'u'`,
          "unique",
          "unique"
        ]
      ]
      const before = yield* written(stores)
      for (const [request, args, sqlOption, tsOption] of cases) {
        const refused = yield* sqlFailure(stores.sql.unsafe(`SELECT ${s}.enqueue(${args})`))
        assert.strictEqual(refused.code, "22023", args)
        assert.match(refused.message!, new RegExp(`^invalid option ${sqlOption}: `), args)
        if (request !== undefined) {
          const ts = yield* Effect.flip(stores.a.enqueue([request]))
          assert.instanceOf(ts, InvalidConfig)
          assert.strictEqual((ts as InvalidConfig).option, tsOption)
          // The names' checks are one rule: the same words after the option.
          if (tsOption !== "delay" && tsOption !== "unique") {
            assert.strictEqual(refused.message!.split(": ").slice(1).join(": "), (ts as InvalidConfig).issue, args)
          }
        }
      }
      // A payload that is not JSON is refused by the cast, before the function runs.
      const notJson = yield* sqlFailure(stores.sql.unsafe(`SELECT ${s}.enqueue('k', 'not json')`))
      assert.strictEqual(notJson.code, "22P02")
      assert.deepStrictEqual(yield* written(stores), before)
      assert.deepStrictEqual(before, { runs: 0, ready: 0 })
    }))

  it.live("from a trigger on an application's table: in its transaction, and a rollback enqueues nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const s = `"${stores.schema}"`
      const sql = stores.sql
      yield* sql.unsafe(`CREATE TABLE ${s}.orders (id bigint PRIMARY KEY, total numeric NOT NULL)`)
      yield* sql.unsafe(`CREATE FUNCTION ${s}.ship_order() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM ${s}.enqueue('ship', jsonb_build_object('order', NEW.id, 'total', NEW.total), queue => 'shipping');
          RETURN NEW;
        END $$`)
      yield* sql.unsafe(
        `CREATE TRIGGER ship_order AFTER INSERT ON ${s}.orders FOR EACH ROW EXECUTE FUNCTION ${s}.ship_order()`
      )

      // The application's transaction fails after its insert: the order and its run go together.
      const rolledBack = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(`INSERT INTO ${s}.orders VALUES (1, 10)`)
        const inside = yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.runs WHERE kind = 'ship'`)
        assert.strictEqual(inside[0]!.n, 1, "the run is visible inside the application's transaction")
        return yield* Effect.fail("the application gives up")
      })))
      assert.isTrue(Exit.isFailure(rolledBack))
      assert.deepStrictEqual(yield* written(stores), { runs: 0, ready: 0 })
      const orders = yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.orders`)
      assert.strictEqual(orders[0]!.n, 0)

      yield* sql.withTransaction(sql.unsafe(`INSERT INTO ${s}.orders VALUES (2, 25.5)`))
      const runs = yield* stores.a.list({ kind: "ship", limit: 10 })
      assert.strictEqual(runs.length, 1)
      assert.deepInclude(runs[0]!, { queue: "shipping", state: "pending" })
      assert.deepStrictEqual(runs[0]!.payload, { order: 2, total: 25.5 })
      assert.deepStrictEqual(yield* written(stores), { runs: 1, ready: 1 })
    }))

  it.live("a worker polling once a minute picks a SQL-enqueued run up on its notification", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const echo = Handler.make({
        kind: "echo",
        payload: Schema.Struct({ n: Schema.Number }),
        handle: ({ n }) => Effect.succeed({ n })
      })
      yield* startWorker(stores.a, stores.sql, { handlers: [echo], pollInterval: "1 minute", ttl: "5 seconds" })
      // The worker's first claim found nothing: from now on it waits a minute, or for a notification.
      yield* Effect.sleep("1 second")
      const rows = yield* stores.sql.unsafe<{ id: string }>(
        `SELECT "${stores.schema}".enqueue('echo', '{"n": 7}')::text AS id`
      )
      const id = rows[0]!.id
      const done = yield* eventually(
        "completed",
        Effect.map(stores.a.get(id), (r) => r.state === "completed" ? r : undefined),
        "15 seconds"
      )
      assert.deepStrictEqual(done.result, { n: 7 })
    }))

  it.live("a payload its handler's schema refuses fails its run with InvalidPayload, once, and the next run still runs", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const s = `"${stores.schema}"`
      const echo = Handler.make({
        kind: "echo",
        payload: Schema.Struct({ n: Schema.Number }),
        handle: ({ n }) => Effect.succeed({ n })
      })
      // The bad run first in claim order (a higher priority), then a good one behind it.
      const bad = (yield* stores.sql.unsafe<{ id: string }>(
        `SELECT ${s}.enqueue('echo', '{"n": "seven"}', priority => 1)::text AS id`
      ))[0]!.id
      const good =
        (yield* stores.sql.unsafe<{ id: string }>(`SELECT ${s}.enqueue('echo', '{"n": 8}')::text AS id`))[0]!.id
      yield* startWorker(stores.a, stores.sql, { handlers: [echo], pollInterval: "50 millis", ttl: "5 seconds" })
      const failed = yield* eventually(
        "bad run failed",
        Effect.map(stores.a.get(bad), (r) => r.state === "failed" ? r : undefined)
      )
      assert.strictEqual(failed.attempt, 1, "a permanent failure: not retried")
      const error = failed.error as { tag: string; message: string; permanent: boolean }
      assert.strictEqual(error.tag, "InvalidPayload")
      assert.isTrue(error.permanent)
      assert.include(error.message, `invalid payload for kind "echo"`)
      assert.include(error.message, "n")
      const completed = yield* eventually(
        "good run completed",
        Effect.map(stores.a.get(good), (r) => r.state === "completed" ? r : undefined)
      )
      assert.deepStrictEqual(completed.result, { n: 8 })
      // The TypeScript client refuses such a payload before writing: only SQL can enqueue it.
      const registry = yield* Handler.registry([echo])
      const refused = yield* Effect.flip(
        Client.enqueueUnknown(registry, "echo", { n: "seven" }).pipe(Effect.provideService(RunStore, stores.a))
      )
      assert.strictEqual(refused._tag, "InvalidPayload")
    }))
})
