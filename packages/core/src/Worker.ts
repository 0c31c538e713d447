/**
 * The worker: claims runs in batches up to its free capacity, runs each in its own RunScope under a
 * scoped lease, renews all its leases with one statement per heartbeat, and wakes on LISTEN/NOTIFY
 * with a polling fallback. Interrupting the worker shuts it down gracefully: it stops claiming,
 * lets in-flight runs finish within a grace period, then interrupts and releases the rest.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Exit, Fiber, Latch, Logger, Queue, Schedule, Scope, Stream } from "effect"
import * as os from "node:os"
import * as Backoff from "./internal/Backoff.js"

/** Retry delays of failed attempts (see `WorkerOptions.retry`). @category models */
export type RetryPolicy = Backoff.RetryPolicy
import type { KeepLogs } from "./AttemptLogs.js"
import { CurrentRun } from "./CurrentRun.js"
import { InvalidConfig } from "./Errors.js"
import { Fence } from "./Fence.js"
import * as Handler from "./Handler.js"
import * as CompletionBatcher from "./internal/CompletionBatcher.js"
import * as Heartbeat from "./internal/Heartbeat.js"
import type { InFlight, LeaseEntry } from "./internal/InFlight.js"
import * as Lease from "./internal/Lease.js"
import * as LogCapture from "./internal/LogCapture.js"
import * as Options from "./internal/Options.js"
import * as RunSpans from "./internal/RunSpans.js"
import * as Settlement from "./internal/Settlement.js"
import * as Timeouts from "./internal/Timeouts.js"
import * as KeyLimits from "./KeyLimits.js"
import * as RateLimits from "./RateLimits.js"
import * as Retention from "./Retention.js"
import type { ClaimedRun } from "./RunRecord.js"
import { RunStore, type StoreNotification } from "./RunStore.js"
import type * as Schedules from "./Schedules.js"
import * as ScheduleTicker from "./ScheduleTicker.js"
import * as Telemetry from "./Telemetry.js"
import * as WorkerEvents from "./WorkerEvents.js"
import * as WorkerMetrics from "./WorkerMetrics.js"
import * as WorkerRegistry from "./WorkerRegistry.js"

/**
 * The slots of the worker running the current handler. A handler that would hold its slot while a
 * run it enqueued starts (a workflow waiting for its child's first result) waits only when a slot
 * is free for that run; otherwise the two could hold every slot and wait on each other.
 *
 * @category services
 */
export class Slots extends Context.Service<Slots, {
  /** Slots not holding a run now. */
  readonly free: () => number
}>()("@leasehold/core/Worker/Slots") {}

/** @category models */
export interface WorkerOptions<R> {
  readonly handlers: ReadonlyArray<Handler.Handler<any, any, any, R>>
  /** Queues to serve. Default `["default"]`. */
  readonly queues?: ReadonlyArray<string> | undefined
  /** Runs held at once. Default 10. */
  readonly concurrency?: number | undefined
  /** Lease time-to-live, counted by the database. Default 30 seconds. */
  readonly ttl?: Duration.Input | undefined
  /** Renewal interval; must be well inside the TTL. Default TTL / 3. */
  readonly heartbeat?: Duration.Input | undefined
  /** Polling fallback when no notification arrives. Default 1 second. */
  readonly pollInterval?: Duration.Input | undefined
  /** How long shutdown waits for in-flight runs before interrupting them. Default 10 seconds. */
  readonly shutdownGrace?: Duration.Input | undefined
  /**
   * Bound on each final write (complete, fail, release); a batched completion is bounded with its
   * batch, so it waits at most the bound of the batch ahead of it and its own. Default 30 seconds.
   */
  readonly finalizeTimeout?: Duration.Input | undefined
  /** This worker's lease owner name. Default host:pid:random. */
  readonly owner?: string | undefined
  readonly retry?: RetryPolicy | undefined
  /** Most completions flushed by one statement. Default 500. */
  readonly maxCompletionBatch?: number | undefined
  /**
   * Record the worker's metrics (`WorkerMetrics`) in Effect's metric registry, for
   * `PrometheusMetrics` or `OtlpMetrics` to export. Default: `Telemetry.RecordMetrics` (false
   * unless turned on); off, nothing is recorded.
   */
  readonly metrics?: boolean | undefined
  /**
   * Run each attempt in a consumer span (see `Telemetry`), and the runtime's claim, renewal and
   * completion statements in spans of their own. Default: `Telemetry.TraceRuns` (false unless
   * turned on); off, no span is made for a run.
   */
  readonly traces?: boolean | undefined
  /**
   * The share of attempts traced when tracing is on, from 0 to 1 (default 1). Decided per run id
   * (the same run is traced on every attempt or on none); the others make no span at all.
   */
  readonly traceSampleRate?: number | undefined
  /**
   * Schedules this worker registers when it starts (`Schedules.ScheduleDefinition`): registering
   * the same definition from many workers yields one schedule. Every worker ticks every schedule of
   * its store (unless `tickSchedules` is false), registered here, from the CLI or the store API: one
   * run per tick whatever the number of workers (`Schedules`).
   */
  readonly schedules?: ReadonlyArray<Schedules.ScheduleDefinition> | undefined
  /**
   * Tick the store's schedules (`ScheduleTicker`). Default true. False: this worker registers its
   * `schedules` but fires no tick, for a deployment that ticks elsewhere (`ScheduleTicker.layer`).
   */
  readonly tickSchedules?: boolean | undefined
  /**
   * Per-key limits this worker declares when it starts, before its first claim
   * (`KeyLimits.perKind`, `KeyLimits.perQueue`): a limit already declared for the same queue or
   * kind is replaced. The limit is the store's, so every worker enforces the last one declared.
   */
  readonly keyLimits?: ReadonlyArray<KeyLimits.KeyLimit> | undefined
  /**
   * Rate limits this worker declares when it starts, before its first claim
   * (`RateLimits.perKind`, `RateLimits.perQueue`), as `keyLimits` are: the store's, so every
   * worker enforces the last one declared.
   */
  readonly rateLimits?: ReadonlyArray<RateLimits.RateLimit> | undefined
  /**
   * Retention of the store's history (`Retention`): every `every` (5 minutes), one worker at a time
   * creates the history's next ranges and reclaims what ended longer ago than `keep` (7 days;
   * `keepFailed` for failed and cancelled runs, 7 days). False: this worker runs no maintenance
   * (another process runs it, or `leasehold retention run`).
   */
  readonly retention?:
    | {
      readonly keep?: Duration.Input | undefined
      readonly keepFailed?: Duration.Input | undefined
      readonly every?: Duration.Input | undefined
    }
    | false
    | undefined
}

/** @category models */
export interface ResolvedOptions {
  readonly owner: string
  readonly queues: ReadonlyArray<string>
  readonly concurrency: number
  readonly ttl: Duration.Duration
  readonly heartbeat: Duration.Duration
  readonly pollInterval: Duration.Duration
  readonly shutdownGrace: Duration.Duration
  readonly finalizeTimeout: Duration.Duration
  readonly retry: RetryPolicy
  readonly maxCompletionBatch: number
  readonly metrics: boolean | undefined
  readonly traces: boolean | undefined
  readonly traceSampleRate: number
  readonly retention: { readonly every: Duration.Duration; readonly window: Retention.Window } | false
}

/**
 * Fills in defaults and checks every option: a malformed duration, a concurrency below 1 or a
 * heartbeat over half the TTL fail with `InvalidConfig`, and nothing starts.
 *
 * @category constructors
 */
export const resolveOptions = (options: WorkerOptions<unknown>): Effect.Effect<ResolvedOptions, InvalidConfig> =>
  Effect.gen(function*() {
    const ttl = yield* Options.duration("ttl", options.ttl ?? "30 seconds")
    if (Duration.toMillis(ttl) < 1) return yield* new InvalidConfig({ option: "ttl", issue: "must be more than 0" })
    const heartbeat = options.heartbeat === undefined
      ? Duration.millis(Duration.toMillis(ttl) / 3)
      : yield* Options.duration("heartbeat", options.heartbeat)
    if (Duration.toMillis(heartbeat) * 2 > Duration.toMillis(ttl) || Duration.toMillis(heartbeat) <= 0) {
      return yield* new InvalidConfig({
        option: "heartbeat",
        issue: `${Duration.format(heartbeat)} must be more than 0 and at most half the TTL (${Duration.format(ttl)})`
      })
    }
    const queues = options.queues ?? ["default"]
    if (queues.length === 0 || queues.some((q) => q === "")) {
      return yield* new InvalidConfig({ option: "queues", issue: "name at least one queue, none empty" })
    }
    for (const limit of options.keyLimits ?? []) yield* KeyLimits.check(limit)
    for (const limit of options.rateLimits ?? []) yield* RateLimits.check(limit)
    const retention = options.retention === false ? false : {
      every: yield* Options.duration("retention.every", options.retention?.every ?? Retention.defaultEvery),
      window: {
        keep: yield* Options.duration("retention.keep", options.retention?.keep ?? Retention.defaultWindow.keep),
        keepFailed: yield* Options.duration(
          "retention.keepFailed",
          options.retention?.keepFailed ?? Retention.defaultWindow.keepFailed
        )
      }
    }
    const retry = options.retry ?? Backoff.defaultPolicy
    yield* Options.duration("retry.base", retry.base)
    yield* Options.duration("retry.max", retry.max)
    return {
      owner: options.owner ?? `${os.hostname()}:${process.pid}:${Math.random().toString(36).slice(2, 8)}`,
      queues,
      concurrency: yield* Options.integer("concurrency", options.concurrency ?? 10, 1),
      ttl,
      heartbeat,
      pollInterval: yield* Options.duration("pollInterval", options.pollInterval ?? "1 second"),
      shutdownGrace: yield* Options.duration("shutdownGrace", options.shutdownGrace ?? "10 seconds"),
      finalizeTimeout: yield* Options.duration("finalizeTimeout", options.finalizeTimeout ?? "30 seconds"),
      retry,
      maxCompletionBatch: yield* Options.integer("maxCompletionBatch", options.maxCompletionBatch ?? 500, 1),
      metrics: options.metrics,
      traces: options.traces,
      traceSampleRate: yield* Options.fraction("traceSampleRate", options.traceSampleRate ?? 1),
      retention
    }
  })

/**
 * Runs a worker until interrupted, or until a defect ends its claim loop (it then fails with it,
 * its runs let go as at shutdown). Provide a `RunStore` (for Postgres: `PgRunStore.layer`) and
 * whatever the handlers need, then `Effect.runFork(worker)`.
 *
 * @category running
 */
export const run = <R>(
  options: WorkerOptions<R>
): Effect.Effect<never, InvalidConfig, RunStore | Exclude<R, Handler.HandlerServices>> =>
  Effect.scoped(Effect.gen(function*() {
    const config = yield* resolveOptions(options as WorkerOptions<unknown>)
    const { owner } = config
    // The stop line, added first so that it runs last: once the drain and the loops are over.
    const annotated = Effect.annotateLogs({ "leasehold.owner": owner })
    yield* Effect.addFinalizer(() => annotated(Effect.logInfo(`leasehold worker ${owner} stopped`)))
    const traced = config.traces ?? (yield* Telemetry.TraceRuns)
    // Polls that find nothing trace nothing, whether run tracing is on or not (RunSpans.recordedIf).
    const store = traced ? RunSpans.runtimeStatements(yield* RunStore) : RunSpans.untracedClaim(yield* RunStore)
    const clock = yield* Effect.clockWith(Effect.succeed)
    const registry = yield* Handler.registry(options.handlers)
    const compiled = new Map<string, Compiled>()
    for (const h of options.handlers) {
      compiled.set(h.kind, {
        handle: h.handle,
        decode: Handler.payloadDecoder(h),
        encodeResult: Handler.resultEncoder(h),
        retry: h.retry,
        keepLogs: h.keepLogs ?? "failed",
        attemptTimeoutMs: yield* Handler.attemptTimeoutMillis(h)
      })
    }
    const inFlight: InFlight = new Set()
    const slots: Slots["Service"] = { free: () => config.concurrency - inFlight.size }
    // Open while no lease is in flight: shutdown waits on it instead of polling.
    const idle = Latch.makeUnsafe(true)
    const wake = yield* Queue.sliding<void>(1)
    const signalWake = Queue.offer(wake, undefined).pipe(Effect.asVoid)
    // Whether the last claim was cut short by capacity (then a freed slot should claim again).
    let atCapacity = false

    // Scope finalizers run in reverse order: claiming stops first, then in-flight runs drain,
    // then the rest are interrupted, and the heartbeat and batcher stop last.
    // With metrics on, every event is recorded on its way to the configured sink; the heartbeat and
    // the watchdog report through the same one.
    const configured = yield* WorkerEvents.WorkerEvents
    const metered = config.metrics ?? (yield* Telemetry.RecordMetrics)
    const events = metered ? yield* WorkerMetrics.sink(configured, () => inFlight.size) : configured
    // Per-run events are built only for a sink that listens: the default one drops them.
    const listened = !WorkerEvents.isSilent(events)
    if (metered) yield* Effect.forkScoped(WorkerMetrics.sampler(store))
    // While the worker claims, each completion batch also claims for it the runs its keyed
    // completions hand their slots to (RunStore.ClaimNext): a key's next run starts without a claim.
    let claimingNext = true
    // Whether the store's notifications reach this worker now (LISTEN up, `Subscribed` seen).
    let listening = false
    // Two batches written at once (PgRunStore's runtime pool keeps a connection for each).
    const completionWriters = 2
    const batcher = yield* CompletionBatcher.make(
      store,
      config.maxCompletionBatch,
      config.finalizeTimeout,
      (count, durationMs, ok) => events.emit({ _tag: "CompletionFlush", owner, count, durationMs, ok }),
      {
        next: () => claimingNext ? { owner, ttl: config.ttl, queues: config.queues, kinds: registry.kinds } : undefined,
        // Each run is started before it is reported, so a sink that throws strands none. Once the
        // worker stops claiming (a batch sent before that answered during the drain), the runs
        // its completions claimed are given back at once instead of started.
        started: (claimed, sentAt) =>
          Effect.forEach(
            claimed,
            (run) =>
              claimingNext
                ? listened
                  ? Effect.andThen(Effect.sync(() => start(run, sentAt)), Effect.exit(claimedEvent(run)))
                  : Effect.sync(() => start(run, sentAt))
                : Effect.exit(store.release({ runId: run.id, fence: run.fence })),
            { discard: true }
          )
      },
      completionWriters
    )
    const reporting = Effect.provideService(WorkerEvents.WorkerEvents, events)
    yield* Effect.forkScoped(
      reporting(Heartbeat.loop(store, inFlight, { owner, ttl: config.ttl, interval: config.heartbeat }))
    )
    // Operators see this worker, idle or not, until it has drained (forked before the drain's finalizer).
    yield* Effect.forkScoped(
      WorkerRegistry.announce(store, {
        ...config,
        kinds: registry.kinds,
        interval: config.heartbeat,
        runsHeld: () => inFlight.size
      })
    )
    // One deadline watchdog for every lease of this worker (not a fiber and a timer per run).
    const watchdog: Heartbeat.WatchdogState = { nextCheckAt: Number.POSITIVE_INFINITY }
    const watchdogWake = yield* Queue.sliding<void>(1)
    yield* Effect.forkScoped(reporting(Heartbeat.watchdog(owner, inFlight, watchdog, watchdogWake)))
    // Each RunScope fiber is started at once as a root fiber carrying the worker's context (the
    // handlers' services), and tracked by its lease's entry rather than by a set of its own: a
    // fiber still running has its entry in flight. Once the drain is over, the runs still going are
    // interrupted and waited for (their finalizers release their leases) before the heartbeat and
    // the batcher stop; a run started after that is interrupted at once.
    // Run fibers log through the application's loggers and, unless no handler keeps any lines,
    // into their attempt's buffer (LogCapture): one logger for all runs, no allocation per run.
    const workerContext = yield* Effect.context<never>()
    const forkRun = Effect.runForkWith(
      options.handlers.every((h) => h.keepLogs === "never")
        ? workerContext
        : Context.add(
          workerContext,
          Logger.CurrentLoggers,
          new Set([...yield* Logger.CurrentLoggers, LogCapture.logger])
        )
    )
    let runsStopped = false
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        runsStopped = true
        return Fiber.interruptAll(runFibers(inFlight))
      })
    )
    const ttlMs = Duration.toMillis(config.ttl)
    const leaseContext: Lease.LeaseContext = {
      owner,
      store,
      events,
      listened,
      batcher,
      inFlight,
      retry: config.retry,
      finalizeTimeout: config.finalizeTimeout,
      // A freed slot wakes the claim loop only when capacity stopped the last claim: new runs
      // announce themselves, and a keyed run's slot goes to a run its completion claimed or
      // announced (admit.ts › handOff). Without notifications the wake stands in for those (ADR 0014).
      monotonicMillis: () => Number(clock.monotonicTimeNanosUnsafe() / 1_000_000n),
      onSlotFreed: (run) => {
        if (inFlight.size === 0) Latch.openUnsafe(idle)
        return atCapacity || (run.concurrencyKey !== null && !listening) ? signalWake : Effect.void
      }
    }
    yield* Effect.addFinalizer(() => reporting(drain(owner, inFlight, idle, config.shutdownGrace)))
    // Runs before the drain (finalizers run in reverse): completions written while it drains claim nothing.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        claimingNext = false
      })
    )

    // The per-run path is written without generators and allocates little: the worker's own cost
    // per run bounds its throughput (ADR 0018).
    const attempt = (entry: LeaseEntry) => Lease.scoped(leaseContext, entry, (scope) => runHandler(entry, scope))
    const sampled = RunSpans.sampler(config.traceSampleRate)
    const execute = traced
      // A run not sampled traces nothing, its statements included: they are sampled with their run.
      ? (entry: LeaseEntry) =>
        sampled(entry.run.id)
          ? RunSpans.consumer(entry, owner, attempt(entry))
          : Effect.withTracerEnabled(attempt(entry), false)
      : attempt

    const runHandler = (entry: LeaseEntry, scope: Scope.Scope): Effect.Effect<unknown, unknown> => {
      const run = entry.run
      // A run claimed past its deadline (by the store's clock) fails for good before its handler starts.
      if (run.deadlineInMs !== null && run.deadlineInMs <= 0) return Timeouts.deadlinePassed(run)
      const handler = compiled.get(run.kind)
      if (handler === undefined) {
        return Effect.fail(new Lease.PermanentFailure({ reason: `no handler for kind ${run.kind}` }))
      }
      const decoded = handler.decode(run.payload)
      if (Exit.isFailure(decoded)) {
        return Effect.mapError(decoded, (error) => new Lease.PermanentFailure({ reason: error }))
      }
      const fence: Fence["Service"] = { runId: run.id, fence: run.fence, owner }
      const current: CurrentRun["Service"] = new Settlement.WorkerRun(run, entry, config.ttl)
      // The RunScope fiber already carries the worker's context (the handlers' services): the run's
      // own services go on top of it in one step.
      return Timeouts.bounded(
        run,
        handler.attemptTimeoutMs,
        Effect.updateContext(
          handler.handle(decoded.value) as Effect.Effect<unknown, unknown>,
          (context: Context.Context<never>) =>
            Context.add(
              Context.add(Context.add(Context.add(context, Scope.Scope, scope), Fence, fence), Slots, slots),
              CurrentRun,
              current
            ) as Context.Context<never>
        )
      )
    }

    const start = (run: ClaimedRun, sentAt: number): void => {
      const handler = compiled.get(run.kind)
      const entry: LeaseEntry = {
        run,
        claimedAt: sentAt,
        encodeResult: handler?.encodeResult ?? schemaless,
        retrySchedule: handler?.retry,
        keepLogs: handler?.keepLogs ?? "failed",
        logs: undefined,
        deadline: sentAt + ttlMs,
        settled: undefined,
        finalizing: false,
        lost: undefined,
        fiber: undefined
      }
      inFlight.add(entry)
      if (inFlight.size === 1) Latch.closeUnsafe(idle)
      if (entry.deadline < watchdog.nextCheckAt) {
        watchdog.nextCheckAt = entry.deadline
        Queue.offerUnsafe(watchdogWake, undefined)
      }
      const fiber = forkRun(execute(entry))
      entry.fiber = fiber
      if (runsStopped) fiber.interruptUnsafe()
    }

    const claimedEvent = (run: ClaimedRun) =>
      events.emit({
        _tag: "Claimed",
        owner,
        runId: run.id,
        fence: run.fence,
        kind: run.kind,
        queue: run.queue,
        attempt: run.attempt,
        via: run.via,
        waitMs: run.waitMs
      })
    const claimErrors = Schedule.exponential("100 millis").pipe(
      Schedule.modifyDelay(({ duration }) => Effect.succeed(Duration.min(duration, Duration.seconds(5))))
    )
    const pollMs = Duration.toMillis(config.pollInterval)
    let lastSweepAt = Number.NEGATIVE_INFINITY
    // Whether the last sweep may have left expired leases or passed deadlines behind: it took
    // some and no due run (its limit was the slots free then, often one on a busy worker).
    let sweepAgain = false
    const claimOnce = Effect.gen(function*() {
      const free = config.concurrency - inFlight.size
      if (free <= 0) {
        atCapacity = true
        return false
      }
      // The local deadline of a new lease counts from before the claim was sent.
      const sentAt = yield* Heartbeat.monotonicMillis
      // Expired leases and passed suspension deadlines are swept at least once per poll interval
      // (every poll sweeps), and again by every claim after a sweep that may have left some, so
      // they get the freed slots before due runs do. The other claims, which notifications and
      // freed slots ask for, look at due runs only. This clock decides only when to look, never
      // who owns a run.
      const sweep = sweepAgain || sentAt - lastSweepAt >= pollMs
      const claimed = yield* store.claim({
        owner,
        queues: config.queues,
        kinds: registry.kinds,
        limit: free,
        ttl: config.ttl,
        dueOnly: !sweep
      })
      if (sweep) {
        lastSweepAt = sentAt
        // A sweep takes expired leases, then passed deadlines, then due runs: a due run among
        // what it took means the first two ran out below its limit. (Expired leases on their last
        // attempt are failed, not returned: a sweep that picked only those looks empty, and what
        // is left waits for the next poll's sweep.)
        sweepAgain = claimed.length > 0 && claimed.every((run) => run.via !== "due")
      }
      const answeredAt = yield* Heartbeat.monotonicMillis
      // Every claimed run is started before anything is reported, and a sink that throws is
      // survived: it strands no run and does not end the claim loop (whose end ends the worker).
      for (const run of claimed) start(run, sentAt)
      yield* Effect.exit(
        events.emit({ _tag: "ClaimBatch", owner, count: claimed.length, durationMs: answeredAt - sentAt, sweep })
      )
      if (listened) { for (const run of claimed) yield* Effect.exit(claimedEvent(run)) }
      atCapacity = claimed.length === free
      return atCapacity
    }).pipe(
      Effect.tapError((error) =>
        Effect.exit(events.emit({ _tag: "StoreError", owner, operation: "claim", error: String(error) }))
      ),
      Effect.retry(claimErrors)
    )
    const claimLoop = Effect.forever(Effect.gen(function*() {
      const mayHaveMore = yield* claimOnce
      if (!mayHaveMore) {
        // Idle until woken, or until the next sweep is due: at most one poll interval after the
        // last one, however recent the last due-only claim was. At capacity there is nothing to
        // claim a sweep for; a freed slot wakes the loop.
        const now = yield* Heartbeat.monotonicMillis
        const untilSweep = atCapacity
          ? pollMs
          : sweepAgain
          ? 0
          : Math.min(pollMs, Math.max(0, lastSweepAt + pollMs - now))
        yield* Effect.timeoutOption(Queue.take(wake), Duration.millis(untilSweep))
      }
    }))

    // Key limits: declared before the first claim, so no run of this worker's kinds is claimed
    // under an older limit by this worker.
    if (options.keyLimits !== undefined && options.keyLimits.length > 0) {
      yield* store.setKeyLimits(options.keyLimits).pipe(
        Effect.tapError((error) =>
          events.emit({ _tag: "StoreError", owner, operation: "set key limits", error: String(error) })
        ),
        Effect.retry({ schedule: claimErrors, while: (error) => error._tag === "StoreError" }),
        Effect.catchTag("StoreError", Effect.die)
      )
    }

    if (options.rateLimits !== undefined && options.rateLimits.length > 0) {
      yield* store.setRateLimits(options.rateLimits).pipe(
        Effect.tapError((error) =>
          events.emit({ _tag: "StoreError", owner, operation: "set rate limits", error: String(error) })
        ),
        Effect.retry({ schedule: claimErrors, while: (error) => error._tag === "StoreError" }),
        Effect.catchTag("StoreError", Effect.die)
      )
    }

    // Schedules: registered once at start, then ticked by this worker unless told not to (ScheduleTicker).
    yield* ScheduleTicker.register(store, events, owner, options.schedules)
    const ticker = yield* ScheduleTicker.make(store, events, owner, traced)

    const onNotification = (note: StoreNotification): Effect.Effect<void> => {
      // Listening again after a reconnect: a schedule change may have gone unheard meanwhile.
      // Runs enqueued before then were announced to no one here: claim once now, not at the next poll.
      if (note._tag === "Subscribed") {
        listening = true
        return Effect.andThen(Effect.andThen(ticker.wake, signalWake), events.emit({ _tag: "Listening", owner }))
      }
      if (note._tag === "RunsAvailable") return config.queues.includes(note.queue) ? signalWake : Effect.void
      if (note._tag === "SchedulesChanged") return ticker.wake
      return Effect.forEach(
        [...inFlight].filter((entry) => entry.run.id === note.runId),
        (entry) => Heartbeat.loseLease(owner, entry, "cancelled"),
        { discard: true }
      )
    }
    const listenLoop = store.notifications.pipe(
      Stream.runForEach(onNotification),
      Effect.ensuring(Effect.sync(() => {
        listening = false
      })),
      Effect.tapError((error) => events.emit({ _tag: "StoreError", owner, operation: "listen", error: String(error) })),
      // Notifications only speed things up: polling still works while listening is down.
      Effect.retry(claimErrors),
      Effect.ignore
    )

    yield* Effect.forkScoped(reporting(listenLoop))
    const claiming = yield* Effect.forkScoped(claimLoop)
    if (options.tickSchedules !== false) yield* Effect.forkScoped(reporting(ticker.loop))
    if (config.retention !== false) yield* Effect.forkScoped(Retention.maintain(store, config.retention))
    // One line at start, through Effect's logger (an application replaces it with its own `Logger`).
    yield* annotated(Effect.logInfo(
      `leasehold worker ${owner} started: queues ${config.queues.join(", ")}, concurrency ${config.concurrency}`
    ))
    // The claim loop retries every store error forever, so it ends only with a defect: the worker
    // then fails with it (its runs drain as at shutdown) instead of heartbeating on, announced in
    // the registry, while it claims nothing.
    return yield* Effect.orDie(Fiber.join(claiming))
  }))

/** What the worker keeps of each handler, compiled once at start. */
interface Compiled {
  readonly handle: (payload: any) => Effect.Effect<unknown, unknown, any>
  readonly decode: ReturnType<typeof Handler.payloadDecoder>
  readonly encodeResult: ReturnType<typeof Handler.resultEncoder>
  readonly retry: Handler.Handler["retry"]
  readonly attemptTimeoutMs: number | undefined
  readonly keepLogs: KeepLogs
}

// A run of a kind without a handler fails before it has a result; this only keeps the entry whole.
const schemaless = Handler.encoderFor<unknown>(undefined)

const runFibers = (inFlight: InFlight): Array<Fiber.Fiber<unknown, unknown>> => {
  const fibers: Array<Fiber.Fiber<unknown, unknown>> = []
  for (const entry of inFlight) if (entry.fiber !== undefined) fibers.push(entry.fiber)
  return fibers
}

const drain = (owner: string, inFlight: InFlight, idle: Latch.Latch, grace: Duration.Duration) =>
  Effect.gen(function*() {
    yield* Effect.timeoutOption(idle.await, grace)
    for (const entry of inFlight) yield* Heartbeat.loseLease(owner, entry, "shutdown")
  })
