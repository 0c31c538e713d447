/**
 * The worker's metrics, recorded from its events (`WorkerEvents`) into Effect's metric registry,
 * where `PrometheusMetrics` and `OtlpMetrics` read them. Off unless a worker is run with
 * `metrics: true`: then its events pass through `sink` on their way to the configured sink, and a
 * sampler reads queue depths from the store. With metrics off nothing here runs.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Metric } from "effect"
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

// A tagged series per combination of attributes, made once.
const series = new Map<string, Metric.Metric<number, unknown>>()
const tagged = <M extends Metric.Metric<number, unknown>>(metric: M, attributes: Record<string, string>): M => {
  const key = `${metric.id}\u0000${Object.entries(attributes).flat().join("\u0000")}`
  let found = series.get(key)
  if (found === undefined) {
    found = Metric.withAttributes(metric, attributes) as Metric.Metric<number, unknown>
    series.set(key, found)
  }
  return found as M
}

const record = (event: WorkerEvent, inFlight: { count: number }): Effect.Effect<void> => {
  switch (event._tag) {
    case "Claimed": {
      const by = { queue: event.queue, kind: event.kind }
      inFlight.count++
      return Effect.all([
        Metric.update(tagged(metrics.claimed, { ...by, via: event.via }), 1),
        Metric.update(tagged(metrics.wait, by), event.waitMs / 1000),
        Metric.update(metrics.inFlight, inFlight.count)
      ], { discard: true })
    }
    case "RunSettled": {
      const by = { queue: event.queue, kind: event.kind }
      inFlight.count = Math.max(0, inFlight.count - 1)
      return Effect.all([
        Metric.update(tagged(metrics.settled, { ...by, outcome: event.outcome }), 1),
        Metric.update(tagged(metrics.duration, by), event.durationMs / 1000),
        Metric.update(metrics.inFlight, inFlight.count)
      ], { discard: true })
    }
    case "LeaseLost":
      return Metric.update(tagged(metrics.leasesLost, { reason: event.reason }), 1)
    case "WriteRejected":
      return Metric.update(tagged(metrics.fenceRejections, { operation: event.operation }), 1)
    case "HeartbeatConfirmed":
      return Effect.all([
        Metric.update(metrics.renewalDuration, event.durationMs / 1000),
        Metric.update(metrics.renewalLeases, event.renewed.length + event.lost.length)
      ], { discard: true })
    case "ClaimBatch":
      return Effect.all([
        Metric.update(metrics.claimDuration, event.durationMs / 1000),
        Metric.update(metrics.claimBatch, event.count)
      ], { discard: true })
    case "CompletionFlush":
      return Effect.all([
        Metric.update(metrics.completionDuration, event.durationMs / 1000),
        Metric.update(metrics.completionBatch, event.count)
      ], { discard: true })
    case "StoreError":
    case "HeartbeatFailed":
      return Metric.update(tagged(metrics.storeErrors, { operation: event._tag === "StoreError" ? event.operation : "renew" }), 1)
    default:
      return Effect.void
  }
}

/**
 * A sink that records each event's metrics, then hands the event on to `next`.
 *
 * @category constructors
 */
export const sink = (next: Sink): Sink => {
  const inFlight = { count: 0 }
  return { emit: (event) => Effect.andThen(record(event, inFlight), next.emit(event)) }
}

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
            ...stats.byStateAndQueue.map((row) => Metric.update(tagged(metrics.queueRuns, { queue: row.queue, state: row.state }), row.count)),
            Metric.update(metrics.oldestDue, stats.oldestPendingSeconds ?? 0)
          ], { discard: true })
        ),
        Effect.ignore
      ),
      Effect.sleep(Duration.fromInputUnsafe(interval))
    )
  )
