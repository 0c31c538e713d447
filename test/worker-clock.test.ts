/**
 * The worker's timing logic on `MemoryRunStore` under `TestClock`: heartbeats, lost and unconfirmed
 * renewals, the deadline watchdog, the sweep cadence and slot release, with time moved by
 * `TestClock.adjust` only (no sleep on the real clock). The store reads the same clock, so a lease
 * the worker stops renewing expires in the store exactly when the test moves time past it. The
 * real-clock versions against PostgreSQL are in `worker.test.ts`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Handler, type LeaseKey, MemoryRunStore, RateLimits, RunStore, Worker, WorkerEvents } from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Cause, Clock, Deferred, Duration, Effect, Exit, Fiber, Schedule, Schema } from "effect"
import { TestClock } from "effect/testing"
import { spyOnRenewals } from "./support/workers.js"

type Event = WorkerEvents.WorkerEvent
type Store = RunStore["Service"]

/** Lets every fiber that can run without time passing run (claims, handlers, flushes). */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 50; i++) yield* Effect.yieldNow
})

/**
 * Starts a worker on `store`, recording its events. `stop` shuts it down gracefully, moving time
 * while it waits for its grace period; it also runs when the test's scope closes (a failed test
 * must not leave the scope waiting on a clock nobody moves).
 */
const startWorker = (
  store: Store,
  options: Worker.WorkerOptions<never>,
  /** What emitting an event does after it is recorded (a test may make it stall). */
  after: (event: Event) => Effect.Effect<void> = () => Effect.void
) =>
  Effect.gen(function*() {
    const events: Array<Event> = []
    const clock = yield* TestClock.testClockWith(Effect.succeed)
    const emit = (event: Event) => Effect.andThen(Effect.sync(() => void events.push(event)), after(event))
    const fiber = yield* Worker.run(options).pipe(
      Effect.provideService(RunStore, store),
      Effect.provideService(WorkerEvents.WorkerEvents, { emit }),
      Effect.forkDetach
    )
    const stop = Effect.gen(function*() {
      if (fiber.pollUnsafe() !== undefined) return
      const stopping = yield* Effect.forkDetach(Fiber.interrupt(fiber))
      for (let i = 0; i < 600 && stopping.pollUnsafe() === undefined; i++) yield* clock.adjust("100 millis")
      assert.isDefined(stopping.pollUnsafe(), "the worker did not stop")
    })
    yield* Effect.addFinalizer(() => Effect.orDie(stop))
    // Lets the worker make its first claim and subscribe.
    yield* settle
    return { events, stop }
  })

const of = <T extends Event["_tag"]>(events: ReadonlyArray<Event>, tag: T) =>
  events.filter((e): e is Extract<Event, { _tag: T }> => e._tag === tag)

const now = Effect.map(Clock.currentTimeMillis, Number)

/** A handler that runs until interrupted, reporting when it started and when it was interrupted. */
const blocking = Effect.gen(function*() {
  const started: Array<string> = []
  const interrupted: Array<string> = []
  const handler = Handler.make({
    kind: "job",
    payload: Schema.Struct({ n: Schema.Number }),
    handle: ({ n }) =>
      Effect.andThen(Effect.sync(() => void started.push(String(n))), Effect.never).pipe(
        Effect.onInterrupt(() => Effect.sync(() => void interrupted.push(String(n))))
      )
  })
  return { handler, started, interrupted }
})

const jobs = (count: number) => Array.from({ length: count }, (_, n) => ({ kind: "job", payload: { n } }))

const timing = {
  ttl: "30 seconds",
  heartbeat: "10 seconds",
  pollInterval: "1 second",
  shutdownGrace: "1 second"
} as const

describe("heartbeat", () => {
  it.effect("one renewal per interval carries every lease, and keeps them held in the store past their first TTL", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const { renewals, spy } = spyOnRenewals(store)
      const { handler, started } = yield* blocking
      yield* store.enqueue(jobs(5))
      const { events, stop } = yield* startWorker(spy, { ...timing, concurrency: 5, handlers: [handler] })
      assert.strictEqual(started.length, 5)
      yield* TestClock.adjust("9999 millis")
      assert.isEmpty(renewals, "nothing before the first interval")
      for (let interval = 1; interval <= 4; interval++) {
        yield* TestClock.adjust("10 seconds")
        assert.strictEqual(renewals.length, interval, `one renewal per interval (interval ${interval})`)
        assert.strictEqual(renewals.at(-1)!.length, 5)
      }
      // 40 s in: every lease outlived its 30 s TTL because each renewal was confirmed.
      assert.strictEqual((yield* store.stats).liveLeases, 5)
      assert.isEmpty(of(events, "LeaseLost"))
      assert.deepStrictEqual(of(events, "Claimed").map((c) => c.fence), [1, 1, 1, 1, 1])
      yield* stop
    }))

  it.effect("a renewal that fails interrupts its run's handler at once, and the run is released", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const { failRenewals, spy } = spyOnRenewals(store)
      const { handler, interrupted } = yield* blocking
      const [run] = yield* store.enqueue(jobs(1))
      const { events, stop } = yield* startWorker(spy, { ...timing, handlers: [handler] })
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(of(events, "HeartbeatConfirmed").length, 1)
      failRenewals()
      yield* TestClock.adjust("9999 millis")
      assert.isEmpty(interrupted, "nothing happens before the renewal is sent")
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(of(events, "HeartbeatFailed").length, 1)
      assert.deepStrictEqual(interrupted, ["0"])
      assert.deepInclude(of(events, "LeaseLost")[0], { runId: run!.id, fence: 1, reason: "renewal-failed" })
      assert.deepInclude(of(events, "RunSettled")[0], { runId: run!.id, outcome: "released" })
      // Released with its attempt refunded, and (announced) claimed again at once under fence 2.
      yield* settle
      assert.deepStrictEqual((yield* store.history(run!.id)).map((e) => `${e.kind}@${e.fence}`), [
        "claimed@1",
        "released@1",
        "claimed@2"
      ])
      assert.deepInclude(yield* store.get(run!.id), { state: "running", fence: 2, attempt: 1 })
      yield* stop
    }))

  it.effect("a renewal that comes back without a lease interrupts that run only; the fence has moved on, so nothing is released", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      let dropped: string | undefined
      // The store answers without one lease, as it does when another claim superseded it.
      const dropping: Store = {
        ...store,
        renew: (owner, leases, ttl) =>
          Effect.map(store.renew(owner, leases, ttl), (renewed) => renewed.filter((l) => l.runId !== dropped))
      }
      const { handler, interrupted } = yield* blocking
      const [first, second] = yield* store.enqueue(jobs(2))
      const { events, stop } = yield* startWorker(dropping, { ...timing, handlers: [handler] })
      dropped = first!.id
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(interrupted, ["0"])
      const confirmed = of(events, "HeartbeatConfirmed")
      assert.deepStrictEqual(confirmed.map((c) => [c.renewed.map((l) => l.runId), c.lost.map((l) => l.runId)]), [[[
        second!.id
      ], [first!.id]]])
      assert.deepInclude(of(events, "LeaseLost")[0], { runId: first!.id, fence: 1, reason: "superseded" })
      assert.deepInclude(of(events, "RunSettled")[0], { runId: first!.id, outcome: "abandoned" })
      assert.deepInclude(
        yield* store.get(first!.id),
        { state: "running", fence: 1 },
        "no release under a superseded lease"
      )
      assert.deepInclude(yield* store.get(second!.id), { state: "running", fence: 1 })
      yield* stop
    }))

  it.effect("a renewal that never answers stops the run exactly at its local deadline, not later", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const unstuck = yield* Deferred.make<void>()
      const sent: Array<number> = []
      // A renewal lost on a silent connection: it neither answers nor can be interrupted until the
      // test lets it go.
      const silent: Store = {
        ...store,
        renew: (owner, leases, ttl) =>
          Effect.gen(function*() {
            sent.push(yield* now)
            if (sent.length === 1) return yield* store.renew(owner, leases, ttl)
            yield* Effect.uninterruptible(Deferred.await(unstuck))
            return [] as ReadonlyArray<LeaseKey>
          })
      }
      const { handler, interrupted } = yield* blocking
      const [run] = yield* store.enqueue(jobs(1))
      const { events, stop } = yield* startWorker(silent, { ...timing, handlers: [handler] })
      // Claimed at 0; renewed at 10 s (local deadline 40 s); the renewal sent at 20 s never answers.
      yield* TestClock.adjust("39999 millis")
      assert.deepStrictEqual(sent, [10_000, 20_000])
      assert.isEmpty(interrupted, "the lease is still held until its local deadline")
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(interrupted, ["0"])
      // Whichever notices first at the deadline (the renewal's own bound or the watchdog) stops it.
      const [lost] = of(events, "LeaseLost")
      assert.deepInclude(lost, { runId: run!.id, fence: 1 })
      assert.include(["renewal-failed", "deadline"], lost!.reason)
      assert.deepInclude(of(events, "RunSettled")[0], { runId: run!.id, outcome: "released" })
      yield* Deferred.succeed(unstuck, undefined)
      yield* stop
    }))

  it.effect("the watchdog interrupts a run whose renewal is not confirmed by its local deadline when the heartbeat itself stalls", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const { renewals, spy } = spyOnRenewals(store)
      const { handler, interrupted } = yield* blocking
      const [run] = yield* store.enqueue(jobs(1))
      // The heartbeat fiber stalls before its second renewal (here: its event sink never returns),
      // so no renewal is sent, fails or times out: only the watchdog can notice.
      let sentEvents = 0
      const { events, stop } = yield* startWorker(
        spy,
        { ...timing, handlers: [handler] },
        (event) => event._tag === "HeartbeatSent" && ++sentEvents === 2 ? Effect.never : Effect.void
      )
      yield* TestClock.adjust("39999 millis")
      assert.strictEqual(renewals.length, 1, "one renewal, at 10 s (local deadline 40 s)")
      assert.isEmpty(interrupted)
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(interrupted, ["0"])
      assert.deepStrictEqual(of(events, "LeaseLost").map((l) => [l.runId, l.fence, l.reason]), [[
        run!.id,
        1,
        "deadline"
      ]])
      assert.isEmpty(of(events, "HeartbeatFailed"))
      assert.deepInclude(of(events, "RunSettled")[0], { runId: run!.id, outcome: "released" })
      yield* stop
    }))
})

/**
 * A worker on a controlled memory store whose queue has a claim position: a due-only claim has
 * taken one run, at 1.5 s. `behind(count)` enqueues runs made due 10 s before that position (as
 * runs enqueued by a transaction that began long ago are).
 */
const positionedWorker = (concurrency: number) =>
  Effect.gen(function*() {
    const controlled = yield* MemoryRunStore.makeControlled
    const store = controlled.store
    const quick = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
    const { events, stop } = yield* startWorker(store, { ...timing, concurrency, handlers: [quick] })
    yield* TestClock.adjust("1500 millis")
    yield* store.enqueue(jobs(1))
    yield* settle
    const behind = (count: number) =>
      Effect.gen(function*() {
        const runs = yield* store.enqueue(
          Array.from({ length: count }, (_, n) => ({ kind: "job", payload: { n }, delayMs: 3_600_000 }))
        )
        const at = new Date((yield* now) - 10_000)
        for (const run of runs) yield* controlled.moveTime(run.id, "runAt", at)
        return runs
      })
    return { store, events, stop, behind }
  })

describe("claims", () => {
  it.effect("a run made due behind the queue's claim position is passed over by due-only claims and taken by the next sweep", () =>
    Effect.gen(function*() {
      const { behind: makeBehind, events, stop, store } = yield* positionedWorker(4)
      // A run made due behind the queue's position, then a new run whose notification wakes a
      // due-only claim.
      const [behind] = yield* makeBehind(1)
      const [ahead] = yield* store.enqueue([{ kind: "job", payload: { n: 2 } }])
      yield* settle
      const claimedAt = () => new Map(of(events, "Claimed").map((c) => [c.runId, c]))
      assert.isTrue(claimedAt().has(ahead!.id), "the new run was taken at once")
      assert.isFalse(claimedAt().has(behind!.id), "the run behind the position waits for a sweep")
      const batchesBefore = of(events, "ClaimBatch").length
      // The next sweep (the last was at 1 s, the interval is 1 s) reads the queue from its head.
      yield* TestClock.adjust("1000 millis")
      assert.isTrue(claimedAt().has(behind!.id), "the sweep took it")
      const sweep = of(events, "ClaimBatch").slice(batchesBefore).find((b) => b.count > 0)
      assert.deepInclude(sweep, { sweep: true, count: 1 })
      yield* stop
    }))

  it.effect("a backlog made due behind the position is read from the head after the sweep that meets it, not one sweep at a time", () =>
    Effect.gen(function*() {
      const { behind, events, stop } = yield* positionedWorker(2)
      // Six runs made due behind the position (a batch whose enqueue began long ago).
      const backlog = yield* behind(6)
      const sweepsBefore = of(events, "ClaimBatch").filter((b) => b.sweep).length
      // One sweep (concurrency 2 lets it take two); the due-only claims their completions ask for
      // then read the queue from its head and take the other four before the next sweep.
      yield* TestClock.adjust("1000 millis")
      yield* settle
      const claimed = new Set(of(events, "Claimed").map((c) => c.runId))
      assert.deepStrictEqual(backlog.filter((r) => !claimed.has(r.id)).map((r) => r.id), [])
      assert.strictEqual(of(events, "ClaimBatch").filter((b) => b.sweep).length - sweepsBefore, 1, "one sweep")
      yield* stop
    }))

  it.effect("expired leases are swept once per poll interval while the claims between are due-only", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const claims: Array<{ readonly at: number; readonly dueOnly: boolean }> = []
      const recording: Store = {
        ...store,
        claim: (request) =>
          Effect.andThen(
            Effect.flatMap(now, (at) => Effect.sync(() => void claims.push({ at, dueOnly: request.dueOnly === true }))),
            store.claim(request)
          )
      }
      // A run whose holder vanished: claimed under a 300 ms lease nobody renews.
      const [abandoned] = yield* store.enqueue(jobs(1))
      yield* store.claim({
        owner: "vanished",
        queues: ["default"],
        kinds: ["job"],
        limit: 1,
        ttl: Duration.millis(300)
      })
      const quick = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.void })
      const { events, stop } = yield* startWorker(recording, { ...timing, concurrency: 4, handlers: [quick] })
      // Busy: a new run every 100 ms, each announced by a notification, for 5 seconds.
      for (let i = 0; i < 50; i++) {
        yield* store.enqueue(jobs(1))
        yield* TestClock.adjust("100 millis")
      }
      const sweeps = claims.filter((c) => !c.dueOnly)
      assert.isAbove(claims.length - sweeps.length, 2 * sweeps.length, "most claims are due-only")
      // The sweep at 1000 ms took the abandoned run and no due run, so the claim after it swept
      // again (it might have left more); that one took a due run, and sweeps were periodic again.
      assert.deepStrictEqual(sweeps.map((s) => s.at), [0, 1000, 1000, 2000, 3000, 4000, 5000])
      // The abandoned run came back through a sweep, never through a due-only claim.
      const reclaim = of(events, "Claimed").find((c) => c.runId === abandoned!.id)
      assert.deepInclude(reclaim, { fence: 2, attempt: 2 })
      assert.deepStrictEqual((yield* store.history(abandoned!.id)).map((e) => `${e.kind}@${e.fence}`), [
        "claimed@1",
        "reclaimed@2",
        "completed@2"
      ])
      assert.isEmpty(of(events, "LeaseLost"))
      yield* stop
    }))

  it.effect("a busy worker gives its freed slots to expired leases before due runs, until a sweep finds no more", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const claims: Array<{ readonly at: number; readonly dueOnly: boolean; readonly limit: number }> = []
      const recording: Store = {
        ...store,
        claim: (request) =>
          Effect.andThen(
            Effect.flatMap(now, (at) =>
              Effect.sync(() => void claims.push({ at, dueOnly: request.dueOnly === true, limit: request.limit }))),
            store.claim(request)
          )
      }
      // Runs of 100 ms each; two slots, so a slot frees every 50 ms or so.
      const work = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.sleep("100 millis") })
      // Six runs whose holder vanished: leases of 500 ms nobody renews.
      const abandoned = yield* store.enqueue(jobs(6))
      yield* store.claim({
        owner: "vanished",
        queues: ["default"],
        kinds: ["job"],
        limit: 6,
        ttl: Duration.millis(500)
      })
      // A backlog much larger than the worker's slots, and more arriving.
      yield* store.enqueue(jobs(100))
      const { events, stop } = yield* startWorker(recording, { ...timing, concurrency: 2, handlers: [work] })
      // The leases expire at 500 ms; the first sweep after that is the poll's, at 1000 ms, with
      // the slots free then. Until 1300 ms (three run lengths later, far from the next poll):
      for (let i = 0; i < 26; i++) yield* TestClock.adjust("50 millis")
      yield* settle
      const reclaims = of(events, "Claimed").filter((c) => c.via === "expired")
      assert.deepStrictEqual(
        reclaims.map((c) => c.runId).sort(),
        abandoned.map((r) => r.id).sort(),
        "every abandoned run reclaimed"
      )
      assert.deepStrictEqual(reclaims.map((c) => c.fence), [2, 2, 2, 2, 2, 2])
      // No due run was claimed from the first sweep that met an expired lease until the last reclaim.
      const claimedRuns = of(events, "Claimed")
      const first = claimedRuns.findIndex((c) => c.via === "expired")
      const last = claimedRuns.findLastIndex((c) => c.via === "expired")
      assert.deepStrictEqual(
        claimedRuns.slice(first, last + 1).filter((c) => c.via !== "expired").map((c) => c.runId),
        []
      )
      // Each claim from 1000 ms on swept, one or two freed slots each, until one took a due run.
      const since = claims.findIndex((c) => c.at >= 1000)
      const lastSweep = claims.findLastIndex((c) => !c.dueOnly)
      assert.isAtLeast(lastSweep - since + 1, 4, "sweeps kept going while they found expired leases")
      assert.deepStrictEqual(claims.slice(since, lastSweep + 1).filter((c) => c.dueOnly), [])
      assert.isAtMost(claims[lastSweep]!.at, 1300)
      yield* stop
    }))

  it.effect("a slot is freed only once its completion is acknowledged; meanwhile the lease is still renewed", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const gate = yield* Deferred.make<void>()
      const flushed: Array<ReadonlyArray<string>> = []
      const gated: Store = {
        ...store,
        completeBatch: (items) =>
          Effect.andThen(
            Effect.sync(() => void flushed.push(items.map((i) => i.runId))),
            Effect.andThen(Deferred.await(gate), store.completeBatch(items))
          )
      }
      const quick = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.succeed("done") })
      const [first, second] = yield* store.enqueue(jobs(2))
      const { events, stop } = yield* startWorker(gated, {
        ttl: "10 seconds",
        heartbeat: "3 seconds",
        pollInterval: "1 second",
        shutdownGrace: "1 second",
        finalizeTimeout: "5 minutes",
        concurrency: 1,
        handlers: [quick]
      })
      assert.deepStrictEqual(flushed, [[first!.id]])
      // Two and a half TTLs: the handler is done, its completion unanswered, its one slot taken.
      yield* TestClock.adjust("25 seconds")
      assert.deepStrictEqual(of(events, "Claimed").map((c) => c.runId), [first!.id])
      assert.deepInclude(yield* store.get(first!.id), { state: "running", fence: 1 })
      assert.isAtLeast(
        of(events, "HeartbeatConfirmed").filter((h) => h.renewed.some((l) => l.runId === first!.id)).length,
        8
      )
      assert.isEmpty(of(events, "LeaseLost"))
      yield* Deferred.succeed(gate, undefined)
      yield* settle
      assert.deepStrictEqual(of(events, "Claimed").map((c) => c.runId), [first!.id, second!.id])
      assert.deepInclude(yield* store.get(first!.id), { state: "completed", result: "done" })
      assert.deepInclude(yield* store.get(second!.id), { state: "completed", fence: 1 })
      yield* stop
    }))
})

describe("completion writers", () => {
  it.effect("a worker's two completion writers never write runs of one claim at the same time (the claim batch's lock would make them wait for each other)", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      // Which claim each run came from, and the claims of the completion batches being written now.
      const claimOf = new Map<string, number>()
      let claims = 0
      const writing: Array<Set<number>> = []
      const shared: Array<number> = []
      let writes = 0
      let overlapping = 0
      const recording: Store = {
        ...store,
        claim: (request) =>
          Effect.tap(store.claim(request), (runs) =>
            Effect.sync(() => {
              claims++
              for (const run of runs) claimOf.set(run.id, claims)
            })),
        completeBatch: (items, next) =>
          Effect.suspend(() => {
            const mine = new Set(items.map((i) => claimOf.get(i.runId)!))
            if (writing.length > 0) overlapping++
            for (const other of writing) for (const claim of mine) if (other.has(claim)) shared.push(claim)
            writing.push(mine)
            writes++
            return Effect.ensuring(
              Effect.andThen(Effect.sleep("20 millis"), store.completeBatch(items, next)),
              Effect.sync(() => void writing.splice(writing.indexOf(mine), 1))
            )
          })
      }
      const work = Handler.make({
        kind: "job",
        payload: Schema.Struct({ n: Schema.Number }),
        handle: ({ n }) => Effect.sleep(Duration.millis(5 + (n % 7) * 3))
      })
      yield* store.enqueue(jobs(300))
      yield* startWorker(recording, { ...timing, concurrency: 40, maxCompletionBatch: 16, handlers: [work] })
      for (let i = 0; i < 400; i++) {
        yield* TestClock.adjust("5 millis")
        yield* settle
      }
      const completed = yield* store.list({ state: "completed", limit: 500 })
      assert.strictEqual(completed.length, 300)
      assert.isAbove(claims, 1)
      assert.isAbove(overlapping, 0, "the two writers never wrote at the same time: the test shows nothing")
      assert.deepStrictEqual(shared, [], "runs of one claim were written by both writers at once")
      assert.isAbove(writes, 2)
    }))
})

describe("shutdown", () => {
  it.effect("a run still running after the grace is interrupted, and the worker stops only once its finalizers ran and its lease is released", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const started: Array<number> = []
      const cleaned: Array<number> = []
      // The handler's own clean-up takes five seconds: the worker must wait for it and for the
      // release that follows it, not stop while they are under way.
      const slow = Handler.make({
        kind: "job",
        payload: Schema.Struct({ n: Schema.Number }),
        handle: ({ n }) =>
          Effect.andThen(Effect.sync(() => void started.push(n)), Effect.never).pipe(
            Effect.ensuring(Effect.andThen(Effect.sleep("5 seconds"), Effect.sync(() => void cleaned.push(n))))
          )
      })
      const [a, b] = yield* store.enqueue(jobs(2))
      const { events, stop } = yield* startWorker(store, { ...timing, concurrency: 2, handlers: [slow] })
      assert.deepStrictEqual(started, [0, 1])
      const stoppedAt: Array<number> = []
      const stopping = yield* Effect.forkDetach(
        Effect.andThen(stop, Effect.andThen(now, (t) => Effect.sync(() => void stoppedAt.push(t))))
      )
      const begunAt = yield* now
      yield* Fiber.await(stopping)
      assert.deepStrictEqual(cleaned, [0, 1], "each handler's finalizer ran to its end")
      assert.isAtLeast(stoppedAt[0]! - begunAt, 6000, "the grace, then the finalizers' five seconds")
      assert.deepStrictEqual(
        of(events, "LeaseLost").map((l) => [l.runId, l.reason]).sort(),
        [[a!.id, "shutdown"], [b!.id, "shutdown"]].sort()
      )
      assert.deepStrictEqual(
        of(events, "RunSettled").map((s) => [s.runId, s.outcome]).sort(),
        [[a!.id, "released"], [b!.id, "released"]].sort()
      )
      for (const run of [a!, b!]) {
        assert.deepInclude(
          yield* store.get(run.id),
          { state: "pending", leaseOwner: null, fence: 1, attempt: 0 },
          "released before the worker stopped"
        )
      }
    }))

  it.effect("with no event sink (nothing listens), a worker of one slot still runs every run in turn and frees its slot after each completion", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const ran: Array<number> = []
      const quick = Handler.make({
        kind: "job",
        payload: Schema.Struct({ n: Schema.Number }),
        handle: ({ n }) => Effect.sync(() => void ran.push(n))
      })
      const runs = yield* store.enqueue(jobs(4))
      // No WorkerEvents provided: the default, silent sink.
      const fiber = yield* Worker.run({ ...timing, concurrency: 1, handlers: [quick] }).pipe(
        Effect.provideService(RunStore, store),
        Effect.forkDetach
      )
      for (let i = 0; i < 20 && ran.length < 4; i++) {
        yield* settle
        yield* TestClock.adjust("100 millis")
      }
      assert.deepStrictEqual(ran, [0, 1, 2, 3])
      for (const run of runs) assert.deepInclude(yield* store.get(run.id), { state: "completed", fence: 1 })
      const stopping = yield* Effect.forkDetach(Fiber.interrupt(fiber))
      for (let i = 0; i < 50 && stopping.pollUnsafe() === undefined; i++) yield* TestClock.adjust("100 millis")
      assert.isDefined(stopping.pollUnsafe(), "the worker did not stop")
    }))

  it.effect("an event sink that throws on every claim report strands no run and stops no claiming: each run is started and completed", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const ran: Array<number> = []
      const quick = Handler.make({
        kind: "job",
        payload: Schema.Struct({ n: Schema.Number }),
        handle: ({ n }) => Effect.sync(() => void ran.push(n))
      })
      const runs = yield* store.enqueue(jobs(6))
      const throwing = (event: Event) =>
        event._tag === "Claimed" || event._tag === "ClaimBatch" ? Effect.die(new Error("the sink threw")) : Effect.void
      const { events } = yield* startWorker(store, { ...timing, concurrency: 2, handlers: [quick] }, throwing)
      for (let i = 0; i < 30 && ran.length < 6; i++) {
        yield* settle
        yield* TestClock.adjust("100 millis")
      }
      assert.deepStrictEqual([...ran].sort(), [0, 1, 2, 3, 4, 5])
      for (const run of runs) assert.deepInclude(yield* store.get(run.id), { state: "completed", fence: 1 })
      assert.isAbove(of(events, "Claimed").length, 0, "the sink was asked, and threw")
    }))

  it.effect("a claim that dies (a defect, not a store error) ends the worker with it, its held run released, instead of leaving it heartbeating and claiming nothing", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const defect = new Error("a claim's row did not decode")
      let claims = 0
      const dying: Store = {
        ...store,
        claim: (request) => Effect.suspend(() => ++claims === 3 ? Effect.die(defect) : store.claim(request))
      }
      const slow = Handler.make({ kind: "job", payload: Schema.Unknown, handle: () => Effect.never })
      const [held] = yield* store.enqueue(jobs(1))
      const fiber = yield* Worker.run({ ...timing, concurrency: 2, handlers: [slow] }).pipe(
        Effect.provideService(RunStore, dying),
        Effect.forkDetach
      )
      // Polls once a second; the third claim dies. Then the grace (1 s) and the release.
      for (let i = 0; i < 80 && fiber.pollUnsafe() === undefined; i++) {
        yield* settle
        yield* TestClock.adjust("100 millis")
      }
      const exit = fiber.pollUnsafe()
      assert.isDefined(exit, "the worker still runs after its claim loop died")
      assert.isTrue(
        Exit.isFailure(exit!) && Cause.squash(exit.cause) === defect,
        "the worker ends with the claim's defect"
      )
      assert.strictEqual(claims, 3)
      // Its run was let go on the way out, as at shutdown: another worker takes it at once.
      assert.deepInclude(yield* store.get(held!.id), { state: "pending", leaseOwner: null, fence: 1 })
    }))
})

describe("rate limits", () => {
  it.effect("a run held back by its window starts as the window opens again, not at the next poll", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const { handler, started } = yield* blocking
      const [first, second, third] = yield* store.enqueue(jobs(3))
      const startedAt = new Map<string, number>()
      const { events, stop } = yield* startWorker(
        store,
        {
          ...timing,
          // A poll an hour apart: only the window's wake can start the runs it held back in time.
          pollInterval: "1 hour",
          concurrency: 5,
          handlers: [handler],
          rateLimits: [RateLimits.perKind("job", 1, "10 seconds")]
        },
        (event) => event._tag === "Claimed" ? Effect.map(now, (at) => void startedAt.set(event.runId, at)) : Effect.void
      )
      const begin = yield* now
      assert.deepStrictEqual(started, ["0"], "one start in the window")
      yield* TestClock.adjust("9 seconds")
      yield* settle
      assert.deepStrictEqual(started, ["0"], "the window is full for 10 seconds")
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.deepStrictEqual(started, ["0", "1"], "the second starts as the first start leaves the window")
      yield* TestClock.adjust("10 seconds")
      yield* settle
      assert.deepStrictEqual(started, ["0", "1", "2"])
      assert.deepStrictEqual(of(events, "Claimed").map((c) => c.runId), [first!.id, second!.id, third!.id])
      assert.deepStrictEqual([second!.id, third!.id].map((id) => startedAt.get(id)! - begin), [10_000, 20_000])
      yield* stop
    }))
})

describe("attempt timeouts and run deadlines", () => {
  /** A handler that never returns (its lease kept by the worker's heartbeats), with these options. */
  const hung = (options: { attemptTimeout?: Duration.Input; retry?: Schedule.Schedule<unknown, unknown> } = {}) =>
    Effect.gen(function*() {
      const { started, interrupted } = yield* blocking
      const handler = Handler.make({
        kind: "job",
        payload: Schema.Struct({ n: Schema.Number }),
        handle: ({ n }) =>
          Effect.andThen(Effect.sync(() => void started.push(String(n))), Effect.never).pipe(
            Effect.onInterrupt(() => Effect.sync(() => void interrupted.push(String(n))))
          ),
        ...options
      })
      return { handler, started, interrupted }
    })

  const errorTag = (store: Store, runId: string) =>
    Effect.map(store.get(runId), (run) => (run.error as { tag?: string } | null)?.tag)

  it.effect("a handler that never returns while its heartbeats keep its lease is interrupted at its attempt timeout, fails with AttemptTimedOut and is retried under its retry policy, the fence untouched", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const { handler, interrupted, started } = yield* hung({
        attemptTimeout: "25 seconds",
        retry: Schedule.spaced("5 seconds")
      })
      const [run] = yield* store.enqueue([{ kind: "job", payload: { n: 0 }, maxAttempts: 2 }])
      const begin = yield* now
      const { events, stop } = yield* startWorker(store, { ...timing, handlers: [handler] })
      assert.deepStrictEqual(started, ["0"])
      yield* TestClock.adjust("24999 millis")
      assert.isEmpty(interrupted, "not before its timeout")
      assert.strictEqual(of(events, "HeartbeatConfirmed").length, 2, "its lease renewed meanwhile")
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(interrupted, ["0"], "interrupted at 25 s, heartbeats or not")
      const retried = yield* store.get(run!.id)
      assert.deepInclude(retried, { state: "pending", fence: 1, attempt: 1, leaseOwner: null })
      assert.strictEqual(yield* errorTag(store, run!.id), "AttemptTimedOut")
      assert.include((retried.error as { message: string }).message, "ran past its timeout of 25000 ms")
      assert.strictEqual(retried.runAt.getTime() - begin, 30_000, "its retry policy's delay: 5 s after the timeout")
      assert.deepStrictEqual(of(events, "RunSettled").map((e) => e.outcome), ["retry-scheduled"])
      assert.isEmpty(of(events, "LeaseLost"))
      // The retry is a normal claim under fence 2, and times out alike; its last attempt fails the run.
      yield* TestClock.adjust("5 seconds")
      assert.deepStrictEqual(started, ["0", "0"])
      assert.deepInclude(yield* store.get(run!.id), { state: "running", fence: 2, attempt: 2 })
      yield* TestClock.adjust("25 seconds")
      assert.deepInclude(yield* store.get(run!.id), { state: "failed", fence: 2, attempt: 2 })
      assert.strictEqual(yield* errorTag(store, run!.id), "AttemptTimedOut")
      assert.deepStrictEqual((yield* store.history(run!.id)).map((e) => `${e.kind}@${e.fence}`), [
        "claimed@1",
        "retry_scheduled@1",
        "claimed@2",
        "failed@2"
      ])
      yield* stop
    }))

  it.effect("an enqueue's attempt timeout overrides its handler's", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const { handler, interrupted } = yield* hung({ attemptTimeout: "1 minute" })
      const [run] = yield* store.enqueue([{ kind: "job", payload: { n: 0 }, attemptTimeoutMs: 5_000 }])
      const { stop } = yield* startWorker(store, { ...timing, handlers: [handler] })
      yield* TestClock.adjust("4999 millis")
      assert.isEmpty(interrupted)
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(interrupted, ["0"])
      assert.strictEqual(yield* errorTag(store, run!.id), "AttemptTimedOut")
      yield* stop
    }))

  it.effect("the run's deadline interrupts its running attempt and fails the run for good, attempts remaining", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const { handler, interrupted } = yield* hung({ attemptTimeout: "1 minute" })
      const [run] = yield* store.enqueue([{ kind: "job", payload: { n: 0 }, deadlineAfterMs: 45_000 }])
      const { events, stop } = yield* startWorker(store, { ...timing, handlers: [handler] })
      yield* TestClock.adjust("44999 millis")
      assert.isEmpty(interrupted, "not before its deadline")
      assert.strictEqual(of(events, "HeartbeatConfirmed").length, 4)
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(interrupted, ["0"])
      assert.deepInclude(yield* store.get(run!.id), { state: "failed", fence: 1, attempt: 1, maxAttempts: 5 })
      assert.strictEqual(yield* errorTag(store, run!.id), "RunDeadlinePassed")
      assert.deepStrictEqual((yield* store.history(run!.id)).map((e) => `${e.kind}@${e.fence}`), [
        "claimed@1",
        "failed@1"
      ])
      assert.deepStrictEqual(of(events, "RunSettled").map((e) => e.outcome), ["failed"])
      yield* stop
    }))

  it.effect("a run waiting for a retry due past its deadline fails for good at its failure; one claimed past its deadline fails without starting its handler", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      let calls = 0
      const failing = Handler.make({
        kind: "job",
        payload: Schema.Struct({ n: Schema.Number }),
        handle: () => Effect.andThen(Effect.sync(() => calls++), Effect.fail("flaky")),
        retry: Schedule.spaced("1 minute")
      })
      const begin = yield* now
      const [retried, late] = yield* store.enqueue([
        { kind: "job", payload: { n: 0 }, deadlineAfterMs: 30_000 },
        { kind: "job", payload: { n: 1 }, delayMs: 20_000, deadlineAt: new Date(begin + 10_000) }
      ])
      const { stop } = yield* startWorker(store, { ...timing, handlers: [failing] })
      assert.strictEqual(calls, 1)
      assert.deepInclude(yield* store.get(retried!.id), { state: "failed", attempt: 1 })
      assert.deepStrictEqual((yield* store.get(retried!.id)).error, RunStorage.deadlineFailure({ message: "flaky" }))
      yield* TestClock.adjust("20 seconds")
      assert.strictEqual(calls, 1, "the late run's handler never started")
      assert.deepInclude(yield* store.get(late!.id), { state: "failed", attempt: 1 })
      assert.strictEqual(yield* errorTag(store, late!.id), "RunDeadlinePassed")
      yield* stop
    }))

  it.effect("a malformed attempt timeout stops the worker before it starts, naming the handler", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const { handler } = yield* hung({ attemptTimeout: "0 millis" })
      const exit = yield* Effect.exit(
        Worker.run({ ...timing, handlers: [handler] }).pipe(
          Effect.provideService(RunStore, store)
        )
      )
      assert.isTrue(Exit.isFailure(exit))
      assert.deepInclude(Cause.squash((exit as Exit.Failure<never, unknown>).cause) as object, {
        _tag: "InvalidConfig",
        option: "handlers.job.attemptTimeout"
      })
    }))
})
