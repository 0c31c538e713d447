/**
 * The hand-off of a completion batch on PostgreSQL, where other transactions hold rows: a batch
 * that frees several slots of one key gives each to a waiting run of its own (the statement's own
 * locks on the key's earlier runs do not make it skip them; others' do), in claim order. And a
 * limit lowered below its peak (migration 0015) keeps a completion from handing on a slot while
 * its key holds one above the new limit, also across the upgrade that introduced the peaks.
 */
import { assert, describe, it } from "@effect/vitest"
import { type ClaimedRun, KeyLimits, RunStore } from "@leasehold/core"
import { Database, Migrations, PgRunStore, StoreSchema } from "@leasehold/sql"
import { Context, Deferred, Duration, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { databaseUrl, freshSchema, layerStore } from "./support/db.js"

const request = { owner: "w", queues: ["default"], kinds: ["noop"], limit: 10, ttl: Duration.seconds(30) }

/** Completes one run as a worker does (claiming its key's next run): the run it claimed, if any. */
const completeOne = (store: RunStore["Service"], run: ClaimedRun) =>
  Effect.map(
    store.completeBatch([{ runId: run.id, fence: run.fence, result: null, keyed: true }], request),
    ([outcome]) => outcome?._tag === "Finalized" ? outcome.next?.id : outcome?._tag
  )

const peakOf = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.map(
    sql<{ peak: number }>`SELECT peak FROM ${sql(schema)}.key_limit_peaks WHERE scope = 'kind' AND name = 'noop'`,
    (rows) => rows[0]?.peak
  )

/** A store in a new schema, with the client its assertions read the database through. */
const openStore = (prefix: string) =>
  Effect.gen(function*() {
    const schema = freshSchema(prefix)
    const context = yield* Layer.build(layerStore(schema, 2))
    return { schema, sql: Context.get(context, SqlClient.SqlClient), store: Context.get(context, RunStore) }
  })

/** A limit of 3 on kind noop and `count` runs of key K: the first three claimed, holding its slots. */
const threeHolding = (store: RunStore["Service"], count: number) =>
  Effect.gen(function*() {
    yield* store.setKeyLimits([KeyLimits.perKind("noop", 3)])
    const ids = (yield* store.enqueue(
      Array.from({ length: count }, (_, i) => ({ kind: "noop", payload: { i }, concurrencyKey: "K" }))
    ))
      .map((r) => r.id)
    const running = yield* store.claim(request)
    assert.deepStrictEqual(running.map((r) => r.id), ids.slice(0, 3), "the key's first three hold its three slots")
    return { ids, running }
  })

/**
 * Three runs of key K hold slots 0, 1 and 2 under a limit of 3 lowered to 1: the run of slot 0
 * ends while the two above still run, and hands nothing on; once they have ended too, a sweep
 * admits K's next run, and from then on each completion hands slot 0 on again.
 */
const lowered = (store: RunStore["Service"], running: ReadonlyArray<ClaimedRun>, waiting: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    assert.isUndefined(yield* completeOne(store, running[0]!), "slot 0 is not handed on while slots 1 and 2 are held")
    assert.deepInclude(yield* store.get(waiting[0]!), { state: "pending", keySlot: null, waitingForKey: true })
    assert.isUndefined(yield* completeOne(store, running[1]!), "slot 1 is above the limit")
    assert.isUndefined(yield* completeOne(store, running[2]!), "slot 2 is above the limit")
    const admitted = yield* store.claim(request)
    assert.deepStrictEqual(
      admitted.map((r) => [r.id, r.concurrencyKey]),
      [[waiting[0]!, "K"]],
      "a sweep admits one run: the limit is 1"
    )
    assert.strictEqual(yield* completeOne(store, admitted[0]!), waiting[1]!, "with no slot above, slot 0 is handed on")
  })

describe("hand-off of a completion batch", () => {
  it.live("frees three slots of one key: each goes to its own waiting run, in claim order, passing over the one another transaction holds", () =>
    Effect.gen(function*() {
      const { schema, sql, store } = yield* openStore("handoff")
      const { ids, running } = yield* threeHolding(store, 8)

      // Another transaction holds the key's first waiting run while the batch is written.
      const locked = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
        yield* sql`SELECT id FROM ${sql(schema)}.runs WHERE id = ${ids[3]!}::bigint FOR UPDATE`
        // A keyed run of the ledger waits in its key's line (migration 0025): that row is what a hand-off locks.
        const inLine = yield* sql`SELECT id FROM ${sql(schema)}.waiting WHERE id = ${ids[3]!}::bigint FOR UPDATE`
        assert.strictEqual(inLine.length, 1, "the default store keeps the waiting run in the ledger's line")
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
      const slots = yield* Effect.forEach(
        ids.slice(4, 7),
        (id) => Effect.map(store.get(id), (r) => [r.state, r.keySlot])
      )
      assert.deepStrictEqual(slots, [["running", 0], ["running", 1], ["running", 2]])
      for (const id of [ids[3]!, ids[7]!]) {
        assert.deepInclude(
          yield* store.get(id),
          { state: "pending", keySlot: null, waitingForKey: true },
          `run ${id} still waits`
        )
      }
    }))

  it.live("a limit lowered below its peak: no slot is handed on while the key holds one above it; the peak outlives a removed limit", () =>
    Effect.gen(function*() {
      const { schema, sql, store } = yield* openStore("peak")
      const { ids, running } = yield* threeHolding(store, 6)
      yield* store.setKeyLimits([KeyLimits.perKind("noop", 1)])
      assert.strictEqual(yield* peakOf(sql, schema), 3, "lowering a limit leaves its peak")
      yield* lowered(store, running, ids.slice(3))
      // Raised again, three runs of key L hold slots 0 to 2; then the limit is removed and declared
      // again at 1. The peak stays, and L's slot 0 is not handed on while 1 and 2 are held.
      yield* store.setKeyLimits([KeyLimits.perKind("noop", 3)])
      const ofL = (yield* store.enqueue(
        Array.from({ length: 4 }, (_, i) => ({ kind: "noop", payload: { i }, concurrencyKey: "L" }))
      ))
        .map((r) => r.id)
      const runningL = (yield* store.claim(request)).filter((r) => r.concurrencyKey === "L")
      assert.deepStrictEqual(runningL.map((r) => r.id), ofL.slice(0, 3))
      assert.isTrue(yield* store.removeKeyLimit("kind", "noop"))
      yield* store.setKeyLimits([KeyLimits.perKind("noop", 1)])
      assert.strictEqual(yield* peakOf(sql, schema), 3, "the peak outlives the removed limit")
      assert.isUndefined(yield* completeOne(store, runningL[0]!), "L's slot 0 is not handed on while 1 and 2 are held")
      assert.deepInclude(yield* store.get(ofL[3]!), { state: "pending", keySlot: null, waitingForKey: true })
      yield* store.setKeyLimits([KeyLimits.perKind("noop", 5)])
      assert.strictEqual(yield* peakOf(sql, schema), 5, "raising a limit above its peak raises the peak")
    }))

  it.live("the upgrade to 0015 counts the slots held above a limit lowered before it: the hand-off still holds them back", () =>
    Effect.gen(function*() {
      const schema = freshSchema("peakup")
      const client = yield* Layer.build(Database.layerFromUrl(databaseUrl(), { maxConnections: 4 }))
      const sql = Context.get(client, SqlClient.SqlClient)
      yield* Migrations.run(StoreSchema.make(schema), { upTo: "0014_key_hot_path" }).pipe(Effect.provideContext(client))
      const context = yield* Layer.build(
        PgRunStore.layer({ schema, migrate: false }).pipe(Layer.provide(Layer.succeedContext(client)))
      )
      const store = Context.get(context, RunStore)
      // Before 0015: a limit of 3 taken by three runs, then lowered to 1. The runs are enqueued,
      // governed, admitted and claimed as that release's statements did (row inserts and updates):
      // today's statements read tables and columns 0015 predates (key_holds, migration 0025).
      // Declaring the limit governs the key's runs and admits the first three.
      const ids = (yield* sql.unsafe<{ id: string }>(`INSERT INTO "${schema}".runs (kind, payload, concurrency_key)
        SELECT 'noop', jsonb_build_object('i', g), 'K' FROM generate_series(0, 5) g ORDER BY g RETURNING id::text AS id`))
        .map((r) => r.id).sort((a, b) => Number(a) - Number(b))
      yield* sql.unsafe(`INSERT INTO "${schema}".key_limits (scope, name, per_key) VALUES ('kind', 'noop', 3)`)
      yield* sql.unsafe(`UPDATE "${schema}".runs SET key_scope = 'kind' WHERE concurrency_key = 'K'`)
      yield* sql.unsafe(`UPDATE "${schema}".runs r SET key_slot = o.slot FROM (
        SELECT id, row_number() OVER (ORDER BY id) - 1 AS slot FROM "${schema}".runs WHERE id = ANY('{${
        ids.slice(0, 3).join(",")
      }}'::bigint[])
      ) o WHERE r.id = o.id`)
      yield* sql.unsafe(`UPDATE "${schema}".runs SET state = 'running', fence = 1, attempt = 1, lease_owner = 'w',
        lease_expires_at = now() + interval '30 seconds' WHERE id = ANY('{${ids.slice(0, 3).join(",")}}'::bigint[])`)
      const held = yield* sql.unsafe<{ id: string; key_slot: number }>(
        `SELECT id::text, key_slot FROM "${schema}".runs WHERE state = 'running' ORDER BY key_slot`
      )
      assert.deepStrictEqual(
        held.map((r) => [r.id, r.key_slot]),
        ids.slice(0, 3).map((id, slot) => [id, slot]),
        "the key's first three hold its three slots"
      )
      yield* sql.unsafe(`UPDATE "${schema}".key_limits SET per_key = 1 WHERE scope = 'kind' AND name = 'noop'`)
      yield* Migrations.run(StoreSchema.make(schema)).pipe(Effect.provideContext(client))
      const running = yield* Effect.forEach(ids.slice(0, 3), (id) =>
        Effect.map(store.get(id), (run): ClaimedRun => ({
          id,
          queue: run.queue,
          kind: run.kind,
          payload: run.payload,
          attempt: run.attempt,
          maxAttempts: run.maxAttempts,
          fence: run.fence,
          checkpoint: null,
          signals: {},
          concurrencyKey: "K",
          via: "due",
          waitMs: 0,
          traceParent: null,
          attemptTimeoutMs: null,
          deadlineInMs: null
        })))
      assert.strictEqual(yield* peakOf(sql, schema), 3, "the peak counts slot 2, held above the lowered limit")
      yield* lowered(store, running, ids.slice(3))
    }))
})
