/**
 * Upgrading a store with runs in flight: a store at the previous release's schema (migrations up
 * to 0006) holds leased runs written by an old worker, a suspended run and a backlog. The upgrade
 * (0007 HOT lease renewal, 0008 paused queues, 0009 schedules) runs while the old holder keeps
 * renewing; afterwards the old holder renews and completes under its fences, the suspended run
 * resumes under a higher fence, an abandoned lease is reclaimed through the new index, and the
 * history is whole.
 */
import { assert, describe, it } from "@effect/vitest"
import { RunStore } from "@leasehold/core"
import { Database, Migrations, PgRunStore, StoreSchema } from "@leasehold/sql"
import { Context, Duration, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { databaseUrl, freshSchema } from "./support/db.js"

const ttl = Duration.seconds(30)

describe("upgrading a store with runs in flight", () => {
  it.live("from the previous release's schema: leases held across the migration keep their fences; nothing is lost", () =>
    Effect.gen(function*() {
      const schema = freshSchema("upgrade")
      const client = yield* Layer.build(Database.layerFromUrl(databaseUrl(), { maxConnections: 6 }))
      const sql = Context.get(client, SqlClient.SqlClient)
      const s = StoreSchema.make(schema)
      const old = yield* Migrations.run(s, { upTo: "0006_trace_context" }).pipe(Effect.provideContext(client))
      assert.deepStrictEqual(old.map(([, name]) => name).at(-1), "trace_context")

      // What an old worker left: four runs claimed under fence 1 (one abandoned), one suspended, a backlog.
      yield* sql.unsafe(`INSERT INTO "${schema}".runs (kind, payload) SELECT 'job', jsonb_build_object('i', g) FROM generate_series(1, 8) g`)
      yield* sql.unsafe(`UPDATE "${schema}".runs SET state = 'running', fence = 1, attempt = 1, lease_owner = 'old-worker',
        lease_expires_at = now() + interval '30 seconds', claimed_by = 'old-worker', claimed_at = now(), claimed_fence = 1,
        claimed_attempt = 1 WHERE id <= 4`)
      yield* sql.unsafe(`UPDATE "${schema}".runs SET lease_expires_at = now() - interval '1 second' WHERE id = 4`)
      yield* sql.unsafe(`UPDATE "${schema}".runs SET state = 'suspended', fence = 1, claimed_by = 'old-worker', claimed_at = now(),
        claimed_fence = 1, claimed_attempt = 1, signal_name = 'approval', signal_token = 'tok-upgrade' WHERE id = 5`)

      // The new store, built without migrating: the old holder renews through it while the upgrade runs.
      const context = yield* Layer.build(PgRunStore.layer({ schema, migrate: false }).pipe(Layer.provide(Layer.succeedContext(client))))
      const store = Context.get(context, RunStore)
      const held = [1, 2, 3].map((id) => ({ runId: String(id), fence: 1 }))
      const renewing = yield* Effect.forkScoped(Effect.forever(Effect.andThen(store.renew("old-worker", held, ttl), Effect.sleep("5 millis"))))
      const applied = yield* Migrations.run(s).pipe(Effect.provideContext(client))
      assert.deepStrictEqual(applied.map(([, name]) => name), ["hot_lease_renewal", "paused_queues", "schedules", "key_concurrency", "workflows", "fence_epoch", "key_admission", "key_hot_path", "key_limit_peaks", "runs_listed", "workflow_awaits", "batch_ledger", "worker_registry", "activity_window", "enqueue_function", "unique_windows", "rate_limits", "unique_hold_order_and_retention", "keyed_ledger"])
      yield* Effect.sleep("50 millis")
      assert.isUndefined(renewing.pollUnsafe(), "renewals kept working through the upgrade")
      yield* Fiber.interrupt(renewing)

      // The old holder's leases and fences are intact: renewed (HOT now) and completed under fence 1.
      assert.deepStrictEqual(yield* store.renew("old-worker", held, ttl), held)
      const outcomes = yield* store.completeBatch(held.slice(0, 2).map((l) => ({ ...l, result: null })))
      assert.deepStrictEqual(outcomes.map((o) => o._tag), ["Finalized", "Finalized"])
      // The abandoned lease is swept through runs_running and reclaimed under fence 2, before the backlog.
      const swept = yield* store.claim({ owner: "new-worker", queues: ["default"], kinds: ["job"], limit: 2, ttl })
      assert.deepStrictEqual(swept.map((r) => [r.id, r.via, r.fence]), [["4", "expired", 2], ["6", "due", 1]])
      // The suspended run resumes by its token and is claimed under fence 2.
      assert.strictEqual(yield* store.resumeByToken("tok-upgrade", { approved: true }), "5")
      const rest = yield* store.claim({ owner: "new-worker", queues: ["default"], kinds: ["job"], limit: 5, ttl, dueOnly: true })
      assert.deepStrictEqual(rest.map((r) => [r.id, r.fence]).sort(), [["5", 2], ["7", 1], ["8", 1]])
      assert.deepStrictEqual(rest.find((r) => r.id === "5")!.signals, { approval: { _tag: "Signalled", payload: { approved: true } } })
      // A stale write under the old fence is refused by the fence, as before the upgrade.
      assert.deepInclude(yield* Effect.flip(store.release({ runId: "4", fence: 1 })), { _tag: "FenceRejected", storedFence: 2 })
      // The features of the new schema work on the upgraded store.
      assert.isTrue(yield* store.pauseQueue("default"))
      assert.deepStrictEqual(yield* store.claim({ owner: "new-worker", queues: ["default"], kinds: ["job"], limit: 5, ttl }), [])
      assert.isTrue(yield* store.resumeQueue("default"))
      yield* store.registerSchedules([{ name: "nightly", cron: "0 3 * * *", kind: "job" }])
      assert.strictEqual((yield* store.schedules).length, 1)
      // History: run 1 was claimed by the old worker and completed; run 4 shows the reclaim and the refused write.
      const history = (id: string) => Effect.map(store.history(id), (events) => events.map((e) => `${e.kind}@${e.fence}`))
      assert.deepStrictEqual(yield* history("1"), ["claimed@1", "completed@1"])
      assert.deepStrictEqual(yield* history("4"), ["claimed@1", "reclaimed@2", "stale_write_rejected@1"])
    }))
})
