/**
 * Uniqueness windows under concurrent enqueuers (migration 0022, docs/adr/0020-uniqueness-windows.md):
 * several psql processes, and several connections through the TypeScript enqueue, enqueue the same
 * unique keys at once; each key gets exactly one run, and every enqueuer is told that run. Then the
 * runs leave their window (cancelled) and the race runs again: exactly one new run per key. Two
 * batches of the same keys in opposite orders never deadlock (the holds are taken in one order).
 */
import { assert, describe, it } from "@effect/vitest"
import type { Enqueued } from "@leasehold/core"
import { Effect, Result } from "effect"
import { spawn } from "node:child_process"
import { databaseUrl } from "./support/db.js"
import { type Stores, twoStores } from "./support/stores.js"

const processes = 6
const keys = 150

/** A seeded shuffle, so each process takes the keys in an order of its own (the seed is printed). */
const shuffled = (n: number, seed: number): Array<number> => {
  let state = seed >>> 0 || 1
  const next = () => (state = (state * 1103515245 + 12345) >>> 0) / 2 ** 32
  const out = Array.from({ length: n }, (_, i) => i + 1)
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1))
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}

/** One psql process enqueueing every key once, one autocommitted statement each: key|id|created lines. */
const psqlEnqueuer = (schema: string, order: ReadonlyArray<number>) =>
  Effect.promise(() =>
    new Promise<Array<{ key: string; id: string; created: boolean }>>((resolve, reject) => {
      const script = order.map((k) =>
        `SELECT 'k${k}', id, created FROM "${schema}".enqueue_run('job', '{}', unique_key => 'k${k}');`
      ).join("\n")
      const child = spawn("psql", [databaseUrl(), "-v", "ON_ERROR_STOP=1", "-At", "-F", "|", "-q"], {
        stdio: ["pipe", "pipe", "pipe"]
      })
      let out = ""
      let err = ""
      child.stdout.on("data", (c) => (out += c))
      child.stderr.on("data", (c) => (err += c))
      child.on("error", reject)
      child.on("exit", (code) => {
        if (code !== 0) return reject(new Error(`psql exited ${code}: ${err}`))
        resolve(
          out.trim().split("\n").map((line) => {
            const [key, id, created] = line.split("|")
            return { key: key!, id: id!, created: created === "t" }
          })
        )
      })
      child.stdin.end(script)
    })
  )

/** Every enqueuer's answers for each key agree on one run, exactly one of them created it; the runs by key. */
const onePerKey = (
  answers: ReadonlyArray<{ key: string; id: string; created: boolean }>,
  count = keys
): Map<string, string> => {
  const byKey = new Map<string, Array<{ id: string; created: boolean }>>()
  for (const a of answers) byKey.set(a.key, [...(byKey.get(a.key) ?? []), a])
  assert.strictEqual(byKey.size, count)
  const runs = new Map<string, string>()
  for (const [key, seen] of byKey) {
    assert.strictEqual(new Set(seen.map((s) => s.id)).size, 1, `every enqueuer of ${key} is told the same run`)
    assert.strictEqual(seen.filter((s) => s.created).length, 1, `exactly one enqueuer of ${key} created it`)
    runs.set(key, seen[0]!.id)
  }
  return runs
}

/** Keys of the connections' race, each met by every connection at once. */
const racedKeys = 40

const jobRuns = (stores: Stores) =>
  Effect.map(
    stores.sql.unsafe<{ n: number; distinct_ids: number }>(
      `SELECT count(*)::int AS n, count(DISTINCT id)::int AS distinct_ids FROM "${stores.schema}".runs WHERE kind = 'job'`
    ),
    (rows) => rows[0]!.n
  )

describe("uniqueness windows under concurrent enqueuers", () => {
  it.live("psql processes enqueueing the same unique keys at once: one run per key, and again once the runs left their window", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const seed = Date.now() % 100_000
      console.log(`unique-process seed ${seed}`)
      // Every process takes the keys in one order, so they meet on each key at about the same moment.
      const race = (round: number) =>
        Effect.map(
          Effect.all(
            Array.from({ length: processes }, () => psqlEnqueuer(stores.schema, shuffled(keys, seed + round))),
            {
              concurrency: "unbounded"
            }
          ),
          (answers) => onePerKey(answers.flat())
        )
      const first = yield* race(0)
      assert.strictEqual(yield* jobRuns(stores), keys, "one run per key in the database")

      // The runs leave the window (unfinished states): the next race creates one new run per key.
      const cancelled = yield* stores.a.cancelMany({ kind: "job" })
      assert.strictEqual(cancelled.length, keys)
      const second = yield* race(1)
      assert.strictEqual(yield* jobRuns(stores), 2 * keys, "one more run per key in the database")
      for (const [key, id] of second) assert.notStrictEqual(id, first.get(key), `${key}: a new run`)
      const holds = yield* stores.sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${stores.schema}".unique_holds h JOIN "${stores.schema}".runs_now r ON r.id = h.run_id
         WHERE r.state = 'pending'`
      )
      assert.strictEqual(holds[0]!.n, keys, "each key's hold names its pending run")
    }))

  it.live("two stores enqueueing batches of the same unique keys in opposite orders at once, round after round: no deadlock, one run per key", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const rounds = 30
      const width = 8
      for (let round = 0; round < rounds; round++) {
        const keys = Array.from({ length: width }, (_, i) => `r${round}-k${i}`)
        const batch = (order: ReadonlyArray<string>) =>
          order.map((key) => ({ kind: "job", payload: { key }, unique: { key } }))
        // Each batch takes every key; without one order of holds, each waits for a key the other took first.
        const [forward, backward] = yield* Effect.all([
          Effect.result(stores.a.enqueue(batch(keys))),
          Effect.result(stores.b.enqueue(batch([...keys].reverse())))
        ], { concurrency: "unbounded" })
        // The reason of a failure, if any: a deadlock is a StoreError whose reason is DeadlockError.
        if (Result.isFailure(forward)) return assert.fail(`round ${round}, forward batch: ${String(forward.failure)}`)
        if (Result.isFailure(backward)) {
          return assert.fail(`round ${round}, backward batch: ${String(backward.failure)}`)
        }
        const answers = [
          ...forward.success.map((e, i) => ({ key: keys[i]!, id: e.id, created: e.created })),
          ...backward.success.map((e, i) => ({ key: keys[width - 1 - i]!, id: e.id, created: e.created }))
        ]
        onePerKey(answers, width)
      }
      assert.strictEqual(yield* jobRuns(stores), rounds * width, "one run per key in the database")
      const holds = yield* stores.sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${stores.schema}".unique_holds h JOIN "${stores.schema}".runs r ON r.id = h.run_id`
      )
      assert.strictEqual(holds[0]!.n, rounds * width, "every hold names its run: no placeholder was left")
    }))

  it.live("two stores enqueueing batches of the same unique keys in opposite orders inside their callers' transactions, where a deadlock is not retried: none deadlocks", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const rounds = 20
      const width = 8
      for (let round = 0; round < rounds; round++) {
        const keys = Array.from({ length: width }, (_, i) => `t${round}-k${i}`)
        const batch = (order: ReadonlyArray<string>) =>
          order.map((key) => ({ kind: "job", payload: { key }, unique: { key } }))
        // Inside a caller's transaction the store sends no batch again (enqueue.ts › retryDeadlocks):
        // only the one order of holds (takeHolds) keeps the two from waiting on each other.
        const [forward, backward] = yield* Effect.all([
          Effect.result(stores.sql.withTransaction(stores.a.enqueue(batch(keys)))),
          Effect.result(stores.sqlB.withTransaction(stores.b.enqueue(batch([...keys].reverse()))))
        ], { concurrency: "unbounded" })
        if (Result.isFailure(forward)) return assert.fail(`round ${round}, forward batch: ${String(forward.failure)}`)
        if (Result.isFailure(backward)) {
          return assert.fail(`round ${round}, backward batch: ${String(backward.failure)}`)
        }
        onePerKey([
          ...forward.success.map((e, i) => ({ key: keys[i]!, id: e.id, created: e.created })),
          ...backward.success.map((e, i) => ({ key: keys[width - 1 - i]!, id: e.id, created: e.created }))
        ], width)
      }
    }))

  it.live("two stores enqueueing batches that mix unique keys and idempotency keys, in opposite orders at once, round after round: no deadlock, one run per key", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const rounds = 30
      for (let round = 0; round < rounds; round++) {
        // Each batch names both keys of the round: one through a unique window, one through an idempotency key.
        const unique = { kind: "job", payload: { round }, unique: { key: `u${round}` } }
        const keyed = { kind: "job", payload: { round }, idempotencyKey: `i${round}` }
        const [forward, backward] = yield* Effect.all([
          Effect.result(stores.a.enqueue([keyed, unique])),
          Effect.result(stores.b.enqueue([unique, keyed]))
        ], { concurrency: "unbounded" })
        // A deadlock is a StoreError whose reason is DeadlockError.
        if (Result.isFailure(forward)) return assert.fail(`round ${round}, forward batch: ${String(forward.failure)}`)
        if (Result.isFailure(backward)) {
          return assert.fail(`round ${round}, backward batch: ${String(backward.failure)}`)
        }
        const [fKeyed, fUnique] = forward.success
        const [bUnique, bKeyed] = backward.success
        assert.strictEqual(fKeyed!.id, bKeyed!.id, `round ${round}: one run for the idempotency key`)
        assert.strictEqual(fUnique!.id, bUnique!.id, `round ${round}: one run for the unique key`)
        assert.strictEqual([fKeyed!, bKeyed!].filter((e) => e.created).length, 1)
        assert.strictEqual([fUnique!, bUnique!].filter((e) => e.created).length, 1)
        // Different unique keys, two idempotency keys in opposite orders: the holds cannot order
        // these, and a deadlock the server breaks sends the batch it aborted again.
        const idem = (key: string) => ({ kind: "job", payload: { round }, idempotencyKey: `${key}${round}` })
        const [left, right] = yield* Effect.all([
          Effect.result(
            stores.a.enqueue([{ kind: "job", payload: { round }, unique: { key: `l${round}` } }, idem("x"), idem("y")])
          ),
          Effect.result(
            stores.b.enqueue([{ kind: "job", payload: { round }, unique: { key: `r${round}` } }, idem("y"), idem("x")])
          )
        ], { concurrency: "unbounded" })
        if (Result.isFailure(left)) return assert.fail(`round ${round}, left batch: ${String(left.failure)}`)
        if (Result.isFailure(right)) return assert.fail(`round ${round}, right batch: ${String(right.failure)}`)
        assert.deepStrictEqual(
          [left.success[1]!.id, left.success[2]!.id],
          [right.success[2]!.id, right.success[1]!.id],
          `round ${round}: one run per idempotency key`
        )
      }
      assert.strictEqual(yield* jobRuns(stores), rounds * 6, "six runs per round in the database")
    }))

  it.live("eight connections of two stores enqueueing each unique key at the same moment: one run per key, and again once the runs left their window", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const enqueuers = 8
      // Key by key, every connection enqueues it at once (the pools hold 4 connections each).
      const race = Effect.map(
        Effect.forEach(Array.from({ length: racedKeys }, (_, k) => `k${k + 1}`), (key) =>
          Effect.all(
            Array.from({ length: enqueuers }, (_, e) =>
              Effect.map(
                (e % 2 === 0 ? stores.a : stores.b).enqueue([{ kind: "job", payload: { from: e }, unique: { key } }]),
                (out: ReadonlyArray<Enqueued>) => ({ key, id: out[0]!.id, created: out[0]!.created })
              )),
            { concurrency: "unbounded" }
          )),
        (answers) => onePerKey(answers.flat(), racedKeys)
      )
      const first = yield* race
      assert.strictEqual(yield* jobRuns(stores), racedKeys)
      yield* stores.a.cancelMany({ kind: "job" })
      const second = yield* race
      assert.strictEqual(yield* jobRuns(stores), 2 * racedKeys)
      for (const [key, id] of second) assert.notStrictEqual(id, first.get(key), `${key}: a new run`)
    }))
})
