/**
 * The worker runtime against a real PostgreSQL, on the real clock: suspension releases the lease
 * and stops its heartbeats, renewal failure interrupts the handler, retries back off and stop,
 * cancellation interrupts, and a skewed worker clock changes nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import {
  Client,
  CurrentRun,
  Fence,
  FenceRejected,
  Handler,
  KeyLimits,
  Run,
  RunStore,
  Worker,
  WorkerEvents
} from "@leasehold/core"
import { Clock, Context, Deferred, Duration, Effect, Fiber, Layer, Ref, Schedule, Schema, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, layerStore } from "./support/db.js"
import { expireLease, readRun, twoStores } from "./support/stores.js"
import { type Event, eventually, spyOnRenewals, startWorker, takeOver } from "./support/workers.js"

const fast = {
  ttl: "1 second",
  heartbeat: "150 millis",
  pollInterval: "50 millis",
  shutdownGrace: "200 millis"
} as const

const approval = Handler.make({
  kind: "approval",
  payload: Schema.Struct({ amount: Schema.Number }),
  handle: ({ amount }) =>
    Effect.gen(function*() {
      yield* Run.checkpoint({ step: "asked", amount })
      const outcome = yield* Run.awaitSignal("approval", { token: `approve-${amount}` })
      return { amount, outcome }
    })
})

const sleeper = (release: Deferred.Deferred<void>) =>
  Handler.make({ kind: "sleeper", payload: Schema.Unknown, handle: () => Deferred.await(release) })

describe("suspend and resume", () => {
  it.live("suspension clears the owner, no heartbeat includes the suspended run, resume gives a higher fence", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { renewals, spy } = spyOnRenewals(stores.a)
      const release = yield* Deferred.make<void>()
      const events = yield* startWorker(spy, stores.sql, { ...fast, handlers: [approval, sleeper(release)] })
      // A long run keeps the heartbeat busy, so silence about the suspended run means something.
      yield* Client.enqueue(sleeper(release), null).pipe(Effect.provideService(RunStore, stores.a))
      const { id } = yield* Client.enqueue(approval, { amount: 42 }).pipe(Effect.provideService(RunStore, stores.a))
      yield* eventually("suspended", Effect.map(readRun(stores, id), (r) => r.state === "suspended"))
      const suspended = yield* readRun(stores, id)
      assert.strictEqual(suspended.lease_owner, null)
      assert.strictEqual(suspended.lease_expires_at, null)
      assert.strictEqual(suspended.fence, 1)

      // Observe what the worker sends over several heartbeat intervals.
      const from = renewals.length
      yield* Effect.sleep("1 second")
      const window = renewals.slice(from)
      assert.isAtLeast(window.length, 4, "heartbeats kept going for the other run")
      for (const leases of window) assert.notInclude(leases.map((l) => l.runId), id)
      assert.isTrue(window.every((leases) => leases.length === 1))

      const resumedId = yield* Client.resumeByToken("approve-42", { approved: true, by: "ana" }).pipe(
        Effect.provideService(RunStore, stores.a)
      )
      assert.strictEqual(resumedId, id)
      yield* eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed"))
      const record = yield* stores.a.get(id)
      assert.strictEqual(record.fence, 2)
      assert.deepStrictEqual(record.result, {
        amount: 42,
        outcome: { _tag: "Signalled", payload: { approved: true, by: "ana" } }
      })
      const claims = events.filter((e): e is Extract<Event, { _tag: "Claimed" }> =>
        e._tag === "Claimed" && e.runId === id
      )
      assert.deepStrictEqual(claims.map((c) => c.fence), [1, 2])
      const history = (yield* stores.a.history(id)).map((e) => [e.kind, e.fence])
      assert.deepStrictEqual(history, [["claimed", 1], ["suspended", 1], ["resumed", 1], ["claimed", 2], [
        "completed",
        2
      ]])
      yield* Deferred.succeed(release, undefined)
    }))

  it.live("a passed deadline resumes the run with a timed-out outcome", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const waiter = Handler.make({
        kind: "waiter",
        payload: Schema.Unknown,
        handle: () => Run.awaitSignal("webhook", { timeout: "300 millis" })
      })
      yield* startWorker(stores.a, stores.sql, { ...fast, handlers: [waiter] })
      const { id } = yield* Client.enqueue(waiter, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed"))
      const record = yield* stores.a.get(id)
      assert.deepStrictEqual(record.result, { _tag: "TimedOut" })
      assert.strictEqual(record.fence, 2)
      assert.deepStrictEqual((yield* stores.a.history(id)).map((e) => e.kind), [
        "claimed",
        "suspended",
        "signal_timed_out",
        "completed"
      ])
    }))

  it.live("a signal delivered before the handler awaits it is returned at once: no suspension, one claim", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const started = yield* Deferred.make<void>()
      const proceed = yield* Deferred.make<void>()
      const early = Handler.make({
        kind: "early",
        payload: Schema.Unknown,
        handle: () =>
          Effect.gen(function*() {
            yield* Deferred.succeed(started, undefined)
            yield* Deferred.await(proceed)
            return yield* Run.awaitSignal("approval")
          })
      })
      yield* startWorker(stores.a, stores.sql, { ...fast, handlers: [early] })
      const { id } = yield* Client.enqueue(early, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* Deferred.await(started)
      const delivered = yield* stores.b.deliverSignal({ runId: id, signal: "approval", payload: { approved: true } })
      assert.strictEqual(delivered._tag, "Recorded")
      yield* Deferred.succeed(proceed, undefined)
      yield* eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed"))
      const record = yield* stores.a.get(id)
      assert.deepInclude(record, { fence: 1, result: { _tag: "Signalled", payload: { approved: true } } })
      assert.deepStrictEqual((yield* stores.a.history(id)).map((e) => e.kind), [
        "claimed",
        "signal_recorded",
        "completed"
      ])
    }))

  it.live("resuming a run that is not suspended, or an unknown one, fails with the reason and writes nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const [queued] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      const notSuspended = yield* Effect.flip(stores.a.resumeById(queued!.id, { ok: true }))
      assert.deepInclude(notSuspended, { _tag: "InvalidTransition", state: "pending", operation: "resume" })
      const unknown = yield* Effect.flip(stores.a.resumeById("999999", {}))
      assert.deepInclude(unknown, { _tag: "RunNotFound", runId: "999999" })
      const unknownToken = yield* Effect.flip(stores.a.resumeByToken("no-such-token", {}))
      assert.deepInclude(unknownToken, { _tag: "SignalTokenNotFound", token: "no-such-token" })
      const unstorable = yield* Effect.flip(stores.a.resumeById(queued!.id, { amount: 10n }))
      assert.deepInclude(unstorable, { _tag: "UnstorableValue", what: "resume payload" })
      assert.deepStrictEqual(yield* stores.a.history(queued!.id), [])
    }))
})

describe("signal tokens", () => {
  it.live("a second run suspending with a token another suspended run holds gets SignalTokenInUse, and writes nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const [first, second] = yield* stores.a.enqueue([{ kind: "job", payload: null }, { kind: "job", payload: null }])
      const claimed = yield* stores.a.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["job"],
        limit: 2,
        ttl: Duration.minutes(1)
      })
      const fenceOf = (id: string) => claimed.find((c) => c.id === id)!.fence
      yield* stores.a.suspend({
        runId: first!.id,
        fence: fenceOf(first!.id),
        signal: "approval",
        token: "shared",
        timeout: undefined
      })
      const error = yield* Effect.flip(
        stores.a.suspend({
          runId: second!.id,
          fence: fenceOf(second!.id),
          signal: "approval",
          token: "shared",
          timeout: undefined
        })
      )
      assert.deepInclude(error, { _tag: "SignalTokenInUse", runId: second!.id, token: "shared" })
      const row = yield* readRun(stores, second!.id)
      assert.strictEqual(row.state, "running")
      assert.strictEqual(row.lease_owner, "w")
      assert.deepStrictEqual((yield* stores.a.history(second!.id)).map((e) => e.kind), ["claimed"])
      // The token still resumes the run that holds it.
      assert.strictEqual(yield* stores.a.resumeByToken("shared", { ok: true }), first!.id)
    }))
})

describe("heartbeat", () => {
  it.live("renewals never wait for the application's pool: a handler holding its only connection for three TTLs keeps its lease", () =>
    Effect.gen(function*() {
      // An application pool of one connection, which the handler holds in a transaction.
      const context = yield* Layer.build(layerStore(freshSchema(), 1))
      const store = Context.get(context, RunStore)
      const sql = Context.get(context, SqlClient.SqlClient)
      const held = yield* Deferred.make<void>()
      const holder = Handler.make({
        kind: "holder",
        payload: Schema.Unknown,
        handle: () =>
          Effect.gen(function*() {
            const app = yield* SqlClient.SqlClient
            return yield* app.withTransaction(Effect.gen(function*() {
              yield* app`SELECT 1`
              yield* Deferred.succeed(held, undefined)
              yield* Effect.sleep("3 seconds")
              return "done"
            }))
          })
      })
      const events = yield* startWorker(store, sql, {
        ...fast,
        ttl: "1 second",
        heartbeat: "200 millis",
        handlers: [holder]
      })
      const { id } = yield* Client.enqueue(holder, null).pipe(Effect.provideService(RunStore, store))
      yield* Deferred.await(held)
      const heldSince = events.length
      yield* eventually("completed", Effect.map(store.get(id), (r) => r.state === "completed"), "10 seconds")
      // The lease was renewed while the handler held the connection, and never lost.
      const renewedWhileHeld = events.slice(heldSince).filter((e) =>
        e._tag === "HeartbeatConfirmed" && e.renewed.some((l) => l.runId === id)
      )
      assert.isAtLeast(renewedWhileHeld.length, 5)
      assert.isUndefined(events.find((e) => e._tag === "LeaseLost"))
      const record = yield* store.get(id)
      assert.strictEqual(record.fence, 1)
      assert.strictEqual(record.result, "done")
    }))

  it.live("one renewal statement per interval carries every lease of the worker", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { renewals, spy } = spyOnRenewals(stores.a)
      const release = yield* Deferred.make<void>()
      yield* startWorker(spy, stores.sql, { ...fast, concurrency: 5, handlers: [sleeper(release)] })
      yield* stores.a.enqueue(Array.from({ length: 5 }, () => ({ kind: "sleeper", payload: null })))
      yield* eventually("5 leases renewed together", Effect.sync(() => renewals.some((r) => r.length === 5)))
      yield* Deferred.succeed(release, undefined)
    }))

  it.live("a failed renewal interrupts the handler: it stops working instead of continuing optimistically", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { failRenewals, spy } = spyOnRenewals(stores.a)
      // Work is counted per claim: the released run is claimed again (fence 2) and works on.
      const ticksOfFence1 = yield* Ref.make(0)
      const ticker = Handler.make({
        kind: "ticker",
        payload: Schema.Unknown,
        handle: () =>
          Effect.flatMap(Fence, (fence) =>
            Effect.forever(Effect.andThen(
              fence.fence === 1 ? Ref.update(ticksOfFence1, (n) => n + 1) : Effect.void,
              Effect.sleep("10 millis")
            )))
      })
      const events = yield* startWorker(spy, stores.sql, { ...fast, handlers: [ticker] })
      const { id } = yield* Client.enqueue(ticker, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* eventually("ticking", Effect.map(Ref.get(ticksOfFence1), (n) => n > 5))
      failRenewals()
      const lost = yield* eventually(
        "lease lost",
        Effect.sync(() => events.find((e) => e._tag === "LeaseLost" && e.runId === id))
      )
      assert.deepInclude(lost, { reason: "renewal-failed", fence: 1 })
      yield* eventually("released", Effect.sync(() => events.some((e) => e._tag === "RunSettled" && e.runId === id)))
      const after = yield* Ref.get(ticksOfFence1)
      yield* Effect.sleep("300 millis")
      assert.strictEqual(yield* Ref.get(ticksOfFence1), after, "no work under fence 1 after the interruption")
      const settled = events.find((e) => e._tag === "RunSettled" && e.runId === id)
      assert.deepInclude(settled, { outcome: "released" })
    }))

  it.live("a renewal that comes back without the lease (superseded) interrupts the handler", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const started = yield* Deferred.make<void>()
      const blocker = Handler.make({
        kind: "job",
        payload: Schema.Unknown,
        handle: () => Effect.andThen(Deferred.succeed(started, undefined), Effect.never)
      })
      // One slot, which its run keeps taken: the worker cannot reclaim its own expired run first.
      const events = yield* startWorker(stores.a, stores.sql, { ...fast, concurrency: 1, handlers: [blocker] })
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      yield* Deferred.await(started)
      // The holder keeps renewing (every 150 ms): expire and reclaim until the reclaim wins the race.
      const taken = yield* takeOver(stores.b, expireLease(stores, run!.id), { owner: "thief", kind: "job" })
      assert.strictEqual(taken.fence, 2)
      const lost = yield* eventually("superseded", Effect.sync(() => events.find((e) => e._tag === "LeaseLost")))
      assert.deepInclude(lost, { reason: "superseded", runId: run!.id, fence: 1 })
      const row = yield* readRun(stores, run!.id)
      assert.strictEqual(row.lease_owner, "thief")
      assert.strictEqual(row.fence, 2)
    }))
})

describe("retries, failure and cancellation", () => {
  it.live("failed attempts back off and stop at max_attempts", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const flaky = Handler.make({
        kind: "flaky",
        payload: Schema.Unknown,
        maxAttempts: 3,
        handle: () => Effect.flatMap(CurrentRun, (run) => Effect.fail(new Error(`attempt ${run.attempt} broke`)))
      })
      yield* startWorker(stores.a, stores.sql, {
        ...fast,
        handlers: [flaky],
        retry: { base: "100 millis", max: "5 seconds" }
      })
      const { id } = yield* Client.enqueue(flaky, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* eventually("failed", Effect.map(readRun(stores, id), (r) => r.state === "failed"))
      const record = yield* stores.a.get(id)
      assert.strictEqual(record.attempt, 3)
      assert.strictEqual(record.fence, 3)
      assert.match(String((record.error as any).message), /attempt 3 broke/)
      const history = yield* stores.a.history(id)
      assert.deepStrictEqual(history.map((e) => e.kind), [
        "claimed",
        "retry_scheduled",
        "claimed",
        "retry_scheduled",
        "claimed",
        "failed"
      ])
      // Exponential: the second wait is longer than the first (jitter is ±20%, the factor is 2).
      const claims = history.filter((e) => e.kind === "claimed").map((e) => e.at.getTime())
      const fails = history.filter((e) => e.kind !== "claimed").map((e) => e.at.getTime())
      const firstWait = claims[1]! - fails[0]!
      const secondWait = claims[2]! - fails[1]!
      assert.isAtLeast(firstWait, 75)
      assert.isAbove(secondWait, firstWait)
    }))

  it.live("a handler's own retry Schedule overrides the worker's backoff, and its end fails the run while attempts remain", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const flaky = Handler.make({
        kind: "flaky",
        payload: Schema.Unknown,
        maxAttempts: 5,
        // Two retries, 300 ms apart; the worker's own backoff (a minute) would not retry in time.
        retry: Schedule.spaced("300 millis").pipe(Schedule.upTo({ times: 2 })),
        handle: () => Effect.flatMap(CurrentRun, (run) => Effect.fail(new Error(`attempt ${run.attempt} broke`)))
      })
      yield* startWorker(stores.a, stores.sql, {
        ...fast,
        ttl: "20 seconds",
        heartbeat: "3 seconds",
        handlers: [flaky],
        retry: { base: "1 minute", max: "1 hour" }
      })
      const { id } = yield* Client.enqueue(flaky, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* eventually("failed", Effect.map(readRun(stores, id), (r) => r.state === "failed"))
      const record = yield* stores.a.get(id)
      assert.deepInclude(record, { attempt: 3, maxAttempts: 5 })
      assert.match(String((record.error as any).message), /attempt 3 broke/)
      const history = yield* stores.a.history(id)
      assert.deepStrictEqual(history.map((e) => e.kind), [
        "claimed",
        "retry_scheduled",
        "claimed",
        "retry_scheduled",
        "claimed",
        "failed"
      ])
      // Each retry was due 300 ms after its failure, by the database's clock (run_at = now() + delay).
      for (const event of history.filter((e) => e.kind === "retry_scheduled")) {
        const runAt = new Date((event.detail as { runAt: string }).runAt).getTime()
        assert.approximately(runAt - event.at.getTime(), 300, 5)
      }
    }))

  it.live("Run.snooze ends the attempt without failing it: due again after its delay, the attempt not counted", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const patient = Handler.make({
        kind: "patient",
        payload: Schema.Unknown,
        maxAttempts: 1,
        handle: () =>
          Effect.gen(function*() {
            const run = yield* CurrentRun
            if (run.checkpoint === null) {
              yield* Run.checkpoint({ waited: 1 })
              // Caught errors cannot keep the handler going: the snooze stops it as an interruption.
              yield* Run.snooze("400 millis").pipe(Effect.catch(() => Effect.void))
              return "not reached"
            }
            return { attempt: run.attempt, checkpoint: run.checkpoint }
          })
      })
      // A lease long enough that a loaded machine's slow claim does not lose it: this is about snoozing.
      const events = yield* startWorker(stores.a, stores.sql, {
        ...fast,
        ttl: "20 seconds",
        heartbeat: "3 seconds",
        handlers: [patient]
      })
      const { id } = yield* Client.enqueue(patient, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed"), "30 seconds")
      const record = yield* stores.a.get(id)
      const history = yield* stores.a.history(id)
      // maxAttempts 1, yet the run ran twice: the snoozed attempt did not count.
      assert.deepInclude(record, { attempt: 1, fence: 2, result: { attempt: 1, checkpoint: { waited: 1 } } })
      assert.deepStrictEqual(history.map((e) => `${e.kind}@${e.fence}`), [
        "claimed@1",
        "snoozed@1",
        "claimed@2",
        "completed@2"
      ])
      const snoozed = history[1]!
      const runAt = new Date((snoozed.detail as { runAt: string }).runAt).getTime()
      assert.approximately(runAt - snoozed.at.getTime(), 400, 5)
      assert.isAtLeast(history[2]!.at.getTime(), runAt, "claimed again only once due")
      const settled = events.filter((e): e is Extract<Event, { _tag: "RunSettled" }> => e._tag === "RunSettled")
      assert.deepStrictEqual(settled.map((e) => e.outcome), ["snoozed", "completed"])
    }))

  it.live("a payload that no longer matches its schema fails the run at once, without retries", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* startWorker(stores.a, stores.sql, { ...fast, handlers: [approval] })
      const [bad] = yield* stores.a.enqueue([{ kind: "approval", payload: { amount: "lots" }, maxAttempts: 5 }])
      yield* eventually("failed", Effect.map(readRun(stores, bad!.id), (r) => r.state === "failed"))
      const record = yield* stores.a.get(bad!.id)
      assert.strictEqual(record.attempt, 1)
      assert.isTrue((record.error as any).permanent)
    }))

  it.live("cancelling a running run interrupts its handler and supersedes its fence", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const interrupted = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const longJob = Handler.make({
        kind: "job",
        payload: Schema.Unknown,
        handle: () =>
          Effect.andThen(Deferred.succeed(started, undefined), Effect.never).pipe(
            Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
          )
      })
      const events = yield* startWorker(stores.a, stores.sql, {
        ...fast,
        ttl: "30 seconds",
        heartbeat: "10 seconds",
        handlers: [longJob]
      })
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      yield* Deferred.await(started)
      // Notifications are a fast path: a cancel sent before the worker listens waits for a heartbeat.
      yield* eventually("listening", Effect.sync(() => events.some((e) => e._tag === "Listening")))
      yield* Client.cancel(run!.id).pipe(Effect.provideService(RunStore, stores.a))
      // The heartbeat is 10 s away: the cancel notification is what interrupts the handler.
      yield* Deferred.await(interrupted).pipe(Effect.timeout("3 seconds"))
      const row = yield* readRun(stores, run!.id)
      assert.strictEqual(row.state, "cancelled")
      assert.strictEqual(row.fence, 2)
      assert.deepInclude(events.find((e) => e._tag === "LeaseLost"), { reason: "cancelled" })
      const finished = yield* Effect.flip(stores.a.cancel(run!.id))
      assert.deepInclude(finished, { _tag: "InvalidTransition", state: "cancelled" })
      // Retry puts it back with a still higher fence. The worker is still running and may claim
      // it again at once, so read the fence the retry granted from the history, not the row.
      yield* stores.a.retry(run!.id)
      const retried = (yield* stores.a.history(run!.id)).find((e) => e.kind === "retried")
      assert.strictEqual(retried?.fence, 3)
      // And the retried run is claimable: the worker takes it under the next fence.
      yield* eventually(
        "reclaimed after retry",
        Effect.map(stores.a.history(run!.id), (h) => h.some((e) => e.kind === "claimed" && e.fence === 4))
      )
    }))
})

describe("clocks", () => {
  const skewed = (offsetMs: number) =>
    Effect.map(Clock.Clock, (clock): Clock.Clock => ({
      ...clock,
      currentTimeMillisUnsafe: () => clock.currentTimeMillisUnsafe() + offsetMs,
      currentTimeMillis: Effect.sync(() => clock.currentTimeMillisUnsafe() + offsetMs),
      currentTimeNanosUnsafe: () => clock.currentTimeNanosUnsafe() + BigInt(offsetMs) * 1_000_000n,
      currentTimeNanos: Effect.sync(() => clock.currentTimeNanosUnsafe() + BigInt(offsetMs) * 1_000_000n),
      sleep: clock.sleep.bind(clock),
      monotonicTimeNanosUnsafe: () => clock.monotonicTimeNanosUnsafe(),
      monotonicTimeNanos: clock.monotonicTimeNanos
    }))

  it.live("a worker whose clock is ten minutes ahead does not take a live lease", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      const [held] = yield* stores.a.claim({
        owner: "holder",
        queues: ["default"],
        kinds: ["job"],
        limit: 1,
        ttl: Duration.minutes(1)
      })
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const clock = yield* skewed(10 * 60_000)
      const events = yield* startWorker(stores.b, stores.sql, { ...fast, handlers: [job] }).pipe(
        Effect.provideService(Clock.Clock, clock)
      )
      yield* Effect.sleep("600 millis")
      assert.isEmpty(events.filter((e) => e._tag === "Claimed"))
      const row = yield* readRun(stores, run!.id)
      assert.strictEqual(row.lease_owner, "holder")
      assert.strictEqual(row.fence, held!.fence)
    }))

  it.live("a worker whose clock is ten minutes behind gets no stale write through", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const superseded = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const outcome = yield* Ref.make<unknown>(undefined)
      const job = Handler.make({
        kind: "job",
        payload: Schema.Unknown,
        handle: () =>
          Effect.gen(function*() {
            yield* Deferred.succeed(started, undefined)
            yield* Deferred.await(superseded)
            // By its own clock this worker's lease is nowhere near expiry.
            const result = yield* Effect.flip(Run.checkpoint({ late: true }))
            yield* Ref.set(outcome, result)
            return "late result"
          })
      })
      const clock = yield* skewed(-10 * 60_000)
      const events = yield* startWorker(stores.a, stores.sql, {
        ...fast,
        ttl: "30 seconds",
        heartbeat: "10 seconds",
        // Its one slot stays taken by the run, so it cannot race "other" to reclaim it once expired.
        concurrency: 1,
        handlers: [job]
      }).pipe(Effect.provideService(Clock.Clock, clock))
      const [run] = yield* stores.a.enqueue([{ kind: "job", payload: null }])
      yield* Deferred.await(started)
      yield* expireLease(stores, run!.id)
      yield* stores.b.claim({ owner: "other", queues: ["default"], kinds: ["job"], limit: 1, ttl: Duration.minutes(1) })
      yield* Deferred.succeed(superseded, undefined)
      yield* eventually("settled", Effect.sync(() => events.some((e) => e._tag === "RunSettled")))
      const rejected = yield* Ref.get(outcome)
      assert.instanceOf(rejected, FenceRejected)
      assert.deepInclude(rejected, { presentedFence: 1, storedFence: 2, operation: "checkpoint" })
      assert.deepInclude(events.find((e) => e._tag === "WriteRejected"), {
        operation: "complete",
        presentedFence: 1,
        storedFence: 2
      })
      const row = yield* readRun(stores, run!.id)
      assert.strictEqual(row.state, "running")
      assert.strictEqual(row.lease_owner, "other")
      assert.strictEqual((yield* stores.a.get(run!.id)).checkpoint, null)
    }))
})

describe("wake-ups and capacity", () => {
  it.live("a new run wakes an idle worker through LISTEN/NOTIFY, long before its next poll", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const events = yield* startWorker(stores.a, stores.sql, { ...fast, pollInterval: "1 minute", handlers: [job] })
      // Once it listens, the worker has made its first (empty) claim and idles on its one-minute poll.
      yield* eventually("listening", Effect.sync(() => events.some((e) => e._tag === "Listening")))
      yield* Effect.sleep("200 millis")
      const [run] = yield* stores.b.enqueue([{ kind: "job", payload: null }])
      yield* eventually(
        "claimed",
        Effect.sync(() => events.some((e) => e._tag === "Claimed" && e.runId === run!.id)),
        "10 seconds"
      )
    }))

  it.live("a run enqueued after the worker's first claim but before its LISTEN is up is claimed when it listens, not at its next poll", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      let claims = 0
      const listenGate = yield* Deferred.make<void>()
      // The store's notifications reach the worker only once the gate opens, as a slow LISTEN would.
      const slowListen: RunStore["Service"] = {
        ...stores.a,
        claim: (request) => Effect.tap(stores.a.claim(request), () => Effect.sync(() => void claims++)),
        notifications: Stream.unwrap(Effect.as(Deferred.await(listenGate), stores.a.notifications))
      }
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const events = yield* startWorker(slowListen, stores.sql, { ...fast, pollInterval: "1 minute", handlers: [job] })
      yield* eventually("first claim", Effect.sync(() => claims >= 1))
      // Announced while the worker does not listen: its notification reaches no one here.
      const [run] = yield* stores.b.enqueue([{ kind: "job", payload: null }])
      yield* Effect.sleep("200 millis")
      assert.isFalse(events.some((e) => e._tag === "Claimed"), "claimed before the worker listened")
      yield* Deferred.succeed(listenGate, undefined)
      yield* eventually(
        "claimed",
        Effect.sync(() => events.some((e) => e._tag === "Claimed" && e.runId === run!.id)),
        "10 seconds"
      )
    }))

  it.live("claims woken by notifications look at due runs only, and expired leases are still swept every poll interval", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      // Each claim, and whether it was a sweep that took only expired leases (the worker sweeps
      // again at once after such a sweep: it may have left more behind).
      const claims: Array<{ dueOnly: boolean; at: number; onlyReclaims: boolean }> = []
      const recording: RunStore["Service"] = {
        ...stores.a,
        claim: (request) =>
          Effect.suspend(() => {
            const claim = { dueOnly: request.dueOnly === true, at: performance.now(), onlyReclaims: false }
            claims.push(claim)
            return Effect.tap(stores.a.claim(request), (runs) =>
              Effect.sync(() => {
                claim.onlyReclaims = !claim.dueOnly && runs.length > 0 && runs.every((run) => run.via !== "due")
              }))
          })
      }
      // A run whose holder vanished: claimed under a short lease that nobody renews.
      const [abandoned] = yield* stores.b.enqueue([{ kind: "job", payload: null }])
      yield* stores.b.claim({
        owner: "vanished",
        queues: ["default"],
        kinds: ["job"],
        limit: 1,
        ttl: Duration.millis(300)
      })
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const events = yield* startWorker(recording, stores.sql, { ...fast, pollInterval: "400 millis", handlers: [job] })
      // Keep the worker busy with notifications: a new run every 25 ms.
      yield* Effect.forkScoped(
        Effect.forever(Effect.andThen(stores.b.enqueue([{ kind: "job", payload: null }]), Effect.sleep("25 millis")))
      )

      yield* eventually(
        "the abandoned run reclaimed under fence 2",
        Effect.sync(() => events.some((e) => e._tag === "Claimed" && e.runId === abandoned!.id && e.fence === 2)),
        "10 seconds"
      )
      yield* eventually(
        "a second of busy claiming",
        Effect.sync(() => claims.length > 0 && performance.now() - claims[0]!.at > 1_000)
      )
      const snapshot = [...claims]
      const sweeps = snapshot.filter((c) => !c.dueOnly)
      assert.isAbove(snapshot.length - sweeps.length, sweeps.length, "most claims are due-only")
      assert.isAtLeast(sweeps.length, 2)
      // Sweeps are spaced by at least the poll interval (measured on another clock: 5 ms of slack),
      // but for the one that follows a sweep which took only expired leases.
      for (let i = 1; i < sweeps.length; i++) {
        if (!sweeps[i - 1]!.onlyReclaims) assert.isAtLeast(sweeps[i]!.at - sweeps[i - 1]!.at, 395)
      }
    }))

  it.live("without notifications, a keyed run's end wakes a claim for its key's next run long before the next poll; with them, it sends no claim", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      // Two kinds at one running run per key: each worker below takes one kind.
      yield* stores.a.setKeyLimits([KeyLimits.perKind("job", 1), KeyLimits.perKind("mail", 1)])
      // The first run of K fails for good: the row trigger hands K's slot to the second, which
      // is announced but not claimed by anyone.
      const job = Handler.make({
        kind: "job",
        payload: Schema.Struct({ fail: Schema.Boolean }),
        handle: ({ fail }) => fail ? Effect.fail(new Error("no")) : Effect.void
      })
      const keyed = (fail: boolean) => ({ kind: "job", payload: { fail }, concurrencyKey: "K", maxAttempts: 1 })
      const ran = (events: ReadonlyArray<Event>, id: string) =>
        events.some((e) => e._tag === "Claimed" && e.runId === id)

      // Notifications off (as through a pooler without a listen URL), a one-minute poll.
      const deaf: RunStore["Service"] = { ...stores.a, notifications: Stream.empty }
      const [first, second] = yield* stores.b.enqueue([keyed(true), keyed(false)])
      const events = yield* startWorker(deaf, stores.sql, { ...fast, pollInterval: "1 minute", handlers: [job] })
      yield* eventually(
        "the key's next run claimed, long before the next poll",
        Effect.sync(() => ran(events, second!.id)),
        "10 seconds"
      )
      assert.isTrue(ran(events, first!.id))

      // Listening: the keyed run's end sends no claim (the hand-off claims or announces the next).
      // (Runs of another kind, which the first worker does not take.)
      // L's first run ends only once the worker listens (before that, the worker wakes itself).
      const listens = yield* Deferred.make<void>()
      const mail = Handler.make({
        kind: "mail",
        payload: Schema.Struct({ i: Schema.Number }),
        handle: ({ i }) => i === 0 ? Deferred.await(listens) : Effect.void
      })
      const claims: Array<boolean> = []
      const counting: RunStore["Service"] = {
        ...stores.a,
        claim: (request) =>
          Effect.andThen(Effect.sync(() => void claims.push(request.dueOnly === true)), stores.a.claim(request))
      }
      const [third, fourth] = yield* stores.b.enqueue(
        [0, 1].map((i) => ({ kind: "mail", payload: { i }, concurrencyKey: "L" }))
      )
      const listening = yield* startWorker(counting, stores.sql, {
        ...fast,
        pollInterval: "1 minute",
        handlers: [mail]
      })
      yield* eventually("listening", Effect.sync(() => listening.some((e) => e._tag === "Listening")))
      // The first sweep, and the claim the worker makes once it listens (for runs announced before).
      yield* eventually("the claim on listening", Effect.sync(() => claims.length === 2))
      yield* Deferred.succeed(listens, undefined)
      yield* eventually(
        "both runs of L ran",
        Effect.sync(() => ran(listening, third!.id) && ran(listening, fourth!.id)),
        "10 seconds"
      )
      yield* Effect.sleep("300 millis")
      assert.deepStrictEqual(
        claims,
        [false, true],
        "no claim after listening: L's second run came with its first's completion"
      )
    }))

  it.live("a keyed completion claims its key's next run for its worker; one that answers after shutdown began gives it back", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* stores.a.setKeyLimits([KeyLimits.perKind("job", 1)])
      const gate = yield* Ref.make<Deferred.Deferred<void> | undefined>(undefined)
      const claimedByClaims: Array<string> = []
      // Claims are recorded; a completion statement waits while a gate is set.
      const store: RunStore["Service"] = {
        ...stores.a,
        claim: (request) =>
          Effect.tap(
            stores.a.claim(request),
            (runs) => Effect.sync(() => void claimedByClaims.push(...runs.map((r) => r.id)))
          ),
        completeBatch: (items, next) =>
          Effect.andThen(
            Effect.flatMap(Ref.get(gate), (g) => g === undefined ? Effect.void : Deferred.await(g)),
            stores.a.completeBatch(items, next)
          )
      }
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const events: Array<Event> = []
      const worker = yield* Worker.run({ ...fast, concurrency: 4, handlers: [job] }).pipe(
        Effect.provideService(RunStore, store),
        Effect.provideService(SqlClient.SqlClient, stores.sql),
        Effect.provideService(WorkerEvents.WorkerEvents, {
          emit: (event) => Effect.sync(() => void events.push(event))
        }),
        Effect.forkScoped
      )
      const [a, b] = yield* stores.a.enqueue([{ kind: "job", payload: 1, concurrencyKey: "K" }, {
        kind: "job",
        payload: 2,
        concurrencyKey: "K"
      }])
      yield* eventually("both completed", Effect.map(readRun(stores, b!.id), (r) => r.state === "completed"))
      assert.include(claimedByClaims, a!.id)
      assert.notInclude(claimedByClaims, b!.id, "b was claimed by a's completion, not by a claim")
      assert.isTrue(events.some((e) => e._tag === "Claimed" && e.runId === b!.id))

      // c's completion waits at the gate while the worker shuts down; d, claimed by it, is given back.
      const held = yield* Deferred.make<void>()
      yield* Ref.set(gate, held)
      const [c, d] = yield* stores.a.enqueue([{ kind: "job", payload: 3, concurrencyKey: "K" }, {
        kind: "job",
        payload: 4,
        concurrencyKey: "K"
      }])
      yield* eventually(
        "c ran and its completion waits",
        Effect.sync(() =>
          events.some((e) => e._tag === "RunSettled" && e.runId === c!.id) || claimedByClaims.includes(c!.id)
        )
      )
      yield* Effect.sleep("100 millis")
      const stopping = yield* Effect.forkScoped(Fiber.interrupt(worker))
      yield* Effect.sleep("300 millis")
      yield* Deferred.succeed(held, undefined)
      yield* Fiber.join(stopping)
      assert.strictEqual((yield* readRun(stores, c!.id)).state, "completed")
      const dRun = yield* readRun(stores, d!.id)
      assert.deepInclude(
        dRun,
        { state: "pending", lease_owner: null },
        "d was claimed by c's completion during the shutdown and given back"
      )
      assert.strictEqual(dRun.fence, 1)
    }))

  it.live("a slot is freed only once its completion is acknowledged by the flush", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const flushGate = yield* Deferred.make<void>()
      const flushes: Array<number> = []
      // The completion statement waits until the test opens the gate.
      const gated: RunStore["Service"] = {
        ...stores.a,
        completeBatch: (items) =>
          Effect.andThen(
            Effect.sync(() => void flushes.push(items.length)),
            Effect.andThen(Deferred.await(flushGate), stores.a.completeBatch(items))
          )
      }
      const job = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const events = yield* startWorker(gated, stores.sql, { ...fast, concurrency: 1, handlers: [job] })
      const [first, second] = yield* stores.a.enqueue([{ kind: "job", payload: null }, { kind: "job", payload: null }])
      yield* eventually("first completion sent", Effect.sync(() => flushes.length === 1))
      // The handler is done, but its completion is not acknowledged: the one slot stays taken, and
      // the lease is still renewed (for more than two TTLs), so nobody reclaims the run meanwhile.
      yield* Effect.sleep("2500 millis")
      assert.deepStrictEqual(events.filter((e) => e._tag === "Claimed").map((e) => (e as any).runId), [first!.id])
      assert.deepInclude(yield* readRun(stores, first!.id), { state: "running", fence: 1 })
      assert.isUndefined(events.find((e) => e._tag === "LeaseLost"))
      yield* Deferred.succeed(flushGate, undefined)
      yield* eventually(
        "second claimed after the ack",
        Effect.sync(() => events.some((e) => e._tag === "Claimed" && e.runId === second!.id))
      )
      yield* eventually("both completed", Effect.map(readRun(stores, second!.id), (r) => r.state === "completed"))
      assert.strictEqual((yield* readRun(stores, first!.id)).state, "completed")
    }))
})
