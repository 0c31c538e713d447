/**
 * The fence at the store: claims raise it by exactly 1, per run; every guarded write is decided
 * by comparing fences, never lease times. The whole suite runs twice: with direct connections, and
 * through a real PgBouncer in transaction pooling mode (issue 16), where one client's consecutive
 * transactions run on different server connections.
 */
import { assert, describe, it } from "@effect/vitest"
import { FenceRejected, type RunStore } from "@leasehold/core"
import { Duration, Effect, type Scope } from "effect"
import { databaseUrl } from "./support/db.js"
import * as PgBouncer from "./support/pgbouncer.js"
import { expireLease, readRun, type Stores, twoStores as directStores, twoStoresAt } from "./support/stores.js"

const ttl = Duration.minutes(5)
const claimOne = (store: RunStore["Service"], owner: string, limit = 1) =>
  store.claim({ owner, queues: ["default"], kinds: ["job"], limit, ttl })
const enqueueJobs = (stores: Stores, n: number, maxAttempts = 1000) =>
  stores.a.enqueue(Array.from({ length: n }, (_, i) => ({ kind: "job", payload: { i }, maxAttempts })))

const fencingSuite = (through: string, twoStores: Effect.Effect<Stores, unknown, Scope.Scope>) => {
  describe(`claim and fence (${through})`, () => {
    it.live("each claim raises the fence by exactly 1 and sets owner and expiry from now()", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        const runs = yield* enqueueJobs(stores, 3)
        const first = yield* claimOne(stores.a, "worker-a", 3)
        assert.deepStrictEqual(first.map((r) => r.fence), [1, 1, 1])
        for (const run of runs) {
          const row = yield* readRun(stores, run.id)
          assert.strictEqual(row.state, "running")
          assert.strictEqual(row.lease_owner, "worker-a")
          assert.strictEqual(row.fence, 1)
        }
        // Live leases are not claimable.
        assert.strictEqual((yield* claimOne(stores.b, "worker-b", 3)).length, 0)
        for (const run of runs) yield* expireLease(stores, run.id)
        const second = yield* claimOne(stores.b, "worker-b", 3)
        assert.deepStrictEqual(second.map((r) => r.fence), [2, 2, 2])
        assert.deepStrictEqual(second.map((r) => r.attempt), [2, 2, 2])
        const row = yield* readRun(stores, runs[0]!.id)
        assert.strictEqual(row.lease_owner, "worker-b")
      }))

    it.live("100 claim/expire cycles with two workers alternating: per-run fences strictly increase, never repeat", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        // Two runs, claimed in an order that makes a per-worker counter diverge from a per-run one.
        const [x, y] = yield* enqueueJobs(stores, 2)
        const seen = new Map<string, Array<number>>([[x!.id, []], [y!.id, []]])
        for (let cycle = 0; cycle < 100; cycle++) {
          const worker = cycle % 2 === 0 ? stores.a : stores.b
          const claimed = yield* claimOne(worker, cycle % 2 === 0 ? "worker-a" : "worker-b", cycle % 3 === 0 ? 2 : 1)
          assert.isAtLeast(claimed.length, 1)
          for (const run of claimed) {
            seen.get(run.id)!.push(run.fence)
            yield* expireLease(stores, run.id)
          }
        }
        for (const [runId, fences] of seen) {
          assert.isAbove(fences.length, 10)
          fences.forEach((fence, i) => assert.strictEqual(fence, i + 1, `run ${runId} claim ${i}`))
          assert.strictEqual(new Set(fences).size, fences.length)
          assert.strictEqual((yield* readRun(stores, runId)).fence, fences.at(-1))
        }
      }))

    it.live("a due-only claim takes pending runs and leaves expired leases and passed suspension deadlines to the sweep", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        const [abandoned, waiting] = yield* enqueueJobs(stores, 2)
        assert.strictEqual((yield* claimOne(stores.a, "worker-a", 2)).length, 2)
        yield* expireLease(stores, abandoned!.id)
        yield* stores.a.suspend({
          runId: waiting!.id,
          fence: 1,
          signal: "approval",
          token: "t-due-only",
          timeout: Duration.millis(1)
        })
        const [fresh] = yield* enqueueJobs(stores, 1)
        yield* Effect.sleep("50 millis")

        const due = yield* stores.b.claim({
          owner: "worker-b",
          queues: ["default"],
          kinds: ["job"],
          limit: 10,
          ttl,
          dueOnly: true
        })
        assert.deepStrictEqual(due.map((r) => [r.id, r.fence]), [[fresh!.id, 1]])
        assert.strictEqual((yield* readRun(stores, abandoned!.id)).lease_owner, "worker-a")
        assert.strictEqual((yield* readRun(stores, waiting!.id)).state, "suspended")

        // The sweep (the default claim) takes both, each under the next fence.
        const swept = yield* claimOne(stores.b, "worker-b", 10)
        assert.deepStrictEqual(swept.map((r) => [r.id, r.fence]).sort(), [[abandoned!.id, 2], [waiting!.id, 2]].sort())
        assert.deepStrictEqual(swept.find((r) => r.id === waiting!.id)!.signals, { approval: { _tag: "TimedOut" } })
      }))

    it.live("fences past 2^32 (a promoted server's) and small ones renew, complete and diagnose together in one statement", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        yield* enqueueJobs(stores, 3)
        const held = yield* claimOne(stores.a, "worker-a", 3)
        // One lease as a promoted server would grant it (ADR 0016); the others as before. The
        // fence is set on the run's row, so the run is moved there from the ledger first.
        yield* stores.sql.unsafe(`SELECT "${stores.schema}".hold(ARRAY[${Number(held[1]!.id)}]::bigint[])`)
        yield* stores.sql.unsafe(
          `UPDATE "${stores.schema}".runs SET fence = 4294967296 WHERE id = ${Number(held[1]!.id)}`
        )
        const leases = held.map((r, i) => ({ runId: r.id, fence: i === 1 ? 2 ** 32 : r.fence }))
        assert.deepStrictEqual(
          (yield* stores.a.renew("worker-a", leases, ttl)).map((l) => l.fence).sort(),
          [1, 1, 2 ** 32].sort()
        )
        // A stale small fence beside a large one is still diagnosed, with both fences.
        const outcomes = yield* stores.a.completeBatch([
          { ...leases[0]!, result: "1" },
          { runId: held[1]!.id, fence: 1, result: "0" },
          { ...leases[2]!, result: "3" }
        ])
        assert.deepStrictEqual(outcomes.map((o) => o._tag), ["Finalized", "Rejected", "Finalized"])
        assert.deepInclude(outcomes[1], { fence: 1, storedFence: 2 ** 32 })
        const [done] = yield* stores.a.completeBatch([{ ...leases[1]!, result: "2" }])
        assert.deepInclude(done, { _tag: "Finalized", fence: 2 ** 32 })
      }))

    it.live("the database refuses to lower a fence, whatever statement tries", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        const [run] = yield* enqueueJobs(stores, 1)
        yield* claimOne(stores.a, "worker-a")
        // On the run's row (the ledger's fences are written once, by the claim).
        yield* stores.sql.unsafe(`SELECT "${stores.schema}".hold(ARRAY[${Number(run!.id)}]::bigint[])`)
        const error = yield* stores.sql.unsafe(`UPDATE "${stores.schema}".runs SET fence = 0 WHERE id = ${run!.id}`)
          .pipe(Effect.flip)
        assert.strictEqual(error._tag, "SqlError")
        assert.strictEqual((yield* readRun(stores, run!.id)).fence, 1)
      }))
  })

  describe(`stale writes (${through})`, () => {
    const supersede = Effect.gen(function*() {
      const stores = yield* twoStores
      const [run] = yield* enqueueJobs(stores, 1)
      const [byA] = yield* claimOne(stores.a, "worker-a")
      yield* expireLease(stores, run!.id)
      const [byB] = yield* claimOne(stores.b, "worker-b")
      assert.strictEqual(byA!.fence, 1)
      assert.strictEqual(byB!.fence, 2)
      return { stores, runId: run!.id }
    })

    it.live("a stale checkpoint, completion, failure and release are rejected by the fence, naming both fences", () =>
      Effect.gen(function*() {
        const { runId, stores } = yield* supersede
        const stale = { runId, fence: 1 }
        const checkpoint = yield* Effect.flip(stores.a.checkpoint(stale, { step: 1 }))
        assert.instanceOf(checkpoint, FenceRejected)
        assert.deepInclude(checkpoint, {
          _tag: "FenceRejected",
          runId,
          presentedFence: 1,
          storedFence: 2,
          operation: "checkpoint"
        })
        const fail = yield* Effect.flip(stores.a.fail({ ...stale, error: { message: "x" }, retryDelayMs: 10 }))
        assert.deepInclude(fail, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 })
        const release = yield* Effect.flip(stores.a.release(stale))
        assert.deepInclude(release, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 })
        const [completion] = yield* stores.a.completeBatch([{ ...stale, result: JSON.stringify("from A") }])
        assert.deepStrictEqual(completion, { _tag: "Rejected", runId, fence: 1, storedFence: 2, state: "running" })
        // The current holder is untouched by all of that and completes.
        const [byB] = yield* stores.b.completeBatch([{ runId, fence: 2, result: JSON.stringify("from B") }])
        assert.strictEqual(byB!._tag, "Finalized")
        const record = yield* stores.a.get(runId)
        assert.strictEqual(record.state, "completed")
        assert.strictEqual(record.result, "from B")
        // Each rejection is in the run's history, with the fence it presented.
        const rejected = (yield* stores.a.history(runId)).filter((e) => e.kind === "stale_write_rejected")
        assert.deepStrictEqual(
          rejected.map((e) => [e.fence, (e.detail as any).operation, (e.detail as any).storedFence]),
          [
            [1, "checkpoint", 2],
            [1, "fail", 2],
            [1, "release", 2],
            [1, "complete", 2]
          ]
        )
      }))

    it.live("lease time does not decide: a holder whose lease expired but was not superseded still writes", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        const [run] = yield* enqueueJobs(stores, 1)
        const [byA] = yield* claimOne(stores.a, "worker-a")
        yield* expireLease(stores, run!.id)
        yield* stores.a.checkpoint({ runId: run!.id, fence: byA!.fence }, { step: 1 })
        const [done] = yield* stores.a.completeBatch([{ runId: run!.id, fence: byA!.fence, result: "1" }])
        assert.strictEqual(done!._tag, "Finalized")
        // And once completed, nobody can claim it again.
        assert.strictEqual((yield* claimOne(stores.b, "worker-b")).length, 0)
      }))

    it.live("a batch with one stale item commits the others and rejects that one", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        const runs = yield* enqueueJobs(stores, 3)
        const claimed = yield* claimOne(stores.a, "worker-a", 3)
        assert.strictEqual(claimed.length, 3)
        const staleId = runs[1]!.id
        yield* expireLease(stores, staleId)
        const [reclaimed] = yield* claimOne(stores.b, "worker-b")
        assert.strictEqual(reclaimed!.id, staleId)
        const outcomes = yield* stores.a.completeBatch(
          claimed.map((r) => ({ runId: r.id, fence: r.fence, result: JSON.stringify("a") }))
        )
        const byId = new Map(outcomes.map((o) => [o.runId, o]))
        assert.strictEqual(byId.get(runs[0]!.id)!._tag, "Finalized")
        assert.strictEqual(byId.get(runs[2]!.id)!._tag, "Finalized")
        assert.deepInclude(byId.get(staleId)!, { _tag: "Rejected", fence: 1, storedFence: 2 })
        assert.strictEqual((yield* readRun(stores, runs[0]!.id)).state, "completed")
        assert.strictEqual((yield* readRun(stores, staleId)).state, "running")
        assert.strictEqual((yield* readRun(stores, staleId)).lease_owner, "worker-b")
      }))

    it.live("a completion sent again under the fence it completed with is acknowledged; any other fence is still rejected", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        const [x, y] = yield* enqueueJobs(stores, 2)
        assert.strictEqual((yield* claimOne(stores.a, "worker-a", 2)).length, 2)
        const items = [x!, y!].map((r) => ({ runId: r.id, fence: 1, result: JSON.stringify({ done: r.id }) }))
        assert.deepStrictEqual((yield* stores.a.completeBatch(items)).map((o) => o._tag), ["Finalized", "Finalized"])
        // The statement's answer was lost and the batch is sent again: the same completion, acknowledged.
        assert.deepStrictEqual((yield* stores.a.completeBatch(items)).map((o) => o._tag), ["Finalized", "Finalized"])
        assert.deepStrictEqual((yield* stores.a.get(x!.id)).result, { done: x!.id })
        // A completion under another fence is not the holder's: rejected, naming both fences.
        const [other] = yield* stores.b.completeBatch([{ runId: x!.id, fence: 2, result: null }])
        assert.deepInclude(other!, { _tag: "Rejected", fence: 2, storedFence: 1, state: "completed" })
        assert.deepStrictEqual((yield* stores.a.get(x!.id)).result, { done: x!.id })
      }))

    it.live("an expired run ends failed after max_attempts instead of looping", () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        const [run] = yield* enqueueJobs(stores, 1, 2)
        assert.strictEqual((yield* claimOne(stores.a, "doomed-1")).length, 1)
        yield* expireLease(stores, run!.id)
        assert.strictEqual((yield* claimOne(stores.b, "doomed-2")).length, 1)
        yield* expireLease(stores, run!.id)
        assert.strictEqual((yield* claimOne(stores.a, "doomed-3")).length, 0)
        const record = yield* stores.a.get(run!.id)
        assert.strictEqual(record.state, "failed")
        assert.strictEqual(record.attempt, 2)
        assert.strictEqual(record.fence, 3)
        assert.strictEqual(record.leaseOwner, null)
        assert.match(String((record.error as any).message), /lease expired/)
      }))
  })
}

fencingSuite("direct", directStores)

describe("through PgBouncer", () => {
  fencingSuite(
    "PgBouncer, transaction pooling",
    Effect.flatMap(
      PgBouncer.start(databaseUrl(), 2),
      (pooler) => twoStoresAt(pooler.url, { pooler: {} }, { pooler: "transaction" })
    )
  )
})
