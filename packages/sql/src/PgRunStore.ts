/**
 * The Postgres implementation of `RunStore`. Each operation is one statement from `internal/statements/`
 * (a stale write costs a second one, to say why it was rejected).
 *
 * @since 0.1.0
 */
import { PgClient, PgConnection } from "@effect/sql-pg"
import {
  type ClaimRequest,
  InvalidConfig,
  type LeaseKey,
  RunStore,
  type StoreError,
  type StoreNotification
} from "@leasehold/core"
import { ClaimPosition, RateWakes, ThroughputStorage } from "@leasehold/core/store"
import { Clock, Context, type Duration, Effect, Layer, PubSub, Redacted, Stream } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import type { SqlError } from "effect/sql"
import * as admin from "./internal/statements/admin.js"
import * as attemptLogs from "./internal/statements/attemptLogs.js"
import * as claimStatement from "./internal/statements/claim.js"
import * as deletes from "./internal/statements/deletes.js"
import * as enqueueStatement from "./internal/statements/enqueue.js"
import * as guarded from "./internal/statements/guarded.js"
import * as history from "./internal/statements/history.js"
import * as keys from "./internal/statements/keys.js"
import * as ledger from "./internal/statements/ledger.js"
import * as operators from "./internal/statements/operators.js"
import * as queues from "./internal/statements/queues.js"
import * as rate from "./internal/statements/rate.js"
import * as read from "./internal/statements/read.js"
import * as renewHeld from "./internal/statements/renewHeld.js"
import * as sampleStatement from "./internal/statements/sample.js"
import * as schedules from "./internal/statements/schedules.js"
import * as signals from "./internal/statements/signals.js"
import * as Migrations from "./Migrations.js"
import * as StoreErrors from "./StoreErrors.js"
import * as StoreSchema from "./StoreSchema.js"
import * as WorkflowJournal from "./WorkflowJournal.js"

/** What becomes of a completed run (see `PgRunStoreOptions.completedRuns`). @category models */
export type CompletedRuns = guarded.CompletedRuns

/** Where new runs are recorded (see `PgRunStoreOptions.storage`). @category models */
export type Storage = enqueueStatement.Storage

/** @category models */
export interface PgRunStoreOptions {
  /**
   * Where this store records the runs it enqueues: `"ledger"` puts those no rate limit governs
   * in the batch ledger, keyed, unique and idempotent ones too (docs/adr/0017, 0020): a claim appends
   * one row per claim statement and a completion one row per completion statement, and the run's
   * own row is not written on that path (the default, but with `completedRuns: "delete"`). `"rows"`
   * writes every run's row at each step.
   * Stores of either kind share a schema: each reads and writes runs recorded either way.
   */
  readonly storage?: Storage | undefined
  /** Postgres schema holding the tables. Default `leasehold`. */
  readonly schema?: string | undefined
  /** Run migrations when the layer is built. Default true. */
  readonly migrate?: boolean | undefined
  /**
   * Connections of the worker runtime's own pool (claims, heartbeats, batched completions).
   * Default 4: the claim loop and the heartbeat each send one statement at a time, and completions
   * are written two batches at a time (a worker's completions also claim its keys' next runs).
   */
  readonly runtimeConnections?: number | undefined
  /**
   * What becomes of a completed run: `"keep"` (default) keeps the row, its result and its history;
   * `"delete"` deletes them in the completion's own guarded statement (nothing accumulates, and a
   * drain writes less). Failed and cancelled runs are kept either way.
   */
  readonly completedRuns?: CompletedRuns | undefined
  /**
   * The client reaches PostgreSQL through a pooler in transaction mode (docs/DEPLOYMENT.md). The
   * runtime pool then sends no session settings (they would stay with a server connection other
   * clients get) and prepares no named statements; workers are woken by LISTEN on `listenUrl`, a
   * direct (session) connection to the server, or, without one, find work by polling alone.
   */
  readonly pooler?: PoolerOptions | undefined
  /**
   * The fewest run ids (and claim batches) a new history range holds (ADR 0028): the maintenance
   * sizes each range to what the last day used, never below this. 100,000 by default.
   */
  readonly historyRange?: number | undefined
}

/** @category models */
export interface PoolerOptions {
  /** A URL straight to PostgreSQL (not through the pooler) for the one LISTEN connection. */
  readonly listenUrl?: string | undefined
}

const parseNotification = (payload: string): StoreNotification | undefined =>
  payload.startsWith("q:")
    ? { _tag: "RunsAvailable", queue: payload.slice(2) }
    : payload.startsWith("c:")
    ? { _tag: "RunCancelled", runId: payload.slice(2) }
    : payload === "s:"
    ? { _tag: "SchedulesChanged" }
    : undefined

/**
 * Settings of the runtime pool's connections: plans made once per connection, and made from
 * indexes only (docs/adr/0002-runtime-connection-pool.md).
 *
 * @category models
 */
export const runtimeSettings: Readonly<Record<string, string>> = {
  plan_cache_mode: "force_generic_plan",
  enable_seqscan: "off",
  enable_bitmapscan: "off",
  // A plan the settings above penalize can cost enough to be JIT-compiled on every execution, and
  // no runtime statement gains from JIT (ADR 0002).
  jit: "off"
}

/** Builds the store over the PgClient in context. @category constructors */
export const make = Effect.fnUntraced(function*(options: PgRunStoreOptions = {}) {
  const sql = yield* PgClient.PgClient
  const s = yield* Effect.fromResult(StoreSchema.validate(options.schema))
  const completedRuns = options.completedRuns ?? "keep"
  if (completedRuns !== "keep" && completedRuns !== "delete") {
    return yield* new InvalidConfig({
      option: "completedRuns",
      issue: `${JSON.stringify(completedRuns)} is not "keep" or "delete"`
    })
  }
  const storage = options.storage ?? (completedRuns === "delete" ? "rows" : "ledger")
  if (storage !== "ledger" && storage !== "rows") {
    return yield* new InvalidConfig({
      option: "storage",
      issue: `${JSON.stringify(storage)} is not "ledger" or "rows"`
    })
  }
  if (storage === "ledger" && completedRuns === "delete") {
    return yield* new InvalidConfig({
      option: "completedRuns",
      issue: `"delete" needs storage "rows": the ledger keeps its history by batch`
    })
  }
  const runtimeConnections = options.runtimeConnections ?? 4
  if (!Number.isInteger(runtimeConnections) || runtimeConnections < 1) {
    return yield* new InvalidConfig({
      option: "runtimeConnections",
      issue: `${runtimeConnections} is not a whole number of at least 1`
    })
  }
  if (options.migrate ?? true) yield* Migrations.run(s)

  // Claims, renewals and batched completions run on a small pool of their own with generic,
  // index-only plans (docs/adr/0002-runtime-connection-pool.md).
  const runtime = yield* PgClient.make({
    ...sql.config,
    maxConnections: runtimeConnections,
    minConnections: 0,
    applicationName: `${sql.config.applicationName ?? "leasehold"} (runtime)`,
    ...(options.pooler === undefined
      ? { startupParameters: { ...sql.config.startupParameters, ...runtimeSettings } }
      : { prepare: false })
  }).pipe(Effect.provide(Reactivity.layer))

  // A listener holds its connection: one of its own, outside both pools (docs/adr/0002). Through
  // a transaction pooler it needs a direct URL; without one, nothing is pushed and workers poll.
  const listenConfig = options.pooler === undefined
    ? sql.config
    : options.pooler.listenUrl === undefined
    ? undefined
    // The URL alone says where: explicit fields would win over it.
    : {
      ...sql.config,
      url: Redacted.make(options.pooler.listenUrl),
      host: undefined,
      port: undefined,
      database: undefined,
      path: undefined,
      stream: undefined
    }
  const notifications: Stream.Stream<StoreNotification, StoreError> = listenConfig === undefined
    ? Stream.never
    : Stream.unwrap(
      Effect.gen(function*() {
        const connection = yield* PgConnection.make(listenConfig)
        const source = yield* connection.listen(s.channel)
        // LISTEN has been acknowledged: what is sent from now on arrives.
        return Stream.concat(
          Stream.succeed<StoreNotification>({ _tag: "Subscribed" }),
          Stream.fromQueue(source).pipe(
            Stream.map((note) => parseNotification(note.payload)),
            Stream.filter((note): note is StoreNotification => note !== undefined)
          )
        )
      })
    ).pipe(Stream.mapError((error) => StoreErrors.fromSql("listen", error as SqlError.SqlError)))

  const refail = StoreErrors.refail
  // Where this store's due-only claims stand in each queue: in this process's memory, never in a
  // row (ClaimPosition, docs/adr/0013).
  const positions = new ClaimPosition.Positions()
  // Where each key limit's sweep stands among its waiting keys (admit.ts › waitingKeys), likewise.
  const keyCursors = new Map<string, string>()
  // Where the ledger put each lease this store claimed there (ledger.ts › LedgerRefs).
  const refs = new ledger.LedgerRefs()
  const renew = (owner: string, leases: ReadonlyArray<LeaseKey>, ttl: Duration.Duration) =>
    renewHeld.renewHeld(runtime, s, owner, leases, ttl, refs)
  const ratedSeen = new rate.RatedSeen()
  // Runs a rate limit held back in this store's claims: their queues are announced to this
  // store's listeners as their window opens (RateWakes), beside what LISTEN brings.
  const clock = yield* Clock.Clock
  const wakes = yield* PubSub.unbounded<StoreNotification>()
  const scope = yield* Effect.scope
  const rateWakes = RateWakes.make(
    clock,
    (queue) => PubSub.publish(wakes, { _tag: "RunsAvailable", queue }),
    (wake) => Effect.forkIn(wake, scope)
  )
  const claimRated = (request: ClaimRequest) => {
    const wake: rate.RatedWake = { next: undefined }
    return Effect.tap(
      rate.withRated(
        runtime,
        s,
        request,
        ratedSeen,
        wake,
        (rest) => claimStatement.claim(runtime, s, positions, rest, keyCursors, refs, storage === "ledger")
      ),
      () => {
        if (wake.next === undefined) return Effect.void
        const now = clock.currentTimeMillisUnsafe()
        return rateWakes.schedule({ at: now + wake.next.inMs, queues: wake.next.queues }, now)
      }
    )
  }
  return RunStore.of({
    enqueue: (requests) =>
      enqueueStatement.enqueue(sql, s, requests, storage).pipe(
        refail("enqueue"),
        Effect.withSpan("PgRunStore.enqueue")
      ),
    // Runs a rate limit governs are started first (rate.ts), then the routine claim takes the rest.
    claim: (request) => refail("claim")(claimRated(request)),
    renew: (owner, leases, ttl) => refail("renew")(renew(owner, leases, ttl)),
    completeBatch: (items, next) =>
      refail("complete")(
        // Lines of completed attempts (`CompleteItem.log`) follow the batch's completion, in one
        // statement for the batch, only when some item carries them. The completions stand
        // whether or not their lines are written: a failed write of lines fails no completion.
        items.some((item) => item.log !== undefined)
          ? Effect.tap(
            guarded.completeBatch(runtime, s, items, completedRuns, next, refs),
            (outcomes) =>
              Effect.ignore(attemptLogs.keepCompleted(
                runtime,
                s,
                items.flatMap((item, i) =>
                  item.log !== undefined && outcomes[i]?._tag === "Finalized" ? [{ ...item, log: item.log }] : []
                )
              ))
          )
          : guarded.completeBatch(runtime, s, items, completedRuns, next, refs)
      ),
    fail: (request) => refail("fail")(guarded.fail(sql, s, request, refs)),
    release: (lease) => refail("release")(guarded.release(sql, s, lease, refs)),
    snooze: (request) => refail("snooze")(guarded.snooze(sql, s, request, refs)),
    checkpoint: (lease, value) => refail("checkpoint")(guarded.checkpoint(sql, s, lease, value, refs)),
    suspend: (request) => refail("suspend")(guarded.suspend(sql, s, request, refs)),
    deliverSignal: (request) => refail("deliver signal")(signals.deliverSignal(sql, s, request)),
    callbackExpiry: (lease, signal, expiresIn) =>
      refail("callback")(signals.callbackExpiry(sql, s, lease, signal, expiresIn)),
    completeInTransaction: (lease, effect, encode, ttl) =>
      guarded.completeInTransaction(sql, s, lease, effect, encode, completedRuns, refs, ttl),
    keepAttemptLog: (lease, log) =>
      refail("keep attempt log")(
        Effect.map(attemptLogs.keepCompleted(sql, s, [{ ...lease, log }]), (kept) => kept.length > 0)
      ),
    attemptLogs: (runId) => refail("attempt logs")(attemptLogs.list(sql, s, runId)),
    resumeById: (runId, payload, actor, check) =>
      refail("resume")(admin.resumeById(sql, s, runId, payload, actor, check)),
    resumeByToken: (token, payload, actor, check) =>
      refail("resume")(admin.resumeByToken(sql, s, token, payload, actor, check)),
    cancel: (runId, actor) => refail("cancel")(admin.cancel(sql, s, runId, actor)),
    retry: (runId, actor) => refail("retry")(admin.retry(sql, s, runId, actor)),
    get: (runId) => refail("get")(read.get(sql, s, runId)),
    list: (filter) => refail("list")(read.list(sql, s, filter)),
    leases: refail("leases")(read.leases(sql, s)),
    cancelMany: (filter, actor) => refail("cancel")(admin.cancelMany(sql, s, filter, actor)),
    retryMany: (filter, actor) => refail("retry")(admin.retryMany(sql, s, filter, actor)),
    countDeletable: (filter) => refail("count for delete")(deletes.countDeletable(sql, s, filter)),
    deleteRuns: (request) => refail("delete")(deletes.deleteRuns(sql, s, request)),
    maintainHistory: (request) =>
      refail("maintain history")(history.maintain(sql, s, request, options.historyRange ?? 100_000)),
    historyStatus: refail("history status")(history.status(sql, s)),
    recordAction: (record) => refail("record action")(deletes.recordAction(sql, s, record)),
    actions: (query) => refail("read actions")(deletes.actions(sql, s, query)),
    history: (runId) => refail("history")(read.history(sql, s, runId)),
    stats: refail("stats")(read.stats(sql, s)),
    sample: refail("sample")(sampleStatement.sample(sql, s)),
    pauseQueue: (queue) => refail("pause queue")(queues.pause(sql, s, queue)),
    resumeQueue: (queue) => refail("resume queue")(queues.resume(sql, s, queue)),
    pausedQueues: refail("paused queues")(queues.paused(sql, s)),
    setKeyLimits: (limits) => refail("set key limits")(keys.set(sql, s, limits)),
    removeKeyLimit: (scope, name) => refail("remove key limit")(keys.remove(sql, s, scope, name)),
    keyLimits: refail("key limits")(keys.list(sql, s)),
    setRateLimits: (limits) =>
      refail("set rate limits")(Effect.ensuring(rate.set(sql, s, limits), Effect.sync(() => ratedSeen.forget()))),
    removeRateLimit: (scope, name) =>
      refail("remove rate limit")(
        Effect.ensuring(rate.remove(sql, s, scope, name), Effect.sync(() => ratedSeen.forget()))
      ),
    rateLimits: refail("rate limits")(rate.list(sql, s)),
    registerSchedules: (definitions) => refail("register schedules")(schedules.register(sql, s, definitions)),
    tickSchedules: refail("tick schedules")(schedules.tick(sql, s)),
    schedules: refail("schedules")(schedules.list(sql, s)),
    pauseSchedule: (name) => refail("pause schedule")(schedules.setPaused(sql, s, name, true)),
    resumeSchedule: (name) => refail("resume schedule")(schedules.setPaused(sql, s, name, false)),
    announceWorker: (announcement) => refail("announce worker")(operators.announceWorker(sql, s, announcement)),
    retireWorker: (owner) => refail("retire worker")(operators.retireWorker(sql, s, owner)),
    workers: refail("workers")(operators.workers(sql, s)),
    goneWorkers: refail("gone workers")(operators.workers(sql, s, "gone")),
    throughput: (request) =>
      Effect.andThen(ThroughputStorage.check(request), refail("throughput")(operators.throughput(sql, s, request))),
    keyUsage: (scope, name, top) => refail("key usage")(operators.keyUsage(sql, s, scope, name, top)),
    notifications: Stream.merge(notifications, Stream.fromPubSub(wakes))
  })
})

/**
 * The store as a layer over a PgClient (see `Database.layer`), with the workflow journal kept in
 * the same schema (`WorkflowJournal`, which `@leasehold/workflow`'s engine takes from context).
 *
 * @category layers
 */
export const layer = (options: PgRunStoreOptions = {}) =>
  Layer.effectContext(Effect.gen(function*() {
    const store = yield* make(options)
    const sql = yield* PgClient.PgClient
    const s = yield* Effect.fromResult(StoreSchema.validate(options.schema))
    return Context.make(RunStore, store).pipe(
      Context.add(WorkflowJournal.WorkflowJournal, WorkflowJournal.makeWith(sql, s))
    )
  }))
