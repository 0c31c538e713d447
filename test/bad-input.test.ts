/**
 * Bad input at every public entry point fails with a typed error naming the option and writes
 * nothing: store options, worker options, enqueue options, and the values PostgreSQL would refuse
 * (over HTTP: 400; in the CLI: exit 2).
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, isValueRefused, RunStore, Worker } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { connection, leasehold } from "./support/cli.js"
import { databaseUrl, freshSchema } from "./support/db.js"
import { postJson, request, startServer } from "./support/http.js"
import { readRun, type Stores, twoStores } from "./support/stores.js"

const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })

describe("store options", () => {
  it.live("an invalid schema name, completedRuns or runtimeConnections is InvalidConfig, and no schema is created", () =>
    Effect.gen(function*() {
      const client = yield* Layer.build(Database.layerFromUrl(databaseUrl(), { maxConnections: 2 }))
      const sql = Context.get(client, SqlClient.SqlClient)
      const cases: ReadonlyArray<readonly [PgRunStore.PgRunStoreOptions, string]> = [
        [{ schema: "Bad-Name" }, "schema"],
        [{ schema: freshSchema("bad"), completedRuns: "sometimes" as never }, "completedRuns"],
        [{ schema: freshSchema("bad"), runtimeConnections: 0 }, "runtimeConnections"]
      ]
      for (const [options, option] of cases) {
        const error = yield* Effect.flip(Effect.provideContext(Layer.build(PgRunStore.layer(options)), client))
        assert.deepInclude(error, { _tag: "InvalidConfig", option })
        const schemas = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = ${options
          .schema!}`
        assert.strictEqual(schemas[0]!.n, 0, `no schema for ${option}`)
      }
    }))
})

describe("worker options", () => {
  it.live("a heartbeat over half the TTL, no concurrency, a malformed duration or two handlers of one kind: InvalidConfig, nothing claimed", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      const cases: ReadonlyArray<readonly [Worker.WorkerOptions<never>, string]> = [
        [{ handlers: [job], ttl: "10 seconds", heartbeat: "6 seconds" }, "heartbeat"],
        [{ handlers: [job], concurrency: 0 }, "concurrency"],
        [{ handlers: [job], concurrency: 2.5 }, "concurrency"],
        [{ handlers: [job], ttl: "thirty seconds" as never }, "ttl"],
        [{ handlers: [job], pollInterval: -5 }, "pollInterval"],
        [{ handlers: [job], queues: [] }, "queues"],
        [{ handlers: [job, job] }, "handlers"]
      ]
      for (const [options, option] of cases) {
        const error = yield* Effect.flip(Worker.run(options).pipe(Effect.provideService(RunStore, stores.a)))
        assert.deepInclude(error, { _tag: "InvalidConfig", option })
      }
      assert.deepInclude(yield* readRun(stores, run!.id), { state: "pending", fence: 0, attempt: 0 })
    }))
})

describe("enqueue options", () => {
  it.live("an empty kind or queue, a fractional priority, a negative delay or zero attempts: InvalidConfig, and no run of the batch is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const count = Effect.map(
        stores.sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${stores.schema}".runs`),
        (rows) => rows[0]!.n
      )
      const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
        [{ kind: "" }, "kind"],
        [{ kind: "job", queue: "" }, "queue"],
        [{ kind: "job", priority: 1.5 }, "priority"],
        [{ kind: "job", delayMs: -1 }, "delay"],
        [{ kind: "job", delayMs: Number.NaN }, "delay"],
        [{ kind: "job", maxAttempts: 0 }, "maxAttempts"],
        [{ kind: "job", idempotencyKey: "" }, "idempotencyKey"]
      ]
      for (const [request, option] of cases) {
        const batch = [{ kind: "job", payload: null }, { payload: null, ...request }] as never
        const error = yield* Effect.flip(stores.a.enqueue(batch))
        assert.deepInclude(error, { _tag: "InvalidConfig", option })
      }
      const viaClient = yield* Effect.flip(
        Client.enqueue(job, null, { maxAttempts: -3 }).pipe(Effect.provideService(RunStore, stores.a))
      )
      assert.deepInclude(viaClient, { _tag: "InvalidConfig", option: "maxAttempts" })
      assert.strictEqual(yield* count, 0)
    }))
})

describe("values PostgreSQL refuses (issue 27)", () => {
  const refund = Handler.make({ kind: "refund", payload: Schema.Unknown, handle: () => Effect.void })
  const adminToken = "admin-token-for-bad-input-0123456789"
  const bearer = { authorization: `Bearer ${adminToken}` }
  const rows = (stores: Stores) =>
    Effect.map(
      stores.sql.unsafe<{ runs: number; events: number; paused: number }>(
        `SELECT (SELECT count(*)::int FROM "${stores.schema}".runs) AS runs, (SELECT count(*)::int FROM "${stores.schema}".run_events) AS events,
          (SELECT count(*)::int FROM "${stores.schema}".paused_queues) AS paused`
      ),
      (r) => r[0]!
    )

  it.live("over HTTP: a NUL in the payload or queue, delayMs 1e300, a 100 KB queue or idempotency key, pausing queue a%00b: 400 naming the field, nothing written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token: adminToken })
      const big = "q".repeat(100 * 1024)
      const enqueues: ReadonlyArray<readonly [string, string, string, string]> = [
        [
          "a NUL in the payload",
          `{"kind":"refund","payload":{"note":"a\\u0000b"}}`,
          "invalid-payload",
          "$.note holds a NUL"
        ],
        [
          "a NUL in the queue",
          `{"kind":"refund","queue":"a\\u0000b"}`,
          "invalid-option",
          "invalid option queue: must not contain NUL"
        ],
        [
          "delayMs 1e300",
          `{"kind":"refund","delayMs":1e300}`,
          "invalid-option",
          "invalid option delay: 1e+300 ms is not a finite delay"
        ],
        [
          "a 100 KB queue",
          JSON.stringify({ kind: "refund", queue: big }),
          "invalid-option",
          "invalid option queue: is 102400 bytes long, over the limit of 255"
        ],
        [
          "a 100 KB idempotency key",
          JSON.stringify({ kind: "refund", idempotencyKey: big }),
          "invalid-option",
          "invalid option idempotencyKey: is 102400 bytes long, over the limit of 1024"
        ]
      ]
      for (const [what, body, error, message] of enqueues) {
        const answer = yield* postJson(`${origin}/api/runs`, body, bearer)
        assert.strictEqual(answer.status, 400, what)
        assert.strictEqual(answer.body.error, error, what)
        assert.include(answer.body.message, message, what)
      }
      for (const action of ["pause", "resume"]) {
        const answer = yield* postJson(`${origin}/api/queues/a%00b/${action}`, {}, bearer)
        assert.deepStrictEqual([answer.status, answer.body.error], [400, "invalid-option"], action)
        assert.include(answer.body.message, "queue: must not contain NUL")
      }
      const listed = yield* request(`${origin}/api/runs?queue=a%00b`, { headers: bearer })
      assert.deepStrictEqual([listed.status, listed.body.error], [400, "invalid-request"])
      assert.deepStrictEqual(yield* rows(stores), { runs: 0, events: 0, paused: 0 })

      // A body not declared as JSON is 415, whatever it holds.
      const typed = yield* request(`${origin}/api/runs`, {
        method: "POST",
        headers: { ...bearer, "content-type": "text/plain" },
        body: `{"kind":"refund"}`
      })
      assert.deepStrictEqual([typed.status, typed.body.error], [415, "unsupported-media-type"])
      assert.deepStrictEqual(yield* rows(stores), { runs: 0, events: 0, paused: 0 })
      // The same request made valid is written.
      assert.strictEqual(
        (yield* postJson(`${origin}/api/runs`, { kind: "refund", payload: { note: "ab" } }, bearer)).status,
        201
      )
    }))

  it.live("in the CLI: a NUL in the payload, a 300-byte queue, a 100 KB idempotency key, a delay past 100 years: one line naming the field, exit 2, no row written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const valid = `{"image":"a.png","width":10}`
      const cases: ReadonlyArray<readonly [string, ReadonlyArray<string>, RegExp]> = [
        [
          "a NUL in the payload",
          ["enqueue", "resize-image", "--payload", `{"image":"a\\u0000.png","width":10}`],
          /\$\.image holds a NUL/
        ],
        [
          "a 300-byte queue",
          ["enqueue", "resize-image", "--payload", valid, "--queue", "q".repeat(300)],
          /invalid option queue: is 300 bytes long, over the limit of 255/
        ],
        ["a 100 KB idempotency key", [
          "enqueue",
          "resize-image",
          "--payload",
          valid,
          "--idempotency-key",
          "k".repeat(100 * 1024)
        ], /invalid option idempotencyKey: is 102400 bytes long/],
        [
          "a delay past 100 years",
          ["enqueue", "resize-image", "--payload", valid, "--delay", "40000 days"],
          /invalid option delay: .* ms is not a finite delay from 0 to/
        ],
        ["a 300-byte queue to pause", ["queues", "pause", "q".repeat(300)], /invalid option queue: is 300 bytes long/]
      ]
      for (const [what, args, reason] of cases) {
        const result = yield* leasehold([...args, ...connection(stores.schema)])
        assert.strictEqual(result.code, 2, `${what}: ${result.stderr}`)
        const lines = result.stderr.split("\n").filter((line) => line.length > 0)
        assert.strictEqual(lines.length, 1, `${what}: ${result.stderr}`)
        assert.match(lines[0]!, reason, what)
      }
      assert.deepStrictEqual(yield* rows(stores), { runs: 0, events: 0, paused: 0 })
    }))

  it.live("behind the checks, a value PostgreSQL refuses is StoreError ValueRefused, and 400 over HTTP, never 503; nothing written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const [kept] = yield* stores.a.enqueue([{ kind: "refund", payload: { note: "n" } }])
      const before = yield* rows(stores)
      // Filters reach the statement unchecked: PostgreSQL's refusal (22021) is the line behind the checks.
      const listed = yield* Effect.flip(stores.a.list({ kind: "a\u0000b", limit: 10, offset: 0 }))
      assert.deepInclude(listed, { _tag: "StoreError", operation: "list", reason: "ValueRefused" })
      assert.isTrue(isValueRefused(listed))
      const cancelled = yield* Effect.flip(stores.a.cancelMany({ payload: [{ path: ["note"], value: "\u0000" }] }))
      assert.deepInclude(cancelled, { _tag: "StoreError", reason: "ValueRefused" })

      const { origin } = yield* startServer(stores, { handlers: [refund], token: adminToken })
      const bulk = yield* postJson(`${origin}/api/runs/bulk/cancel`, `{"kind":"a\\u0000b"}`, bearer)
      assert.strictEqual(bulk.status, 400, JSON.stringify(bulk.body))
      assert.strictEqual(bulk.body.error, "value-refused")
      assert.include(bulk.body.message, "the database refused a value of this request: invalid byte sequence")
      assert.deepStrictEqual(yield* rows(stores), before)
      assert.deepInclude(yield* readRun(stores, kept!.id), { state: "pending" })
    }))
})
