/**
 * Idempotency keys under concurrent enqueuers (I23): two stores (two connection pools) enqueue
 * batches of the same keys in opposite orders at once, round after round. Neither batch may fail
 * (each inserts its keys in one order, so they never wait on each other in a cycle), each key gets
 * exactly one run, and each answer, in its request's place, names the run of its request's key.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import { twoStores } from "./support/stores.js"

describe("idempotency keys under concurrent enqueuers", () => {
  it.live("two stores enqueueing batches of the same idempotency keys in opposite orders at once, round after round: no deadlock, one run per key, each answer its key's run", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const rounds = 40
      const width = 200
      for (let round = 0; round < rounds; round++) {
        const keys = Array.from({ length: width }, (_, i) => `r${round}-k${String(i).padStart(3, "0")}`)
        const batch = (order: ReadonlyArray<string>) =>
          order.map((key) => ({ kind: "job", payload: { key }, idempotencyKey: key }))
        const backwardKeys = [...keys].reverse()
        const [forward, backward] = yield* Effect.all([
          Effect.result(stores.a.enqueue(batch(keys))),
          Effect.result(stores.b.enqueue(batch(backwardKeys)))
        ], { concurrency: "unbounded" })
        // The reason of a failure, if any: a deadlock is a StoreError whose reason is DeadlockError.
        if (Result.isFailure(forward)) return assert.fail(`round ${round}, forward batch: ${String(forward.failure)}`)
        if (Result.isFailure(backward)) {
          return assert.fail(`round ${round}, backward batch: ${String(backward.failure)}`)
        }
        const answers = [
          ...forward.success.map((e, i) => ({ key: keys[i]!, ...e })),
          ...backward.success.map((e, i) => ({ key: backwardKeys[i]!, ...e }))
        ]
        const rows = yield* stores.sql.unsafe<{ id: string; key: string }>(
          `SELECT id::text AS id, idempotency_key AS key FROM "${stores.schema}".runs WHERE idempotency_key LIKE 'r${round}-%'`
        )
        const runOf = new Map(rows.map((r) => [r.key, r.id]))
        assert.strictEqual(runOf.size, width, `round ${round}: one run per key in the database`)
        assert.strictEqual(rows.length, width, `round ${round}: no second run of a key`)
        for (const key of keys) {
          const seen = answers.filter((a) => a.key === key)
          assert.deepStrictEqual(
            seen.map((a) => a.id),
            [runOf.get(key)!, runOf.get(key)!],
            `round ${round}, ${key}: both answers name its run`
          )
          assert.strictEqual(
            seen.filter((a) => a.created).length,
            1,
            `round ${round}, ${key}: exactly one batch created it`
          )
        }
        // Ids are drawn in request order, as the memory store draws them.
        const created = forward.success.filter((e) => e.created).map((e) => BigInt(e.id))
        assert.deepStrictEqual(
          created,
          [...created].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)),
          `round ${round}: ids in request order`
        )
      }
      const total = yield* stores.sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${stores.schema}".runs`)
      assert.strictEqual(total[0]!.n, rounds * width, "one run per key in the database")
    }))
})
