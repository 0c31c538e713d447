/**
 * A `RunStore` held in memory: the same state machine as `PgRunStore` (claims raise the fence by
 * exactly 1, writes guarded by id + fence + running and diagnosed precisely, history, stats,
 * notifications), for tests and for running the worker deterministically under `TestClock`, as
 * Effect's `WorkflowEngine.layerMemory` sits beside its SQL engine. The contract suite
 * (`test/contract/`) runs one set of tests against both stores.
 *
 * Its clock is Effect's `Clock`, captured when the store is made: it plays the database's `now()`
 * (lease expiry, due times, suspension deadlines), so `TestClock.adjust` expires leases. Values are
 * kept as JSON text (`Json.encode`), so a value JSON cannot hold fails with `UnstorableValue`
 * exactly where the Postgres store fails, and reads hand back fresh copies.
 *
 * Each operation applies its whole transition synchronously, so it is atomic with respect to every
 * other caller, as one statement is. Not modelled: `completedRuns: "delete"` (completed runs are
 * kept), and in `completeInTransaction` there is no transaction to roll back: the completion is
 * written only if the caller's effect and the result's encoding succeed, but what the effect itself
 * did (its own writes, even through this store) stays done; nor is there a server session whose idle
 * time its `ttl` would bound.
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Exit, Layer, Option, PubSub, Stream } from "effect"
import {
  DeleteCountChanged,
  type InvalidConfig,
  RunNotFound,
  SignalTokenNotFound,
  StoreError,
  type UnstorableValue
} from "./Errors.js"
import * as Admin from "./internal/memory/Admin.js"
import * as Admit from "./internal/memory/Admit.js"
import * as AttemptLogs from "./internal/memory/AttemptLogs.js"
import * as Claim from "./internal/memory/Claim.js"
import * as Delete from "./internal/memory/Delete.js"
import * as Enqueue from "./internal/memory/Enqueue.js"
import * as Guarded from "./internal/memory/Guarded.js"
import * as History from "./internal/memory/History.js"
import { Journal } from "./internal/memory/Journal.js"
import * as Keys from "./internal/memory/Keys.js"
import * as Operators from "./internal/memory/Operators.js"
import * as Queues from "./internal/memory/Queues.js"
import * as Rate from "./internal/memory/Rate.js"
import * as Read from "./internal/memory/Read.js"
import * as Renew from "./internal/memory/Renew.js"
import * as Sample from "./internal/memory/Sample.js"
import * as MemorySchedules from "./internal/memory/Schedules.js"
import * as Signals from "./internal/memory/Signals.js"
import { canonicalId, type Outcome, State, type TimeColumn } from "./internal/memory/State.js"
import * as Json from "./Json.js"
import * as KeyLimits from "./KeyLimits.js"
import * as RateLimits from "./RateLimits.js"
import * as RateWakes from "./RateWakes.js"
import { checkEnqueueRequest, type EnqueueRequest, type LeaseKey } from "./RunRecord.js"
import { checkQueueName, checkSignalDelivery, isStorableToken } from "./RunStorage.js"
import { RunStore, type StoreNotification } from "./RunStore.js"
import * as Schedules from "./Schedules.js"
import * as ThroughputStorage from "./ThroughputStorage.js"
import { interruptSignalName, WorkflowJournal } from "./WorkflowJournal.js"

/** A time column of a run, as `moveTime` may set it. @category testing */
export type { TimeColumn }

/**
 * The store and a test's hand on its time columns: `moveTime` sets one run's lease expiry,
 * suspension deadline, due time or run deadline, as a test against Postgres updates the column directly.
 *
 * @category testing
 */
export interface Controlled {
  readonly store: RunStore["Service"]
  /** The workflow journal kept beside the store's runs. */
  readonly journal: WorkflowJournal["Service"]
  readonly moveTime: (runId: string, column: TimeColumn, at: Date) => Effect.Effect<void>
  /** Sets a schedule's next tick, as a test against Postgres updates `schedules.next_tick`. */
  readonly moveNextTick: (name: string, at: Date) => Effect.Effect<void>
  /** Moves the recorded starts of one rate limit (or of all) to `at`, as a test against Postgres updates `rate_starts.started_at`. */
  readonly moveRateStarts: (
    at: Date,
    limit?: { readonly scope: RateLimits.RateLimitScope; readonly name: string }
  ) => Effect.Effect<void>
  /** Moves the end of every unique window with a period to `at`, as a test against Postgres updates `unique_holds.held_until`. */
  readonly moveUniqueHoldEnds: (at: Date) => Effect.Effect<void>
}

const fromOutcome = <A, E>(outcome: Outcome<A, E>): Effect.Effect<A, E> =>
  outcome.ok ? Effect.succeed(outcome.value) : Effect.fail(outcome.error)

/**
 * Checks each request's options and encodes its payload, in order, as the Postgres store does
 * before its statement: the first invalid option or unstorable payload fails the whole call.
 */
const payloadsOf = (
  requests: ReadonlyArray<EnqueueRequest>
): Exit.Exit<Array<string>, InvalidConfig | UnstorableValue> => {
  const texts: Array<string> = []
  for (const request of requests) {
    const checked = checkEnqueueRequest(request)
    if (Exit.isFailure(checked)) return Exit.failCause(checked.cause)
    const encoded = Json.encode(request.payload ?? null, "payload")
    if (Exit.isFailure(encoded)) return Exit.failCause(encoded.cause)
    texts.push(encoded.value)
  }
  return Exit.succeed(texts)
}

const isJsonText = (text: string): boolean => {
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

/**
 * Builds a store with a test's hand on its time columns (see `Controlled`).
 *
 * @category testing
 */
export const makeControlled: Effect.Effect<Controlled> = Effect.gen(function*() {
  const clock = yield* Clock.Clock
  const pubsub = yield* PubSub.unbounded<StoreNotification>()
  const state = new State()
  const workers = new Operators.Workers()
  // Runs a rate limit held back in a claim: their queues' workers are woken as the window opens.
  const rateWakes = RateWakes.make(clock, (queue) => PubSub.publish(pubsub, { _tag: "RunsAvailable", queue }))

  /** One transition at the store's `now()`, then its notifications: one statement, committed. */
  const apply = <A>(transition: (now: number) => A): Effect.Effect<A> =>
    Effect.sync(() => {
      state.outbox = []
      const now = clock.currentTimeMillisUnsafe()
      const result = transition(now)
      // The row trigger's hand-offs of the slots this statement's runs gave back.
      Admit.endStatement(state, now)
      for (const note of state.outbox) PubSub.publishUnsafe(pubsub, note)
      state.outbox = []
      return result
    })
  const applyOutcome = <A, E>(transition: (now: number) => Outcome<A, E>): Effect.Effect<A, E> =>
    Effect.flatMap(apply(transition), fromOutcome)

  const guardedCompletion = (lease: LeaseKey, result: string) =>
    applyOutcome((now) => {
      const run = Guarded.holder(state, lease)
      if (run === undefined) return { ok: false, error: Guarded.diagnose(state, lease, "transaction", now) }
      Guarded.completeInTransaction(state, run, result, now)
      return { ok: true, value: undefined }
    })

  const store = RunStore.of({
    enqueue: Effect.fn("MemoryRunStore.enqueue")(function*(requests) {
      if (requests.length === 0) return []
      // Checked and encoded before anything is written: one bad request fails the whole call.
      const payloads = yield* payloadsOf(requests)
      return yield* apply((now) => Enqueue.enqueue(state, requests, payloads, now))
    }),
    claim: (request) =>
      Effect.flatMap(
        apply((now) => ({
          claimed: Claim.claim(state, request, Duration.toMillis(request.ttl), now),
          wake: state.rateWake,
          now
        })),
        ({ claimed, now, wake }) => Effect.as(wake === undefined ? Effect.void : rateWakes.schedule(wake, now), claimed)
      ),
    renew: (owner, leases, ttl) => apply((now) => Renew.renew(state, owner, leases, Duration.toMillis(ttl), now)),
    completeBatch: (items, next) =>
      items.every((item) => item.result === null || isJsonText(item.result))
        ? apply((now) => Guarded.completeBatch(state, items, now, next))
        : Effect.fail(
          new StoreError({
            operation: "complete",
            reason: "InvalidJson",
            cause: new Error("a result is not JSON text")
          })
        ),
    fail: Effect.fn("MemoryRunStore.fail")(function*(request) {
      const error = yield* Effect.orDie(Effect.try(() => Json.encodeDiagnostic(request.error)))
      return yield* applyOutcome((now) => Guarded.fail(state, request, error, now))
    }),
    release: Effect.fn("MemoryRunStore.release")(function*(lease) {
      return yield* applyOutcome((now) => Guarded.release(state, lease, now))
    }),
    snooze: Effect.fn("MemoryRunStore.snooze")(function*(request) {
      return yield* applyOutcome((now) => Guarded.snooze(state, request, now))
    }),
    checkpoint: Effect.fn("MemoryRunStore.checkpoint")(function*(lease, value) {
      const text = yield* Json.encode(value ?? null, "checkpoint", lease.runId)
      return yield* applyOutcome((now) => Guarded.checkpoint(state, lease, text, now))
    }),
    suspend: Effect.fn("MemoryRunStore.suspend")(function*(request) {
      const timeoutMs = request.timeout === undefined ? null : Duration.toMillis(request.timeout)
      return yield* applyOutcome((now) => Guarded.suspend(state, request, timeoutMs, now))
    }),
    deliverSignal: Effect.fn("MemoryRunStore.deliverSignal")(function*(request) {
      yield* checkSignalDelivery(request)
      if (canonicalId(request.runId) === undefined) return yield* Effect.fail(new RunNotFound({ runId: request.runId }))
      const text = yield* Json.encode(request.payload ?? null, "signal payload", request.runId)
      return yield* applyOutcome((now) => Signals.deliverSignal(state, request, text, now))
    }),
    callbackExpiry: (lease, signal, expiresIn) =>
      applyOutcome((now) => Signals.callbackExpiry(state, lease, signal, Duration.toMillis(expiresIn), now)),
    completeInTransaction: (lease, effect, encodeResult) =>
      Effect.gen(function*() {
        // Checked first, so a stale holder does no work; checked again by the completion, which
        // decides. Nothing of the store changes unless the effect, the encoding and the guarded
        // completion all succeed (the effect's own side effects are the caller's).
        yield* applyOutcome((now) =>
          Guarded.holder(state, lease) === undefined
            ? { ok: false, error: Guarded.diagnose(state, lease, "transaction", now) }
            : { ok: true, value: undefined }
        )
        const value = yield* effect
        const encoded = encodeResult(value)
        if (Exit.isFailure(encoded)) return yield* Effect.failCause(encoded.cause)
        yield* guardedCompletion(lease, encoded.value)
        return value
      }).pipe(Effect.withSpan("MemoryRunStore.completeInTransaction")),
    keepAttemptLog: (lease, log) => apply((now) => AttemptLogs.keepCompleted(state, lease, log, now)),
    attemptLogs: (runId) => applyOutcome(() => AttemptLogs.read(state, runId)),
    resumeById: Effect.fn("MemoryRunStore.resumeById")(function*(runId, payload, actor, check) {
      if (canonicalId(runId) === undefined) return yield* Effect.fail(new RunNotFound({ runId }))
      const text = yield* Json.encode(payload ?? null, "resume payload")
      return yield* applyOutcome((now) => Admin.resumeById(state, runId, text, now, actor, check))
    }),
    resumeByToken: Effect.fn("MemoryRunStore.resumeByToken")(function*(token, payload, actor, check) {
      if (!isStorableToken(token)) return yield* Effect.fail(new SignalTokenNotFound({ token }))
      const text = yield* Json.encode(payload ?? null, "resume payload")
      return yield* applyOutcome((now) => Admin.resumeByToken(state, token, text, now, actor, check))
    }),
    cancel: (runId, actor) => applyOutcome((now) => Admin.cancel(state, runId, now, actor)),
    retry: (runId, actor) => applyOutcome((now) => Admin.retry(state, runId, now, actor)),
    get: (runId) => applyOutcome(() => Read.get(state, runId)),
    list: (filter) => apply(() => Read.list(state.runs.values(), filter)),
    leases: apply((now) => Read.leases(state, now)),
    cancelMany: (filter, actor) => apply((now) => Admin.many(state, filter, "cancel", now, actor)),
    retryMany: (filter, actor) => apply((now) => Admin.many(state, filter, "retry", now, actor)),
    countDeletable: (filter) =>
      apply(() => Delete.count(state, filter)).pipe(Effect.map(({ busy, count }) => ({ count, busy }))),
    maintainHistory: (request) =>
      apply((now) => {
        const window = { keep: Duration.toMillis(request.keep), keepFailed: Duration.toMillis(request.keepFailed) }
        const outcome = History.maintain(state, request, window, now)
        kept.forget(outcome.executions)
        return outcome.actions
      }),
    historyStatus: apply(() => History.status(state)),
    deleteRuns: (request) =>
      Effect.gen(function*() {
        const counted = yield* apply(() => Delete.count(state, request.filter))
        if (counted.count !== request.expected) {
          return yield* Effect.fail(new DeleteCountChanged({ expected: request.expected, found: counted.count }))
        }
        // One statement per batch, as the Postgres store deletes: the runs of each, then its audit line.
        let deleted = 0
        for (;;) {
          const batch = yield* applyOutcome((now) => {
            const outcome = Delete.deleteBatch(state, request, counted.maxId, deleted, now)
            // The journal of a deleted workflow run goes in the same step (one statement's CTEs in Postgres).
            if (outcome.ok) kept.forget(outcome.value.executions)
            return outcome
          })
          if (batch.deleted === 0) return { deleted }
          deleted += batch.deleted
        }
      }),
    recordAction: (record) => apply((now) => Delete.recordAction(state, record, now)),
    actions: (query) => apply(() => Delete.actions(state, query)),
    history: (runId) => applyOutcome(() => Read.history(state, runId)),
    stats: apply((now) => Read.stats(state.runs.values(), state.events, now)),
    sample: apply((now) => Sample.sample(state.runs.values(), now)),
    pauseQueue: (queue) => Effect.andThen(checkQueueName(queue), apply((now) => Queues.pauseQueue(state, queue, now))),
    resumeQueue: (queue) => Effect.andThen(checkQueueName(queue), apply(() => Queues.resumeQueue(state, queue))),
    pausedQueues: apply(() => Queues.pausedQueues(state)),
    setKeyLimits: Effect.fn("MemoryRunStore.setKeyLimits")(function*(limits) {
      const checked: Array<KeyLimits.KeyLimit> = []
      for (const limit of limits) checked.push(yield* KeyLimits.check(limit))
      return yield* apply((now) => Keys.setKeyLimits(state, checked, now))
    }),
    removeKeyLimit: (scope, name) => apply((now) => Keys.removeKeyLimit(state, scope, name, now)),
    keyLimits: apply((now) => Keys.keyLimits(state, now)),
    setRateLimits: Effect.fn("MemoryRunStore.setRateLimits")(function*(limits) {
      const checked: Array<RateLimits.CheckedRateLimit> = []
      for (const limit of limits) checked.push(yield* RateLimits.check(limit))
      return yield* apply(() => Rate.setRateLimits(state, checked))
    }),
    removeRateLimit: (scope, name) => apply(() => Rate.removeRateLimit(state, scope, name)),
    rateLimits: apply((now) => Rate.rateLimits(state, now)),
    registerSchedules: Effect.fn("MemoryRunStore.registerSchedules")(function*(definitions) {
      const checked: Array<Schedules.CheckedSchedule> = []
      for (const definition of definitions) checked.push(yield* Schedules.check(definition))
      return yield* apply((now) => MemorySchedules.registerSchedules(state, checked, now))
    }),
    tickSchedules: apply((now) => MemorySchedules.tickSchedules(state, now)),
    schedules: apply(() => MemorySchedules.schedules(state)),
    pauseSchedule: (name) => applyOutcome((now) => MemorySchedules.setSchedulePaused(state, name, true, now)),
    resumeSchedule: (name) => applyOutcome((now) => MemorySchedules.setSchedulePaused(state, name, false, now)),
    announceWorker: (announcement) => apply((now) => workers.announce(announcement, now)),
    retireWorker: (owner) => apply(() => workers.retire(owner)),
    workers: apply((now) => workers.list(now)),
    goneWorkers: apply((now) => workers.gone(now)),
    throughput: (request) =>
      Effect.andThen(
        ThroughputStorage.check(request),
        apply((now) => Operators.throughput(state.runs.values(), state.events, now, request))
      ),
    keyUsage: (scope, name, top) => apply((now) => Operators.keyUsage(state.runs.values(), scope, name, top, now)),
    // Subscribed before `Subscribed` is emitted: what is published from then on arrives.
    notifications: Stream.unwrap(Effect.map(
      PubSub.subscribe(pubsub),
      (subscription) =>
        Stream.concat(Stream.succeed<StoreNotification>({ _tag: "Subscribed" }), Stream.fromSubscription(subscription))
    ))
  })

  const kept = new Journal(state)
  const journal = WorkflowJournal.of({
    sqlClient: undefined,
    execution: (execution) => apply(() => Option.fromNullishOr(kept.execution(execution))),
    activityResult: (execution, activity, attempt) =>
      apply(() => Option.fromNullishOr(kept.activityResult(execution, activity, attempt))),
    activityStart: (execution, activity, attempt) =>
      apply(() => ({
        stored: Option.fromNullishOr(kept.activityResult(execution, activity, attempt)),
        interruptPending: kept.isDone(execution, interruptSignalName)
      })),
    recordActivity: (lease, execution, activity, attempt, exit) =>
      applyOutcome((now) =>
        kept.recordActivity(lease, execution, activity, attempt, JSON.stringify(exit ?? null), now)
      ),
    deferredResult: (execution, name) =>
      apply((now) => Option.fromNullishOr(kept.deferredResult(execution, name, now))),
    // No transaction to share: an activity's own writes are its own (see `completeInTransaction`).
    transaction: (effect) => effect,
    deferredDone: (execution, name, exit) =>
      apply((now) => kept.deferredDone(execution, name, JSON.stringify(exit ?? null), now)),
    wake: (execution, reason) => apply((now) => kept.wake(execution, reason, now)),
    consumeWake: (lease) => applyOutcome((now) => kept.consumeWake(lease, now)),
    scheduleClock: (execution, deferred, durationMs) =>
      apply((now) => kept.scheduleClock(execution, deferred, durationMs, now)),
    now: apply((now) => String(Math.round(now * 1000))),
    nextClock: (execution, since) => apply((now) => Option.fromNullishOr(kept.nextClock(execution, since, now))),
    doneAmong: (execution, names) => apply((now) => kept.doneAmong(execution, names, now)),
    awaiting: (executions) => apply((now) => kept.awaiting(executions, now)),
    journal: (execution) => apply((now) => kept.journal(execution, now))
  })

  return {
    store,
    journal,
    moveTime: (runId, column, at) => Effect.sync(() => state.setTime(runId, column, at.getTime())),
    moveNextTick: (name, at) => Effect.sync(() => MemorySchedules.setNextTick(state, name, at.getTime())),
    moveRateStarts: (at, limit) => Effect.sync(() => Rate.setRateStartTimes(state, at.getTime(), limit)),
    moveUniqueHoldEnds: (at) => Effect.sync(() => Enqueue.setUniqueHoldEnds(state, at.getTime()))
  } satisfies Controlled
})

/**
 * Builds an empty store. Its `now()` is the `Clock` in context here (a `TestClock` in tests).
 *
 * @category constructors
 */
export const make: Effect.Effect<RunStore["Service"]> = Effect.map(makeControlled, (controlled) => controlled.store)

/**
 * The store as a layer, with the workflow journal kept beside its runs (`WorkflowJournal`, which
 * `@leasehold/workflow`'s engine takes from context). Each build is a new, empty store whose
 * clock is the `Clock` of the context it is built in: build it inside an `it.effect` test to drive
 * it with `TestClock`.
 *
 * @category layers
 */
export const layer: Layer.Layer<RunStore | WorkflowJournal> = Layer.effectContext(Effect.map(
  makeControlled,
  ({ journal, store }) => Context.make(RunStore, store).pipe(Context.add(WorkflowJournal, journal))
))
