/**
 * Issue 16, poolers: the worker's whole path through a real PgBouncer in transaction pooling mode,
 * with fewer server connections than clients, so consecutive transactions of one client run on
 * different server connections. A drain in fenced transactions, the fencing of stale writes, and
 * wake-ups by LISTEN on a direct URL beside the pooled one.
 */
import { assert, describe, it } from "@effect/vitest"
import { CurrentRun, Fence, FenceRejected, Handler, Run, RunStore, type WorkerEvents } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Duration, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { databaseUrl, freshSchema, setLeaseExpirySql } from "./support/db.js"
import * as PgBouncer from "./support/pgbouncer.js"
import { eventually, startWorker } from "./support/workers.js"

/** A store through the pooler (its own client pool of `clients`), optionally listening directly. */
const pooledStore = (pooler: PgBouncer.Pooler, schema: string, listenUrl?: string, clients = 8) =>
  Effect.map(
    Layer.build(
      PgRunStore.layer({ schema, pooler: { listenUrl } }).pipe(
        Layer.provideMerge(Database.layerFromUrl(pooler.url, { maxConnections: clients, pooler: "transaction" }))
      )
    ),
    (context) => ({ store: Context.get(context, RunStore), sql: Context.get(context, SqlClient.SqlClient) })
  )

/** A PgBouncer with `poolSize` server connections, a fresh schema with its ledger, two stores through it. */
const twoWorkersThrough = (poolSize: number, prefix: string) =>
  Effect.gen(function*() {
    const pooler = yield* PgBouncer.start(databaseUrl(), poolSize)
    const schema = freshSchema(prefix)
    const a = yield* pooledStore(pooler, schema)
    const b = yield* pooledStore(pooler, schema)
    yield* a.sql.unsafe(
      `CREATE TABLE "${schema}".ledger (run_id bigint NOT NULL, fence bigint NOT NULL, n int NOT NULL)`
    )
    return { pooler, schema, a, b }
  })

const ledgered = (schema: string) =>
  Handler.make({
    kind: "ledgered",
    payload: Schema.Struct({ n: Schema.Number }),
    handle: ({ n }) =>
      Run.transaction(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const fence = yield* Fence
        yield* sql`INSERT INTO ${
          sql(schema)
        }.ledger (run_id, fence, n) VALUES (${fence.runId}::bigint, ${fence.fence}, ${n})`
        return n
      }))
  })

describe("through PgBouncer in transaction mode", () => {
  it.live(
    "a drain of 2,000 runs by two workers: each completes once, its ledger row in its fenced transaction",
    () =>
      Effect.gen(function*() {
        const { a, b, schema } = yield* twoWorkersThrough(4, "pool")
        const total = 2_000
        yield* a.store.enqueue(Array.from({ length: total }, (_, n) => ({ kind: "ledgered", payload: { n } })))
        const options = {
          handlers: [ledgered(schema)],
          concurrency: 20,
          pollInterval: "50 millis",
          ttl: "10 seconds"
        } as const
        yield* startWorker(a.store, a.sql, { ...options, owner: "a" })
        yield* startWorker(b.store, b.sql, { ...options, owner: "b" })
        const count = (query: string) => Effect.map(a.sql.unsafe<{ n: number }>(query), (rows) => rows[0]!.n)
        yield* eventually(
          "every run completed",
          Effect.map(
            count(`SELECT count(*)::int AS n FROM "${schema}".runs_now WHERE state = 'completed'`),
            (n) => n === total
          ),
          "60 seconds"
        )
        assert.strictEqual(yield* count(`SELECT count(*)::int AS n FROM "${schema}".ledger`), total)
        assert.strictEqual(yield* count(`SELECT count(DISTINCT run_id)::int AS n FROM "${schema}".ledger`), total)
        // Each row was written under the fence its run completed with.
        assert.strictEqual(
          yield* count(
            `SELECT count(*)::int AS n FROM "${schema}".ledger l JOIN "${schema}".runs_now r ON r.id = l.run_id WHERE r.fence <> l.fence`
          ),
          0
        )
      }),
    120_000
  )

  it.live("a superseded holder's writes through the pooler are refused by the fence, its transaction rolled back", () =>
    Effect.gen(function*() {
      const { a, b, schema } = yield* twoWorkersThrough(2, "poolfence")
      const [run] = yield* a.store.enqueue([{ kind: "ledgered", payload: { n: 1 } }])
      const claim = (store: RunStore["Service"], owner: string) =>
        store.claim({ owner, queues: ["default"], kinds: ["ledgered"], limit: 1, ttl: Duration.minutes(1) })
      yield* claim(a.store, "a")
      yield* a.sql.unsafe(setLeaseExpirySql(schema, run!.id, "now() - interval '1 second'"))
      const [second] = yield* claim(b.store, "b")
      assert.strictEqual(second!.fence, 2)

      const stale = { runId: run!.id, fence: 1 }
      const [completion] = yield* a.store.completeBatch([{ ...stale, result: "1" }])
      assert.deepInclude(completion, { _tag: "Rejected", fence: 1, storedFence: 2 })
      const rejected = [
        yield* Effect.flip(a.store.checkpoint(stale, { step: 1 })),
        yield* Effect.flip(a.store.fail({ ...stale, error: "boom", retryDelayMs: undefined }))
      ]
      for (const error of rejected) assert.deepInclude(error as object, { presentedFence: 1, storedFence: 2 })
      const transaction = yield* Effect.flip(
        ledgered(schema).handle({ n: 1 }).pipe(
          Effect.provideService(Fence, { runId: run!.id, fence: 1, owner: "a" }),
          Effect.provideService(RunStore, a.store),
          Effect.provideService(SqlClient.SqlClient, a.sql),
          Effect.provideService(CurrentRun, {
            kind: "ledgered",
            queue: "default",
            attempt: 1,
            maxAttempts: 5,
            checkpoint: null,
            signals: {}
          })
        )
      )
      assert.instanceOf(transaction, FenceRejected)
      assert.deepInclude(transaction, { presentedFence: 1, storedFence: 2, operation: "transaction" })
      assert.strictEqual((yield* a.sql.unsafe(`SELECT 1 FROM "${schema}".ledger`)).length, 0)

      // The holder of fence 2 completes it, through the pooler too.
      const outcomes = yield* b.store.completeBatch([{ runId: run!.id, fence: 2, result: "2" }])
      assert.strictEqual(outcomes[0]!._tag, "Finalized")
      assert.deepInclude(yield* a.store.get(run!.id), { state: "completed", fence: 2 })
    }))

  it.live("with a direct URL to listen on, an idle worker is woken by NOTIFY (it would not poll for an hour)", () =>
    Effect.gen(function*() {
      const pooler = yield* PgBouncer.start(databaseUrl(), 2)
      const schema = freshSchema("poollisten")
      const listening = yield* pooledStore(pooler, schema, databaseUrl())
      yield* listening.sql.unsafe(
        `CREATE TABLE "${schema}".ledger (run_id bigint NOT NULL, fence bigint NOT NULL, n int NOT NULL)`
      )
      const events: Array<WorkerEvents.WorkerEvent> = []
      yield* startWorker(listening.store, listening.sql, {
        handlers: [ledgered(schema)],
        pollInterval: "1 hour",
        owner: "l"
      }, events)
      yield* eventually("the worker listens", Effect.sync(() => events.some((e) => e._tag === "Listening")))
      const [run] = yield* listening.store.enqueue([{ kind: "ledgered", payload: { n: 7 } }])
      yield* eventually("the run completes", Effect.map(listening.store.get(run!.id), (r) => r.state === "completed"))
    }))

  it.live("without the pooler option the runtime pool's session settings are refused: claims cannot connect (08P01)", () =>
    Effect.gen(function*() {
      const pooler = yield* PgBouncer.start(databaseUrl(), 2)
      const context = yield* Layer.build(
        PgRunStore.layer({ schema: freshSchema("poolplain") }).pipe(
          Layer.provideMerge(Database.layerFromUrl(pooler.url, { maxConnections: 4, pooler: "transaction" }))
        )
      )
      const claim = yield* Effect.flip(
        Context.get(context, RunStore).claim({
          owner: "o",
          queues: ["default"],
          kinds: ["x"],
          limit: 1,
          ttl: Duration.minutes(1)
        })
      )
      assert.deepInclude(claim, { _tag: "StoreError", operation: "claim", reason: "ConnectionError" })
      assert.include(JSON.stringify(claim), "08P01")
    }))
})
