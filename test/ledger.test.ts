/**
 * The batch ledger (migration 0018, docs/adr/0017): what a claim, a completion and a renewal write,
 * and the guards that keep its per-run fences, per-run expiry and guarded writes, on a real
 * PostgreSQL. Two stores over one schema stand for two worker processes; lease time is moved by
 * the database's clock (expired batches), never by the test's.
 */
import { assert, describe, it } from "@effect/vitest"
import { Handler, Run } from "@leasehold/core"
import { Cause, Deferred, Duration, Effect, Exit, Fiber, Schedule, Schema } from "effect"
import { Statement } from "effect/sql"
import { setLeaseExpirySql } from "./support/db.js"
import { expireLease, readRun, twoStores, twoStoresWith } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

const ttl = Duration.seconds(30)
const claimOf = (owner: string, limit = 100) => ({ owner, queues: ["default"], kinds: ["job"], limit, ttl })

const count = (sql: import("effect/sql").SqlClient.SqlClient, text: string) =>
  Effect.map(sql.unsafe<{ n: string }>(text), (rows) => Number(rows[0]!.n))

describe("the batch ledger", () => {
  it.live("a fenced transaction completing an unkeyed run in the ledger sends no key hand-off (its lease says nothing of a key; its claim does)", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* stores.a.enqueue([{ kind: "job", payload: {} }])
      const [claimed] = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(claimed!.concurrencyKey, null)
      // Every statement text the completion sends, as the driver gets it.
      const texts: Array<string> = []
      const record: Statement.Transformer = (self) => Effect.sync(() => (texts.push(self.compile()[0]), self))
      const value = yield* stores.a.completeInTransaction(
        { runId: claimed!.id, fence: claimed!.fence },
        Effect.succeed(7),
        (n) => Exit.succeed(String(n)),
        ttl
      ).pipe(Effect.provideService(Statement.CurrentTransformer, record))
      assert.strictEqual(value, 7)
      assert.deepInclude(yield* readRun(stores, claimed!.id), { state: "completed", fence: 1 })
      assert.isTrue(texts.some((t) => t.includes("completion_batches")), "the completion went through the ledger")
      // A hand-off reads the run's row and key_holds, and deletes from key_holds, for nothing here.
      assert.deepStrictEqual(texts.filter((t) => t.includes("given_back AS")), [], "a key hand-off was sent")
    }))

  it.live("a claim of 50 runs writes one claim batch and a completion one completion batch; the run rows are not written; the history is whole", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue(Array.from({ length: 50 }, (_, i) => ({ kind: "job", payload: { i } })))
      const before = yield* sql.unsafe<{ id: string; xmin: string }>(
        `SELECT id::text, xmin::text FROM "${schema}".runs ORDER BY id`
      )
      const claimed = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(claimed.length, 50)
      assert.isTrue(claimed.every((r) => r.fence === 1 && r.attempt === 1))
      assert.strictEqual(yield* count(sql, `SELECT count(*) AS n FROM "${schema}".claim_batches`), 1)
      assert.strictEqual(yield* count(sql, `SELECT count(*) AS n FROM "${schema}".ready`), 0)
      const outcomes = yield* stores.a.completeBatch(
        claimed.map((r) => ({
          runId: r.id,
          fence: r.fence,
          result: r.id === claimed[0]!.id ? "{\"ok\":1}" : null,
          keyed: false
        }))
      )
      assert.isTrue(outcomes.every((o) => o._tag === "Finalized"))
      assert.strictEqual(yield* count(sql, `SELECT count(*) AS n FROM "${schema}".completion_batches`), 1)
      // Not one run row was written by the claim or the completion.
      const after = yield* sql.unsafe<{ id: string; xmin: string }>(
        `SELECT id::text, xmin::text FROM "${schema}".runs ORDER BY id`
      )
      assert.deepStrictEqual(after, before)
      const first = yield* stores.a.get(claimed[0]!.id)
      assert.strictEqual(first.state, "completed")
      assert.strictEqual(first.fence, 1)
      assert.deepStrictEqual(first.result, { ok: 1 })
      const history = yield* stores.a.history(claimed[1]!.id)
      assert.deepStrictEqual(history.map((e) => [e.kind, e.fence]), [["claimed", 1], ["completed", 1]])
      assert.strictEqual(
        yield* count(sql, `SELECT count(*) AS n FROM "${schema}".claim_batches WHERE settled_at IS NULL`),
        0
      )
    })))

  it.live("an idempotent run drains through the ledger: its key answers with its run, a claim batch and a completion batch are written and its row is not (on a rows store, its row is)", () =>
    Effect.scoped(Effect.gen(function*() {
      for (const storage of ["ledger", "rows"] as const) {
        const stores = yield* twoStoresWith({ storage })
        const { sql, schema } = stores
        const requests = Array.from(
          { length: 20 },
          (_, i) => ({ kind: "job", payload: { i }, idempotencyKey: `i${i}` })
        )
        const enqueued = yield* stores.a.enqueue(requests)
        assert.isTrue(enqueued.every((e) => e.created), storage)
        const again = yield* stores.a.enqueue([{ kind: "job", payload: { again: true }, idempotencyKey: "i3" }])
        assert.deepStrictEqual(again, [{ id: enqueued[3]!.id, created: false }], `${storage}: a repeated key`)
        const recorded = yield* sql.unsafe<{ state: string; n: string }>(
          `SELECT state, count(*)::text AS n FROM "${schema}".runs GROUP BY state`
        )
        assert.deepStrictEqual(
          recorded.map((r) => [r.state, Number(r.n)]),
          [[storage === "ledger" ? "ledger" : "pending", 20]],
          `${storage}: where the runs are recorded`
        )
        const before = yield* sql.unsafe<{ id: string; xmin: string }>(
          `SELECT id::text, xmin::text FROM "${schema}".runs ORDER BY id`
        )
        const claimed = yield* stores.a.claim(claimOf("w-a"))
        assert.strictEqual(claimed.length, 20, storage)
        const outcomes = yield* stores.a.completeBatch(
          claimed.map((r) => ({ runId: r.id, fence: r.fence, result: "{\"ok\":1}", keyed: false }))
        )
        assert.isTrue(outcomes.every((o) => o._tag === "Finalized"), storage)
        const after = yield* sql.unsafe<{ id: string; xmin: string }>(
          `SELECT id::text, xmin::text FROM "${schema}".runs ORDER BY id`
        )
        const batches = yield* count(
          sql,
          `SELECT (SELECT count(*) FROM "${schema}".claim_batches) + (SELECT count(*) FROM "${schema}".completion_batches) AS n`
        )
        if (storage === "ledger") {
          assert.strictEqual(batches, 2, "one claim batch and one completion batch")
          assert.deepStrictEqual(after, before, "no run row was written by the claim or the completion")
        } else {
          assert.strictEqual(batches, 0, "rows: no batch")
          assert.isTrue(after.every((r, i) => r.xmin !== before[i]!.xmin), "rows: every run row was written")
        }
        // The run a key names reads as it stands, and the key still answers with it, completed.
        const run = yield* stores.a.get(enqueued[3]!.id)
        assert.deepInclude(run, { state: "completed", fence: 1, idempotencyKey: "i3", result: { ok: 1 } })
        const later = yield* stores.a.enqueue([{ kind: "job", payload: {}, idempotencyKey: "i3" }])
        assert.deepStrictEqual(later, [{ id: enqueued[3]!.id, created: false }], `${storage}: a key of a completed run`)
      }
    })))

  it.live("a lease named with leading zeros (\"007\") is renewed and completed in the ledger by the store that claimed it; its fence still decides", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue([{ kind: "job", payload: {} }, { kind: "job", payload: {} }])
      const claimed = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(claimed.length, 2)
      const [one, two] = claimed.map((r) => ({ runId: `00${r.id}`, fence: r.fence }))
      const before = yield* sql.unsafe<{ id: string; xmin: string }>(
        `SELECT id::text, xmin::text FROM "${schema}".runs ORDER BY id`
      )
      assert.deepStrictEqual(
        yield* stores.a.renew("w-a", [one!, two!], ttl),
        claimed.map((r) => ({ runId: r.id, fence: 1 }))
      )
      // A fence the claim did not grant, under either spelling, is refused and completes nothing.
      const [stale] = yield* stores.a.completeBatch([{ ...one!, fence: 2, result: null, keyed: false }])
      assert.deepInclude(stale, { _tag: "Rejected", fence: 2, storedFence: 1 })
      const outcomes = yield* stores.a.completeBatch([{ ...one!, result: null, keyed: false }, {
        ...two!,
        result: "{\"n\":2}",
        keyed: false
      }])
      assert.deepStrictEqual(outcomes.map((o) => o._tag), ["Finalized", "Finalized"])
      // Completed in the ledger: one completion batch, no run row written.
      assert.strictEqual(yield* count(sql, `SELECT count(*) AS n FROM "${schema}".completion_batches`), 1)
      assert.deepStrictEqual(
        yield* sql.unsafe<{ id: string; xmin: string }>(
          `SELECT id::text, xmin::text FROM "${schema}".runs ORDER BY id`
        ),
        before
      )
      assert.deepInclude(yield* stores.a.get(claimed[1]!.id), { state: "completed", fence: 1, result: { n: 2 } })
      // The same completion sent again is acknowledged, and writes nothing more.
      const [again] = yield* stores.a.completeBatch([{ runId: claimed[0]!.id, fence: 1, result: null, keyed: false }])
      assert.strictEqual(again!._tag, "Finalized")
      assert.strictEqual(yield* count(sql, `SELECT count(*) AS n FROM "${schema}".completion_batches`), 1)
    })))

  it.live("a holder whose batch expired and was reclaimed by another worker has its completion, failure and renewal refused by the fence, naming both fences", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: {} }])
      const [held] = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(held!.fence, 1)
      yield* expireLease(stores, run!.id)
      const [reclaimed] = yield* stores.b.claim(claimOf("w-b"))
      assert.strictEqual(reclaimed!.id, run!.id)
      assert.strictEqual(reclaimed!.fence, 2)
      assert.strictEqual(reclaimed!.via, "expired")
      const [outcome] = yield* stores.a.completeBatch([{ runId: run!.id, fence: 1, result: null, keyed: false }])
      assert.deepStrictEqual(outcome, { _tag: "Rejected", runId: run!.id, fence: 1, storedFence: 2, state: "running" })
      const failed = yield* Effect.exit(stores.a.fail({ runId: run!.id, fence: 1, error: "late", retryDelayMs: 0 }))
      assert.isTrue(Exit.isFailure(failed))
      const error = Exit.isFailure(failed)
        ? (failed.cause as unknown as { reasons: Array<{ error: unknown }> }).reasons[0]!.error
        : undefined
      assert.deepInclude(error as object, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 })
      assert.deepStrictEqual(yield* stores.a.renew("w-a", [{ runId: run!.id, fence: 1 }], ttl), [])
      // The new holder completes; the history names the first claim, the reclaim and the rejections.
      const [done] = yield* stores.b.completeBatch([{ runId: run!.id, fence: 2, result: null, keyed: false }])
      assert.strictEqual(done!._tag, "Finalized")
      const history = yield* stores.b.history(run!.id)
      const kinds = history.map((e) => e.kind)
      assert.deepStrictEqual(kinds.filter((k) => k === "claimed" || k === "reclaimed" || k === "completed"), [
        "claimed",
        "reclaimed",
        "completed"
      ])
      assert.isTrue(history.some((e) => e.kind === "stale_write_rejected" && e.fence === 1))
      assert.strictEqual((yield* stores.b.get(run!.id)).state, "completed")
    })))

  it.live("a fence the ledger did not grant is refused at the run's place, and the run stays held under its own", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: {} }])
      const [held] = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(held!.fence, 1)
      for (const fence of [0, 2]) {
        const [outcome] = yield* stores.b.completeBatch([{ runId: run!.id, fence, result: null, keyed: false }])
        assert.deepInclude(outcome, { _tag: "Rejected", fence, storedFence: 1, state: "running" })
        assert.deepStrictEqual(yield* stores.b.renew("w-a", [{ runId: run!.id, fence }], ttl), [])
      }
      const [done] = yield* stores.a.completeBatch([{ runId: run!.id, fence: 1, result: null, keyed: false }])
      assert.strictEqual(done!._tag, "Finalized")
    })))

  it.live("a run its worker stops naming in renewals keeps the expiry it had and is reclaimed; the runs it names stay held", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue([1, 2, 3].map((i) => ({ kind: "job", payload: { i } })))
      const claimed = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(claimed.length, 3)
      // The batch's lease runs out in 2 seconds; the renewal names two of its three runs.
      yield* sql.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() + interval '2 seconds'`)
      const named = claimed.slice(0, 2).map((r) => ({ runId: r.id, fence: r.fence }))
      assert.deepStrictEqual(yield* stores.a.renew("w-a", named, ttl), named)
      yield* Effect.sleep("2500 millis")
      const reclaimed = yield* stores.b.claim(claimOf("w-b"))
      assert.deepStrictEqual(reclaimed.map((r) => [r.id, r.fence, r.via]), [[claimed[2]!.id, 2, "expired"]])
      assert.deepStrictEqual(yield* stores.a.renew("w-a", named, ttl), named)
      const outcomes = yield* stores.a.completeBatch(
        claimed.map((r) => ({ runId: r.id, fence: r.fence, result: null, keyed: false }))
      )
      assert.deepStrictEqual(outcomes.map((o) => o._tag), ["Finalized", "Finalized", "Rejected"])
    })))

  it.live("an operator's cancel of a run running in the ledger advances its fence: the holder's completion is refused and the run stays cancelled; its batch's other run completes", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const [run, other] = yield* stores.a.enqueue([{ kind: "job", payload: {} }, { kind: "job", payload: {} }])
      const held = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(held.length, 2)
      yield* stores.b.cancel(run!.id)
      const outcomes = yield* stores.a.completeBatch(
        held.map((r) => ({ runId: r.id, fence: r.fence, result: null, keyed: false }))
      )
      assert.deepStrictEqual(outcomes.map((o) => [o.runId, o._tag]), [[run!.id, "Rejected"], [other!.id, "Finalized"]])
      const stored = yield* stores.a.get(run!.id)
      assert.strictEqual(stored.state, "cancelled")
      assert.isAbove(stored.fence, held[0]!.fence)
      assert.strictEqual((yield* stores.a.get(other!.id)).state, "completed")
    })))

  it.live("a claimed run is never claimable again while the ledger holds it, whatever updates its row (a changed due time or priority)", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: {} }])
      yield* stores.a.claim(claimOf("w-a"))
      yield* sql.unsafe(
        `UPDATE "${schema}".runs SET run_at = now() - interval '1 minute', priority = 5 WHERE id = ${Number(run!.id)}`
      )
      assert.deepStrictEqual(yield* stores.b.claim({ ...claimOf("w-b"), dueOnly: true }), [])
      assert.deepStrictEqual(yield* stores.b.claim(claimOf("w-b")), [])
      assert.strictEqual((yield* stores.a.get(run!.id)).state, "running")
    })))

  it.live("completions and cancels racing over 200 held runs: each run ends one way, and its holder is told the truth", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      yield* stores.a.enqueue(Array.from({ length: 200 }, (_, i) => ({ kind: "job", payload: { i } })))
      const claimed = yield* stores.a.claim(claimOf("w-a", 200))
      assert.strictEqual(claimed.length, 200)
      const victims = claimed.filter((_, i) => i % 2 === 1)
      const [outcomes] = yield* Effect.all([
        Effect.forEach(
          [0, 1, 2, 3],
          (part) =>
            stores.a.completeBatch(
              claimed.filter((_, i) => i % 4 === part).map((r) => ({
                runId: r.id,
                fence: r.fence,
                result: null,
                keyed: false
              }))
            ),
          { concurrency: "unbounded" }
        ).pipe(Effect.map((parts) => parts.flat())),
        Effect.forEach(victims, (r) => Effect.ignore(stores.b.cancel(r.id)), { concurrency: 8 })
      ], { concurrency: "unbounded" })
      for (const outcome of outcomes) {
        const stored = yield* stores.a.get(outcome.runId)
        if (outcome._tag === "Finalized") {
          assert.strictEqual(stored.state, "completed", `run ${outcome.runId} was told Finalized`)
        } else assert.strictEqual(stored.state, "cancelled", `run ${outcome.runId} was told ${outcome._tag}`)
      }
      const evens = claimed.filter((_, i) => i % 2 === 0)
      for (const r of evens) assert.strictEqual((yield* stores.a.get(r.id)).state, "completed")
    })))
  it.live("a renewal by claim batch answers exactly the leases still held: a run completed elsewhere, one an operator cancelled and one reclaimed by another worker are lost, one not named lapses with the expiry it had, and no one else's lease moves", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue(Array.from({ length: 6 }, (_, i) => ({ kind: "job", payload: { i } })))
      const claimed = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(claimed.length, 6)
      assert.strictEqual(yield* count(sql, `SELECT count(*) AS n FROM "${schema}".claim_batches`), 1)
      const [completed, cancelled, reclaimed, unnamed, ...kept] = claimed.map((r) => ({ runId: r.id, fence: r.fence }))
      // Completed under its fence by another store of the same owner (no claim reference there).
      const [done] = yield* stores.b.completeBatch([{ ...completed!, result: null, keyed: false }])
      assert.strictEqual(done!._tag, "Finalized")
      yield* stores.b.cancel(cancelled!.runId)
      // Moved to its row with a lease already over, as a lapse that ran out, and reclaimed at fence 2.
      yield* sql.unsafe(setLeaseExpirySql(schema, reclaimed!.runId, "now() - interval '1 second'"))
      const [taken] = yield* stores.b.claim(claimOf("w-b"))
      assert.deepStrictEqual([taken!.id, taken!.fence, taken!.via], [reclaimed!.runId, 2, "expired"])
      yield* sql.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() + interval '5 seconds'`)
      const before = yield* expiries(stores)
      const named = [completed!, cancelled!, reclaimed!, ...kept]
      assert.deepStrictEqual(yield* stores.a.renew("w-a", named, ttl), kept)
      const after = yield* expiries(stores)
      assert.isAbove(after.batch, before.batch + 20_000, "the batch's lease was extended")
      // The unnamed run was moved to its row with the batch's expiry as it was, not the new one.
      const lapsed = yield* readRun(stores, unnamed!.runId)
      assert.deepStrictEqual([lapsed.state, lapsed.fence, lapsed.lease_owner], ["running", 1, "w-a"])
      assert.strictEqual(lapsed.lease_expires_at!.getTime(), before.batch)
      // The new holder's lease is its own: the stale renewal did not touch it.
      const other = yield* readRun(stores, reclaimed!.runId)
      assert.deepStrictEqual([other.state, other.fence, other.lease_owner], ["running", 2, "w-b"])
      assert.strictEqual(other.lease_expires_at!.getTime(), before.runs.get(reclaimed!.runId))
      assert.strictEqual((yield* stores.a.get(cancelled!.runId)).state, "cancelled")
      assert.strictEqual((yield* stores.a.get(completed!.runId)).state, "completed")
      // A lease listed twice is renewed once and answered twice; the next round names the kept ones only.
      assert.deepStrictEqual(yield* stores.a.renew("w-a", [kept[0]!, kept[0]!, kept[1]!], ttl), [
        kept[0]!,
        kept[0]!,
        kept[1]!
      ])
    })))

  it.live("a renewal that meets a hold closing another run of its batch mid-statement still renews the run it names: the hold is seen, not taken for a loss", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue([1, 2].map((i) => ({ kind: "job", payload: { i } })))
      const [kept, moved] = (yield* stores.a.claim(claimOf("w-a"))).map((r) => ({ runId: r.id, fence: r.fence }))
      // A hold of the other run (a suspension, a failure) in a transaction left open: it holds the
      // batch's row, so the renewal's update waits for it and then finds the batch changed.
      const holding = yield* Deferred.make<void>()
      const commit = yield* Deferred.make<void>()
      const hold = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(`SELECT "${schema}".hold(ARRAY[${Number(moved!.runId)}]::bigint[])`)
        yield* Deferred.succeed(holding, undefined)
        yield* Deferred.await(commit)
      })))
      yield* Deferred.await(holding)
      const renewal = yield* Effect.forkChild(stores.a.renew("w-a", [kept!], ttl))
      // The renewal is waiting on the batch's row lock.
      let waiting = false
      for (let i = 0; i < 200 && !waiting; i++) {
        waiting = (yield* count(
          sql,
          `SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%claim_batches%'`
        )) > 0
        if (!waiting) yield* Effect.sleep("20 millis")
      }
      assert.isTrue(waiting, "the renewal waited for the hold's lock")
      yield* Deferred.succeed(commit, undefined)
      yield* Fiber.join(hold)
      assert.deepStrictEqual(
        yield* Fiber.join(renewal),
        [kept!],
        "the run still open in its batch is renewed, not lost"
      )
      const run = yield* readRun(stores, kept!.runId)
      assert.deepStrictEqual([run.state, run.fence, run.lease_owner], ["running", 1, "w-a"])
      assert.isAbove(run.lease_expires_at!.getTime(), Date.now() + 20_000)
    })))

  it.live("a fenced transaction left open holds up no reclaim of its batch: the sweep takes its expired neighbours at once, and the transaction's own run, whose completion is then refused by the fence with nothing of it committed", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* sql.unsafe(`CREATE TABLE "${schema}".app_writes (run_id bigint NOT NULL)`)
      yield* stores.a.enqueue([1, 2, 3].map((i) => ({ kind: "job", payload: { i } })))
      const claimed = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(claimed.length, 3)
      const inside = yield* Deferred.make<void>()
      const finish = yield* Deferred.make<void>()
      const lease = { runId: claimed[0]!.id, fence: claimed[0]!.fence }
      const transaction = yield* Effect.forkChild(Effect.exit(stores.a.completeInTransaction(
        lease,
        Effect.gen(function*() {
          yield* sql.unsafe(`INSERT INTO "${schema}".app_writes VALUES (${Number(lease.runId)})`)
          yield* Deferred.succeed(inside, undefined)
          yield* Deferred.await(finish)
        }),
        () => Exit.succeed("null"),
        ttl
      )))
      yield* Deferred.await(inside)
      // The batch's lease runs out while the caller's transaction is still open.
      yield* sql.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() - interval '1 second'`)
      const taken = yield* stores.b.claim(claimOf("w-b")).pipe(Effect.timeout("10 seconds"))
      assert.sameDeepMembers(taken.map((r) => [r.id, r.fence, r.via]), claimed.map((r) => [r.id, 2, "expired"]))
      yield* Deferred.succeed(finish, undefined)
      const exit = yield* Fiber.join(transaction)
      assert.isTrue(Exit.isFailure(exit))
      assert.deepInclude(Cause.squash((exit as Exit.Failure<unknown, unknown>).cause) as object, {
        _tag: "FenceRejected",
        presentedFence: 1,
        storedFence: 2
      })
      assert.strictEqual(yield* count(sql, `SELECT count(*) AS n FROM "${schema}".app_writes`), 0)
    })))

  it.live("a renewal that meets two holds of its batch one after the other (two runs checkpointing) still renews the run it names: no held lease is answered lost", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue([1, 2, 3].map((i) => ({ kind: "job", payload: { i } })))
      const [kept, first, second] = (yield* stores.a.claim(claimOf("w-a"))).map((r) => ({
        runId: r.id,
        fence: r.fence
      }))
      const waiters = (like: string) =>
        count(sql, `SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '${like}'`)
      const until = (condition: Effect.Effect<boolean, unknown>) =>
        Effect.gen(function*() {
          for (let i = 0; i < 500; i++) {
            if (yield* condition) return true
            yield* Effect.sleep("10 millis")
          }
          return false
        })
      // Each hold in a transaction of its own, committed when told: the second queues behind the first.
      const holdOpen = (runId: string, commit: Deferred.Deferred<void>, holding?: Deferred.Deferred<void>) =>
        Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe(`SELECT "${schema}".hold(ARRAY[${Number(runId)}]::bigint[])`)
          if (holding !== undefined) yield* Deferred.succeed(holding, undefined)
          yield* Deferred.await(commit)
        })))
      const holding = yield* Deferred.make<void>()
      const commitFirst = yield* Deferred.make<void>()
      const commitSecond = yield* Deferred.make<void>()
      const firstHold = yield* holdOpen(first!.runId, commitFirst, holding)
      yield* Deferred.await(holding)
      const renewal = yield* Effect.forkChild(stores.a.renew("w-a", [kept!], ttl))
      assert.isTrue(
        yield* until(Effect.map(waiters("%claim_batches%"), (n) => n >= 1)),
        "the renewal waits for the first hold"
      )
      const secondHold = yield* holdOpen(second!.runId, commitSecond)
      assert.isTrue(yield* until(Effect.map(waiters("%hold(%"), (n) => n >= 1)), "the second hold waits too")
      yield* Deferred.succeed(commitFirst, undefined)
      yield* Fiber.join(firstHold)
      // The renewal answers, or waits for the second hold in a statement of its own.
      yield* until(
        Effect.map(waiters("%renewed AS%"), (n) => n >= 1).pipe(
          Effect.map((n) => n || renewal.pollUnsafe() !== undefined)
        )
      )
      yield* Deferred.succeed(commitSecond, undefined)
      yield* Fiber.join(secondHold)
      assert.deepStrictEqual(
        yield* Fiber.join(renewal),
        [kept!],
        "the run still open in its batch is renewed, not lost"
      )
      const run = yield* readRun(stores, kept!.runId)
      assert.deepStrictEqual([run.state, run.fence, run.lease_owner], ["running", 1, "w-a"])
    })))

  it.live(
    "two workers draining 2,000 runs, half of which checkpoint: every run completed once under fence 1 (no lease of theirs answered lost), and no claim batch left unsettled",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const stores = yield* twoStores
        const { sql, schema } = stores
        const job = Handler.make({
          kind: "job",
          payload: Schema.Struct({ i: Schema.Number }),
          handle: ({ i }) => i % 2 === 0 ? Run.checkpoint({ i }) : Effect.void
        })
        // Renewals every 50 ms meet the checkpoints' holds often; a lease of 30 s never runs out here.
        const options = {
          ttl: "30 seconds",
          heartbeat: "50 millis",
          pollInterval: "100 millis",
          concurrency: 50,
          handlers: [job]
        } as const
        const eventsA = yield* startWorker(stores.a, sql, options)
        const eventsB = yield* startWorker(stores.b, sql, options)
        yield* stores.a.enqueue(Array.from({ length: 2_000 }, (_, i) => ({ kind: "job", payload: { i } })))
        yield* eventually(
          "2,000 runs completed",
          Effect.map(count(sql, `SELECT count(*) AS n FROM "${schema}".runs_now WHERE state = 'completed'`), (n) =>
            n === 2_000),
          "180 seconds"
        )
        if (process.env.DEBUG_DRAIN) {
          const lost = [...eventsA, ...eventsB].filter((e) =>
            e._tag === "LeaseLost" || e._tag === "WriteRejected" || e._tag === "StoreError"
          )
          console.error(JSON.stringify(lost.slice(0, 5)), lost.length)
          const first = lost.find((e) =>
            e._tag === "LeaseLost"
          ) as { runId: string } | undefined
          if (first) console.error(JSON.stringify(yield* stores.a.history(first.runId)))
        }
        assert.strictEqual(
          yield* count(sql, `SELECT count(*) AS n FROM "${schema}".runs_now WHERE fence <> 1`),
          0,
          "runs reclaimed (a lease answered lost)"
        )
        assert.strictEqual(
          yield* count(sql, `SELECT count(*) AS n FROM "${schema}".claim_batches WHERE settled_at IS NULL`),
          0,
          "claim batches left unsettled"
        )
        assert.strictEqual(
          yield* count(
            sql,
            `SELECT count(*) AS n FROM (SELECT run_id FROM "${schema}".run_history WHERE kind = 'completed' GROUP BY run_id HAVING count(*) > 1) x`
          ),
          0,
          "runs completed twice"
        )
      })),
    { timeout: 240_000 }
  )

  it.live("a sweep takes a dead worker's expired runs before due ones, however small their claim batches: 20 batches of one run, 20 due runs, one sweep of 20 reclaims the 20", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      // A worker that claimed its runs one at a time (a claim batch each), then died.
      for (let i = 0; i < 20; i++) {
        yield* stores.a.enqueue([{ kind: "job", payload: { dead: i } }])
        assert.strictEqual((yield* stores.a.claim(claimOf("w-dead", 1))).length, 1)
      }
      yield* sql.unsafe(
        `UPDATE "${schema}".claim_batches SET expires_at = now() - interval '1 second' WHERE owner = 'w-dead'`
      )
      yield* stores.a.enqueue(Array.from({ length: 20 }, (_, i) => ({ kind: "job", payload: { due: i } })))
      const swept = yield* stores.b.claim({ ...claimOf("w-b", 20), dueOnly: false })
      assert.strictEqual(swept.length, 20)
      assert.deepStrictEqual(
        swept.filter((r) => r.via !== "expired").map((r) => r.payload),
        [],
        "the sweep took due runs while expired leases were left in batches it did not move"
      )
    }))

  it.live("a sweep skips an expired batch another transaction holds (a holder gone silent mid-transaction) and reclaims the other expired batches", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue([{ kind: "job", payload: { i: 1 } }])
      const [free] = yield* stores.a.claim(claimOf("w-a"))
      yield* stores.a.enqueue([{ kind: "job", payload: { i: 2 } }])
      const [stuck] = yield* stores.a.claim(claimOf("w-a"))
      assert.strictEqual(yield* count(sql, `SELECT count(*) AS n FROM "${schema}".claim_batches`), 2)
      yield* sql.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() - interval '1 second'`)
      // The second batch held FOR KEY SHARE by a transaction that never ends here, as a fenced
      // transaction's check holds it while its client has gone silent.
      const holding = yield* Deferred.make<void>()
      const never = yield* Deferred.make<void>()
      yield* Effect.forkScoped(sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(
          `SELECT 1 FROM "${schema}".claim_batches WHERE ${Number(stuck!.id)} = ANY (ids) FOR KEY SHARE`
        )
        yield* Deferred.succeed(holding, undefined)
        yield* Deferred.await(never)
      })))
      yield* Deferred.await(holding)
      // The sweep answers, and takes the free batch's run; the held one waits for its batch.
      const taken = yield* stores.b.claim(claimOf("w-b")).pipe(Effect.timeout("10 seconds"))
      assert.deepStrictEqual(taken.map((r) => [r.id, r.fence, r.via]), [[free!.id, 2, "expired"]])
      const held = yield* readRun(stores, stuck!.id)
      assert.deepStrictEqual([held.fence, held.lease_owner], [1, "w-a"])
    })))

  it.live(
    "a completion held back before it reaches the server holds no lock (its lock and decision are one statement): the sweep reclaims its run, and the completion, sent late, is refused",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const stores = yield* twoStores
        const { sql, schema } = stores
        yield* stores.a.enqueue([{ kind: "job", payload: {} }])
        const [run] = yield* stores.a.claim(claimOf("w-a"))
        yield* sql.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() - interval '1 second'`)
        // The completion's statement is held back: a paused process, or a network gone silent.
        const stalled = yield* Deferred.make<void>()
        const resume = yield* Deferred.make<void>()
        const stall: Statement.Transformer = (self) =>
          self.compile()[0].includes("INSERT INTO") && self.compile()[0].includes("completion_batches")
            ? Effect.as(Effect.andThen(Deferred.succeed(stalled, undefined), Deferred.await(resume)), self)
            : Effect.succeed(self)
        const completing = yield* Effect.forkScoped(Effect.exit(
          stores.a.completeBatch([{ runId: run!.id, fence: run!.fence, result: null, keyed: false }]).pipe(
            Effect.provideService(Statement.CurrentTransformer, stall)
          )
        ))
        yield* Deferred.await(stalled)
        // While it is held back, nothing is locked: the sweep takes its run.
        const taken = yield* stores.b.claim(claimOf("w-b")).pipe(
          Effect.repeat({ until: (runs) => runs.length > 0, schedule: Schedule.spaced("250 millis") }),
          Effect.timeout("30 seconds")
        )
        assert.deepStrictEqual(taken.map((r) => [r.id, r.fence, r.via]), [[run!.id, 2, "expired"]])
        yield* Deferred.succeed(resume, undefined)
        const exit = yield* Fiber.join(completing)
        // The stalled completion never completes the run under its old fence.
        if (Exit.isSuccess(exit)) assert.notStrictEqual(exit.value[0]!._tag, "Finalized")
        const after = yield* readRun(stores, run!.id)
        assert.deepStrictEqual([after.state, after.fence, after.lease_owner], ["running", 2, "w-b"])
      })),
    { timeout: 60_000 }
  )

  it.live(
    "a keyed completion's transaction stalled after its ledger statement (its batch locked, the rows' statement to come) lets the batch go after the idle bound: the sweep reclaims the ledger's run while the completion is still stalled",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const stores = yield* twoStores
        const { sql, schema } = stores
        yield* stores.a.enqueue([1, 2].map((i) => ({ kind: "job", payload: { i } })))
        const [inLedger, inRow] = yield* stores.a.claim(claimOf("w-a"))
        // The second run moves to its row (as a checkpoint moves it): the completion then sends the
        // ledger's statement, and the rows' in the same transaction, since it claims successors.
        yield* sql.unsafe(`SELECT "${schema}".hold(ARRAY[${Number(inRow!.id)}]::bigint[])`)
        yield* sql.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() - interval '1 second'`)
        const stalled = yield* Deferred.make<void>()
        const resume = yield* Deferred.make<void>()
        let ledgerSent = false
        const stall: Statement.Transformer = (self) => {
          if (self.compile()[0].includes("lock_claim_batches")) ledgerSent = true
          else if (ledgerSent) {
            return Effect.as(Effect.andThen(Deferred.succeed(stalled, undefined), Deferred.await(resume)), self)
          }
          return Effect.succeed(self)
        }
        const items = [inLedger!, inRow!].map((r) => ({ runId: r.id, fence: r.fence, result: null, keyed: true }))
        const completing = yield* Effect.forkScoped(Effect.exit(
          stores.a.completeBatch(items, { owner: "w-a", ttl, queues: ["default"], kinds: ["job"] }).pipe(
            Effect.provideService(Statement.CurrentTransformer, stall)
          )
        ))
        yield* Deferred.await(stalled)
        // While it is stalled, the sweep skips the locked batch, then takes its run once the server
        // has ended the idle transaction.
        const taken = yield* stores.b.claim(claimOf("w-b")).pipe(
          Effect.repeat({ until: (runs) => runs.length > 0, schedule: Schedule.spaced("250 millis") }),
          Effect.timeout("30 seconds")
        )
        assert.deepStrictEqual(taken.map((r) => [r.id, r.fence, r.via]), [[inLedger!.id, 2, "expired"]])
        yield* Deferred.succeed(resume, undefined)
        const exit = yield* Fiber.join(completing)
        if (Exit.isSuccess(exit)) assert.notStrictEqual(exit.value[0]!._tag, "Finalized")
        const after = yield* readRun(stores, inLedger!.id)
        assert.deepStrictEqual([after.state, after.fence, after.lease_owner], ["running", 2, "w-b"])
      })),
    { timeout: 60_000 }
  )

  it.live("a renewal under another owner's name renews nothing of a batch this store claimed and leaves its expiry as it was", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue([1, 2, 3].map((i) => ({ kind: "job", payload: { i } })))
      const held = (yield* stores.a.claim(claimOf("w-a"))).map((r) => ({ runId: r.id, fence: r.fence }))
      yield* sql.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() + interval '5 seconds'`)
      const before = yield* expiries(stores)
      assert.deepStrictEqual(yield* stores.a.renew("w-x", held, ttl), [])
      assert.strictEqual((yield* expiries(stores)).batch, before.batch)
      // Its holder still holds them all.
      assert.deepStrictEqual(yield* stores.a.renew("w-a", held, ttl), held)
      assert.isAbove((yield* expiries(stores)).batch, before.batch + 20_000)
    })))

  it.live("a batch whose lease expired and whose runs were all reclaimed answers every lease of it as lost, and the new holder's leases keep their own expiry", () =>
    Effect.scoped(Effect.gen(function*() {
      const stores = yield* twoStores
      const { sql, schema } = stores
      yield* stores.a.enqueue([1, 2, 3].map((i) => ({ kind: "job", payload: { i } })))
      const held = (yield* stores.a.claim(claimOf("w-a"))).map((r) => ({ runId: r.id, fence: r.fence }))
      yield* sql.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() - interval '1 second'`)
      const taken = yield* stores.b.claim(claimOf("w-b"))
      assert.deepStrictEqual(taken.map((r) => [r.id, r.fence]), held.map((l) => [l.runId, 2]))
      const before = yield* expiries(stores)
      assert.deepStrictEqual(yield* stores.a.renew("w-a", held, ttl), [])
      const after = yield* expiries(stores)
      assert.deepStrictEqual([...after.runs], [...before.runs])
      assert.deepStrictEqual(
        yield* stores.b.renew("w-b", taken.map((r) => ({ runId: r.id, fence: r.fence })), ttl),
        taken.map((r) => ({ runId: r.id, fence: 2 }))
      )
    })))

  it.live("one renewal carries ledger leases and row leases (a keyed run moved to its row, an idempotent one reclaimed there), and on a rows store only row leases: the held ones are renewed, a reclaimed one is lost and its new holder's lease stays its own", () =>
    Effect.scoped(Effect.gen(function*() {
      for (const storage of ["ledger", "rows"] as const) {
        const stores = yield* twoStoresWith({ storage })
        const { sql, schema } = stores
        yield* stores.a.enqueue([{ kind: "job", payload: { i: 1 } }, { kind: "job", payload: { i: 2 } }])
        yield* stores.a.enqueue([{ kind: "job", payload: { i: 3 }, idempotencyKey: "once" }, {
          kind: "job",
          payload: { i: 4 },
          concurrencyKey: "k"
        }])
        const claimed = (yield* stores.a.claim(claimOf("w-a"))).map((r) => ({ runId: r.id, fence: r.fence }))
        assert.strictEqual(claimed.length, 4, storage)
        const inRows = yield* count(sql, `SELECT count(*) AS n FROM "${schema}".runs WHERE state = 'running'`)
        assert.strictEqual(inRows, storage === "ledger" ? 0 : 4, `${storage}: the runs claimed in their rows`)
        const [plain, , once, keyed] = claimed
        // The idempotent run's lease runs out and another worker takes it at fence 2 (in its row).
        yield* expireLease(stores, once!.runId)
        const [taken] = yield* stores.b.claim(claimOf("w-b"))
        assert.deepStrictEqual([taken!.id, taken!.fence], [once!.runId, 2], storage)
        // The keyed run moves to its row (a hold, as any write but a claim, completion or renewal
        // makes), its lease there to end in 5 seconds.
        yield* sql.unsafe(setLeaseExpirySql(schema, keyed!.runId, "now() + interval '5 seconds'"))
        const before = yield* expiries(stores)
        const held = claimed.filter((l) => l !== once)
        assert.deepStrictEqual(yield* stores.a.renew("w-a", claimed, ttl), held, storage)
        const after = yield* expiries(stores)
        assert.isAbove(
          after.runs.get(keyed!.runId)!,
          before.runs.get(keyed!.runId)! + 20_000,
          `${storage}: the keyed run's lease was extended`
        )
        assert.strictEqual(
          after.runs.get(once!.runId),
          before.runs.get(once!.runId),
          `${storage}: the new holder's lease did not move`
        )
        assert.strictEqual((yield* readRun(stores, plain!.runId)).lease_owner, "w-a")
      }
    })))
})

/** The claim batch's expiry (the store's one batch, if any) and each run row's lease expiry, in ms. */
const expiries = (stores: import("./support/stores.js").Stores) =>
  Effect.gen(function*() {
    const [batch] = yield* stores.sql.unsafe<{ at: Date | null }>(
      `SELECT max(expires_at) AS at FROM "${stores.schema}".claim_batches`
    )
    const rows = yield* stores.sql.unsafe<{ id: string; at: Date | null }>(
      `SELECT id::text AS id, lease_expires_at AS at FROM "${stores.schema}".runs WHERE state = 'running' ORDER BY id`
    )
    return { batch: batch?.at?.getTime() ?? Number.NaN, runs: new Map(rows.map((r) => [r.id, r.at?.getTime()])) }
  })
