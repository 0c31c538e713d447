/**
 * The RunStore contract: one suite of behaviour every store must show, registered against a store
 * factory (as River's driver conformance suite runs against each driver). `contract.test.ts` runs
 * it against `PgRunStore` on a real PostgreSQL and against `MemoryRunStore` under `TestClock`.
 *
 * Lease time is never slept: each target says how time passes for what its store compares with
 * its `now()` (PG: the stored times move back; memory: `TestClock.adjust`).
 */
import { assert, describe, it } from "@effect/vitest"
import {
  AttemptLogs,
  type ClaimedRun,
  Client,
  type EnqueueRequest,
  Handler,
  InvalidPayload,
  KeyLimits,
  type LeaseKey,
  type ListFilter,
  OperatorActions,
  RateLimits,
  RunHistory,
  RunStore,
  type StoreNotification,
  UnstorableValue
} from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Duration, Effect, Exit, Fiber, Schema, type Scope, Stream } from "effect"

/** A store under test and how time passes for it. */
export interface ContractStore {
  readonly store: RunStore["Service"]
  /** Time passes by `duration` for everything the store compares with its `now()`. */
  readonly passTime: (duration: Duration.Input) => Effect.Effect<void, unknown>
  /** Gives background work (a notification listener) a moment to catch up. */
  readonly settle: Effect.Effect<void>
  /**
   * The runs and claims made so far are in history ranges the ids have passed, as a day's range is
   * once the next day's runs go to the next one (PG: the sequences move to the next range's start;
   * memory: nothing, each run is its own).
   */
  readonly sealHistory: Effect.Effect<void, unknown>
}

export interface ContractTarget {
  readonly name: string
  /** `live`: the store runs on the real clock (`it.live`); `test`: under `TestClock` (`it.effect`). */
  readonly clock: "live" | "test"
  /**
   * What becomes of a completed run: `keep` (its row, result and history stay readable) or
   * `delete` (PgRunStore's `completedRuns: "delete"`: the completion deletes it, so reads of it
   * answer as for a run never enqueued; failed and cancelled runs are kept).
   */
  readonly completedRuns: "keep" | "delete"
  /** A fresh, empty store in the test's scope. */
  readonly make: Effect.Effect<ContractStore, unknown, Scope.Scope>
}

type Store = RunStore["Service"]

const ttl = Duration.minutes(1)
const claimFrom = (
  store: Store,
  owner: string,
  options: { limit?: number; queues?: Array<string>; kinds?: Array<string>; dueOnly?: boolean } = {}
) =>
  store.claim({
    owner,
    queues: options.queues ?? ["default"],
    kinds: options.kinds ?? ["job"],
    limit: options.limit ?? 10,
    ttl,
    dueOnly: options.dueOnly
  })

const enqueueJobs = (store: Store, count: number, extra: { queue?: string; maxAttempts?: number } = {}) =>
  Effect.map(
    store.enqueue(Array.from({ length: count }, (_, i) => ({ kind: "job", payload: { i }, ...extra }))),
    (runs) => runs.map((r) => r.id)
  )

/** Enqueues one run and claims it: its id and the lease its claim granted. */
const heldRun = (store: Store, owner = "w1", extra: { maxAttempts?: number } = {}) =>
  Effect.gen(function*() {
    const [id] = yield* enqueueJobs(store, 1, extra)
    const claimed = yield* claimFrom(store, owner, { limit: 1 })
    assert.strictEqual(claimed.length, 1)
    assert.strictEqual(claimed[0]!.id, id)
    return { runId: id!, fence: claimed[0]!.fence } satisfies LeaseKey
  })

const kinds = (store: Store, runId: string) =>
  Effect.map(store.history(runId), (events) => events.map((e) => `${e.kind}@${e.fence}`))

/** The run is gone: it reads as a run never enqueued. */
const assertDeleted = (store: Store, runId: string) =>
  Effect.gen(function*() {
    assert.deepInclude(yield* Effect.flip(store.get(runId)), { _tag: "RunNotFound" })
    assert.deepInclude(yield* Effect.flip(store.history(runId)), { _tag: "RunNotFound" })
  })

const cyclic = (): unknown => {
  const value: Record<string, unknown> = {}
  value.self = value
  return value
}

/** A log line as a worker hands it to the store. */
const logLine = (message: string, level = "Info", annotations: Record<string, string> = {}): AttemptLogs.LogLine => ({
  level,
  at: new Date("2026-12-03T12:00:00.000Z"),
  message,
  annotations,
  cut: 0
})

/** Registers the contract's tests for one store. */
export const runStoreContract = (target: ContractTarget): void => {
  const test = (name: string, body: (s: ContractStore) => Effect.Effect<void, unknown, Scope.Scope>) =>
    (target.clock === "live" ? it.live : it.effect)(name, () => Effect.flatMap(target.make, body))
  const deleted = target.completedRuns === "delete"

  describe(`RunStore contract: ${target.name}`, () => {
    describe("enqueue and claim", () => {
      test("a claim hands out the run under fence 1, attempt 1, and a live lease is not claimed again", ({ store }) =>
        Effect.gen(function*() {
          const [enqueued] = yield* store.enqueue([{ kind: "job", payload: { n: 1, tags: ["a"] }, maxAttempts: 3 }])
          assert.isTrue(enqueued!.created)
          const [claimed, ...rest] = yield* claimFrom(store, "w1")
          assert.isEmpty(rest)
          assert.deepInclude(claimed, {
            id: enqueued!.id,
            kind: "job",
            queue: "default",
            fence: 1,
            attempt: 1,
            maxAttempts: 3,
            checkpoint: null
          })
          assert.deepStrictEqual(claimed!.payload, { n: 1, tags: ["a"] })
          const record = yield* store.get(enqueued!.id)
          assert.deepInclude(record, { state: "running", leaseOwner: "w1", fence: 1, attempt: 1 })
          assert.isNotNull(record.leaseExpiresAt)
          assert.isEmpty(yield* claimFrom(store, "w2"))
          assert.strictEqual((yield* store.get(enqueued!.id)).fence, 1)
        }))

      test("claims take due runs by priority, then due time, then id, within the queues and kinds asked, up to the limit", ({ passTime, store }) =>
        Effect.gen(function*() {
          const [low] = yield* enqueueJobs(store, 1)
          yield* passTime("1 second")
          const [high, otherQueue, otherKind] = (yield* store.enqueue([
            { kind: "job", payload: null, priority: 5 },
            { kind: "job", payload: null, queue: "other", priority: 9 },
            { kind: "mail", payload: null, priority: 9 }
          ])).map((r) => r.id)
          yield* passTime("1 second")
          const [later] = yield* enqueueJobs(store, 1)
          const [delayed] = (yield* store.enqueue([{ kind: "job", payload: null, priority: 9, delayMs: 60_000 }])).map((
            r
          ) => r.id)
          const first = yield* claimFrom(store, "w", { limit: 2 })
          assert.deepStrictEqual(first.map((c) => c.id).sort(), [high!, low!].sort())
          const second = yield* claimFrom(store, "w", { limit: 5 })
          assert.deepStrictEqual(second.map((c) => c.id), [later!], "the delayed run, other queues and kinds stay")
          yield* passTime("61 seconds")
          // Due only: the first claims' leases have expired by now, and are not what this asks for.
          const third = yield* claimFrom(store, "w", {
            queues: ["default", "other"],
            kinds: ["job", "mail"],
            limit: 5,
            dueOnly: true
          })
          assert.deepStrictEqual(third.map((c) => c.id).sort(), [delayed!, otherQueue!, otherKind!].sort())
        }))

      test("enqueueing an idempotency key again yields the same run, within a batch and across calls", ({ store }) =>
        Effect.gen(function*() {
          const batch = yield* store.enqueue([
            { kind: "job", payload: { v: 1 }, idempotencyKey: "k" },
            { kind: "job", payload: { v: 2 }, idempotencyKey: "k" },
            { kind: "job", payload: { v: 3 } }
          ])
          assert.deepStrictEqual(batch.map((e) => e.created), [true, false, true])
          assert.strictEqual(batch[1]!.id, batch[0]!.id)
          assert.notStrictEqual(batch[2]!.id, batch[0]!.id)
          const [again] = yield* store.enqueue([{ kind: "job", payload: { v: 4 }, idempotencyKey: "k" }])
          assert.deepStrictEqual(again, { id: batch[0]!.id, created: false })
          assert.deepStrictEqual((yield* store.get(batch[0]!.id)).payload, { v: 1 })
          assert.strictEqual((yield* store.list({ limit: 10, offset: 0 })).length, 2)
        }))
    })

    describe("unique windows", () => {
      test("a unique key while the run is unfinished: a duplicate yields it, in a batch and across calls, per kind; once it completes a new run is enqueued", ({ store }) =>
        Effect.gen(function*() {
          const batch = yield* store.enqueue([
            { kind: "job", payload: { v: 1 }, unique: { key: "order-7" } },
            { kind: "job", payload: { v: 2 }, unique: { key: "order-7" } },
            { kind: "mail", payload: { v: 3 }, unique: { key: "order-7" } }
          ])
          assert.deepStrictEqual(batch.map((e) => e.created), [true, false, true])
          assert.strictEqual(batch[1]!.id, batch[0]!.id)
          assert.notStrictEqual(batch[2]!.id, batch[0]!.id, "another kind's key is another window")
          // Held while running too.
          const [claimed] = yield* claimFrom(store, "w1", { limit: 1 })
          assert.strictEqual(claimed!.id, batch[0]!.id)
          const [running] = yield* store.enqueue([{ kind: "job", payload: { v: 4 }, unique: { key: "order-7" } }])
          assert.deepStrictEqual(running, { id: batch[0]!.id, created: false })
          assert.deepStrictEqual((yield* store.get(batch[0]!.id)).payload, { v: 1 })
          yield* store.completeBatch([{ runId: claimed!.id, fence: claimed!.fence, result: null }])
          const [after] = yield* store.enqueue([{ kind: "job", payload: { v: 5 }, unique: { key: "order-7" } }])
          assert.isTrue(after!.created)
          assert.notStrictEqual(after!.id, batch[0]!.id)
          if (deleted) {
            yield* assertDeleted(store, batch[0]!.id)
            assert.deepStrictEqual((yield* store.list({ limit: 10, kind: "job" })).map((r) => r.id), [after!.id])
          } else {
            assert.strictEqual((yield* store.list({ limit: 10, kind: "job" })).length, 2)
          }
        }))

      test("unique by payload: payloads equal as JSON values are duplicates whatever their keys' order, others are not", ({ store }) =>
        Effect.gen(function*() {
          const out = yield* store.enqueue([
            { kind: "job", payload: { a: 1, b: [1, { c: null }] }, unique: {} },
            { kind: "job", payload: { b: [1, { c: null }], a: 1 }, unique: {} },
            { kind: "job", payload: { a: 1, b: [1, { c: 0 }] }, unique: {} },
            { kind: "job", payload: { a: 1, b: [1, { c: null }] } }
          ])
          assert.deepStrictEqual(out.map((e) => e.created), [true, false, true, true])
          assert.strictEqual(out[1]!.id, out[0]!.id)
        }))

      test("a window of states holds only while its run is in them; a window of a period holds in every state until it passes", ({ passTime, store }) =>
        Effect.gen(function*() {
          const [pending] = yield* store.enqueue([{
            kind: "job",
            payload: null,
            unique: { key: "p", states: ["pending"] }
          }])
          const [claimed] = yield* claimFrom(store, "w1", { limit: 1 })
          assert.strictEqual(claimed!.id, pending!.id)
          const [whileRunning] = yield* store.enqueue([{
            kind: "job",
            payload: null,
            unique: { key: "p", states: ["pending"] }
          }])
          assert.isTrue(whileRunning!.created, "the running run no longer holds a window of pending")

          const [first] = yield* store.enqueue([{
            kind: "mail",
            payload: null,
            unique: { key: "hourly", periodMs: 3_600_000 }
          }])
          yield* store.cancel(first!.id)
          const [cancelled] = yield* store.enqueue([{
            kind: "mail",
            payload: null,
            unique: { key: "hourly", periodMs: 3_600_000 }
          }])
          assert.deepStrictEqual(cancelled, { id: first!.id, created: false }, "a period holds in any state")
          yield* passTime("59 minutes")
          const [within] = yield* store.enqueue([{
            kind: "mail",
            payload: null,
            unique: { key: "hourly", periodMs: 3_600_000 }
          }])
          assert.isFalse(within!.created)
          yield* passTime("2 minutes")
          const [next] = yield* store.enqueue([{
            kind: "mail",
            payload: null,
            unique: { key: "hourly", periodMs: 3_600_000 }
          }])
          assert.isTrue(next!.created)
          // A period and states: held while both hold.
          const [both] = yield* store.enqueue([{
            kind: "sms",
            payload: null,
            unique: { key: "b", periodMs: 3_600_000, states: ["pending"] }
          }])
          yield* store.cancel(both!.id)
          const [afterCancel] = yield* store.enqueue([{
            kind: "sms",
            payload: null,
            unique: { key: "b", periodMs: 3_600_000 }
          }])
          assert.isTrue(afterCancel!.created, "the cancelled run left its window's states")
        }))

      test("a bad window is refused with InvalidConfig naming it, and nothing is written", ({ store }) =>
        Effect.gen(function*() {
          const bad: Array<[unknown, string]> = [
            [{ periodMs: 0 }, "unique.periodMs"],
            [{ periodMs: -5 }, "unique.periodMs"],
            [{ periodMs: Number.NaN }, "unique.periodMs"],
            [{ states: [] }, "unique.states"],
            [{ states: ["pending", "done"] }, "unique.states"],
            [{ key: "" }, "unique.key"],
            [{ key: "k".repeat(1025) }, "unique.key"]
          ]
          for (const [unique, option] of bad) {
            const refused = yield* Effect.flip(store.enqueue([
              { kind: "job", payload: null },
              { kind: "job", payload: null, unique: unique as never }
            ]))
            assert.deepInclude(refused, { _tag: "InvalidConfig", option }, JSON.stringify(unique))
          }
          const combined = yield* Effect.flip(
            store.enqueue([{ kind: "job", payload: null, idempotencyKey: "i", unique: { key: "u" } }])
          )
          assert.deepInclude(combined, { _tag: "InvalidConfig", option: "unique" })
          assert.isEmpty(yield* store.list({ limit: 10 }))
        }))
    })

    describe("fences and expired leases", () => {
      test("each claim raises the fence by exactly 1: an expired lease is reclaimed under the next fence, before due runs", ({ passTime, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store, "w1")
          assert.strictEqual(lease.fence, 1)
          yield* passTime("61 seconds")
          const [due] = yield* enqueueJobs(store, 1)
          const [reclaimed, next] = yield* claimFrom(store, "w2", { limit: 1 })
          assert.isUndefined(next)
          assert.deepInclude(reclaimed, { id: lease.runId, fence: 2, attempt: 2 })
          assert.deepInclude(yield* store.get(lease.runId), { leaseOwner: "w2", fence: 2 })
          assert.deepStrictEqual((yield* claimFrom(store, "w2")).map((c) => c.id), [due!])
          assert.deepStrictEqual(yield* kinds(store, lease.runId), ["claimed@1", "reclaimed@2"])
          assert.strictEqual((yield* store.stats).reclaims, 1)
        }))

      test("a due-only claim leaves expired leases alone; a sweeping claim takes them", ({ passTime, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store, "w1")
          yield* passTime("61 seconds")
          assert.isEmpty(yield* claimFrom(store, "w2", { dueOnly: true }))
          assert.strictEqual((yield* store.get(lease.runId)).fence, 1)
          assert.deepStrictEqual((yield* claimFrom(store, "w2")).map((c) => [c.id, c.fence]), [[lease.runId, 2]])
        }))

      test("an expired lease on the run's last attempt fails the run instead of handing it out, still raising the fence", ({ passTime, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store, "w1", { maxAttempts: 1 })
          yield* passTime("61 seconds")
          assert.isEmpty(yield* claimFrom(store, "w2"))
          const record = yield* store.get(lease.runId)
          assert.deepInclude(record, { state: "failed", fence: 2, attempt: 1, leaseOwner: null })
          assert.isTrue((record.error as { permanent: boolean }).permanent)
          assert.isNotNull(record.finishedAt)
          assert.deepStrictEqual(yield* kinds(store, lease.runId), ["claimed@1", "failed@2"])
        }))

      test("renewal returns exactly the leases still held by that owner, and a renewed lease outlives its first expiry", ({ passTime, store }) =>
        Effect.gen(function*() {
          const [a, b, c] = yield* enqueueJobs(store, 3)
          const claimed = yield* claimFrom(store, "w1")
          assert.strictEqual(claimed.length, 3)
          yield* store.completeBatch([{ runId: c!, fence: 1, result: null }])
          const renewed = yield* store.renew("w1", [
            { runId: a!, fence: 1 },
            { runId: b!, fence: 7 }, // a fence it was never granted
            { runId: c!, fence: 1 } // finished
          ], ttl)
          assert.deepStrictEqual(renewed, [{ runId: a!, fence: 1 }])
          assert.isEmpty(yield* store.renew("thief", [{ runId: a!, fence: 1 }, { runId: b!, fence: 1 }], ttl))
          // A lease listed twice is held twice; an id written with leading zeros answers as the store prints it.
          assert.deepStrictEqual(yield* store.renew("w1", [{ runId: a!, fence: 1 }, { runId: a!, fence: 1 }], ttl), [{
            runId: a!,
            fence: 1
          }, { runId: a!, fence: 1 }])
          assert.deepStrictEqual(yield* store.renew("w1", [{ runId: `00${a!}`, fence: 1 }], ttl), [{
            runId: a!,
            fence: 1
          }])
          yield* passTime("40 seconds")
          assert.deepStrictEqual(yield* store.renew("w1", [{ runId: a!, fence: 1 }], ttl), [{ runId: a!, fence: 1 }])
          yield* passTime("40 seconds") // past a's first expiry, inside its renewed one; b was never renewed
          const taken = yield* claimFrom(store, "w2")
          assert.deepStrictEqual(taken.map((t) => [t.id, t.fence]), [[b!, 2]])
          assert.strictEqual((yield* store.get(a!)).leaseOwner, "w1")
        }))

      test("a renewal loses exactly the runs its holder no longer holds (completed, cancelled, reclaimed after the lease it stopped renewing ran out) and never extends the new holder's lease", ({ passTime, store }) =>
        Effect.gen(function*() {
          const ids = yield* enqueueJobs(store, 5)
          assert.strictEqual((yield* claimFrom(store, "w1")).length, 5)
          const [done, cancelled, forgotten, ...kept] = ids.map((id): LeaseKey => ({ runId: id!, fence: 1 }))
          yield* store.completeBatch([{ ...done!, result: null }])
          yield* store.cancel(cancelled!.runId)
          // `forgotten` is not named: it keeps its first expiry, and another worker takes it after.
          assert.deepStrictEqual(yield* store.renew("w1", [done!, cancelled!, ...kept], ttl), kept)
          yield* passTime("40 seconds")
          assert.deepStrictEqual(yield* store.renew("w1", kept, ttl), kept)
          yield* passTime("30 seconds")
          const [taken] = yield* claimFrom(store, "w2")
          assert.deepStrictEqual([taken!.id, taken!.fence], [forgotten!.runId, 2])
          // The stale holder names it again: lost, and w2's lease runs out on its own time.
          yield* passTime("20 seconds")
          assert.deepStrictEqual(yield* store.renew("w1", [forgotten!, ...kept], ttl), kept)
          yield* passTime("41 seconds")
          const again = yield* claimFrom(store, "w3")
          assert.deepStrictEqual(again.map((r) => [r.id, r.fence]), [[forgotten!.runId, 3]])
          assert.strictEqual((yield* store.get(kept[0]!.runId)).leaseOwner, "w1")
        }))
    })

    describe("guarded writes", () => {
      test("a superseded holder's writes are rejected with both fences named, recorded, and change nothing", ({ passTime, store }) =>
        Effect.gen(function*() {
          const stale = yield* heldRun(store, "w1")
          yield* passTime("61 seconds")
          const [current] = yield* claimFrom(store, "w2")
          assert.strictEqual(current!.fence, 2)
          const expect = (operation: string) => ({
            _tag: "FenceRejected" as const,
            runId: stale.runId,
            presentedFence: 1,
            storedFence: 2,
            operation
          })
          assert.deepInclude(yield* Effect.flip(store.checkpoint(stale, { late: true })), expect("checkpoint"))
          assert.deepInclude(
            yield* Effect.flip(store.fail({ ...stale, error: { m: "x" }, retryDelayMs: 0 })),
            expect("fail")
          )
          assert.deepInclude(yield* Effect.flip(store.release(stale)), expect("release"))
          assert.deepInclude(
            yield* Effect.flip(store.suspend({ ...stale, signal: "s", token: "t-stale", timeout: undefined })),
            expect("suspend")
          )
          assert.deepInclude(yield* Effect.flip(store.snooze({ ...stale, delayMs: 5_000 })), expect("snooze"))
          const record = yield* store.get(stale.runId)
          assert.deepInclude(record, {
            state: "running",
            leaseOwner: "w2",
            fence: 2,
            attempt: 2,
            checkpoint: null,
            error: null
          })
          const history = yield* store.history(stale.runId)
          const rejections = history.filter((e) => e.kind === "stale_write_rejected")
          assert.deepStrictEqual(rejections.map((e) => [e.fence, (e.detail as { operation: string }).operation]), [
            [1, "checkpoint"],
            [1, "fail"],
            [1, "release"],
            [1, "suspend"],
            [1, "snooze"]
          ])
          assert.strictEqual((yield* store.stats).fenceRejections, 5)
        }))

      test("a holder that already let its run go gets LeaseNotHeld, an unknown run RunNotFound, and neither is recorded as stale", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.release(lease)
          const notHeld = yield* Effect.flip(store.checkpoint(lease, { late: true }))
          assert.deepInclude(notHeld, {
            _tag: "LeaseNotHeld",
            runId: lease.runId,
            fence: 1,
            state: "pending",
            operation: "checkpoint"
          })
          const missing = yield* Effect.flip(
            store.fail({ runId: "999999", fence: 1, error: null, retryDelayMs: undefined })
          )
          assert.deepInclude(missing, { _tag: "RunNotFound", runId: "999999" })
          assert.deepStrictEqual(yield* kinds(store, lease.runId), ["claimed@1", "released@1"])
          assert.strictEqual((yield* store.stats).fenceRejections, 0)
        }))

      test("a batch completes its current items and rejects a stale one and a missing one, each with its reason", ({ passTime, store }) =>
        Effect.gen(function*() {
          const stale = yield* heldRun(store, "w1")
          yield* passTime("61 seconds")
          yield* claimFrom(store, "w2") // takes the stale run under fence 2
          const [fresh] = yield* enqueueJobs(store, 1)
          const [held] = yield* claimFrom(store, "w1")
          assert.strictEqual(held!.id, fresh)
          const outcomes = yield* store.completeBatch([
            { runId: fresh!, fence: 1, result: JSON.stringify({ ok: 1 }) },
            { runId: stale.runId, fence: 1, result: JSON.stringify({ ok: 2 }) },
            { runId: "999999", fence: 3, result: null }
          ])
          assert.deepStrictEqual(outcomes, [
            { _tag: "Finalized", runId: fresh!, fence: 1 },
            { _tag: "Rejected", runId: stale.runId, fence: 1, storedFence: 2, state: "running" },
            { _tag: "Rejected", runId: "999999", fence: 3, storedFence: 3, state: "missing" }
          ])
          if (deleted) yield* assertDeleted(store, fresh!)
          else {assert.deepInclude(yield* store.get(fresh!), {
              state: "completed",
              result: { ok: 1 },
              leaseOwner: null,
              leaseExpiresAt: null
            })}
          assert.deepInclude(yield* store.get(stale.runId), { state: "running", result: null, fence: 2 })
          assert.deepStrictEqual(yield* kinds(store, stale.runId), [
            "claimed@1",
            "reclaimed@2",
            "stale_write_rejected@1"
          ])
        }))

      test("a completion sent again under the fence it completed with is acknowledged, not rejected nor recorded", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          const item = { ...lease, result: JSON.stringify("first") }
          assert.deepStrictEqual(yield* store.completeBatch([item]), [{ _tag: "Finalized", ...lease }])
          const again = yield* store.completeBatch([{ ...lease, result: JSON.stringify("again") }])
          if (deleted) {
            // The run is gone with its completion: the resent one finds nothing and is answered as
            // a missing run's (storedFence: the presented one), writing nothing. Not acknowledged,
            // unlike keep mode and I6 (RunStore.completeBatch documents Finalized for this case).
            assert.deepStrictEqual(again, [{ _tag: "Rejected", ...lease, storedFence: 1, state: "missing" }])
            yield* assertDeleted(store, lease.runId)
            assert.deepInclude(yield* Effect.flip(store.release(lease)), { _tag: "RunNotFound" })
            return
          }
          assert.deepStrictEqual(again, [{ _tag: "Finalized", ...lease }])
          assert.deepInclude(yield* store.get(lease.runId), { state: "completed", result: "first", fence: 1 })
          assert.deepStrictEqual(yield* kinds(store, lease.runId), ["claimed@1", "completed@1"])
          // Any other guarded write after the completion is still refused.
          assert.deepInclude(yield* Effect.flip(store.release(lease)), {
            _tag: "LeaseNotHeld",
            state: "completed",
            operation: "release"
          })
        }))

      test("fail schedules a retry after its delay while attempts remain, then fails the run", ({ passTime, store }) =>
        Effect.gen(function*() {
          const first = yield* heldRun(store, "w1", { maxAttempts: 2 })
          assert.deepStrictEqual(yield* store.fail({ ...first, error: { m: "one" }, retryDelayMs: 30_000 }), {
            _tag: "RetryScheduled",
            delayMs: 30_000
          })
          assert.deepInclude(yield* store.get(first.runId), {
            state: "pending",
            error: { m: "one" },
            leaseOwner: null,
            finishedAt: null
          })
          assert.isEmpty(yield* claimFrom(store, "w1"), "not due before its delay")
          yield* passTime("31 seconds")
          const [second] = yield* claimFrom(store, "w1")
          assert.deepInclude(second, { id: first.runId, fence: 2, attempt: 2 })
          assert.deepStrictEqual(
            yield* store.fail({ runId: first.runId, fence: 2, error: { m: "two" }, retryDelayMs: 0 }),
            { _tag: "Failed" }
          )
          const record = yield* store.get(first.runId)
          assert.deepInclude(record, { state: "failed", attempt: 2, error: { m: "two" } })
          assert.isNotNull(record.finishedAt)
          assert.deepStrictEqual(yield* kinds(store, first.runId), [
            "claimed@1",
            "retry_scheduled@1",
            "claimed@2",
            "failed@2"
          ])
        }))

      test("release gives the run back at once and refunds its attempt", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.checkpoint(lease, { step: 3 })
          yield* store.release(lease)
          assert.deepInclude(yield* store.get(lease.runId), {
            state: "pending",
            attempt: 0,
            leaseOwner: null,
            fence: 1
          })
          const [again] = yield* claimFrom(store, "w2")
          assert.deepInclude(again, { id: lease.runId, fence: 2, attempt: 1, checkpoint: { step: 3 } })
        }))
    })

    describe("attempt timeouts and run deadlines", () => {
      test("an enqueue's attempt timeout and deadline are kept on the run and handed to its claim, the deadline counted from the store's clock", ({ store }) =>
        Effect.gen(function*() {
          const [after] = yield* store.enqueue([{
            kind: "job",
            payload: null,
            attemptTimeoutMs: 5_000,
            deadlineAfterMs: 60_000
          }])
          const record = yield* store.get(after!.id)
          assert.strictEqual(record.attemptTimeoutMs, 5_000)
          assert.strictEqual(record.deadline!.getTime() - record.createdAt.getTime(), 60_000, "now() + 60 s")
          // A deadline given as a time is kept as it is (here one hour after the store's now()).
          const at = new Date(record.createdAt.getTime() + 3_600_000)
          const [timed, plain] = yield* store.enqueue([
            { kind: "job", payload: null, deadlineAt: at },
            { kind: "job", payload: null }
          ])
          assert.deepInclude(yield* store.get(timed!.id), { deadline: at, attemptTimeoutMs: null })
          assert.deepInclude(yield* store.get(plain!.id), { deadline: null, attemptTimeoutMs: null })
          const claimed = yield* claimFrom(store, "w1")
          const byId = new Map(claimed.map((c) => [c.id, c]))
          assert.strictEqual(byId.get(after!.id)!.attemptTimeoutMs, 5_000)
          const left = byId.get(after!.id)!.deadlineInMs!
          assert.isTrue(left > 0 && left <= 60_000, `${left} ms left of 60 s`)
          assert.isTrue(byId.get(timed!.id)!.deadlineInMs! > 60_000)
          assert.deepInclude(byId.get(plain!.id), { attemptTimeoutMs: null, deadlineInMs: null })
        }))

      test("a key's next run, claimed by a completion's hand-off, is handed over with its timeouts", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          const [first, second] = yield* store.enqueue([
            { kind: "job", payload: 1, concurrencyKey: "K" },
            { kind: "job", payload: 2, concurrencyKey: "K", attemptTimeoutMs: 4_000, deadlineAfterMs: 60_000 }
          ])
          const claimed = yield* claimFrom(store, "w1")
          assert.deepStrictEqual(claimed.map((c) => c.id), [first!.id])
          assert.deepInclude(claimed[0], { attemptTimeoutMs: null, deadlineInMs: null })
          const [done] = yield* store.completeBatch([{ runId: first!.id, fence: 1, result: null, keyed: true }], {
            owner: "w1",
            ttl,
            queues: ["default"],
            kinds: ["job"]
          })
          const next = (done as { next?: ClaimedRun }).next
          assert.deepInclude(next, { id: second!.id, fence: 1, attemptTimeoutMs: 4_000 })
          assert.isTrue(next!.deadlineInMs! > 0 && next!.deadlineInMs! <= 60_000, `${next!.deadlineInMs} ms left`)
        }))

      test("idempotency keys and unique windows keep an enqueue's timeouts too", ({ store }) =>
        Effect.gen(function*() {
          const [keyed, unique] = yield* store.enqueue([
            { kind: "job", payload: 1, idempotencyKey: "k1", attemptTimeoutMs: 7_000, deadlineAfterMs: 90_000 },
            { kind: "job", payload: 2, unique: { key: "u1" }, attemptTimeoutMs: 8_000, deadlineAfterMs: 80_000 }
          ])
          for (const [id, timeout, deadline] of [[keyed!.id, 7_000, 90_000], [unique!.id, 8_000, 80_000]] as const) {
            const record = yield* store.get(id)
            assert.strictEqual(record.attemptTimeoutMs, timeout)
            assert.strictEqual(record.deadline!.getTime() - record.createdAt.getTime(), deadline)
          }
        }))

      test("a failed attempt gets no retry due at or past the run's deadline: the run fails for good, saying why, its attempt's error kept", ({ passTime, store }) =>
        Effect.gen(function*() {
          const [enqueued] = yield* store.enqueue([{ kind: "job", payload: null, deadlineAfterMs: 60_000 }])
          const [first] = yield* claimFrom(store, "w1")
          const lease1 = { runId: enqueued!.id, fence: first!.fence }
          assert.deepStrictEqual(yield* store.fail({ ...lease1, error: { m: "one" }, retryDelayMs: 10_000 }), {
            _tag: "RetryScheduled",
            delayMs: 10_000
          })
          yield* passTime("11 seconds")
          const [second] = yield* claimFrom(store, "w1")
          assert.deepInclude(second, { id: enqueued!.id, fence: 2, attempt: 2 })
          // 11 s have passed: a retry in 49 s or more would be due at or past the deadline.
          assert.deepStrictEqual(
            yield* store.fail({ runId: enqueued!.id, fence: 2, error: { m: "two" }, retryDelayMs: 49_000 }),
            { _tag: "Failed" }
          )
          const record = yield* store.get(enqueued!.id)
          assert.deepInclude(record, { state: "failed", attempt: 2, maxAttempts: 5 })
          assert.deepStrictEqual(record.error, RunStorage.deadlineFailure({ m: "two" }))
          assert.isNotNull(record.finishedAt)
          const history = yield* store.history(enqueued!.id)
          assert.deepStrictEqual(history.map((e) => `${e.kind}@${e.fence}`), [
            "claimed@1",
            "retry_scheduled@1",
            "claimed@2",
            "failed@2"
          ])
          assert.deepInclude(history[3]!.detail as object, { error: RunStorage.deadlineFailure({ m: "two" }) })
          assert.isEmpty(yield* claimFrom(store, "w1"), "nothing left to claim")
        }))

      test("a run due, or reclaimed, past its deadline is claimed with the time left at or below zero", ({ passTime, store }) =>
        Effect.gen(function*() {
          const [late] = yield* store.enqueue([{ kind: "job", payload: null, deadlineAfterMs: 10_000 }])
          yield* passTime("20 seconds")
          const [claimed] = yield* claimFrom(store, "w1")
          assert.strictEqual(claimed!.id, late!.id)
          assert.isTrue(claimed!.deadlineInMs! <= -10_000, `${claimed!.deadlineInMs} ms left`)
          // Its holder fails it for good (what the worker does with a run claimed past its deadline).
          assert.deepStrictEqual(
            yield* store.fail({
              runId: late!.id,
              fence: claimed!.fence,
              error: { tag: "RunDeadlinePassed" },
              retryDelayMs: undefined
            }),
            { _tag: "Failed" }
          )
          // A lease that expired past the deadline: its reclaim says so too.
          const [held] = yield* store.enqueue([{ kind: "job", payload: null, deadlineAfterMs: 90_000 }])
          const [first] = yield* claimFrom(store, "w1")
          assert.strictEqual(first!.id, held!.id)
          yield* passTime("2 minutes")
          const [reclaimed] = yield* claimFrom(store, "w2")
          assert.deepInclude(reclaimed, { id: held!.id, via: "expired", fence: 2 })
          assert.isTrue(reclaimed!.deadlineInMs! <= -30_000, `${reclaimed!.deadlineInMs} ms left`)
        }))

      test("bad timeouts are refused with InvalidConfig naming them, and nothing is written", ({ store }) =>
        Effect.gen(function*() {
          const bad: ReadonlyArray<[Partial<EnqueueRequest>, string]> = [
            [{ attemptTimeoutMs: 0 }, "attemptTimeout"],
            [{ attemptTimeoutMs: Number.NaN }, "attemptTimeout"],
            [{ deadlineAfterMs: -1 }, "deadline"],
            [{ deadlineAt: new Date(Number.NaN) }, "deadline"],
            [{ deadlineAt: new Date(), deadlineAfterMs: 1_000 }, "deadline"],
            [{ delayMs: 5_000, deadlineAfterMs: 5_000 }, "deadline"]
          ]
          for (const [options, option] of bad) {
            const refused = yield* Effect.flip(
              store.enqueue([{ kind: "job", payload: null }, { kind: "job", payload: null, ...options }])
            )
            assert.deepInclude(refused, { _tag: "InvalidConfig", option }, JSON.stringify(options))
          }
          assert.isEmpty(yield* store.list({ limit: 10 }), "nothing written")
        }))
    })

    describe("snooze", () => {
      test("snooze lets the lease go, refunds the attempt and makes the run due after its delay, by the store's clock", ({ passTime, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store, "w1", { maxAttempts: 1 })
          yield* store.checkpoint(lease, { step: 1 })
          yield* store.snooze({ ...lease, delayMs: 30_000 })
          const record = yield* store.get(lease.runId)
          assert.deepInclude(record, {
            state: "pending",
            attempt: 0,
            leaseOwner: null,
            leaseExpiresAt: null,
            fence: 1,
            error: null
          })
          assert.isNull(record.finishedAt)
          assert.isEmpty(yield* claimFrom(store, "w2"), "not due before its delay")
          // The holder's lease is gone: its next write is refused, as after a release.
          assert.deepInclude(yield* Effect.flip(store.snooze({ ...lease, delayMs: 0 })), {
            _tag: "LeaseNotHeld",
            state: "pending",
            operation: "snooze"
          })
          yield* passTime("31 seconds")
          const [again] = yield* claimFrom(store, "w2")
          // maxAttempts 1, and still a first attempt: snoozing used none.
          assert.deepInclude(again, { id: lease.runId, fence: 2, attempt: 1, checkpoint: { step: 1 } })
          yield* store.snooze({ runId: lease.runId, fence: 2, delayMs: 0 })
          const [third] = yield* claimFrom(store, "w1")
          assert.deepInclude(third, { id: lease.runId, fence: 3, attempt: 1 })
          const history = yield* store.history(lease.runId)
          assert.deepStrictEqual(history.map((e) => `${e.kind}@${e.fence}`), [
            "claimed@1",
            "snoozed@1",
            "claimed@2",
            "snoozed@2",
            "claimed@3"
          ])
          assert.isString((history[1]!.detail as { runAt: unknown }).runAt)
          assert.strictEqual((yield* store.stats).fenceRejections, 0)
        }))

      test("a snoozed keyed run gives its key slot to the key's next run and waits in the key's line again", ({ passTime, store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          const [k1, k2] = (yield* store.enqueue([
            { kind: "job", payload: { i: 1 }, concurrencyKey: "K" },
            { kind: "job", payload: { i: 2 }, concurrencyKey: "K" }
          ])).map((r) => r.id)
          const [first] = yield* claimFrom(store, "w1")
          assert.strictEqual(first!.id, k1!)
          yield* store.snooze({ runId: k1!, fence: 1, delayMs: 10_000 })
          const [second, ...none] = yield* claimFrom(store, "w1")
          assert.strictEqual(second!.id, k2!, "the slot went to the next of K")
          assert.isEmpty(none)
          yield* passTime("11 seconds")
          assert.isEmpty(yield* claimFrom(store, "w1"), "k1 is due, but K's one slot is k2's")
          assert.deepInclude(yield* store.get(k1!), { state: "pending", waitingForKey: true })
          yield* store.completeBatch([{ runId: k2!, fence: 1, result: null }])
          const [back] = yield* claimFrom(store, "w1")
          assert.deepInclude(back, { id: k1!, fence: 2, attempt: 1 })
        }))
    })

    describe("suspension", () => {
      test("suspend releases the lease and refunds the attempt; resume by id makes it claimable with the payload under the next fence", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.suspend({ ...lease, signal: "approval", token: "tok-1", timeout: undefined })
          assert.deepInclude(yield* store.get(lease.runId), {
            state: "suspended",
            leaseOwner: null,
            leaseExpiresAt: null,
            attempt: 0,
            signalName: "approval",
            signalToken: "tok-1",
            suspendDeadline: null
          })
          assert.isEmpty(yield* claimFrom(store, "w1"))
          assert.isEmpty(yield* store.renew("w1", [lease], ttl), "a suspended run's lease is not renewed")
          assert.strictEqual(yield* store.resumeById(lease.runId, { approved: true }), lease.runId)
          const [again] = yield* claimFrom(store, "w1")
          assert.deepInclude(again, { id: lease.runId, fence: 2, attempt: 1 })
          assert.deepStrictEqual(again!.signals, { approval: { _tag: "Signalled", payload: { approved: true } } })
          assert.deepStrictEqual(yield* kinds(store, lease.runId), [
            "claimed@1",
            "suspended@1",
            "resumed@1",
            "claimed@2"
          ])
        }))

      test("resume by token finds the waiting run; the token is gone afterwards, and the wrong targets fail with their reasons", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.suspend({ ...lease, signal: "webhook", token: "tok-2", timeout: undefined })
          const [pendingId] = yield* enqueueJobs(store, 1)
          assert.deepInclude(yield* Effect.flip(store.resumeById(pendingId!, {})), {
            _tag: "InvalidTransition",
            runId: pendingId!,
            state: "pending",
            operation: "resume"
          })
          assert.deepInclude(yield* Effect.flip(store.resumeById("999999", {})), {
            _tag: "RunNotFound",
            runId: "999999"
          })
          assert.deepInclude(yield* Effect.flip(store.resumeByToken("tok-unknown", {})), {
            _tag: "SignalTokenNotFound",
            token: "tok-unknown"
          })
          assert.strictEqual(yield* store.resumeByToken("tok-2", { by: "hook" }), lease.runId)
          assert.deepInclude(yield* store.get(lease.runId), { state: "pending", signalToken: null, signalName: null })
          assert.deepInclude(yield* Effect.flip(store.resumeByToken("tok-2", {})), {
            _tag: "SignalTokenNotFound",
            token: "tok-2"
          })
          assert.deepStrictEqual((yield* store.get(lease.runId)).signals, {
            webhook: { _tag: "Signalled", payload: { by: "hook" } }
          })
        }))

      test("a second run suspending with a token a waiting run holds gets SignalTokenInUse and keeps its lease", ({ store }) =>
        Effect.gen(function*() {
          const [a, b] = yield* enqueueJobs(store, 2)
          yield* claimFrom(store, "w1")
          yield* store.suspend({ runId: a!, fence: 1, signal: "s", token: "shared", timeout: undefined })
          const error = yield* Effect.flip(
            store.suspend({ runId: b!, fence: 1, signal: "s", token: "shared", timeout: undefined })
          )
          assert.deepInclude(error, { _tag: "SignalTokenInUse", runId: b!, token: "shared" })
          assert.deepInclude(yield* store.get(b!), { state: "running", leaseOwner: "w1", signalToken: null })
          assert.deepStrictEqual(yield* kinds(store, b!), ["claimed@1"])
        }))

      test("a suspension past its deadline is taken by a sweeping claim with a TimedOut outcome, never by a due-only one", ({ passTime, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.suspend({ ...lease, signal: "approval", token: "tok-3", timeout: Duration.seconds(30) })
          assert.isNotNull((yield* store.get(lease.runId)).suspendDeadline)
          assert.isEmpty(yield* claimFrom(store, "w1"), "not before the deadline")
          yield* passTime("31 seconds")
          assert.isEmpty(yield* claimFrom(store, "w1", { dueOnly: true }))
          const [timedOut] = yield* claimFrom(store, "w1")
          assert.deepInclude(timedOut, { id: lease.runId, fence: 2, attempt: 1 })
          assert.deepStrictEqual(timedOut!.signals, { approval: { _tag: "TimedOut" } })
          assert.deepInclude(yield* store.get(lease.runId), { signalToken: null, suspendDeadline: null })
          assert.deepStrictEqual(yield* kinds(store, lease.runId), ["claimed@1", "suspended@1", "signal_timed_out@2"])
        }))
    })

    describe("signal delivery", () => {
      test("a delivery resumes a run suspended on that signal; the same outcome again is a Duplicate, another a Conflict, and neither writes", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          assert.deepStrictEqual(
            yield* store.suspend({ ...lease, signal: "approval", token: "tok-d1", timeout: undefined }),
            { _tag: "Suspended" }
          )
          const delivery = { runId: lease.runId, signal: "approval", payload: { approved: true, note: "ok" } }
          assert.deepStrictEqual(yield* store.deliverSignal(delivery), { _tag: "Resumed", runId: lease.runId })
          const after = yield* store.get(lease.runId)
          assert.deepInclude(after, { state: "pending", signalToken: null })
          // Key order does not matter: the same JSON value.
          const same = yield* store.deliverSignal({ ...delivery, payload: { note: "ok", approved: true } })
          assert.deepStrictEqual(same, { _tag: "Duplicate", runId: lease.runId })
          const other = yield* store.deliverSignal({ ...delivery, payload: { approved: false } })
          assert.deepStrictEqual(other, { _tag: "Conflict", runId: lease.runId })
          assert.deepStrictEqual(yield* store.get(lease.runId), after, "nothing written by the refused deliveries")
          const [again] = yield* claimFrom(store, "w2")
          assert.deepInclude(again, { id: lease.runId, fence: 2 })
          assert.deepStrictEqual(again!.signals, {
            approval: { _tag: "Signalled", payload: { approved: true, note: "ok" } }
          })
        }))

      test("a delivery before the run suspends is kept: the suspension returns it at once and writes nothing", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          const recorded = yield* store.deliverSignal({
            runId: lease.runId,
            signal: "approval",
            payload: { approved: true }
          })
          assert.deepStrictEqual(recorded, { _tag: "Recorded", runId: lease.runId })
          const suspended = yield* store.suspend({ ...lease, signal: "approval", token: "tok-d2", timeout: undefined })
          assert.deepStrictEqual(suspended, {
            _tag: "AlreadySignalled",
            outcome: { _tag: "Signalled", payload: { approved: true } }
          })
          assert.deepInclude(yield* store.get(lease.runId), {
            state: "running",
            fence: 1,
            leaseOwner: "w1",
            signalToken: null
          })
          // Another signal still suspends.
          assert.deepStrictEqual(
            yield* store.suspend({ ...lease, signal: "other", token: "tok-d3", timeout: undefined }),
            { _tag: "Suspended" }
          )
          // A stale holder's suspension is still rejected by the fence, delivered outcome or not.
          const error = yield* Effect.flip(
            store.suspend({ runId: lease.runId, fence: 0, signal: "approval", token: "tok-d4", timeout: undefined })
          )
          assert.deepInclude(error, { _tag: "FenceRejected", presentedFence: 0, storedFence: 1 })
        }))

      test("a timed-out signal or a finished run is Gone; an unknown run is RunNotFound; a replayed delivery id writes nothing", ({ passTime, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.suspend({ ...lease, signal: "approval", token: "tok-d5", timeout: Duration.seconds(30) })
          yield* passTime("31 seconds")
          assert.strictEqual((yield* claimFrom(store, "w1")).length, 1)
          assert.deepStrictEqual(
            yield* store.deliverSignal({ runId: lease.runId, signal: "approval", payload: {} }),
            { _tag: "Gone", runId: lease.runId, reason: "timed-out" }
          )
          yield* store.completeBatch([{ runId: lease.runId, fence: 2, result: null }])
          if (deleted) {
            // The finished run was deleted by its completion: it is not known any more.
            assert.deepInclude(
              yield* Effect.flip(store.deliverSignal({ runId: lease.runId, signal: "late", payload: {} })),
              { _tag: "RunNotFound" }
            )
          } else {
            assert.deepStrictEqual(
              yield* store.deliverSignal({ runId: lease.runId, signal: "late", payload: {} }),
              { _tag: "Gone", runId: lease.runId, reason: "finished" }
            )
          }
          assert.deepInclude(
            yield* Effect.flip(store.deliverSignal({ runId: "999999", signal: "approval", payload: {} })),
            { _tag: "RunNotFound" }
          )

          const other = yield* heldRun(store, "w3")
          const first = yield* store.deliverSignal({
            runId: other.runId,
            signal: "hook",
            payload: { n: 1 },
            deliveryId: "msg_1"
          })
          assert.strictEqual(first._tag, "Recorded")
          const before = yield* store.get(other.runId)
          const replay = yield* store.deliverSignal({
            runId: other.runId,
            signal: "hook2",
            payload: { n: 2 },
            deliveryId: "msg_1"
          })
          assert.deepStrictEqual(replay, { _tag: "Replayed", runId: other.runId })
          assert.deepStrictEqual(yield* store.get(other.runId), before)
          const unstorable = yield* Effect.flip(
            store.deliverSignal({ runId: other.runId, signal: "x", payload: { n: 1n } })
          )
          assert.deepInclude(unstorable, { _tag: "UnstorableValue" })
        }))

      test("a callback's expiry is fixed by its first request, under the fence", ({ passTime, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          const first = yield* store.callbackExpiry(lease, "approval", Duration.hours(1))
          yield* passTime("10 seconds")
          const second = yield* store.callbackExpiry(lease, "approval", Duration.hours(2))
          assert.strictEqual(second.getTime(), first.getTime())
          const other = yield* store.callbackExpiry(lease, "other", Duration.hours(2))
          assert.isAbove(other.getTime(), first.getTime())
          const stale = yield* Effect.flip(
            store.callbackExpiry({ runId: lease.runId, fence: 0 }, "approval", Duration.hours(1))
          )
          assert.deepInclude(stale, { _tag: "FenceRejected", presentedFence: 0, storedFence: 1 })
        }))
    })

    describe("client batches and checked signals", () => {
      const jobs = Handler.make({
        kind: "job",
        payload: Schema.Struct({ i: Schema.Int }),
        signals: { approval: Schema.Struct({ approved: Schema.Boolean }) },
        handle: () => Effect.void
      })
      const handlers = Effect.runSync(Handler.registry([jobs]))

      test("Client.enqueueMany writes the batch in order, or nothing when one payload does not encode", ({ store }) =>
        Effect.gen(function*() {
          const bad = yield* Effect.flip(
            Client.enqueueMany(jobs, [{ i: 1 }, { i: 2 }, { i: 2.5 }, { i: 4 }], { queue: "bulk" })
          )
          assert.strictEqual(bad._tag, "InvalidPayload")
          assert.match(bad.message, /invalid payload for kind "job": payload 2: /)
          assert.isEmpty(yield* store.list({ limit: 10 }), "no run of the refused batch was written")
          const enqueued = yield* Client.enqueueMany(jobs, [{ i: 1 }, { i: 2 }, { i: 3 }], {
            queue: "bulk",
            priority: 4
          })
          assert.strictEqual(enqueued.length, 3)
          assert.isTrue(enqueued.every((e) => e.created))
          const runs = yield* Effect.forEach(enqueued, (e) => store.get(e.id))
          assert.deepStrictEqual(runs.map((r) => [r.payload, r.queue, r.priority]), [
            [{ i: 1 }, "bulk", 4],
            [{ i: 2 }, "bulk", 4],
            [{ i: 3 }, "bulk", 4]
          ])
          const unknown = yield* Effect.flip(
            Client.enqueueUnknownMany(handlers, [{ kind: "job", payload: { i: 9 } }, { kind: "sms", payload: {} }])
          )
          assert.deepInclude(unknown, { _tag: "UnknownKind", kind: "sms", index: 1 })
          assert.match(unknown.message, /^run 1: unknown kind "sms"/)
          assert.strictEqual((yield* store.list({ limit: 10 })).length, 3, "nothing of the refused batch was written")
        }).pipe(Effect.provideService(RunStore, store)))

      test("Client.resume and resumeByToken with the handlers refuse a payload its signal's schema does not decode (the store's check), writing nothing", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.suspend({ ...lease, signal: "approval", token: "tok-c1", timeout: undefined })
          const before = yield* store.get(lease.runId)
          const eventsBefore = yield* store.history(lease.runId)
          const refused = yield* Effect.flip(Client.resume(lease.runId, { approved: "yes" }, { handlers }))
          assert.deepInclude(refused, { _tag: "InvalidPayload", kind: "job (signal approval)" })
          assert.deepStrictEqual(yield* store.get(lease.runId), before, "the run is untouched")
          assert.deepStrictEqual(yield* store.history(lease.runId), eventsBefore, "no event was written")
          const byToken = yield* Effect.flip(Client.resumeByToken("tok-c1", { approved: 1 }, { handlers }))
          assert.deepInclude(byToken, { _tag: "InvalidPayload", kind: "job (signal approval)" })
          // The store hands its check the run it would resume, and writes nothing when it refuses.
          const seen: Array<unknown> = []
          const refusal = new InvalidPayload({ kind: "job", issue: "refused by the check" })
          const checked = yield* Effect.flip(store.resumeById(lease.runId, { approved: true }, undefined, (target) => {
            seen.push(target)
            return Exit.fail(refusal)
          }))
          assert.strictEqual(checked, refusal)
          assert.deepStrictEqual(seen, [{ kind: "job", signal: "approval" }])
          assert.deepStrictEqual(yield* store.get(lease.runId), before, "the run is untouched")
          assert.deepStrictEqual(yield* store.history(lease.runId), eventsBefore, "no event was written")
          assert.strictEqual(yield* Client.resume(lease.runId, { approved: true }, { handlers }), lease.runId)
          assert.deepInclude(yield* store.get(lease.runId), {
            state: "pending",
            signals: { approval: { _tag: "Signalled", payload: { approved: true } } }
          })
        }).pipe(Effect.provideService(RunStore, store)))
    })

    describe("cancel and retry", () => {
      test("cancelling a running run advances its fence, so its holder's writes are rejected; retry advances it again", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.cancel(lease.runId)
          assert.deepInclude(yield* store.get(lease.runId), { state: "cancelled", fence: 2, leaseOwner: null })
          assert.deepInclude(yield* Effect.flip(store.checkpoint(lease, {})), {
            _tag: "FenceRejected",
            presentedFence: 1,
            storedFence: 2
          })
          assert.deepStrictEqual(yield* store.completeBatch([{ ...lease, result: null }]), [
            { _tag: "Rejected", runId: lease.runId, fence: 1, storedFence: 2, state: "cancelled" }
          ])
          assert.deepInclude(yield* Effect.flip(store.cancel(lease.runId)), {
            _tag: "InvalidTransition",
            state: "cancelled",
            operation: "cancel"
          })
          yield* store.retry(lease.runId)
          assert.deepInclude(yield* store.get(lease.runId), {
            state: "pending",
            fence: 3,
            attempt: 0,
            finishedAt: null
          })
          assert.deepInclude(yield* Effect.flip(store.retry(lease.runId)), {
            _tag: "InvalidTransition",
            state: "pending",
            operation: "retry"
          })
          const [again] = yield* claimFrom(store, "w2")
          assert.deepInclude(again, { id: lease.runId, fence: 4, attempt: 1 })
          assert.deepInclude(yield* Effect.flip(store.cancel("999999")), { _tag: "RunNotFound", runId: "999999" })
        }))

      test("cancelling a suspended run clears its token", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.suspend({ ...lease, signal: "s", token: "tok-c", timeout: undefined })
          yield* store.cancel(lease.runId)
          assert.deepInclude(yield* store.get(lease.runId), {
            state: "cancelled",
            fence: 2,
            signalToken: null,
            signalName: null
          })
          assert.deepInclude(yield* Effect.flip(store.resumeByToken("tok-c", {})), { _tag: "SignalTokenNotFound" })
        }))
    })

    describe("fenced transaction", () => {
      test("the effect's value completes the run; a stale fence fails before the effect runs; the effect's failure writes nothing", ({ passTime, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          let ran = 0
          const work = Effect.sync(() => ++ran)
          const failed = yield* Effect.flip(
            store.completeInTransaction(
              lease,
              Effect.andThen(work, Effect.fail("app error" as const)),
              (n) => Exit.succeed(String(n))
            )
          )
          assert.strictEqual(failed, "app error")
          assert.deepInclude(yield* store.get(lease.runId), { state: "running", fence: 1 })
          assert.strictEqual(
            yield* store.completeInTransaction(lease, work, (n) => Exit.succeed(JSON.stringify({ n }))),
            2
          )
          if (deleted) yield* assertDeleted(store, lease.runId)
          else assert.deepInclude(yield* store.get(lease.runId), { state: "completed", result: { n: 2 } })

          const stale = yield* heldRun(store, "w1")
          yield* passTime("61 seconds")
          yield* claimFrom(store, "w2")
          const rejected = yield* Effect.flip(store.completeInTransaction(stale, work, () => Exit.succeed("null")))
          assert.deepInclude(rejected, {
            _tag: "FenceRejected",
            presentedFence: 1,
            storedFence: 2,
            operation: "transaction"
          })
          assert.strictEqual(ran, 2, "a stale holder's effect does not run")
          assert.deepStrictEqual(yield* kinds(store, stale.runId), [
            "claimed@1",
            "reclaimed@2",
            "stale_write_rejected@1"
          ])
        }))
    })

    describe("attempt logs", () => {
      test("a failed attempt's lines are kept with its failure under its fence, a completed one's with its completion; read oldest claim first", ({ store }) =>
        Effect.gen(function*() {
          const first = yield* heldRun(store, "w1", { maxAttempts: 3 })
          yield* store.fail({
            ...first,
            error: { m: "declined" },
            retryDelayMs: 0,
            log: {
              attempt: 1,
              dropped: 0,
              lines: [logLine("calling the card API", "Info", { order: "o-1" }), logLine("card declined", "Warn")]
            }
          })
          const [second] = yield* claimFrom(store, "w1")
          assert.strictEqual(second!.fence, 2)
          const [outcome] = yield* store.completeBatch([{
            runId: first.runId,
            fence: 2,
            result: null,
            log: { attempt: 2, dropped: 0, lines: [logLine("charged")] }
          }])
          assert.strictEqual(outcome!._tag, "Finalized")
          if (deleted) {
            // The completion deleted the run: its lines, the failed attempt's included, went with it.
            assert.deepInclude(yield* Effect.flip(store.attemptLogs(first.runId)), { _tag: "RunNotFound" })
            return
          }
          const logs = yield* store.attemptLogs(first.runId)
          assert.deepStrictEqual(
            logs.map((l) => ({ fence: l.fence, attempt: l.attempt, outcome: l.outcome, dropped: l.dropped })),
            [
              { fence: 1, attempt: 1, outcome: "failed", dropped: 0 },
              { fence: 2, attempt: 2, outcome: "completed", dropped: 0 }
            ]
          )
          assert.deepStrictEqual(logs[0]!.lines, [
            logLine("calling the card API", "Info", { order: "o-1" }),
            logLine("card declined", "Warn")
          ])
          assert.deepStrictEqual(logs[1]!.lines, [logLine("charged")])
          assert.strictEqual(logs[0]!.runId, first.runId)
          assert.instanceOf(logs[0]!.at, Date)
        }))

      test("a failure or completion the fence rejects writes no lines; lines are kept for a completion under that very fence only", ({ passTime, store }) =>
        Effect.gen(function*() {
          const stale = yield* heldRun(store, "w1")
          yield* passTime("61 seconds")
          const [current] = yield* claimFrom(store, "w2")
          const log = { attempt: 1, dropped: 0, lines: [logLine("stale holder's line")] }
          assert.deepInclude(
            yield* Effect.flip(store.fail({ ...stale, error: { m: "late" }, retryDelayMs: 0, log })),
            { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 }
          )
          const [rejected] = yield* store.completeBatch([{ ...stale, result: null, log }])
          assert.strictEqual(rejected!._tag, "Rejected")
          assert.isFalse(yield* store.keepAttemptLog(stale, log), "the run is running, under fence 2")
          assert.deepStrictEqual(yield* store.attemptLogs(stale.runId), [])
          // Completed under fence 2: a line for fence 1 is still refused, one for fence 2 kept once.
          yield* store.completeInTransaction(
            { runId: stale.runId, fence: current!.fence },
            Effect.void,
            () => Exit.succeed("null")
          )
          assert.isFalse(yield* store.keepAttemptLog(stale, log))
          const own = { attempt: 2, dropped: 0, lines: [logLine("committed")] }
          if (deleted) {
            assert.isFalse(yield* store.keepAttemptLog({ runId: stale.runId, fence: 2 }, own), "the run is gone")
            return
          }
          assert.isTrue(yield* store.keepAttemptLog({ runId: stale.runId, fence: 2 }, own))
          assert.isFalse(yield* store.keepAttemptLog({ runId: stale.runId, fence: 2 }, own), "written once")
          const logs = yield* store.attemptLogs(stale.runId)
          assert.deepStrictEqual(logs.map((l) => [l.fence, l.outcome, l.lines.map((x) => x.message)]), [
            [2, "completed", ["committed"]]
          ])
        }))

      test("the store applies the bounds: the last 100 lines, 16 KiB of text, messages cut at 2 KiB, the rest counted; a NUL cannot keep a failure from being recorded", ({ store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          const lines = Array.from({ length: 150 }, (_, i) => logLine(`line ${i}`))
          lines[140] = logLine("x".repeat(5_000))
          lines[149] = logLine("last\u0000line")
          yield* store.fail({
            ...lease,
            error: { m: "x" },
            retryDelayMs: undefined,
            log: { attempt: 1, dropped: 7, lines }
          })
          assert.deepInclude(yield* store.get(lease.runId), { state: "failed" })
          const [kept] = yield* store.attemptLogs(lease.runId)
          assert.strictEqual(kept!.lines.length, AttemptLogs.maxLines)
          assert.strictEqual(kept!.dropped, 7 + 50, "the 50 oldest lines and the 7 the caller had dropped")
          assert.strictEqual(kept!.lines[0]!.message, "line 50")
          assert.strictEqual(kept!.lines.at(-1)!.message, "last\ufffdline")
          const long = kept!.lines.find((l) => l.cut > 0)!
          assert.strictEqual(long.message.length, AttemptLogs.maxLineCharacters)
          assert.strictEqual(long.cut, 5_000 - AttemptLogs.maxLineCharacters)
          const text = kept!.lines.reduce((n, l) => n + l.message.length, 0)
          assert.isAtMost(text, AttemptLogs.maxCharacters)

          // Past 16 KiB of text, the oldest lines are dropped however few they are.
          const other = yield* heldRun(store)
          const big = Array.from({ length: 10 }, (_, i) => logLine(`${i}`.padEnd(2_000, ".")))
          yield* store.fail({
            ...other,
            error: null,
            retryDelayMs: undefined,
            log: { attempt: 1, dropped: 0, lines: big }
          })
          const [within] = yield* store.attemptLogs(other.runId)
          assert.deepStrictEqual(within!.lines.map((l) => l.message[0]), ["2", "3", "4", "5", "6", "7", "8", "9"])
          assert.strictEqual(within!.dropped, 2)
          assert.deepInclude(yield* Effect.flip(store.attemptLogs("999999")), { _tag: "RunNotFound" })
          assert.deepInclude(yield* Effect.flip(store.attemptLogs("not-a-run")), { _tag: "RunNotFound" })
        }))
    })

    describe("values the store cannot keep", () => {
      test("a request with an invalid option fails the whole batch with InvalidConfig naming it, and writes nothing", ({ store }) =>
        Effect.gen(function*() {
          const cases = [
            [{ kind: "" }, "kind"],
            [{ kind: "job", queue: "" }, "queue"],
            [{ kind: "job", priority: 1.5 }, "priority"],
            [{ kind: "job", delayMs: -1 }, "delay"],
            [{ kind: "job", maxAttempts: 0 }, "maxAttempts"],
            [{ kind: "job", idempotencyKey: "" }, "idempotencyKey"]
          ] as const
          for (const [request, option] of cases) {
            const error = yield* Effect.flip(
              store.enqueue([{ kind: "job", payload: { ok: true } }, { payload: null, ...request }])
            )
            assert.deepInclude(error, { _tag: "InvalidConfig", option })
          }
          assert.isEmpty(yield* store.list({ limit: 10, offset: 0 }))
        }))

      test("an unstorable payload, checkpoint, resume payload or transaction result fails with UnstorableValue and writes nothing", ({ store }) =>
        Effect.gen(function*() {
          const enqueue = yield* Effect.flip(
            store.enqueue([{ kind: "job", payload: { ok: true } }, { kind: "job", payload: { n: 10n } }])
          )
          assert.deepInclude(enqueue, { _tag: "UnstorableValue", what: "payload" })
          assert.isEmpty(yield* store.list({ limit: 10, offset: 0 }))

          const lease = yield* heldRun(store)
          yield* store.checkpoint(lease, { step: 1 })
          assert.deepInclude(yield* Effect.flip(store.checkpoint(lease, cyclic())), {
            _tag: "UnstorableValue",
            what: "checkpoint"
          })
          assert.deepStrictEqual((yield* store.get(lease.runId)).checkpoint, { step: 1 })

          // The caller's encoder refuses the result (as a handler's result schema would).
          const refused = yield* Effect.flip(store.completeInTransaction(
            lease,
            Effect.succeed({ n: 1n }),
            () => Exit.fail(new UnstorableValue({ what: "result", runId: lease.runId, issue: "BigInt" }))
          ))
          assert.deepInclude(refused, { _tag: "UnstorableValue", what: "result", runId: lease.runId })
          assert.deepInclude(yield* store.get(lease.runId), { state: "running", result: null })

          yield* store.suspend({ ...lease, signal: "s", token: "tok-u", timeout: undefined })
          assert.deepInclude(yield* Effect.flip(store.resumeByToken("tok-u", { big: 1n })), {
            _tag: "UnstorableValue",
            what: "resume payload"
          })
          assert.deepInclude(yield* Effect.flip(store.resumeById(lease.runId, cyclic())), {
            _tag: "UnstorableValue",
            what: "resume payload"
          })
          assert.deepInclude(yield* store.get(lease.runId), { state: "suspended", signalToken: "tok-u" })
          assert.deepStrictEqual(yield* kinds(store, lease.runId), ["claimed@1", "suspended@1"])
        }))

      test("values PostgreSQL would refuse (a NUL, an unpaired surrogate, an oversized name or key, a delay past 100 years) are refused first, naming the field, and nothing is written", ({ store }) =>
        Effect.gen(function*() {
          const long = "q".repeat(100 * 1024)
          const options = [
            [{ kind: "job\u0000" }, "kind", "NUL"],
            [{ kind: "j".repeat(256) }, "kind", "over the limit of 255"],
            [{ kind: "job", queue: "a\u0000b" }, "queue", "NUL"],
            [{ kind: "job", queue: long }, "queue", "over the limit of 255"],
            [{ kind: "job", queue: "bad\ud800" }, "queue", "unpaired surrogate"],
            [{ kind: "job", delayMs: 1e300 }, "delay", "100 years"],
            [{ kind: "job", delayMs: Infinity }, "delay", "100 years"],
            [{ kind: "job", idempotencyKey: "k".repeat(1025) }, "idempotencyKey", "over the limit of 1024"],
            [{ kind: "job", idempotencyKey: "k\u0000" }, "idempotencyKey", "NUL"],
            [{ kind: "job", concurrencyKey: "é".repeat(513) }, "concurrencyKey", "1026 bytes long"]
          ] as const
          for (const [request, option, issue] of options) {
            const error = yield* Effect.flip(
              store.enqueue([{ kind: "job", payload: { ok: true } }, { payload: null, ...request }])
            )
            assert.deepInclude(error, { _tag: "InvalidConfig", option }, option)
            assert.include((error as { issue: string }).issue, issue, option)
          }
          // At the limits exactly: stored.
          yield* store.enqueue([{
            kind: "j".repeat(255),
            payload: null,
            queue: "é".repeat(127),
            idempotencyKey: "k".repeat(1024)
          }])
          assert.strictEqual((yield* store.list({ limit: 10, offset: 0 })).length, 1)

          const payloads = [
            [{ note: "a\u0000b" }, "$.note holds a NUL"],
            [{ list: [1, { "x y": "\udc00" }] }, "$.list[1][\"x y\"] holds an unpaired surrogate"],
            [{ "k\u0000": 1 }, "$ (a key) holds a NUL"]
          ] as const
          for (const [payload, issue] of payloads) {
            const error = yield* Effect.flip(store.enqueue([{ kind: "job", payload }]))
            assert.deepInclude(error, { _tag: "UnstorableValue", what: "payload" })
            assert.include((error as { issue: string }).issue, issue)
          }
          // A string that merely spells the escape is fine.
          yield* store.enqueue([{ kind: "job", queue: "kept", payload: { text: "\\u0000" } }])
          assert.strictEqual((yield* store.list({ limit: 10, offset: 0 })).length, 2)

          for (const queue of ["a\u0000b", long]) {
            assert.deepInclude(yield* Effect.flip(store.pauseQueue(queue)), { _tag: "InvalidConfig", option: "queue" })
            assert.deepInclude(yield* Effect.flip(store.resumeQueue(queue)), { _tag: "InvalidConfig", option: "queue" })
          }
          assert.isEmpty(yield* store.pausedQueues)

          const lease = yield* heldRun(store)
          assert.deepInclude(yield* Effect.flip(store.checkpoint(lease, { s: "\u0000" })), {
            _tag: "UnstorableValue",
            what: "checkpoint"
          })
          const signal = yield* Effect.flip(
            store.deliverSignal({ runId: lease.runId, signal: "s\u0000", payload: null, deliveryId: undefined })
          )
          assert.deepInclude(signal, { _tag: "UnstorableValue", what: "signal name" })
          const body = yield* Effect.flip(
            store.deliverSignal({ runId: lease.runId, signal: "s", payload: { a: "\u0000" }, deliveryId: undefined })
          )
          assert.deepInclude(body, { _tag: "UnstorableValue", what: "signal payload" })
          const deliveryId = yield* Effect.flip(
            store.deliverSignal({ runId: lease.runId, signal: "s", payload: null, deliveryId: "d".repeat(1025) })
          )
          assert.deepInclude(deliveryId, { _tag: "UnstorableValue", what: "webhook-id" })
          // A token no run could hold names no run.
          assert.deepInclude(yield* Effect.flip(store.resumeByToken("t\u0000", null)), { _tag: "SignalTokenNotFound" })
          assert.deepInclude(yield* store.get(lease.runId), { state: "running", checkpoint: null, signals: {} })
          assert.deepStrictEqual(yield* kinds(store, lease.runId), ["claimed@1"])
          // A failure whose error text holds a NUL is still recorded (the NUL replaced).
          yield* store.fail({ ...lease, error: { message: "bad\u0000byte" }, retryDelayMs: undefined })
          assert.deepInclude(yield* store.get(lease.runId), { state: "failed", error: { message: "bad\ufffdbyte" } })
        }))
    })

    describe("paused queues", () => {
      test("a paused queue is not claimed (due runs, expired leases, passed deadlines) while its running runs finish; other queues go on", ({ passTime, store }) =>
        Effect.gen(function*() {
          const running = yield* heldRun(store, "w1")
          const expiring = yield* heldRun(store, "w1")
          const suspended = yield* heldRun(store, "w1")
          yield* store.suspend({ ...suspended, signal: "s", token: "tok-p", timeout: Duration.seconds(30) })
          const [due] = yield* enqueueJobs(store, 1)
          const [other] = yield* enqueueJobs(store, 1, { queue: "other" })
          assert.isTrue(yield* store.pauseQueue("default"))
          assert.isFalse(yield* store.pauseQueue("default"), "paused already")
          assert.deepStrictEqual((yield* store.pausedQueues).map((q) => q.queue), ["default"])
          assert.instanceOf((yield* store.pausedQueues)[0]!.since, Date)

          // The holder renews and completes as before.
          assert.deepStrictEqual(yield* store.renew("w1", [running, expiring], ttl), [running, expiring])
          assert.deepStrictEqual((yield* store.completeBatch([{ ...running, result: null }]))[0]!._tag, "Finalized")
          // An expired lease and a passed suspension deadline stay put, as does the due run; the
          // other queue is claimed, by a sweeping claim and a due-only one alike.
          yield* passTime("61 seconds")
          const [again] = yield* enqueueJobs(store, 1)
          assert.deepStrictEqual((yield* claimFrom(store, "w2", { queues: ["default", "other"] })).map((c) => c.id), [
            other!
          ])
          assert.isEmpty(yield* claimFrom(store, "w2", { queues: ["default", "other"], dueOnly: true }))
          assert.deepInclude(yield* store.get(expiring.runId), { state: "running", fence: 1 })
          assert.deepInclude(yield* store.get(suspended.runId), { state: "suspended", fence: 1 })
          assert.deepInclude(yield* store.get(due!), { state: "pending", fence: 0 })

          // Resumed: everything it held back is claimed, under the next fences.
          assert.isTrue(yield* store.resumeQueue("default"))
          assert.isFalse(yield* store.resumeQueue("default"), "not paused any more")
          assert.isEmpty(yield* store.pausedQueues)
          const claimed = yield* claimFrom(store, "w2")
          assert.deepStrictEqual(
            claimed.map((c) => [c.id, c.via, c.fence]),
            [[expiring.runId, "expired", 2], [suspended.runId, "timed-out", 2], [due!, "due", 1], [again!, "due", 1]]
          )
        }))

      test("a queue name that is not a non-empty string is refused with InvalidConfig, and nothing is paused", ({ store }) =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(store.pauseQueue(""))
          assert.deepInclude(error, { _tag: "InvalidConfig", option: "queue" })
          assert.deepInclude(yield* Effect.flip(store.resumeQueue("")), { _tag: "InvalidConfig", option: "queue" })
          assert.isEmpty(yield* store.pausedQueues)
          const [id] = yield* enqueueJobs(store, 1)
          assert.deepStrictEqual((yield* claimFrom(store, "w1")).map((c) => c.id), [id!])
        }))

      test("resuming a queue wakes idle workers on it", ({ settle, store }) =>
        Effect.gen(function*() {
          yield* store.pauseQueue("q3")
          const seen: Array<StoreNotification> = []
          const listener = yield* Effect.forkScoped(
            Stream.runForEach(store.notifications, (note) => Effect.sync(() => void seen.push(note)))
          )
          for (let i = 0; i < 100 && !seen.some((n) => n._tag === "Subscribed"); i++) yield* settle
          // Subscribed: what is sent from now on arrives.
          yield* store.resumeQueue("q3")
          for (let i = 0; i < 50 && !seen.some((n) => n._tag === "RunsAvailable"); i++) yield* settle
          assert.deepStrictEqual(seen.filter((n) => n._tag !== "Subscribed"), [{ _tag: "RunsAvailable", queue: "q3" }])
          yield* Fiber.interrupt(listener)
        }))
    })

    describe("rate limits", () => {
      const runsOf = (store: Store, kind: string, keys: ReadonlyArray<string | undefined>) =>
        Effect.map(
          store.enqueue(keys.map((key, i) => ({ kind, payload: { i }, concurrencyKey: key }))),
          (runs) => runs.map((r) => r.id)
        )
      const sorted = (claimed: ReadonlyArray<{ readonly id: string }>) =>
        claimed.map((c) => c.id).sort((a, b) => Number(a) - Number(b))
      const claimBoth = (store: Store) =>
        Effect.map(claimFrom(store, "w1", { kinds: ["job", "mail"], limit: 10 }), sorted)

      test("a rated claim hands over each run's attempt timeout and what is left of its deadline, as every claim does", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setRateLimits([RateLimits.perKind("job", 5, "10 seconds")])
          yield* store.enqueue([
            { kind: "job", payload: {}, attemptTimeoutMs: 1_500, deadlineAfterMs: 3_600_000 },
            { kind: "job", payload: {} }
          ])
          const claimed = yield* claimFrom(store, "w1", { kinds: ["job"], limit: 10 })
          assert.strictEqual(claimed.length, 2)
          const [bounded, plain] = [...claimed].sort((a, b) => Number(a.id) - Number(b.id))
          assert.strictEqual(bounded!.attemptTimeoutMs, 1_500)
          assert.isTrue(
            bounded!.deadlineInMs !== null && bounded!.deadlineInMs > 3_500_000 && bounded!.deadlineInMs <= 3_600_000,
            `deadlineInMs ${bounded!.deadlineInMs}`
          )
          assert.deepStrictEqual([plain!.attemptTimeoutMs, plain!.deadlineInMs], [null, null])
        }))

      test("at most N starts per interval, by the store's clock; the runs held back block no others, and the window slides", ({ passTime, store }) =>
        Effect.gen(function*() {
          yield* store.setRateLimits([RateLimits.perKind("job", 2, "10 seconds")])
          const jobs = yield* runsOf(store, "job", [undefined, undefined, undefined, undefined, undefined])
          const mails = yield* runsOf(store, "mail", [undefined, undefined])
          assert.deepStrictEqual(
            yield* claimBoth(store),
            [jobs[0]!, jobs[1]!, ...mails],
            "two jobs, and the mails behind them"
          )
          assert.isEmpty(yield* claimBoth(store), "the window is full")
          assert.isEmpty(yield* claimFrom(store, "w2", { kinds: ["job"], dueOnly: true }))
          assert.deepStrictEqual(yield* store.rateLimits, [
            { scope: "kind", name: "job", limit: 2, intervalMs: 10_000, perKey: false, startedInWindow: 2, due: 3 }
          ])
          assert.deepInclude(yield* store.get(jobs[2]!), { state: "pending", attempt: 0 })
          yield* passTime("6 seconds")
          assert.isEmpty(yield* claimBoth(store), "6 s later the two starts are still within the last 10 s")
          yield* passTime("5 seconds")
          assert.deepStrictEqual(yield* claimBoth(store), [jobs[2]!, jobs[3]!])
          assert.deepStrictEqual((yield* store.rateLimits)[0]!.startedInWindow, 2)
          const history = yield* store.history(jobs[2]!)
          assert.deepStrictEqual(history.map((e) => `${e.kind}@${e.fence}`), ["claimed@1"])
        }))

      test("per key, each key has its own window; runs without a key share one", ({ passTime, store }) =>
        Effect.gen(function*() {
          yield* store.setRateLimits([RateLimits.perQueue("default", 1, "1 minute", { perKey: true })])
          const [a1, a2, b1, n1, n2] = yield* runsOf(store, "job", ["A", "A", "B", undefined, undefined])
          assert.deepStrictEqual(yield* claimBoth(store), [a1!, b1!, n1!])
          assert.isEmpty(yield* claimBoth(store))
          // A completed run frees nothing: the limit counts starts, not runs at once.
          yield* store.completeBatch([a1!, b1!, n1!].map((runId) => ({ runId, fence: 1, result: null })))
          assert.isEmpty(yield* claimBoth(store))
          yield* passTime("61 seconds")
          assert.deepStrictEqual(yield* claimBoth(store), [a2!, n2!])
        }))

      test("a full window ahead in claim order blocks no window with room behind it, whatever the claim's limit", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setRateLimits([RateLimits.perKind("job", 1, "1 hour", { perKey: true })])
          const [a1, a2, b1, c1] = yield* runsOf(store, "job", ["A", "A", "B", "C"])
          assert.deepStrictEqual(sorted(yield* claimFrom(store, "w1", { limit: 1 })), [a1!])
          // A's window is full and its next run is first in claim order: B's and C's windows have room.
          assert.deepStrictEqual(sorted(yield* claimFrom(store, "w1", { limit: 1 })), [b1!])
          assert.deepStrictEqual(sorted(yield* claimFrom(store, "w1", { limit: 1, dueOnly: true })), [c1!])
          assert.isEmpty(yield* claimFrom(store, "w1", { limit: 1 }))
          assert.deepInclude(yield* store.get(a2!), { state: "pending", attempt: 0 })
        }))

      test("a due-only claim starts governed runs whatever a claim of other queues saw before it", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setRateLimits([RateLimits.perQueue("default", 1, "1 hour")])
          const [run] = yield* runsOf(store, "job", [undefined])
          assert.isEmpty(yield* claimFrom(store, "w1", { queues: ["other"] }), "no limit governs queue other")
          assert.deepStrictEqual(
            sorted(yield* claimFrom(store, "w1", { queues: ["default", "other"], dueOnly: true })),
            [run!]
          )
        }))

      test("a limit declared over runs already enqueued governs them; removed, they start freely", ({ store }) =>
        Effect.gen(function*() {
          const jobs = yield* runsOf(store, "job", [undefined, undefined, undefined, undefined])
          yield* store.setRateLimits([RateLimits.perKind("job", 1, "1 hour")])
          assert.deepStrictEqual(yield* claimBoth(store), [jobs[0]!])
          assert.isEmpty(yield* claimBoth(store))
          assert.isTrue(yield* store.removeRateLimit("kind", "job"))
          assert.isFalse(yield* store.removeRateLimit("kind", "job"))
          assert.deepStrictEqual(yield* store.rateLimits, [])
          assert.deepStrictEqual(yield* claimBoth(store), [jobs[1]!, jobs[2]!, jobs[3]!])
        }))

      test("a limit declared while runs of its kind are running governs them once they are pending again (released, snoozed, failed with a retry)", ({ store }) =>
        Effect.gen(function*() {
          const jobs = yield* runsOf(store, "job", [undefined, undefined, undefined])
          const running = yield* claimFrom(store, "w1", { limit: 3 })
          assert.strictEqual(running.length, 3)
          yield* store.setRateLimits([RateLimits.perKind("job", 1, "1 hour")])
          const lease = (i: number) => ({ runId: jobs[i]!, fence: running.find((r) => r.id === jobs[i])!.fence })
          yield* store.release(lease(0))
          yield* store.snooze({ ...lease(1), delayMs: 0 })
          assert.deepInclude(yield* store.fail({ ...lease(2), error: { m: "again" }, retryDelayMs: 0 }), {
            _tag: "RetryScheduled"
          })
          assert.deepInclude((yield* store.rateLimits)[0], { startedInWindow: 0, due: 3 })
          assert.strictEqual((yield* claimBoth(store)).length, 1, "one start in the hour")
          assert.isEmpty(yield* claimBoth(store), "the window is full")
          assert.isEmpty(yield* claimFrom(store, "w2", { dueOnly: true }))
          assert.deepInclude((yield* store.rateLimits)[0], { startedInWindow: 1, due: 2 })
        }))

      test("a retried run is governed by the rate limits in force when it is retried, not by those of its first enqueue", ({ store }) =>
        Effect.gen(function*() {
          // Ended before a limit was declared: retried, it waits for room like any run of its kind.
          const [before] = yield* runsOf(store, "job", [undefined])
          yield* store.cancel(before!)
          yield* store.setRateLimits([RateLimits.perKind("job", 1, "1 hour")])
          const [fresh] = yield* runsOf(store, "job", [undefined])
          assert.deepStrictEqual(yield* claimBoth(store), [fresh!])
          yield* store.retryMany({ ids: [before!] })
          assert.isEmpty(yield* claimBoth(store), "the window is full: the retried run waits")
          assert.isEmpty(yield* claimFrom(store, "w2", { kinds: ["job"], dueOnly: true }))
          // Ended while governed, the limit removed since: retried, it starts freely.
          const [mail] = yield* runsOf(store, "mail", [undefined])
          yield* store.setRateLimits([RateLimits.perKind("mail", 1, "1 hour")])
          yield* store.cancel(mail!)
          assert.isTrue(yield* store.removeRateLimit("kind", "mail"))
          yield* store.retry(mail!)
          assert.deepStrictEqual(yield* claimBoth(store), [mail!])
        }))

      test("a run under a key limit and a rate limit waits for its slot, then for room in its window", ({ passTime, store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          yield* store.setRateLimits([RateLimits.perKind("job", 1, "1 minute")])
          const [k1, k2, m1] = yield* runsOf(store, "job", ["K", "K", "M"])
          assert.deepStrictEqual(
            yield* claimBoth(store),
            [k1!],
            "one start in the window; M's run is admitted but waits for room"
          )
          // k1's completion hands K's slot to k2 but does not start it: only the rated claim does.
          const [done] = yield* store.completeBatch([{ runId: k1!, fence: 1, result: null }], {
            owner: "w1",
            ttl,
            queues: ["default"],
            kinds: ["job"]
          })
          assert.isUndefined((done as { next?: unknown }).next)
          assert.isEmpty(yield* claimBoth(store))
          yield* passTime("61 seconds")
          assert.deepStrictEqual(
            yield* claimBoth(store),
            [k2!],
            "K's run first: one window for the kind, K and M alike"
          )
          yield* store.completeBatch([{ runId: k2!, fence: 1, result: null }])
          yield* passTime("61 seconds")
          assert.deepStrictEqual(yield* claimBoth(store), [m1!])
        }))

      test("bad limits are InvalidConfig naming the option, and nothing is written", ({ store }) =>
        Effect.gen(function*() {
          const bad: ReadonlyArray<[RateLimits.RateLimit, string]> = [
            [RateLimits.perKind("job", 0, "1 second"), "limit"],
            [RateLimits.perKind("job", -3, "1 second"), "limit"],
            [RateLimits.perKind("job", 1.5, "1 second"), "limit"],
            [RateLimits.perKind("job", 10, "0 seconds"), "interval"],
            [RateLimits.perKind("job", 10, -5), "interval"],
            [RateLimits.perKind("job", 10, "soon" as Duration.Input), "interval"],
            [RateLimits.perKind("job", 10, "2 days"), "interval"],
            [RateLimits.perKind("", 10, "1 second"), "kind"],
            [{ scope: "tenant" as never, name: "x", limit: 1, interval: "1 second" }, "scope"]
          ]
          for (const [limit, option] of bad) {
            const error = yield* Effect.flip(
              store.setRateLimits([RateLimits.perQueue("default", 5, "1 second"), limit])
            )
            assert.deepInclude(error, { _tag: "InvalidConfig", option }, JSON.stringify(limit))
          }
          assert.deepStrictEqual(yield* store.rateLimits, [], "not even the valid limit beside the bad one")
          const [run] = yield* runsOf(store, "job", [undefined])
          assert.deepStrictEqual(yield* claimBoth(store), [run!], "nothing governs the runs")
        }))
    })

    describe("per-key concurrency", () => {
      const keyed = (
        store: Store,
        keys: ReadonlyArray<string | undefined>,
        extra: { queue?: string; kind?: string } = {}
      ) =>
        Effect.map(
          store.enqueue(
            keys.map((key, i) => ({
              kind: extra.kind ?? "job",
              payload: { i },
              queue: extra.queue,
              concurrencyKey: key
            }))
          ),
          (runs) => runs.map((r) => r.id)
        )
      const ids = (claimed: ReadonlyArray<{ readonly id: string }>) => claimed.map((c) => c.id)
      const sortedIds = (claimed: ReadonlyArray<{ readonly id: string }>) =>
        ids(claimed).sort((a, b) => Number(a) - Number(b))

      test("a key at its limit is passed over, not waited on: the runs behind it are claimed, and it gets its turn when its run completes", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          const [a1, a2, b1, free, a3] = yield* keyed(store, ["A", "A", "B", undefined, "A"])
          const first = yield* claimFrom(store, "w1", { limit: 10 })
          assert.deepStrictEqual(
            ids(first),
            [a1!, b1!, free!],
            "one run of A, the first; B and the unkeyed run behind it"
          )
          assert.isEmpty(yield* claimFrom(store, "w2", { limit: 10 }), "A is full; nothing else is due")
          assert.isEmpty(yield* claimFrom(store, "w2", { limit: 10, dueOnly: true }))
          assert.deepInclude(yield* store.get(a2!), { state: "pending", concurrencyKey: "A" })
          assert.deepStrictEqual(yield* store.keyLimits, [{
            scope: "kind",
            name: "job",
            perKey: 1,
            keysRunning: 2,
            keyedDue: 2
          }])

          yield* store.completeBatch([{ runId: a1!, fence: 1, result: null }])
          assert.deepStrictEqual(
            ids(yield* claimFrom(store, "w2", { limit: 10, dueOnly: true })),
            [a2!],
            "the next of A, alone"
          )
          yield* store.fail({ runId: a2!, fence: 1, error: "boom", retryDelayMs: undefined })
          assert.deepStrictEqual(
            ids(yield* claimFrom(store, "w2", { limit: 10 })),
            [a3!],
            "a failed run frees its slot"
          )
        }))

      test("a limit above 1 admits that many runs of a key in one claim, the first ones; a kind's limit governs its runs, its queue's the others", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perQueue("q", 3), KeyLimits.perKind("mail", 1)])
          const jobs = yield* keyed(store, ["K", "K", "K", "K"], { queue: "q" })
          const mails = yield* keyed(store, ["K", "K"], { queue: "q", kind: "mail" })
          const claimAll = () =>
            Effect.map(claimFrom(store, "w1", { queues: ["q"], kinds: ["job", "mail"], limit: 10 }), sortedIds)
          // The queue's limit governs the jobs: the first three of K; mail's own limit its first mail.
          const first = yield* claimAll()
          assert.deepStrictEqual(first, [jobs[0]!, jobs[1]!, jobs[2]!, mails[0]!])
          yield* store.completeBatch([jobs[0]!, jobs[1]!].map((runId) => ({ runId, fence: 1, result: null })))
          assert.deepStrictEqual(yield* claimAll(), [jobs[3]!], "the mail still running holds mail's only slot for K")
          yield* store.completeBatch([{ runId: mails[0]!, fence: 1, result: null }])
          assert.deepStrictEqual(yield* claimAll(), [mails[1]!])
        }))

      test("a suspended run holds no slot; a resumed or timed-out one waits in its key's line at its first place; a reclaim keeps the slot it holds", ({ passTime, store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          const [k1, k2, k3] = yield* keyed(store, ["K", "K", "K"])
          const [first] = yield* claimFrom(store, "w1", { limit: 1 })
          assert.strictEqual(first!.id, k1!)
          yield* store.suspend({
            runId: k1!,
            fence: 1,
            signal: "approve",
            token: "tok-k1",
            timeout: Duration.seconds(30)
          })
          // Suspended: the key's slot is free for the next run.
          assert.deepStrictEqual(ids(yield* claimFrom(store, "w1", { limit: 10 })), [k2!])
          // k1's deadline passes while k2 runs: the sweep does not take it, but puts it back in K's
          // line, its signal timed out.
          yield* passTime("31 seconds")
          assert.isEmpty(yield* claimFrom(store, "w1", { limit: 10 }))
          assert.deepInclude(yield* store.get(k1!), {
            state: "pending",
            waitingForKey: true,
            keySlot: null,
            signals: { approve: { _tag: "TimedOut" } }
          })
          // k2's lease expires: its reclaim keeps K's slot, and k1 and k3 still wait.
          yield* passTime("61 seconds")
          const reclaimed = yield* claimFrom(store, "w2", { limit: 10 })
          assert.deepStrictEqual(reclaimed.map((c) => [c.id, c.via]), [[k2!, "expired"]])
          yield* store.completeBatch([{ runId: k2!, fence: 2, result: null }])
          const next = yield* claimFrom(store, "w2", { limit: 10 })
          // k1 was enqueued first: its place in K's line is ahead of k3's.
          assert.deepStrictEqual(
            next.map((c) => [c.id, c.via]),
            [[k1!, "due"]],
            "the timed-out run first, then k3 waits"
          )
          assert.deepInclude(next[0]!.signals, { approve: { _tag: "TimedOut" } })
          assert.deepInclude(yield* store.get(k3!), { state: "pending", waitingForKey: true })
        }))

      test("after a limit is lowered below the slots held, no run of the key is admitted until fewer than the new limit hold slots", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 3)])
          const running = yield* keyed(store, ["K", "K", "K"])
          assert.deepStrictEqual(sortedIds(yield* claimFrom(store, "w1", { limit: 10 })), running)
          const slotOf = (id: string) => Effect.map(store.get(id), (run) => run.keySlot)
          const bySlot = new Map<number | null, string>()
          for (const id of running) bySlot.set(yield* slotOf(id!), id!)
          // Slot 0's run ends with nothing waiting; then the limit drops to 2 with slots 1 and 2 held.
          yield* store.completeBatch([{ runId: bySlot.get(0)!, fence: 1, result: null }])
          yield* store.setKeyLimits([KeyLimits.perKind("job", 2)])
          const [late] = yield* keyed(store, ["K"])
          assert.deepInclude(
            yield* store.get(late!),
            { waitingForKey: true, keySlot: null },
            "two runs hold slots: no room under 2"
          )
          assert.isEmpty(yield* claimFrom(store, "w1", { limit: 10 }))
          // One of the two ends: one holds a slot now, so there is room for one more.
          yield* store.completeBatch([{ runId: bySlot.get(1)!, fence: 1, result: null }])
          assert.deepStrictEqual(ids(yield* claimFrom(store, "w1", { limit: 10 })), [late!])
          assert.deepInclude(yield* store.get(late!), { keySlot: 0 })
        }))

      test("a paused queue's runs hold no key slot: pausing gives theirs to the key's runs in other queues", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          const [a] = yield* keyed(store, ["K"], { queue: "q1" })
          const [b] = yield* keyed(store, ["K"], { queue: "q2" })
          assert.deepInclude(yield* store.get(a!), { keySlot: 0 })
          assert.deepInclude(yield* store.get(b!), { waitingForKey: true })
          assert.isTrue(yield* store.pauseQueue("q1"))
          assert.deepInclude(
            yield* store.get(a!),
            { keySlot: null, waitingForKey: true },
            "the paused run gave its slot back"
          )
          assert.deepStrictEqual(ids(yield* claimFrom(store, "w1", { queues: ["q1", "q2"], limit: 10 })), [b!])
          assert.isTrue(yield* store.resumeQueue("q1"))
          yield* store.completeBatch([{ runId: b!, fence: 1, result: null }])
          assert.deepStrictEqual(
            ids(yield* claimFrom(store, "w1", { queues: ["q1", "q2"], limit: 10 })),
            [a!],
            "resumed, it is next"
          )
        }))

      test("a key no limit covers is not limited; a limit counts the runs that start under it; replaced or removed, from the next claim", ({ store }) =>
        Effect.gen(function*() {
          const runs = yield* keyed(store, ["K", "K", "K", "K", "K", "K"])
          const claim = () => Effect.map(claimFrom(store, "w1", { limit: 10 }), sortedIds)
          assert.deepStrictEqual(sortedIds(yield* claimFrom(store, "w1", { limit: 2 })), runs.slice(0, 2))
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          // The two running since before the limit hold no slot of it.
          assert.deepStrictEqual(yield* claim(), [runs[2]!])
          assert.isEmpty(yield* claim(), "K's one slot is held")
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1), KeyLimits.perKind("job", 3)])
          assert.deepStrictEqual((yield* store.keyLimits).map((l) => l.perKey), [3], "the last of a batch stands")
          assert.deepStrictEqual(yield* claim(), [runs[3]!, runs[4]!])
          assert.isTrue(yield* store.removeKeyLimit("kind", "job"))
          assert.isFalse(yield* store.removeKeyLimit("kind", "job"))
          assert.deepStrictEqual(yield* claim(), [runs[5]!])
          assert.isEmpty(yield* store.keyLimits)
        }))

      test("a limit of 0 or less, a fraction, an empty name or an unknown scope is refused with InvalidConfig, and nothing is written", ({ store }) =>
        Effect.gen(function*() {
          const bad: ReadonlyArray<[KeyLimits.KeyLimit, string]> = [
            [KeyLimits.perKind("job", 0), "perKey"],
            [KeyLimits.perQueue("q", -1), "perKey"],
            [KeyLimits.perQueue("q", 1.5), "perKey"],
            [KeyLimits.perKind("", 1), "kind"],
            [{ scope: "tenant" as "kind", name: "x", perKey: 1 }, "scope"]
          ]
          for (const [limit, option] of bad) {
            const error = yield* Effect.flip(store.setKeyLimits([KeyLimits.perKind("ok", 1), limit]))
            assert.deepInclude(error, { _tag: "InvalidConfig", option })
          }
          assert.isEmpty(yield* store.keyLimits, "the valid limit beside each bad one was not written either")
          const error = yield* Effect.flip(
            store.enqueue([{ kind: "job", payload: 1 }, { kind: "job", payload: 2, concurrencyKey: "" }])
          )
          assert.deepInclude(error, { _tag: "InvalidConfig", option: "concurrencyKey" })
          assert.isEmpty(yield* store.list({ limit: 10, offset: 0 }), "no run of the batch was enqueued")
        }))
    })

    describe("retention", () => {
      const window = { keep: Duration.hours(1), keepFailed: Duration.hours(1) }
      const maintain = (store: Store) => store.maintainHistory({ ...window, dryRun: false })
      test("retention never drops a run not ended (pending, running, suspended) nor one ended within the window; an idempotency key answers while its run is kept", ({ passTime, sealHistory, store }) =>
        Effect.gen(function*() {
          const [done, keyed] = yield* store.enqueue([
            { kind: "job", payload: { i: 0 } },
            { kind: "job", payload: { i: 1 }, idempotencyKey: "retained-key" }
          ])
          const [pending] = yield* store.enqueue([{ kind: "job", payload: { i: 2 }, delayMs: 24 * 3_600_000 }])
          const [suspended, running] = yield* store.enqueue([
            { kind: "job", payload: { i: 3 } },
            { kind: "job", payload: { i: 4 } }
          ])
          const claimed = yield* claimFrom(store, "w1", { limit: 4 })
          const lease = (id: string) => {
            const run = claimed.find((c) => c.id === id)!
            return { runId: run.id, fence: run.fence }
          }
          yield* store.completeBatch([{ ...lease(done!.id), result: null }, { ...lease(keyed!.id), result: null }])
          yield* store.suspend({ ...lease(suspended!.id), signal: "s", token: "retention-token", timeout: undefined })
          yield* sealHistory
          // Within the window: everything is kept, the key answers with its run.
          yield* maintain(store)
          yield* passTime(Duration.minutes(30))
          yield* maintain(store)
          // (A store that deletes completed runs deleted `done` at its completion; a keyed run stays.)
          for (
            const run of deleted
              ? [keyed, pending, suspended, running]
              : [done, keyed, pending, suspended, running]
          ) {
            yield* store.get(run!.id)
          }
          const [again] = yield* store.enqueue([{ kind: "job", payload: {}, idempotencyKey: "retained-key" }])
          assert.deepStrictEqual(again, { id: keyed!.id, created: false })
          // Past the window: the runs not ended are kept, whatever else their range holds.
          yield* passTime(Duration.hours(2))
          yield* maintain(store)
          yield* passTime(Duration.hours(2))
          yield* maintain(store)
          assert.deepInclude(yield* store.get(pending!.id), { state: "pending" })
          assert.deepInclude(yield* store.get(suspended!.id), { state: "suspended", signalToken: "retention-token" })
          assert.deepInclude(yield* store.get(running!.id), { state: "running" })
          // The suspended run still answers its token, and the running one its lease.
          assert.strictEqual(yield* store.resumeByToken("retention-token", { ok: true }), suspended!.id)
          const [completed] = yield* store.completeBatch([{ ...lease(running!.id), result: null }])
          assert.deepInclude(completed, { _tag: "Finalized", runId: running!.id })
        }))

      test("a suspended run alone in its range (its claim settled, nothing ready) keeps it past the window", ({ passTime, sealHistory, store }) =>
        Effect.gen(function*() {
          const lease = yield* heldRun(store)
          yield* store.suspend({ ...lease, signal: "s", token: "alone-token", timeout: undefined })
          yield* sealHistory
          yield* maintain(store)
          yield* passTime(Duration.hours(2))
          yield* maintain(store)
          assert.deepInclude(yield* store.get(lease.runId), { state: "suspended", signalToken: "alone-token" })
        }))

      test("retention drops runs that ended longer ago than the window once nothing keeps their range; an idempotency key of a dropped run no longer answers", ({ passTime, sealHistory, store }) =>
        Effect.gen(function*() {
          const [done, keyed, failed] = yield* store.enqueue([
            { kind: "job", payload: { i: 0 } },
            { kind: "job", payload: { i: 1 }, idempotencyKey: "dropped-key" },
            { kind: "job", payload: { i: 2 }, maxAttempts: 1 }
          ])
          const claimed = yield* claimFrom(store, "w1", { limit: 3 })
          const lease = (id: string) => {
            const run = claimed.find((c) => c.id === id)!
            return { runId: run.id, fence: run.fence }
          }
          yield* store.completeBatch([{ ...lease(done!.id), result: null }, { ...lease(keyed!.id), result: null }])
          yield* store.fail({ ...lease(failed!.id), error: { m: "no" }, retryDelayMs: 0 })
          yield* sealHistory
          const dry = yield* store.maintainHistory({ ...window, dryRun: true })
          assert.isFalse(dry.some((a) => a.action === "drop" && a.table === "runs"), "nothing is past its window yet")
          yield* maintain(store)
          yield* passTime(Duration.hours(2))
          yield* maintain(store)
          for (const run of [done, keyed, failed]) yield* assertDeleted(store, run!.id)
          const [again] = yield* store.enqueue([{ kind: "job", payload: {}, idempotencyKey: "dropped-key" }])
          assert.isTrue(again!.created)
          assert.notStrictEqual(again!.id, keyed!.id)
          const status = yield* store.historyStatus
          assert.isAtLeast(status.runs, 0)
        }))
    })

    describe("operators' reads", () => {
      const announcement = (owner: string, runsHeld: number) => ({
        owner,
        host: "host-a",
        pid: 42,
        version: "0.1.0",
        queues: ["default", "emails"],
        kinds: ["job"],
        concurrency: 8,
        runsHeld,
        startedAt: new Date("2026-01-01T00:00:00Z"),
        ttl: Duration.seconds(30)
      })

      test("the worker registry lists each announced worker once with its latest announcement, drops it after its ttl, and forgets a retired one", ({ passTime, store }) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(yield* store.workers, [])
          yield* store.announceWorker(announcement("w-b", 0))
          yield* store.announceWorker(announcement("w-a", 1))
          yield* store.announceWorker(announcement("w-a", 3))
          const listed = yield* store.workers
          assert.deepStrictEqual(listed.map((w) => [w.owner, w.runsHeld]), [["w-a", 3], ["w-b", 0]])
          assert.deepInclude(listed[0]!, { host: "host-a", pid: 42, version: "0.1.0", concurrency: 8 })
          assert.deepStrictEqual(listed[0]!.queues, ["default", "emails"])
          assert.strictEqual(listed[0]!.startedAt.toISOString(), "2026-01-01T00:00:00.000Z")
          assert.isBelow(listed[0]!.lastHeartbeatAt.getTime(), listed[0]!.expiresAt.getTime())
          yield* passTime("20 seconds")
          yield* store.announceWorker(announcement("w-a", 2))
          yield* passTime("20 seconds")
          assert.deepStrictEqual(
            (yield* store.workers).map((w) => w.owner),
            ["w-a"],
            "w-b missed its ttl; w-a announced since"
          )
          // Dead, not retired: listed as gone, with when it was last seen, until the registry forgets it.
          const gone = yield* store.goneWorkers
          assert.deepStrictEqual(gone.map((w) => [w.owner, w.runsHeld]), [["w-b", 0]], "w-b is gone")
          assert.isBelow(gone[0]!.lastHeartbeatAt.getTime(), gone[0]!.expiresAt.getTime())
          assert.isTrue(yield* store.retireWorker("w-a"))
          assert.isFalse(yield* store.retireWorker("w-a"))
          assert.deepStrictEqual(yield* store.workers, [])
          assert.deepStrictEqual(
            (yield* store.goneWorkers).map((w) => w.owner),
            ["w-b"],
            "a retired worker is not gone: it stopped"
          )
          yield* passTime("11 minutes")
          assert.deepStrictEqual(yield* store.goneWorkers, [], "forgotten 10 minutes past its expiry")
        }))

      test("runs are found by id, concurrency key, error text (any case, wildcards literal) and creation time; a bulk retry by ids takes only those", ({ store }) =>
        Effect.gen(function*() {
          const ids = yield* enqueueJobs(store, 3, { maxAttempts: 1 })
          const [keyed] = yield* store.enqueue([{
            kind: "job",
            payload: {},
            queue: "keyed",
            concurrencyKey: "tenant-7"
          }])
          const claimed = yield* claimFrom(store, "w1", { limit: 3 })
          for (const [i, run] of claimed.entries()) {
            yield* store.fail({
              runId: run.id,
              fence: run.fence,
              error: { message: i === 0 ? "Timeout talking to 100%_sure" : "refused" },
              retryDelayMs: undefined
            })
          }
          const find = (filter: Omit<ListFilter, "limit">) =>
            Effect.map(store.list({ limit: 50, ...filter }), (runs) => runs.map((r) => r.id))
          assert.deepStrictEqual(yield* find({ ids: [ids[1]!, "not-an-id", "999999"] }), [ids[1]])
          assert.deepStrictEqual(yield* find({ concurrencyKey: "tenant-7" }), [keyed!.id])
          assert.deepStrictEqual(yield* find({ errorText: "TIMEOUT" }), [claimed[0]!.id])
          assert.deepStrictEqual(yield* find({ errorText: "100%_sure" }), [claimed[0]!.id])
          assert.deepStrictEqual(yield* find({ errorText: "100_" }), [], "% and _ are matched as themselves")
          assert.deepStrictEqual(yield* find({ state: "failed", errorText: "refused" }), [
            claimed[2]!.id,
            claimed[1]!.id
          ])
          const created = (yield* store.get(ids[0]!)).createdAt
          assert.deepStrictEqual(yield* find({ createdTo: created }), [])
          assert.strictEqual((yield* find({ createdFrom: created })).length, 4)
          assert.deepStrictEqual(yield* find({ ids: [] }), [])
          const retried = yield* store.retryMany({ ids: [ids[0]!, ids[2]!] })
          assert.deepStrictEqual([...retried].sort(), [ids[0]!, ids[2]!].sort())
          assert.strictEqual((yield* store.get(ids[1]!)).state, "failed")
        }))

      test("throughput counts completions and failures per queue and minute with wait and run times, takes at most maxRuns (and says so), and refuses a bad window", ({ store }) =>
        Effect.gen(function*() {
          const empty = yield* store.throughput({ minutes: 60 })
          assert.deepStrictEqual([empty.series, empty.truncated, empty.minutes], [[], false, 60])
          yield* enqueueJobs(store, 2, { maxAttempts: 1 })
          yield* enqueueJobs(store, 1, { queue: "other" })
          const [a, b] = yield* claimFrom(store, "w1", { limit: 2 })
          const [c] = yield* claimFrom(store, "w1", { queues: ["other"] })
          yield* store.completeBatch([{ runId: a!.id, fence: a!.fence, result: null }, {
            runId: c!.id,
            fence: c!.fence,
            result: null
          }])
          yield* store.fail({ runId: b!.id, fence: b!.fence, error: { message: "no" }, retryDelayMs: undefined })
          const throughput = yield* store.throughput({ minutes: 60 })
          const byQueue = new Map<string, { completed: number; failed: number }>()
          for (const m of throughput.series) {
            const q = byQueue.get(m.queue) ?? { completed: 0, failed: 0 }
            byQueue.set(m.queue, { completed: q.completed + m.completed, failed: q.failed + m.failed })
            assert.isNotNull(m.waitMs)
            assert.isAtLeast(m.runMs!.p95, m.runMs!.p50)
            assert.isAtLeast(m.minute.getTime(), throughput.since.getTime())
          }
          // Deleted completed runs are not there to count: only the failure is.
          assert.deepStrictEqual(
            Object.fromEntries(byQueue),
            deleted
              ? { default: { completed: 0, failed: 1 } }
              : { default: { completed: 1, failed: 1 }, other: { completed: 1, failed: 0 } }
          )
          assert.isFalse(throughput.truncated)
          // Deleted: the one failure is all there is to take, so a cap of one truncates nothing.
          const capped = yield* store.throughput({ minutes: 60, maxRuns: deleted ? 1 : 2 })
          assert.strictEqual(capped.series.reduce((n, m) => n + m.completed + m.failed, 0), deleted ? 1 : 2)
          assert.strictEqual(capped.truncated, !deleted)
          for (const minutes of [0, 1441, 1.5]) {
            const refused = yield* Effect.flip(store.throughput({ minutes }))
            assert.deepInclude(refused, { _tag: "InvalidConfig", option: "minutes" })
          }
        }))

      test("keyUsage lists a limit's keys, the one waiting longest first, with the slots each holds", ({ passTime, store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          const enqueueKey = (key: string, n: number) =>
            store.enqueue(Array.from({ length: n }, () => ({ kind: "job", payload: {}, concurrencyKey: key })))
          yield* enqueueKey("old", 3)
          yield* passTime("10 seconds")
          yield* enqueueKey("new", 2)
          yield* enqueueKey("solo", 1)
          yield* claimFrom(store, "w1", { limit: 10 })
          const usage = yield* store.keyUsage("kind", "job", 10)
          assert.deepStrictEqual(usage.map((u) => [u.key, u.held, u.waiting]), [["old", 1, 2], ["new", 1, 1], [
            "solo",
            1,
            0
          ]])
          assert.isAtLeast(usage[0]!.oldestWaitingSeconds!, 10)
          // The runs waiting for their key's slot are due runs in stats too (the kind scope's index).
          assert.deepStrictEqual((yield* store.stats).dueByQueue.map((q) => [q.queue, q.due]), [["default", 3]])
          assert.isNull(usage[2]!.oldestWaitingSeconds)
          assert.strictEqual((yield* store.keyUsage("kind", "job", 1)).length, 1)
          assert.deepStrictEqual(yield* store.keyUsage("queue", "default", 10), [])
        }))
    })

    describe("operators' actions and deletes", () => {
      const alice: OperatorActions.Actor = { name: "alice", via: "api" }

      test("cancel, retry and resume record who acted and from where in the run's history; the application's own do not", ({ store }) =>
        Effect.gen(function*() {
          // A resume by an operator says who.
          const lease = yield* heldRun(store)
          yield* store.suspend({ ...lease, signal: "approval", token: "tok-actor", timeout: undefined })
          yield* store.resumeById(lease.runId, { ok: true }, { name: "console-user", via: "console" })
          const resumed = RunHistory.fromEvents(yield* store.history(lease.runId))
          assert.deepInclude(resumed.adminActions[0], { action: "resumed", by: "console-user", via: "console" })
          assert.deepStrictEqual(resumed.suspensions[0]!.payload, { ok: true })
          const [a, b] = yield* enqueueJobs(store, 2)
          yield* store.cancel(a!, alice)
          yield* store.retry(a!, { name: "bob", via: "cli" })
          yield* store.cancel(b!)
          const actions = RunHistory.fromEvents(yield* store.history(a!)).adminActions
          assert.deepStrictEqual(actions.map((x) => [x.action, x.by, x.via]), [
            ["cancelled", "alice", "api"],
            ["retried", "bob", "cli"]
          ])
          assert.deepStrictEqual(
            RunHistory.fromEvents(yield* store.history(b!)).adminActions.map((x) => [x.action, x.by, x.via]),
            [["cancelled", null, null]]
          )
          // The runs of a bulk cancel each say who.
          const [c] = yield* enqueueJobs(store, 1, { queue: "bulk-actor" })
          yield* store.cancelMany({ queue: "bulk-actor" }, alice)
          assert.deepInclude(RunHistory.fromEvents(yield* store.history(c!)).adminActions[0], { by: "alice" })
        }))

      test("a delete confirmed for another count deletes nothing; one of a running run is refused; then the runs are gone, their keys free", ({ store }) =>
        Effect.gen(function*() {
          const [first] = yield* store.enqueue([{
            kind: "job",
            payload: { secret: "s1" },
            queue: "del",
            idempotencyKey: "k-del"
          }])
          const [second] = yield* enqueueJobs(store, 1, { queue: "del" })
          yield* store.cancel(second!)
          const filter = { queue: "del" }
          assert.deepStrictEqual(yield* store.countDeletable(filter), { count: 2, busy: 0 })
          const changed = yield* Effect.flip(store.deleteRuns({ filter, expected: 3, actor: alice }))
          assert.deepInclude(changed, { _tag: "DeleteCountChanged", expected: 3, found: 2 })
          assert.strictEqual((yield* store.get(first!.id)).state, "pending", "nothing deleted")
          // A running run is refused, and nothing of the selection is deleted.
          const lease = yield* heldRun(store)
          const busy = yield* Effect.flip(
            store.deleteRuns({ filter: { ids: [lease.runId] }, expected: 1, actor: alice })
          )
          assert.deepInclude(busy, { _tag: "RunsBusy", busy: 1, deleted: 0 })
          assert.strictEqual((yield* store.get(lease.runId)).state, "running")
          assert.deepStrictEqual(yield* store.countDeletable({ ids: [lease.runId] }), { count: 1, busy: 1 })
          assert.deepStrictEqual(yield* store.deleteRuns({ filter, expected: 2, actor: alice }), { deleted: 2 })
          for (const id of [first!.id, second!]) yield* assertDeleted(store, id)
          assert.deepStrictEqual(yield* store.countDeletable(filter), { count: 0, busy: 0 })
          // The idempotency key is free again: the same enqueue makes a new run.
          const [again] = yield* store.enqueue([{ kind: "job", payload: {}, queue: "del", idempotencyKey: "k-del" }])
          assert.isTrue(again!.created)
          assert.notStrictEqual(again!.id, first!.id)
          // The audit names who deleted which runs, never their payloads.
          const [line] = yield* store.actions({ limit: 10 })
          assert.deepInclude(line, { by: "alice", via: "api", action: "runs.delete" })
          assert.deepStrictEqual(line!.detail, {
            count: 2,
            ids: [first!.id, second!].sort((x, y) => Number(x) - Number(y))
          })
          assert.notInclude(JSON.stringify(line), "s1")
        }))

      test("a delete of a pending run holding its key's slot hands the slot to the key's next run", ({ store }) =>
        Effect.gen(function*() {
          yield* store.setKeyLimits([KeyLimits.perKind("job", 1)])
          const [a, b] = yield* store.enqueue([
            { kind: "job", payload: {}, concurrencyKey: "acct" },
            { kind: "job", payload: {}, concurrencyKey: "acct" }
          ])
          assert.deepStrictEqual(yield* store.deleteRuns({ filter: { ids: [a!.id] }, expected: 1 }), { deleted: 1 })
          const claimed = yield* claimFrom(store, "w1")
          assert.deepStrictEqual(claimed.map((c) => c.id), [b!.id], "the key's next run took the slot")
        }))

      test("a delete of more runs than one statement takes (deleteBatchSize) is done in several, each with its audit line", ({ store }) =>
        Effect.gen(function*() {
          const n = RunStorage.deleteBatchSize + 3
          yield* store.enqueue(Array.from({ length: n }, (_, i) => ({ kind: "job", payload: { i }, queue: "many" })))
          const [kept] = yield* enqueueJobs(store, 1, { queue: "other" })
          assert.deepStrictEqual(yield* store.deleteRuns({ filter: { queue: "many" }, expected: n, actor: alice }), {
            deleted: n
          })
          assert.deepStrictEqual(yield* store.list({ queue: "many", limit: 10 }), [])
          assert.strictEqual((yield* store.get(kept!)).state, "pending")
          const lines = yield* store.actions({ limit: 10 })
          assert.deepStrictEqual(lines.map((l) => (l.detail as { count: number }).count), [
            3,
            RunStorage.deleteBatchSize
          ])
        }))

      test("a delete by a payload field (a data-protection request) keeps the field's path in the audit, never its value", ({ store }) =>
        Effect.gen(function*() {
          const customer = "customer-7c2e@example.org"
          yield* store.enqueue([
            { kind: "job", payload: { customer }, queue: "gdpr" },
            { kind: "job", payload: { customer }, queue: "gdpr" }
          ])
          const filter = { queue: "gdpr", payload: [{ path: ["customer"], value: customer }] }
          assert.deepStrictEqual(yield* store.deleteRuns({ filter, expected: 2, actor: alice }), { deleted: 2 })
          const [line] = yield* store.actions({ limit: 1 })
          assert.deepInclude(line, { action: "runs.delete", by: "alice" })
          assert.deepStrictEqual(JSON.parse(line!.target), { queue: "gdpr", payload: [{ path: ["customer"] }] })
          assert.notInclude(JSON.stringify(line), customer)
        }))

      test("actions not about one run are recorded in the audit, newest first, paged by id", ({ store }) =>
        Effect.gen(function*() {
          yield* store.recordAction({ actor: alice, action: "queue.pause", target: "mail" })
          yield* store.recordAction({
            actor: { name: "ci", via: "cli" },
            action: "schedule.register",
            target: "daily",
            detail: { cron: "0 * * * *" }
          })
          const lines = yield* store.actions({ limit: 10 })
          assert.deepStrictEqual(lines.map((l) => [l.by, l.via, l.action, l.target, l.detail]), [
            ["ci", "cli", "schedule.register", "daily", { cron: "0 * * * *" }],
            ["alice", "api", "queue.pause", "mail", null]
          ])
          assert.deepStrictEqual((yield* store.actions({ limit: 10, before: lines[0]!.id })).map((l) => l.action), [
            "queue.pause"
          ])
          assert.deepStrictEqual(yield* store.actions({ limit: 10, before: "not-an-id" }), [])
        }))
    })

    describe("reads and notifications", () => {
      test("stats count runs by queue and state, live leases, the oldest due run's wait, rejections and reclaims", ({ passTime, store }) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(yield* store.stats, {
            byStateAndQueue: [],
            liveLeases: 0,
            oldestPendingSeconds: null,
            dueByQueue: [],
            fenceRejections: 0,
            reclaims: 0
          })
          yield* enqueueJobs(store, 2)
          yield* enqueueJobs(store, 1, { queue: "other" })
          yield* claimFrom(store, "w1", { limit: 1 })
          yield* passTime("5 seconds")
          const stats = yield* store.stats
          assert.deepStrictEqual(stats.byStateAndQueue, [
            { queue: "default", state: "pending", count: 1 },
            { queue: "default", state: "running", count: 1 },
            { queue: "other", state: "pending", count: 1 }
          ])
          assert.strictEqual(stats.liveLeases, 1)
          assert.isAtLeast(stats.oldestPendingSeconds!, 5)
          assert.isBelow(stats.oldestPendingSeconds!, 60)
          assert.deepStrictEqual(stats.dueByQueue.map((q) => [q.queue, q.due]), [["default", 1], ["other", 1]])
          assert.isTrue(stats.dueByQueue.every((q) => q.oldestDueSeconds >= 5 && q.oldestDueSeconds < 60))
          yield* passTime("61 seconds")
          assert.strictEqual((yield* store.stats).liveLeases, 0, "an expired lease is not live")
        }))

      test("stats count only the runs that have not ended (the rest of a ledger batch still running), never completed or failed ones (ADR 0030)", ({ store }) =>
        Effect.gen(function*() {
          yield* enqueueJobs(store, 4, { maxAttempts: 1 })
          yield* enqueueJobs(store, 1, { queue: "other" })
          const claimed = yield* claimFrom(store, "w1", { limit: 4 })
          assert.strictEqual(claimed.length, 4)
          // Two complete together (one completion batch), one fails (moved to its row), one still runs.
          yield* store.completeBatch(claimed.slice(0, 2).map((c) => ({ runId: c.id, fence: c.fence, result: null })))
          yield* store.fail({
            runId: claimed[2]!.id,
            fence: claimed[2]!.fence,
            error: { message: "no" },
            retryDelayMs: undefined
          })
          const [other] = yield* claimFrom(store, "w2", { queues: ["other"] })
          yield* store.completeBatch([{ runId: other!.id, fence: other!.fence, result: null }])
          // Ended runs (kept or deleted) are not counted: activity counts them, per minute.
          assert.deepStrictEqual((yield* store.stats).byStateAndQueue, [{
            queue: "default",
            state: "running",
            count: 1
          }])
          // The one still running completes: its batch is settled, and nothing live is left.
          yield* store.completeBatch([{ runId: claimed[3]!.id, fence: claimed[3]!.fence, result: null }])
          assert.deepStrictEqual((yield* store.stats).byStateAndQueue, [])
        }))

      test("sample counts the runs that have not ended by queue and state, due runs a claim may take with the oldest one's wait, and live leases; ended runs are not counted", ({ passTime, store }) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(yield* store.sample, { byStateAndQueue: [], dueByQueue: [], liveLeases: 0 })
          const ended = yield* heldRun(store, "w1")
          yield* store.completeBatch([{ ...ended, result: null }])
          yield* enqueueJobs(store, 2)
          yield* enqueueJobs(store, 1, { queue: "other" })
          yield* store.enqueue([{ kind: "job", payload: {}, delayMs: 3_600_000 }])
          const held = yield* claimFrom(store, "w1", { limit: 1 })
          const [suspended] = yield* claimFrom(store, "w1", { limit: 1, queues: ["other"] })
          yield* store.suspend({
            runId: suspended!.id,
            fence: suspended!.fence,
            signal: "s",
            token: "tok-sample",
            timeout: undefined
          })
          yield* passTime("5 seconds")
          const sample = yield* store.sample
          assert.deepStrictEqual(sample.byStateAndQueue, [
            { queue: "default", state: "pending", count: 2 },
            { queue: "default", state: "running", count: 1 },
            { queue: "other", state: "suspended", count: 1 }
          ])
          assert.deepStrictEqual(sample.dueByQueue.map((q) => [q.queue, q.due]), [["default", 1]])
          assert.isAtLeast(sample.dueByQueue[0]!.oldestDueSeconds, 5)
          assert.isBelow(sample.dueByQueue[0]!.oldestDueSeconds, 60)
          assert.strictEqual(sample.liveLeases, 1)
          assert.strictEqual(held.length, 1)
          yield* passTime("61 seconds")
          assert.strictEqual((yield* store.sample).liveLeases, 0, "an expired lease is not live")
        }))

      test("list filters by state, queue and kind, newest first, with limit and offset", ({ store }) =>
        Effect.gen(function*() {
          const ids = yield* enqueueJobs(store, 3)
          const [mail] = (yield* store.enqueue([{ kind: "mail", payload: null, queue: "other" }])).map((r) => r.id)
          yield* claimFrom(store, "w1", { limit: 1 })
          const all = yield* store.list({ limit: 10, offset: 0 })
          assert.deepStrictEqual(all.map((r) => r.id), [mail!, ...ids].sort((a, b) => Number(b) - Number(a)))
          assert.deepStrictEqual((yield* store.list({ state: "running", limit: 10, offset: 0 })).map((r) => r.id), [
            ids[0]!
          ])
          assert.deepStrictEqual((yield* store.list({ queue: "other", limit: 10, offset: 0 })).map((r) => r.id), [
            mail!
          ])
          assert.deepStrictEqual(
            (yield* store.list({ kind: "job", state: "pending", limit: 1, offset: 1 })).map((r) => r.id),
            [ids[1]!]
          )
          assert.deepInclude(yield* Effect.flip(store.get("999999")), { _tag: "RunNotFound" })
          assert.deepInclude(yield* Effect.flip(store.history("999999")), { _tag: "RunNotFound" })
        }))

      test("list pages newest first by the run's number (40 down to 1, not as text), by keyset cursors before and after an id", ({ store }) =>
        Effect.gen(function*() {
          const ids = yield* enqueueJobs(store, 40)
          assert.deepStrictEqual(
            ids,
            Array.from({ length: 40 }, (_, i) => String(i + 1)),
            "a fresh store numbers its runs from 1"
          )
          const newestFirst = Array.from({ length: 40 }, (_, i) => String(40 - i))
          const page = (filter: Omit<ListFilter, "limit"> & { limit?: number }) =>
            Effect.map(store.list({ limit: 40, ...filter }), (runs) => runs.map((r) => r.id))
          assert.deepStrictEqual(yield* page({}), newestFirst)
          // Page after page by the last id of the one before: every run once, in order.
          const walked: Array<string> = []
          let before: string | undefined = undefined
          while (true) {
            const next: ReadonlyArray<string> = yield* page({ limit: 7, before })
            if (next.length === 0) break
            walked.push(...next)
            before = next.at(-1)
          }
          assert.deepStrictEqual(walked, newestFirst)
          // The page before a cursor's (newer), newest first: the runs nearest above it.
          assert.deepStrictEqual(yield* page({ limit: 3, after: "9" }), ["12", "11", "10"])
          assert.deepStrictEqual(yield* page({ limit: 3, after: "39" }), ["40"])
          assert.deepStrictEqual(yield* page({ before: "12", after: "8" }), ["11", "10", "9"])
          // With a filter: the cursor and the state together.
          yield* claimFrom(store, "w1", { limit: 3 })
          assert.deepStrictEqual(yield* page({ state: "running" }), ["3", "2", "1"])
          assert.deepStrictEqual(yield* page({ state: "pending", before: "5", limit: 5 }), ["4"])
          // A cursor that is no run's id selects nothing.
          assert.deepStrictEqual(yield* page({ before: "x1" }), [])
          assert.deepStrictEqual(yield* page({ after: "-1" }), [])
        }))

      test("list filters by payload fields as text (strings as they are, numbers and booleans as JSON; null never matches)", ({ store }) =>
        Effect.gen(function*() {
          const [a, b, c] = (yield* store.enqueue([
            { kind: "job", payload: { customer: { id: "c-1" }, amount: 5, vip: true } },
            { kind: "job", payload: { customer: { id: "c-2" }, amount: 5, vip: null } },
            { kind: "job", payload: { customer: "c-1" } }
          ])).map((e) => e.id)
          const ids = (payload: ReadonlyArray<{ path: Array<string>; value: string }>) =>
            Effect.map(store.list({ payload, limit: 10, offset: 0 }), (runs) => runs.map((r) => r.id))
          assert.deepStrictEqual(yield* ids([{ path: ["customer", "id"], value: "c-1" }]), [a!])
          assert.deepStrictEqual(yield* ids([{ path: ["amount"], value: "5" }]), [b!, a!])
          assert.deepStrictEqual(yield* ids([{ path: ["amount"], value: "5" }, { path: ["vip"], value: "true" }]), [a!])
          assert.deepStrictEqual(yield* ids([{ path: ["vip"], value: "null" }]), [])
          assert.deepStrictEqual(yield* ids([{ path: ["customer"], value: "c-1" }]), [c!])
        }))

      test("leases lists the leases held now, by owner, with the time left by the store's clock", ({ passTime, store }) =>
        Effect.gen(function*() {
          const mine = yield* heldRun(store, "w-b")
          const theirs = yield* heldRun(store, "w-a")
          const leases = yield* store.leases
          assert.deepStrictEqual(leases.map((l) => [l.owner, l.runId, l.fence]), [["w-a", theirs.runId, 1], [
            "w-b",
            mine.runId,
            1
          ]])
          assert.isTrue(leases.every((l) => l.expiresInMs > 50_000 && l.expiresInMs <= 60_000))
          yield* passTime("61 seconds")
          assert.deepStrictEqual(yield* store.leases, [], "expired leases are not held")
        }))

      test("cancelMany and retryMany act on the runs a filter selects that allow it, advancing each fence, in one call", ({ store }) =>
        Effect.gen(function*() {
          const [p1, p2] = yield* enqueueJobs(store, 2, { queue: "bulk" })
          const [other] = yield* enqueueJobs(store, 1, { queue: "other" })
          const held = yield* claimFrom(store, "w1", { queues: ["bulk"], limit: 1 })
          assert.strictEqual(held.length, 1)
          const cancelled = yield* store.cancelMany({ queue: "bulk" })
          assert.deepStrictEqual([...cancelled].sort(), [p1!, p2!].sort())
          for (const id of [p1!, p2!]) assert.strictEqual((yield* store.get(id)).state, "cancelled")
          assert.strictEqual((yield* store.get(other!)).state, "pending")
          // The holder's writes are rejected by the fence cancel advanced.
          const stale = yield* Effect.flip(store.checkpoint({ runId: held[0]!.id, fence: 1 }, {}))
          assert.deepInclude(stale, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 })
          assert.deepStrictEqual(yield* store.cancelMany({ queue: "bulk" }), [], "nothing left to cancel")
          const retried = yield* store.retryMany({ queue: "bulk", state: "cancelled" })
          assert.deepStrictEqual([...retried].sort(), [p1!, p2!].sort())
          assert.deepInclude(yield* store.get(held[0]!.id), { state: "pending", fence: 3, attempt: 0 })
        }))

      test("notifications announce new runs by queue and cancelled runs by id", ({ settle, store }) =>
        Effect.gen(function*() {
          const seen: Array<StoreNotification> = []
          const listener = yield* Effect.forkScoped(
            Stream.runForEach(store.notifications, (note) => Effect.sync(() => void seen.push(note)))
          )
          // Subscribing takes a moment (a LISTEN): enqueue until the first announcement arrives.
          let tries = 0
          while (!seen.some((n) => n._tag === "RunsAvailable" && n.queue === "q1") && tries++ < 100) {
            yield* store.enqueue([{ kind: "job", payload: null, queue: "q1" }])
            yield* settle
          }
          assert.isTrue(seen.some((n) => n._tag === "RunsAvailable" && n.queue === "q1"), "no announcement arrived")
          const [id] = (yield* store.enqueue([{ kind: "job", payload: null, queue: "q2" }])).map((r) => r.id)
          yield* store.cancel(id!)
          for (let i = 0; i < 50 && !seen.some((n) => n._tag === "RunCancelled"); i++) yield* settle
          assert.deepStrictEqual(seen[0], { _tag: "Subscribed" }, "Subscribed comes first")
          const after = seen.filter((n) => n._tag !== "Subscribed" && !(n._tag === "RunsAvailable" && n.queue === "q1"))
          assert.deepStrictEqual(after, [{ _tag: "RunsAvailable", queue: "q2" }, { _tag: "RunCancelled", runId: id! }])
          yield* Fiber.interrupt(listener)
        }))
    })
  })
}
