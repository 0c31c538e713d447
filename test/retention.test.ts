/**
 * `completedRuns: "delete"`: a completion deletes the run and its stored history in its own
 * guarded statement (id + fence + running). Deleting changes what is kept, not who may write:
 * a stale holder is still rejected by the fence while the run exists, and finds nothing to write
 * once it is gone. A completion that deletes its run deletes the uniqueness holds that run can
 * never hold again (migration 0024).
 */
import { assert, describe, it } from "@effect/vitest"
import { FenceRejected, RunNotFound } from "@leasehold/core"
import { Deferred, Duration, Effect, Exit, Fiber } from "effect"
import { expireLease, readRun, type Stores, twoStoresWith } from "./support/stores.js"

const ttl = Duration.minutes(5)
const claim = (stores: Stores, who: "a" | "b", limit: number) =>
  stores[who].claim({ owner: `worker-${who}`, queues: ["default"], kinds: ["job"], limit, ttl })
const count = (stores: Stores, table: "runs" | "run_events", runId: string) =>
  Effect.map(
    stores.sql.unsafe<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${stores.schema}".${table} WHERE ${table === "runs" ? "id" : "run_id"} = ${
        Number(runId)
      }`
    ),
    (rows) => rows[0]!.n
  )

describe("completed runs deleted", () => {
  it.live("a completion deletes the run and its history; a stale holder is rejected by the fence, then finds nothing to write", () =>
    Effect.gen(function*() {
      const stores = yield* twoStoresWith({ completedRuns: "delete" })
      const [x, y, z] = yield* stores.a.enqueue(
        [1, 2, 3].map((i) => ({ kind: "job", payload: { i }, maxAttempts: 10 }))
      )
      assert.strictEqual((yield* claim(stores, "a", 3)).length, 3)
      // A loses x: its lease expires and b reclaims it under fence 2 (a history row for x).
      yield* expireLease(stores, x!.id)
      assert.deepStrictEqual((yield* claim(stores, "b", 3)).map((r) => [r.id, r.fence]), [[x!.id, 2]])
      assert.isAbove(yield* count(stores, "run_events", x!.id), 0)

      // A's batch: y and z are completed (and deleted); x is rejected by the fence, as in keep mode.
      const outcomes = yield* stores.a.completeBatch(
        [x!, y!, z!].map((r) => ({ runId: r.id, fence: 1, result: JSON.stringify({ by: "a" }) }))
      )
      assert.deepStrictEqual(outcomes.map((o) => o._tag), ["Rejected", "Finalized", "Finalized"])
      assert.deepInclude(outcomes[0]!, { runId: x!.id, fence: 1, storedFence: 2, state: "running" })
      assert.strictEqual(yield* count(stores, "runs", y!.id), 0)
      assert.strictEqual(yield* count(stores, "runs", z!.id), 0)
      assert.deepInclude(yield* readRun(stores, x!.id), { state: "running", fence: 2, lease_owner: "worker-b" })

      // B completes x: the row and every history row of x go in the same statement.
      const [done] = yield* stores.b.completeBatch([{ runId: x!.id, fence: 2, result: null }])
      assert.strictEqual(done!._tag, "Finalized")
      assert.strictEqual(yield* count(stores, "runs", x!.id), 0)
      assert.strictEqual(yield* count(stores, "run_events", x!.id), 0)

      // A's later writes for x find no run: rejected, nothing written anywhere.
      const checkpoint = yield* Effect.flip(stores.a.checkpoint({ runId: x!.id, fence: 1 }, { step: 2 }))
      assert.instanceOf(checkpoint, RunNotFound)
      const [late] = yield* stores.a.completeBatch([{ runId: x!.id, fence: 1, result: JSON.stringify({ by: "a" }) }])
      assert.deepInclude(late!, { _tag: "Rejected", state: "missing" })
      const left = yield* stores.sql.unsafe<{ runs: number; events: number }>(
        `SELECT (SELECT count(*) FROM "${stores.schema}".runs)::int AS runs, (SELECT count(*) FROM "${stores.schema}".run_events)::int AS events`
      )
      assert.deepStrictEqual(left[0], { runs: 0, events: 0 })
    }))

  it.live("a fenced transaction commits the application's write and deletes the run together, or neither", () =>
    Effect.gen(function*() {
      const stores = yield* twoStoresWith({ completedRuns: "delete" })
      yield* stores.sql.unsafe(`CREATE TABLE "${stores.schema}".ledger (run_id bigint, note text)`)
      const write = (runId: string, note: string) =>
        stores.sql.unsafe(`INSERT INTO "${stores.schema}".ledger VALUES (${Number(runId)}, '${note}')`)
      const [kept, lost] = yield* stores.a.enqueue([{ kind: "job", payload: null }, { kind: "job", payload: null }])
      assert.strictEqual((yield* claim(stores, "a", 2)).length, 2)

      const value = yield* stores.a.completeInTransaction(
        { runId: kept!.id, fence: 1 },
        Effect.as(write(kept!.id, "ok"), 7),
        (n) => Exit.succeed(String(n))
      )
      assert.strictEqual(value, 7)
      assert.strictEqual(yield* count(stores, "runs", kept!.id), 0)

      // The fence moved while a still held the run: its transaction rolls back, ledger row included.
      yield* expireLease(stores, lost!.id)
      assert.strictEqual((yield* claim(stores, "b", 1)).length, 1)
      const rejected = yield* Effect.flip(
        stores.a.completeInTransaction(
          { runId: lost!.id, fence: 1 },
          write(lost!.id, "stale"),
          () => Exit.succeed("null")
        )
      )
      assert.instanceOf(rejected, FenceRejected)
      assert.deepInclude(rejected as FenceRejected, { presentedFence: 1, storedFence: 2 })
      const ledger = yield* stores.sql.unsafe<{ run_id: string; note: string }>(
        `SELECT run_id::text, note FROM "${stores.schema}".ledger`
      )
      assert.deepStrictEqual(ledger.map((r) => [r.run_id, r.note]), [[kept!.id, "ok"]])
      assert.deepInclude(yield* readRun(stores, lost!.id), { state: "running", fence: 2 })
    }))

  it.live("a run deleted by its new holder while a stale transaction is open is RunNotFound for the stale one, and nothing of it lands", () =>
    Effect.gen(function*() {
      const stores = yield* twoStoresWith({ completedRuns: "delete" })
      yield* stores.sql.unsafe(`CREATE TABLE "${stores.schema}".ledger (run_id bigint, note text)`)
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      assert.strictEqual((yield* claim(stores, "a", 1)).length, 1)
      yield* expireLease(stores, run!.id)
      // Inside a's open transaction (past its fence check), b reclaims the run and completes it,
      // which deletes the row: a's completion then finds no run at all.
      const supersede = Effect.gen(function*() {
        assert.deepStrictEqual((yield* claim(stores, "b", 1)).map((r) => r.fence), [2])
        const [done] = yield* stores.b.completeBatch([{ runId: run!.id, fence: 2, result: null }])
        assert.strictEqual(done!._tag, "Finalized")
      })
      const write = stores.sql.unsafe(`INSERT INTO "${stores.schema}".ledger VALUES (${Number(run!.id)}, 'stale')`)
      const rejected = yield* Effect.flip(
        stores.a.completeInTransaction(
          { runId: run!.id, fence: 1 },
          Effect.andThen(write, supersede),
          () => Exit.succeed("null")
        )
      )
      assert.deepInclude(rejected, { _tag: "RunNotFound", runId: run!.id })
      const ledger = yield* stores.sql.unsafe(`SELECT * FROM "${stores.schema}".ledger`)
      assert.deepStrictEqual(ledger, [])
      assert.strictEqual(yield* count(stores, "runs", run!.id), 0)
    }))

  it.live("failed runs are kept: only completions delete", () =>
    Effect.gen(function*() {
      const stores = yield* twoStoresWith({ completedRuns: "delete" })
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null, maxAttempts: 1 }])
      assert.strictEqual((yield* claim(stores, "a", 1)).length, 1)
      const outcome = yield* stores.a.fail({
        runId: run!.id,
        fence: 1,
        error: { message: "boom" },
        retryDelayMs: undefined
      })
      assert.strictEqual(outcome._tag, "Failed")
      assert.strictEqual((yield* readRun(stores, run!.id)).state, "failed")
      assert.isAbove(yield* count(stores, "run_events", run!.id), 0)
    }))

  it.live("a run enqueued with an idempotency key is kept when it completes, so the key still answers with it", () =>
    Effect.gen(function*() {
      const stores = yield* twoStoresWith({ completedRuns: "delete" })
      const [keyed, plain] = yield* stores.a.enqueue([
        { kind: "job", payload: { n: 1 }, idempotencyKey: "order-42" },
        { kind: "job", payload: { n: 2 } }
      ])
      assert.strictEqual((yield* claim(stores, "a", 2)).length, 2)
      const outcomes = yield* stores.a.completeBatch(
        [keyed!, plain!].map((r) => ({ runId: r.id, fence: 1, result: JSON.stringify({ ok: true }) }))
      )
      assert.deepStrictEqual(outcomes.map((o) => o._tag), ["Finalized", "Finalized"])
      assert.strictEqual(yield* count(stores, "runs", plain!.id), 0)
      const kept = yield* stores.a.get(keyed!.id)
      assert.deepInclude(kept, { state: "completed", fence: 1, result: { ok: true } })
      // The same key again: the completed run, not a second one.
      const [again] = yield* stores.b.enqueue([{ kind: "job", payload: { n: 1 }, idempotencyKey: "order-42" }])
      assert.deepStrictEqual(again, { id: keyed!.id, created: false })
    }))

  describe("uniqueness windows' holds", () => {
    const holds = (stores: Stores) =>
      Effect.map(
        stores.sql.unsafe<{ unique_key: string; run_id: string }>(
          `SELECT unique_key, run_id::text FROM "${stores.schema}".unique_holds ORDER BY unique_key`
        ),
        (rows) => rows.map((r) => [r.unique_key, r.run_id])
      )

    it.live("a completion that deletes its run deletes the holds it cannot hold any more; live holds, and a period's, still decide", () =>
      Effect.gen(function*() {
        const stores = yield* twoStoresWith({ completedRuns: "delete" })
        const [done, hourly, waiting, inBatch] = yield* stores.a.enqueue([
          { kind: "job", payload: null, unique: { key: "done" } },
          { kind: "job", payload: null, unique: { key: "hourly", periodMs: 3_600_000 } },
          { kind: "mail", payload: null, unique: { key: "waiting" } },
          { kind: "job", payload: null, unique: { key: "in-batch", states: ["pending", "running", "completed"] } }
        ])
        assert.deepStrictEqual(
          (yield* claim(stores, "a", 3)).map((r) => r.id).sort(),
          [done!.id, hourly!.id, inBatch!.id].sort()
        )
        const outcomes = yield* stores.a.completeBatch(
          [done!, hourly!].map((r) => ({ runId: r.id, fence: 1, result: null }))
        )
        assert.deepStrictEqual(outcomes.map((o) => o._tag), ["Finalized", "Finalized"])
        yield* stores.a.completeInTransaction({ runId: inBatch!.id, fence: 1 }, Effect.void, () => Exit.succeed("null"))
        // The runs are gone; so are the holds of windows with states. A period holds its key for its
        // whole period, even once its run is deleted; the pending run's hold is untouched.
        assert.deepStrictEqual(yield* holds(stores), [["key:hourly", hourly!.id], ["key:waiting", waiting!.id]])

        const again = yield* stores.b.enqueue([
          { kind: "mail", payload: null, unique: { key: "waiting" } },
          { kind: "job", payload: null, unique: { key: "hourly", periodMs: 3_600_000 } },
          { kind: "job", payload: null, unique: { key: "done" } }
        ])
        assert.deepStrictEqual(again.slice(0, 2), [{ id: waiting!.id, created: false }, {
          id: hourly!.id,
          created: false
        }])
        assert.isTrue(again[2]!.created, "the deleted run's key is free again")

        // Once the period ended, the next completion that deletes a run deletes its hold too.
        yield* stores.sql.unsafe(
          `UPDATE "${stores.schema}".unique_holds SET held_until = now() - interval '1 second' WHERE unique_key = 'key:hourly'`
        )
        const [next] = yield* claim(stores, "b", 1)
        assert.strictEqual(next!.id, again[2]!.id)
        yield* stores.b.completeBatch([{ runId: next!.id, fence: 1, result: null }])
        assert.deepStrictEqual(yield* holds(stores), [["key:waiting", waiting!.id]])
        const [fresh] = yield* stores.b.enqueue([{
          kind: "job",
          payload: null,
          unique: { key: "hourly", periodMs: 3_600_000 }
        }])
        assert.isTrue(fresh!.created, "a new run once the period ended")
      }))

    it.live("a hold deleted between a unique enqueue's insert and its lock is taken anew: a new run, never none", () =>
      Effect.gen(function*() {
        const stores = yield* twoStoresWith({ completedRuns: "delete" })
        const [first] = yield* stores.a.enqueue([{ kind: "job", payload: null, unique: { key: "k" } }])
        // Another transaction holds the hold's row locked, then deletes it with its run (as a
        // completion that deletes its run does) once the enqueue waits for that lock: the enqueue's
        // insert met the row, its lock finds none.
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* Effect.forkChild(stores.sql.withTransaction(Effect.gen(function*() {
          yield* stores.sql.unsafe(
            `SELECT 1 FROM "${stores.schema}".unique_holds WHERE unique_key = 'key:k' FOR UPDATE`
          )
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
          yield* stores.sql.unsafe(`DELETE FROM "${stores.schema}".runs WHERE id = ${Number(first!.id)}`)
          yield* stores.sql.unsafe(`DELETE FROM "${stores.schema}".unique_holds WHERE unique_key = 'key:k'`)
        })))
        yield* Deferred.await(locked)
        const enqueuer = yield* Effect.forkChild(
          stores.b.enqueue([{ kind: "job", payload: null, unique: { key: "k" } }])
        )
        for (let i = 0; i < 200; i++) {
          const waiting = yield* stores.sql.unsafe<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%enqueue_run%'`
          )
          if (waiting[0]!.n > 0) break
          yield* Effect.sleep("10 millis")
        }
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        const [second] = yield* Fiber.join(enqueuer)
        assert.isTrue(second!.created, "the key was free: a new run")
        assert.notStrictEqual(second!.id, first!.id)
        assert.deepStrictEqual(yield* holds(stores), [["key:k", second!.id]])
        assert.strictEqual((yield* readRun(stores, second!.id)).state, "pending")
      }))
  })
})
