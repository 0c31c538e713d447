/**
 * The hand-off of a completion batch on PostgreSQL, where other transactions hold rows: a batch
 * that frees several slots of one key gives each to a waiting run of its own (the statement's own
 * locks on the key's earlier runs do not make it skip them; others' do), in claim order.
 */
import { assert, describe, it } from "@effect/vitest"
import { KeyLimits, RunStore } from "@leasehold/core"
import { Context, Deferred, Duration, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, storeLayer } from "./support/db.js"

describe("hand-off of a completion batch", () => {
  it.live("frees three slots of one key: each goes to its own waiting run, in claim order, passing over the one another transaction holds", () =>
    Effect.gen(function*() {
      const schema = freshSchema("handoff")
      const context = yield* Layer.build(storeLayer(schema, 2))
      const sql = Context.get(context, SqlClient.SqlClient)
      const store = Context.get(context, RunStore)
      yield* store.setKeyLimits([KeyLimits.perKind("noop", 3)])
      const ids = (yield* store.enqueue(Array.from({ length: 8 }, (_, i) => ({ kind: "noop", payload: { i }, concurrencyKey: "K" }))))
        .map((r) => r.id)
      const request = { owner: "w", queues: ["default"], kinds: ["noop"], limit: 10, ttl: Duration.seconds(30) }
      const running = yield* store.claim(request)
      assert.deepStrictEqual(running.map((r) => r.id), ids.slice(0, 3), "the key's first three hold its three slots")

      // Another transaction holds the key's first waiting run while the batch is written.
      const locked = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
        yield* sql`SELECT id FROM ${sql(schema)}.runs WHERE id = ${ids[3]!}::bigint FOR UPDATE`
        yield* Deferred.succeed(locked, undefined)
        yield* Deferred.await(release)
      })))
      yield* Deferred.await(locked)
      const outcomes = yield* store.completeBatch(
        running.map((r) => ({ runId: r.id, fence: r.fence, result: null, keyed: true })),
        request
      )
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)

      // Slot 0's run hands it to the first run not held elsewhere, slot 1's to the next, and so on.
      assert.deepStrictEqual(
        outcomes.map((o) => o._tag === "Finalized" ? o.next?.id : o._tag),
        ids.slice(4, 7),
        "each freed slot went to a run of its own, the held run passed over"
      )
      const slots = yield* Effect.forEach(ids.slice(4, 7), (id) => Effect.map(store.get(id), (r) => [r.state, r.keySlot]))
      assert.deepStrictEqual(slots, [["running", 0], ["running", 1], ["running", 2]])
      for (const id of [ids[3]!, ids[7]!]) {
        assert.deepInclude(yield* store.get(id), { state: "pending", keySlot: null, waitingForKey: true }, `run ${id} still waits`)
      }
    }))
})
