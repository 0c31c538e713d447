/**
 * Bad input at every public entry point fails with a typed error naming the option and writes
 * nothing: store options, worker options, enqueue options.
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, RunStore, Worker } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { databaseUrl, freshSchema } from "./support/db.js"
import { readRun, twoStores } from "./support/stores.js"

const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })

describe("store options", () => {
  it.live("an invalid schema name, completedRuns or runtimeConnections is InvalidConfig, and no schema is created", () =>
    Effect.gen(function*() {
      const client = yield* Layer.build(Database.clientLayer(databaseUrl(), { maxConnections: 2 }))
      const sql = Context.get(client, SqlClient.SqlClient)
      const cases: ReadonlyArray<readonly [PgRunStore.PgRunStoreOptions, string]> = [
        [{ schema: "Bad-Name" }, "schema"],
        [{ schema: freshSchema("bad"), completedRuns: "sometimes" as never }, "completedRuns"],
        [{ schema: freshSchema("bad"), runtimeConnections: 0 }, "runtimeConnections"]
      ]
      for (const [options, option] of cases) {
        const error = yield* Effect.flip(Effect.provideContext(Layer.build(PgRunStore.layer(options)), client))
        assert.deepInclude(error, { _tag: "InvalidConfig", option })
        const schemas = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = ${options.schema!}`
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
