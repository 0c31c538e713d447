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
      yield* sql.unsafe(
        `INSERT INTO "${schema}".runs (kind, payload) SELECT 'job', jsonb_build_object('i', g) FROM generate_series(1, 8) g`
      )
      yield* sql.unsafe(
        `UPDATE "${schema}".runs SET state = 'running', fence = 1, attempt = 1, lease_owner = 'old-worker',
        lease_expires_at = now() + interval '30 seconds', claimed_by = 'old-worker', claimed_at = now(), claimed_fence = 1,
        claimed_attempt = 1 WHERE id <= 4`
      )
      yield* sql.unsafe(`UPDATE "${schema}".runs SET lease_expires_at = now() - interval '1 second' WHERE id = 4`)
      yield* sql.unsafe(
        `UPDATE "${schema}".runs SET state = 'suspended', fence = 1, claimed_by = 'old-worker', claimed_at = now(),
        claimed_fence = 1, claimed_attempt = 1, signal_name = 'approval', signal_token = 'tok-upgrade' WHERE id = 5`
      )

      // The new store, built without migrating: the old holder renews through it while the upgrade runs.
      const context = yield* Layer.build(
        PgRunStore.layer({ schema, migrate: false }).pipe(Layer.provide(Layer.succeedContext(client)))
      )
      const store = Context.get(context, RunStore)
      const held = [1, 2, 3].map((id) => ({ runId: String(id), fence: 1 }))
      const renewing = yield* Effect.forkScoped(
        Effect.forever(Effect.andThen(store.renew("old-worker", held, ttl), Effect.sleep("5 millis")))
      )
      const applied = yield* Migrations.run(s).pipe(Effect.provideContext(client))
      assert.deepStrictEqual(applied.map(([, name]) => name), [
        "hot_lease_renewal",
        "paused_queues",
        "schedules",
        "key_concurrency",
        "workflows",
        "fence_epoch",
        "key_admission",
        "key_hot_path",
        "key_limit_peaks",
        "runs_listed",
        "workflow_awaits",
        "batch_ledger",
        "worker_registry",
        "activity_window",
        "enqueue_function",
        "unique_windows",
        "rate_limits",
        "unique_hold_order_and_retention",
        "keyed_ledger",
        "ledger_settlement",
        "timeouts",
        "operator_actions",
        "attempt_logs",
        "ledger_lock_in_statement",
        "unique_ledger",
        "runs_now_by_span",
        "history_partitions",
        "idempotent_ledger"
      ])
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
      const rest = yield* store.claim({
        owner: "new-worker",
        queues: ["default"],
        kinds: ["job"],
        limit: 5,
        ttl,
        dueOnly: true
      })
      assert.deepStrictEqual(rest.map((r) => [r.id, r.fence]).sort(), [["5", 2], ["7", 1], ["8", 1]])
      assert.deepStrictEqual(rest.find((r) => r.id === "5")!.signals, {
        approval: { _tag: "Signalled", payload: { approved: true } }
      })
      // A stale write under the old fence is refused by the fence, as before the upgrade.
      assert.deepInclude(yield* Effect.flip(store.release({ runId: "4", fence: 1 })), {
        _tag: "FenceRejected",
        storedFence: 2
      })
      // The features of the new schema work on the upgraded store.
      assert.isTrue(yield* store.pauseQueue("default"))
      assert.deepStrictEqual(
        yield* store.claim({ owner: "new-worker", queues: ["default"], kinds: ["job"], limit: 5, ttl }),
        []
      )
      assert.isTrue(yield* store.resumeQueue("default"))
      yield* store.registerSchedules([{ name: "nightly", cron: "0 3 * * *", kind: "job" }])
      assert.strictEqual((yield* store.schedules).length, 1)
      // History: run 1 was claimed by the old worker and completed; run 4 shows the reclaim and the refused write.
      const history = (id: string) =>
        Effect.map(store.history(id), (events) => events.map((e) => `${e.kind}@${e.fence}`))
      assert.deepStrictEqual(yield* history("1"), ["claimed@1", "completed@1"])
      assert.deepStrictEqual(yield* history("4"), ["claimed@1", "reclaimed@2", "stale_write_rejected@1"])
    }))

  it.live("migration 0026 sets right the batches the earlier ledger left wrong: one settled with a run still open is unsettled (the run is then reclaimed), one whose runs all ended is settled", () =>
    Effect.gen(function*() {
      const schema = freshSchema("upgrade")
      const client = yield* Layer.build(Database.layerFromUrl(databaseUrl(), { maxConnections: 4 }))
      const sql = Context.get(client, SqlClient.SqlClient)
      const s = StoreSchema.make(schema)
      yield* Migrations.run(s, { upTo: "0025_keyed_ledger" }).pipe(Effect.provideContext(client))
      // This release's store writes and reads the columns 0027 adds: they are there for the scene
      // below (written by this release's enqueue and claim); the upgrade then runs to 0026 only.
      const timeoutColumns = ["attempt_timeout_ms integer", "deadline timestamptz"]
      yield* sql.unsafe(`ALTER TABLE "${schema}".runs ${timeoutColumns.map((c) => `ADD COLUMN ${c}`).join(", ")}`)
      const context = yield* Layer.build(
        PgRunStore.layer({ schema, migrate: false }).pipe(Layer.provide(Layer.succeedContext(client)))
      )
      const store = Context.get(context, RunStore)
      const claimOf = (owner: string) => ({ owner, queues: ["default"], kinds: ["job"], limit: 3, ttl })
      // Two claim batches of three runs, as the earlier release's races left them: the first has
      // runs 1 and 2 completed twice and was settled with run 3 still open; the second has all its
      // runs completed and was never settled.
      yield* store.enqueue([1, 2, 3].map((i) => ({ kind: "job", payload: { i } })))
      const stranded = yield* store.claim(claimOf("w-a"))
      yield* store.enqueue([4, 5, 6].map((i) => ({ kind: "job", payload: { i } })))
      const ended = yield* store.claim(claimOf("w-a"))
      const batchOf = (runId: string) =>
        `(SELECT batch FROM "${schema}".claim_batches WHERE ${Number(runId)} = ANY (ids))`
      const completion = (runs: ReadonlyArray<{ id: string }>) =>
        `INSERT INTO "${schema}".completion_batches (claim_batch, ids, fences) VALUES (${batchOf(runs[0]!.id)},
          ARRAY[${runs.map((r) => Number(r.id)).join(",")}]::bigint[], ARRAY[${runs.map(() => 1).join(",")}]::bigint[])`
      yield* sql.unsafe(completion(stranded.slice(0, 2)))
      yield* sql.unsafe(completion(stranded.slice(0, 2)))
      yield* sql.unsafe(
        `UPDATE "${schema}".claim_batches SET settled_at = now() WHERE batch = ${batchOf(stranded[0]!.id)}`
      )
      yield* sql.unsafe(completion(ended))
      const applied = yield* Migrations.run(s, { upTo: "0026_ledger_settlement" }).pipe(Effect.provideContext(client))
      assert.deepStrictEqual(applied.map(([, name]) => name), ["ledger_settlement"])
      const settled = (runId: string) =>
        Effect.map(
          sql.unsafe<{ settled: boolean }>(
            `SELECT settled_at IS NOT NULL AS settled FROM "${schema}".claim_batches WHERE batch = ${batchOf(runId)}`
          ),
          (rows) => rows[0]!.settled
        )
      assert.isFalse(yield* settled(stranded[2]!.id), "the batch with an open run is unsettled")
      assert.isTrue(yield* settled(ended[0]!.id), "the batch whose runs all ended is settled")
      // The open run's lease runs out: another worker's sweep reclaims it under fence 2.
      yield* sql.unsafe(
        `UPDATE "${schema}".claim_batches SET expires_at = now() - interval '1 second' WHERE settled_at IS NULL`
      )
      const swept = yield* store.claim(claimOf("w-b"))
      assert.deepStrictEqual(swept.map((r) => [r.id, r.fence, r.via]), [[stranded[2]!.id, 2, "expired"]])
    }).pipe(Effect.scoped))
  it.live("migration 0033 moves a store with history and runs in flight to partitions: leases, keys, tokens and history carry over, and the old history is reclaimed once it has all ended", () =>
    Effect.gen(function*() {
      const schema = freshSchema("upgrade")
      const client = yield* Layer.build(Database.layerFromUrl(databaseUrl(), { maxConnections: 4 }))
      const sql = Context.get(client, SqlClient.SqlClient)
      const s = StoreSchema.make(schema)
      yield* Migrations.run(s, { upTo: "0032_runs_now_by_span" }).pipe(Effect.provideContext(client))
      const context = yield* Layer.build(
        PgRunStore.layer({ schema, migrate: false }).pipe(Layer.provide(Layer.succeedContext(client)))
      )
      const store = Context.get(context, RunStore)
      const claimOf = (owner: string, limit: number) => ({ owner, queues: ["default"], kinds: ["job"], limit, ttl })
      // History and runs in flight: two completed, one suspended with a token, one held in its
      // claim batch, two pending in the ledger, one with an idempotency key (the SQL enqueue of 0029).
      const enqueued = yield* store.enqueue([1, 2, 3, 4, 5, 6].map((i) => ({ kind: "job", payload: { i } })))
      const [one, two, three, four] = yield* store.claim(claimOf("w-a", 4))
      yield* store.completeBatch([{ runId: one!.id, fence: one!.fence, result: null }, {
        runId: two!.id,
        fence: two!.fence,
        result: null
      }])
      yield* store.suspend({
        runId: three!.id,
        fence: three!.fence,
        signal: "s",
        token: "tok-0030",
        timeout: undefined
      })
      const [keyed] = yield* sql.unsafe<{ id: string }>(
        `SELECT "${schema}".enqueue('job', '{}'::jsonb, idempotency_key => 'key-0030')::text AS id`
      )
      const held = [{ runId: four!.id, fence: four!.fence }]
      const renewing = yield* Effect.forkScoped(
        Effect.forever(Effect.andThen(store.renew("w-a", held, ttl), Effect.sleep("5 millis")))
      )
      const applied = yield* Migrations.run(s).pipe(Effect.provideContext(client))
      assert.deepStrictEqual(applied.map(([, name]) => name), ["history_partitions", "idempotent_ledger"])
      assert.isUndefined(renewing.pollUnsafe(), "renewals kept working through the upgrade")
      yield* Fiber.interrupt(renewing)
      const partitionOf = (id: string) =>
        Effect.map(
          sql.unsafe<{ part: string }>(
            `SELECT tableoid::regclass::text AS part FROM "${schema}".runs WHERE id = ${Number(id)}`
          ),
          (rows) => rows[0]!.part
        )
      assert.strictEqual(yield* partitionOf(one!.id), `${schema}.runs_from_0`)
      // The key answers with its run, the token resumes its run, the lease completes under its fence.
      const [again] = yield* store.enqueue([{ kind: "job", payload: {}, idempotencyKey: "key-0030" }])
      assert.deepStrictEqual(again, { id: keyed!.id, created: false })
      assert.strictEqual(yield* store.resumeByToken("tok-0030", { ok: true }), three!.id)
      const [finished] = yield* store.completeBatch([{ ...held[0]!, result: null }])
      assert.deepInclude(finished, { _tag: "Finalized", runId: four!.id })
      assert.deepStrictEqual(
        (yield* store.history(one!.id)).map((e) => `${e.kind}@${e.fence}`),
        ["claimed@1", "completed@1"]
      )
      // New runs go to the new range; the old one is reclaimed once every run in it has ended.
      const [fresh] = yield* store.enqueue([{ kind: "job", payload: { fresh: true } }])
      assert.notStrictEqual(yield* partitionOf(fresh!.id), `${schema}.runs_from_0`)
      const now = { keep: Duration.zero, keepFailed: Duration.zero, dryRun: false }
      yield* store.maintainHistory(now)
      yield* store.maintainHistory(now)
      yield* store.get(enqueued[4]!.id)
      const rest = yield* store.claim(claimOf("w-b", 10))
      assert.sameMembers(rest.map((r) => r.id), [three!.id, enqueued[4]!.id, enqueued[5]!.id, keyed!.id, fresh!.id])
      yield* store.completeBatch(rest.map((r) => ({ runId: r.id, fence: r.fence, result: null })))
      const actions = [...yield* store.maintainHistory(now), ...yield* store.maintainHistory(now)]
      assert.deepInclude(actions, { action: "drop", table: "runs", from: "0", to: String(Number(keyed!.id) + 1) })
      for (const id of [one!.id, three!.id, keyed!.id]) {
        assert.deepInclude(yield* Effect.flip(store.get(id)), { _tag: "RunNotFound" })
      }
      assert.deepInclude(yield* store.get(fresh!.id), { state: "completed" })
      const [reused] = yield* store.enqueue([{ kind: "job", payload: {}, idempotencyKey: "key-0030" }])
      assert.isTrue(reused!.created)
    }).pipe(Effect.scoped))
})
