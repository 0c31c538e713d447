/**
 * The worker registry on PostgreSQL: a running worker, idle or busy, is listed with what it says of
 * itself and how many runs it holds; it is retired when it stops; and a refresh is a HOT update
 * (the row is rewritten in place, no index entry added), as migration 0019 promises.
 */
import { assert, describe, it } from "@effect/vitest"
import { Handler, WorkerRegistry } from "@leasehold/core"
import { Deferred, Duration, Effect, Fiber, Schema } from "effect"
import { twoStores } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

describe("worker registry (PostgreSQL)", () => {
  it.live("an idle worker is listed with its host, pid, version, queues and concurrency; it counts the runs it holds; it is gone once it stops", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const release = yield* Deferred.make<void>()
      const held = Handler.make({ kind: "held", payload: Schema.Unknown, handle: () => Deferred.await(release) })
      const worker = yield* Effect.forkChild(Effect.scoped(Effect.andThen(
        startWorker(stores.a, stores.sql, {
          handlers: [held],
          owner: "registry-worker",
          queues: ["default", "mail"],
          concurrency: 3,
          ttl: "3 seconds",
          heartbeat: "200 millis",
          pollInterval: "100 millis"
        }),
        Effect.never
      )))
      const idle = yield* eventually(
        "the idle worker is announced",
        Effect.map(stores.b.workers, (ws) => ws.find((w) => w.owner === "registry-worker"))
      )
      assert.deepInclude(idle, { pid: process.pid, version: WorkerRegistry.version, concurrency: 3, runsHeld: 0 })
      assert.deepStrictEqual(idle.queues, ["default", "mail"])
      assert.deepStrictEqual(idle.kinds, ["held"])
      assert.isTrue(idle.host.length > 0)

      yield* stores.b.enqueue([{ kind: "held", payload: {} }, { kind: "held", payload: {} }])
      const busy = yield* eventually(
        "the worker announces the two runs it holds",
        Effect.map(stores.b.workers, (ws) => ws.find((w) => w.owner === "registry-worker" && w.runsHeld === 2))
      )
      assert.isAbove(busy.lastHeartbeatAt.getTime(), idle.lastHeartbeatAt.getTime(), "refreshed with its heartbeat")
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.interrupt(worker)
      assert.deepStrictEqual((yield* stores.b.workers).map((w) => w.owner), [], "a stopped worker retires its row")
    }))

  it.live("a refresh of a worker's row is a HOT update, and a dead worker's row is deleted by another's announcement", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const announce = (owner: string, runsHeld: number) =>
        stores.a.announceWorker({
          owner,
          host: "h",
          pid: 1,
          version: "v",
          queues: ["default"],
          kinds: ["k"],
          concurrency: 4,
          runsHeld,
          startedAt: new Date(),
          ttl: Duration.seconds(30)
        })
      // One transaction, so its own statistics (pg_stat_xact_user_tables) count exactly its updates.
      const counts = yield* stores.sql.withTransaction(Effect.gen(function*() {
        yield* announce("hot", 0)
        for (let i = 1; i <= 20; i++) yield* announce("hot", i % 4)
        return yield* stores.sql.unsafe<{ upd: string; hot: string }>(
          `SELECT n_tup_upd::text AS upd, n_tup_hot_upd::text AS hot FROM pg_stat_xact_user_tables
           WHERE schemaname = '${stores.schema}' AND relname = 'workers'`
        )
      }))
      assert.deepStrictEqual(counts, [{ upd: "20", hot: "20" }], "every refresh was HOT")

      yield* stores.sql.unsafe(
        `UPDATE "${stores.schema}".workers SET expires_at = now() - interval '11 minutes' WHERE owner = 'hot'`
      )
      yield* announce("other", 0)
      const rows = yield* stores.sql.unsafe<{ owner: string }>(
        `SELECT owner FROM "${stores.schema}".workers ORDER BY owner`
      )
      assert.deepStrictEqual(rows.map((r) => r.owner), ["other"], "the row dead for over 10 minutes was deleted")
    }))
})
