/**
 * The schedule ticker: fires the due ticks of every schedule in its store, and sleeps until the
 * next one by the store's clock. However many tickers run, each tick yields one run (`Schedules`).
 *
 * A worker runs one unless told otherwise (`Worker.run({ tickSchedules: false })`), sharing its
 * LISTEN for wake-ups. `layer` runs one apart from any worker, on its own LISTEN: as Effect's
 * `ClusterCron` lives apart from `Sharding`, ticking has nothing to do with leasing runs.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Layer, Queue, Schedule, Stream } from "effect"
import * as os from "node:os"
import type { InvalidConfig } from "./Errors.js"
import * as RunSpans from "./internal/RunSpans.js"
import { RunStore, type StoreNotification } from "./RunStore.js"
import type * as Schedules from "./Schedules.js"
import * as Telemetry from "./Telemetry.js"
import * as WorkerEvents from "./WorkerEvents.js"

/** @category models */
export interface TickerOptions {
  /**
   * Schedules registered when the ticker starts (`Schedules.ScheduleDefinition`): registering the
   * same definition from many places yields one schedule. The ticker ticks every schedule of its
   * store, wherever it was registered.
   */
  readonly schedules?: ReadonlyArray<Schedules.ScheduleDefinition> | undefined
  /** The name its events carry (`WorkerEvents`). Default `schedule-ticker:host:pid`. */
  readonly owner?: string | undefined
  /** Trace the rounds that fire. Default: `Telemetry.TraceRuns`. */
  readonly traces?: boolean | undefined
}

/**
 * A ticker whose wake-ups come from elsewhere (a worker's notifications): `loop` ticks until
 * interrupted, `wake` asks it for a round now.
 *
 * @category models
 */
export interface Ticker {
  readonly loop: Effect.Effect<never>
  /** A schedule changed, or notifications came back after a gap in which one may have. */
  readonly wake: Effect.Effect<void>
}

const storeErrors = Schedule.exponential("100 millis").pipe(
  Schedule.modifyDelay(({ duration }) => Effect.succeed(Duration.min(duration, Duration.seconds(5))))
)

/**
 * Registers `schedules`, retrying while the store is unreachable. A definition the store refuses
 * fails with `InvalidConfig`, and nothing is registered.
 *
 * @category running
 */
export const register = (
  store: RunStore["Service"],
  events: WorkerEvents.Sink,
  owner: string,
  schedules: ReadonlyArray<Schedules.ScheduleDefinition> | undefined
): Effect.Effect<void, InvalidConfig> =>
  schedules === undefined || schedules.length === 0 ? Effect.void : store.registerSchedules(schedules).pipe(
    Effect.tapError((error) =>
      events.emit({ _tag: "StoreError", owner, operation: "register schedules", error: String(error) })
    ),
    Effect.retry({ schedule: storeErrors, while: (error) => error._tag === "StoreError" }),
    Effect.catchTag("StoreError", Effect.die),
    Effect.asVoid
  )

/**
 * The tick loop over `store`, reporting to `events`. The caller forks `loop` and calls `wake` when
 * its notifications say a schedule changed.
 *
 * @category constructors
 */
export const make = (
  store: RunStore["Service"],
  events: WorkerEvents.Sink,
  owner: string,
  traced: boolean
): Effect.Effect<Ticker> =>
  Effect.gen(function*() {
    const wakes = yield* Queue.sliding<void>(1)
    // A round that fires nothing traces nothing, as an empty claim (RunSpans.recordedIf).
    const tickStatement = traced
      ? RunSpans.recordedIf(
        "leasehold.tick_schedules",
        {},
        (exit) => Exit.isFailure(exit) || exit.value.fired.length > 0,
        ({ fired }) => ({ "leasehold.fired": fired.length }),
        store.tickSchedules
      )
      : Effect.withTracerEnabled(store.tickSchedules, false)
    // Whatever goes wrong in one round (a store error, a defect) is reported and the next round
    // comes a second later: schedules keep ticking as long as the ticker runs.
    const tickRound = tickStatement.pipe(
      Effect.catchCause((cause) =>
        Effect.as(
          events.emit({ _tag: "StoreError", owner, operation: "tick schedules", error: String(Cause.squash(cause)) }),
          {
            fired: [],
            nextInMs: 1_000
          }
        )
      )
    )
    // Sleeps until the next tick by the store's clock, at most a minute in case a wake-up was missed.
    const loop = Effect.forever(Effect.gen(function*() {
      const { fired, nextInMs } = yield* tickRound
      // A due schedule another ticker holds at this moment: look again shortly, not at once.
      const wait = nextInMs === null ? 60_000 : Math.min(60_000, Math.max(fired.length > 0 ? 0 : 100, nextInMs))
      yield* Effect.timeoutOption(Queue.take(wakes), Duration.millis(wait))
    }))
    return { loop, wake: Queue.offer(wakes, undefined).pipe(Effect.asVoid) }
  })

// A schedule changed, or notifications are back after a gap in which one may have.
const wakesTicker = (note: StoreNotification): boolean => note._tag === "SchedulesChanged" || note._tag === "Subscribed"

const standalone = (options: TickerOptions) =>
  Effect.gen(function*() {
    const store = yield* RunStore
    const events = yield* WorkerEvents.WorkerEvents
    const owner = options.owner ?? `schedule-ticker:${os.hostname()}:${process.pid}`
    const traced = options.traces ?? (yield* Telemetry.TraceRuns)
    yield* register(store, events, owner, options.schedules)
    const ticker = yield* make(store, events, owner, traced)
    const listen = store.notifications.pipe(
      Stream.runForEach((note) => wakesTicker(note) ? ticker.wake : Effect.void),
      Effect.tapError((error) => events.emit({ _tag: "StoreError", owner, operation: "listen", error: String(error) })),
      // Notifications only bring ticks forward: without them the ticker still wakes each minute.
      Effect.retry(storeErrors),
      Effect.ignore
    )
    return Effect.andThen(Effect.forkScoped(listen), ticker.loop)
  })

/**
 * A ticker on its own: registers `options.schedules`, then ticks until interrupted, woken by the
 * store's notifications (one LISTEN connection of its own on PostgreSQL). Reports to
 * `WorkerEvents`.
 *
 * @category running
 */
export const run = (options: TickerOptions = {}): Effect.Effect<never, InvalidConfig, RunStore> =>
  Effect.scoped(Effect.flatten(standalone(options)))

/**
 * A ticker (`run`) for as long as the layer lives, for an application whose workers are told not
 * to tick (`Worker.run({ tickSchedules: false })`) or that has none. The schedules are registered
 * while the layer is built: a definition the store refuses fails it with `InvalidConfig`.
 *
 * @category layers
 */
export const layer = (options: TickerOptions = {}): Layer.Layer<never, InvalidConfig, RunStore> =>
  Layer.effectDiscard(Effect.flatMap(standalone(options), Effect.forkScoped))
