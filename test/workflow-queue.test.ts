/**
 * Issue 30 item 4: `DurableQueue` on PostgreSQL through `LeaseholdQueueStore`, Effect's
 * `PersistedQueue` store over Leasehold runs: elements survive a restart, and a take holds its
 * element under a lease and a fence, so a superseded taker settles nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdQueueStore } from "@leasehold/workflow"
import { Effect, Exit, Layer, Schema, Scope } from "effect"
import { PersistedQueue } from "effect/persistence"
import { SqlClient } from "effect/sql"
import { DurableQueue, Workflow } from "effect/workflow"
import { databaseUrl, freshSchema, setLeaseExpirySql } from "./support/db.js"
import { eventually } from "./support/workers.js"
import { leaseholdEngine } from "./support/workflowEngine.js"

const Appraisal = DurableQueue.make({
  name: "appraisal",
  payload: { lot: Schema.String, estimate: Schema.Number },
  success: Schema.Number,
  error: Schema.String,
  idempotencyKey: ({ lot }) => lot
})

const Auction = Workflow.make("Auction", {
  payload: { lot: Schema.String, estimate: Schema.Number },
  success: Schema.Number,
  error: Schema.String,
  idempotencyKey: ({ lot }) => lot
})

const AuctionLayer = Auction.toLayer(({ estimate, lot }) => DurableQueue.process(Appraisal, { lot, estimate }))

/** Appraises at 110 % of the estimate; a lot named "fake" is refused. */
const appraiser = DurableQueue.worker(
  Appraisal,
  ({ estimate, lot }) => lot === "fake" ? Effect.fail("not genuine") : Effect.succeed(Math.round(estimate * 1.1))
)

const queueStore = LeaseholdQueueStore.layer({ ttl: "3 seconds", pollInterval: "50 millis" })

const elements = (sql: SqlClient.SqlClient, schema: string) =>
  sql<{ state: string; fence: string; attempt: number }>`
    SELECT state, fence::text AS fence, attempt FROM ${sql(schema)}.runs_now WHERE kind = ${
    LeaseholdQueueStore.kindOf("DurableQueue/appraisal")
  }`

describe("DurableQueue on Leasehold", () => {
  it.live("an element offered by a workflow survives a restart before any worker takes it, and is processed once after", () =>
    Effect.gen(function*() {
      const schema = freshSchema("wfq")
      const sql = yield* SqlClient.SqlClient
      // First the application alone: the workflow offers its element and waits.
      const first = yield* Scope.make()
      const app = AuctionLayer.pipe(Layer.provideMerge(queueStore), Layer.provideMerge(leaseholdEngine({ schema })))
      const context = yield* Layer.buildWithScope(app, first)
      const executionId = yield* Auction.execute({ lot: "vase", estimate: 100 }, { discard: true }).pipe(
        Effect.provideContext(context)
      )
      yield* eventually(
        "the element is stored",
        Effect.map(elements(sql, schema), (rows) => rows.length === 1 && rows[0]!.state === "pending")
      )
      yield* Scope.close(first, Exit.void)

      // Then a restart with an appraiser: the element is taken, and the workflow completes with it.
      const restarted = Layer.mergeAll(AuctionLayer, appraiser).pipe(
        Layer.provideMerge(queueStore),
        Layer.provideMerge(leaseholdEngine({ schema }))
      )
      const price = yield* Auction.execute({ lot: "vase", estimate: 100 }).pipe(Effect.provide(restarted))
      assert.strictEqual(price, 110)
      assert.strictEqual(executionId, yield* Auction.executionId({ lot: "vase", estimate: 100 }))
      const rows = yield* elements(sql, schema)
      assert.deepStrictEqual(rows.map((r) => [r.state, r.fence]), [["completed", "1"]])
    }).pipe(Effect.provide(Database.layerFromUrl(databaseUrl(), { maxConnections: 2 }))))

  it.live("a worker's failure reaches the workflow as its typed error", () =>
    Effect.gen(function*() {
      const error = yield* Auction.execute({ lot: "fake", estimate: 5 }).pipe(Effect.flip)
      assert.strictEqual(error, "not genuine")
    }).pipe(
      Effect.provide(
        Layer.mergeAll(AuctionLayer, appraiser).pipe(
          Layer.provideMerge(queueStore),
          Layer.provideMerge(leaseholdEngine())
        )
      )
    ))

  it.live("a take superseded after its lease expired settles nothing; the element is completed by the taker that holds it", () =>
    Effect.gen(function*() {
      const schema = freshSchema("wfqf")
      const layer = LeaseholdQueueStore.layer({ ttl: "1 minute", pollInterval: "20 millis" }).pipe(
        Layer.provideMerge(PgRunStore.layer({ schema })),
        Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 3 }))
      )
      yield* Effect.gen(function*() {
        const store = yield* PersistedQueue.PersistedQueueStore
        const sql = yield* SqlClient.SqlClient
        yield* store.offer({ name: "ledger", id: "entry-1", element: { amount: 7 }, isCustomId: true })
        // An id offered again is the same element.
        yield* store.offer({ name: "ledger", id: "entry-1", element: { amount: 8 }, isCustomId: true })
        const take = { name: "ledger", maxAttempts: 3, retryDelay: () => Effect.succeed(0 as any) }
        const a = yield* Scope.make()
        const taken = yield* store.take(take).pipe(Scope.provide(a))
        assert.deepStrictEqual(taken, { id: "entry-1", attempts: 1, element: { amount: 7 } })
        // A's lease runs out (its process stalled); B takes the element under the next fence.
        const [entry] = yield* sql<{ id: string }>`SELECT id::text AS id FROM ${sql(schema)}.runs WHERE kind = ${
          LeaseholdQueueStore.kindOf("ledger")
        }`
        yield* sql.unsafe(setLeaseExpirySql(schema, entry!.id, "now() - interval '1 second'"))
        const b = yield* Scope.make()
        const again = yield* store.take(take).pipe(Scope.provide(b))
        assert.deepStrictEqual(again, { id: "entry-1", attempts: 2, element: { amount: 7 } })
        const state = () =>
          Effect.map(
            sql<{ state: string; fence: string }>`SELECT state, fence::text AS fence FROM ${
              sql(schema)
            }.runs_now WHERE kind = ${LeaseholdQueueStore.kindOf("ledger")}`,
            (rows) => rows
          )
        // A finishes late: its completion is refused by the fence.
        yield* Scope.close(a, Exit.void)
        assert.deepStrictEqual(yield* state(), [{ state: "running", fence: "2" }])
        yield* Scope.close(b, Exit.void)
        assert.deepStrictEqual(yield* state(), [{ state: "completed", fence: "2" }])
        const runs = yield* RunStore
        const [row] = yield* sql<{ id: string }>`SELECT id::text AS id FROM ${sql(schema)}.runs WHERE kind = ${
          LeaseholdQueueStore.kindOf("ledger")
        }`
        const history = (yield* runs.history(row!.id)).map((e) => [e.kind, e.fence])
        assert.deepInclude(history, ["completed", 2])
      }).pipe(Effect.provide(layer))
    }))
})
