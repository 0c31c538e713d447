/**
 * The worker's metrics, recorded from its events (`WorkerEvents`) into Effect's metric registry,
 * where `PrometheusMetrics` and `OtlpMetrics` read them. Off unless a worker is run with
 * `metrics: true`: then its events pass through `sink` on their way to the configured sink, and a
 * sampler reads queue depths from the store. With metrics off nothing here runs.
 *
 * @since 0.1.0
 */
import { type Context, Duration, Effect, Metric, type Scope } from "effect"
import type { RunStore } from "./RunStore.js"
import type { Sink, WorkerEvent } from "./WorkerEvents.js"

const seconds = Metric.exponentialBoundaries({ start: 0.001, factor: 2, count: 18 }) // 1 ms … ~2 min
const sizes = Metric.exponentialBoundaries({ start: 1, factor: 2, count: 14 }) // 1 … 8,192

/** Metric names and what each counts, for dashboards. @category metrics */
export const metrics = {
  claimed: Metric.counter("leasehold_runs_claimed_total", { description: "Runs claimed, by queue, kind and via (due, expired, timed-out)", incremental: true }),
  settled: Metric.counter("leasehold_runs_settled_total", {
    description: "Runs settled by a worker, by queue, kind and outcome (completed, failed, retry-scheduled, released, suspended, abandoned)",
    incremental: true
  }),
  duration: Metric.histogram("leasehold_run_duration_seconds", { description: "From claim to settlement, by queue and kind", boundaries: seconds }),
  wait: Metric.histogram("leasehold_run_wait_seconds", { description: "From due to claim, by queue and kind", boundaries: seconds }),
  inFlight: Metric.gauge("leasehold_runs_in_flight", { description: "Runs held by this worker" }),
  leasesLost: Metric.counter("leasehold_leases_lost_total", { description: "Leases a worker stopped, by reason", incremental: true }),
  fenceRejections: Metric.counter("leasehold_fence_rejections_total", { description: "Writes rejected by the fence, by operation", incremental: true }),
  renewalDuration: Metric.histogram("leasehold_renewal_duration_seconds", { description: "One renewal statement", boundaries: seconds }),
  renewalLeases: Metric.histogram("leasehold_renewal_leases", { description: "Leases carried by one renewal statement", boundaries: sizes }),
  claimDuration: Metric.histogram("leasehold_claim_duration_seconds", { description: "One claim statement", boundaries: seconds }),
  claimBatch: Metric.histogram("leasehold_claim_batch_size", { description: "Runs taken by one claim statement", boundaries: sizes }),
  completionDuration: Metric.histogram("leasehold_completion_duration_seconds", { description: "One batched completion statement", boundaries: seconds }),
  completionBatch: Metric.histogram("leasehold_completion_batch_size", { description: "Runs completed by one statement", boundaries: sizes }),
  storeErrors: Metric.counter("leasehold_store_errors_total", { description: "Store calls that failed, by operation", incremental: true }),
  queueRuns: Metric.gauge("leasehold_queue_runs", { description: "Runs by queue and state (sampled)" }),
  oldestDue: Metric.gauge("leasehold_oldest_due_seconds", { description: "How long the oldest due run has waited (sampled)" })
} as const

// A tagged series per combination of attributes, made once and found again without building a key
// string: one nested map level per attribute value.
type Series = Metric.Metric<number, unknown>
interface Level {
  series?: Series
  readonly next: Map<string, Level>
}
const roots = new Map<Series, Level>()
const tagged = <M extends Series>(metric: M, names: ReadonlyArray<string>, values: ReadonlyArray<string>): M => {
  let level: Level | undefined = roots.get(metric)
  if (level === undefined) {
    level = { next: new Map() }
    roots.set(metric, level)
  }
  for (const value of values) {
    let next: Level | undefined = level.next.get(value)
    if (next === undefined) {
      next = { next: new Map() }
      level.next.set(value, next)
    }
    level = next
  }
  if (level.series === undefined) {
    level.series = Metric.withAttributes(metric, Object.fromEntries(names.map((name, i) => [name, values[i]!]))) as Series
  }
  return level.series as M
}

const seconds1000 = (ms: number) => ms / 1000

/** Records one event's metrics synchronously (the worker emits per run: no effect is built for it). */
const recorder = (context: Context.Context<never>) => {
  const add = (metric: Series, value: number) => metric.updateUnsafe(value, context)
  return (event: WorkerEvent): void => {
    switch (event._tag) {
      case "Claimed":
        add(tagged(metrics.claimed, ["queue", "kind", "via"], [event.queue, event.kind, event.via]), 1)
        return add(tagged(metrics.wait, ["queue", "kind"], [event.queue, event.kind]), seconds1000(event.waitMs))
      case "RunSettled":
        add(tagged(metrics.settled, ["queue", "kind", "outcome"], [event.queue, event.kind, event.outcome]), 1)
        return add(tagged(metrics.duration, ["queue", "kind"], [event.queue, event.kind]), seconds1000(event.durationMs))
      case "LeaseLost":
        return add(tagged(metrics.leasesLost, ["reason"], [event.reason]), 1)
      case "WriteRejected":
        return add(tagged(metrics.fenceRejections, ["operation"], [event.operation]), 1)
      case "HeartbeatConfirmed":
        add(metrics.renewalDuration, seconds1000(event.durationMs))
        return add(metrics.renewalLeases, event.renewed.length + event.lost.length)
      case "ClaimBatch":
        add(metrics.claimDuration, seconds1000(event.durationMs))
        return add(metrics.claimBatch, event.count)
      case "CompletionFlush":
        add(metrics.completionDuration, seconds1000(event.durationMs))
        return add(metrics.completionBatch, event.count)
      case "StoreError":
        return add(tagged(metrics.storeErrors, ["operation"], [event.operation]), 1)
      case "HeartbeatFailed":
        return add(tagged(metrics.storeErrors, ["operation"], ["renew"]), 1)
    }
  }
}

/**
 * A sink that records each event's metrics (into the metric registry of the context it is made
 * in), then hands the event on to `next`. The in-flight gauge reads `inFlight` when it is
 * scraped (nothing is written per run for it), for as long as the scope is open.
 *
 * @category constructors
 */
export const sink = (next: Sink, inFlight: () => number): Effect.Effect<Sink, never, Scope.Scope> =>
  Effect.gen(function*() {
    const context = yield* Effect.context<never>()
    const registration = Metric.registerUnsafe(metrics.inFlight, context, {
      get: () => ({ value: inFlight() }),
      update: () => {},
      modify: () => {}
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => registration.remove()))
    const record = recorder(context)
    return {
      emit: (event) => {
        record(event)
        return next.emit(event)
      }
    } satisfies Sink
  })

/**
 * Samples runs by queue and state and the oldest due run's wait from the store's counters, every
 * `interval`, forever. (Sampled rather than counted per transition: a counter row updated on every
 * claim would be the hottest row in the database.)
 *
 * @category constructors
 */
export const sampler = (store: RunStore["Service"], interval: Duration.Input = "10 seconds"): Effect.Effect<never> =>
  Effect.forever(
    Effect.andThen(
      store.stats.pipe(
        Effect.flatMap((stats) =>
          Effect.all([
            ...stats.byStateAndQueue.map((row) => Metric.update(tagged(metrics.queueRuns, ["queue", "state"], [row.queue, row.state]), row.count)),
            Metric.update(metrics.oldestDue, stats.oldestPendingSeconds ?? 0)
          ], { discard: true })
        ),
        Effect.ignore
      ),
      Effect.sleep(Duration.fromInputUnsafe(interval))
    )
  )
