/**
 * The worker's metrics, recorded from its events (`WorkerEvents`) into Effect's metric registry,
 * where `PrometheusMetrics` and `OtlpMetrics` read them. Off unless a worker is run with
 * `metrics: true`: then its events pass through `sink` on their way to the configured sink, and a
 * sampler reads queue depths from the store. With metrics off nothing here runs.
 *
 * @since 0.1.0
 */
import { type Context, Duration, Effect, Metric, type Scope } from "effect"
import type { RunStore, Stats } from "./RunStore.js"
import type { Sink, WorkerEvent } from "./WorkerEvents.js"

const seconds = Metric.exponentialBoundaries({ start: 0.001, factor: 2, count: 18 }) // 1 ms … ~2 min
const sizes = Metric.exponentialBoundaries({ start: 1, factor: 2, count: 14 }) // 1 … 8,192
// The unit OTLP exports (as UCUM "s"; without it, "1"); Prometheus's text leaves this attribute out.
const inSeconds = { unit: "seconds" } as const

/** Metric names and what each counts, for dashboards. @category metrics */
export const metrics = {
  claimed: Metric.counter("leasehold_runs_claimed_total", {
    description: "Runs claimed, by queue, kind and via (due, expired, timed-out)",
    incremental: true
  }),
  settled: Metric.counter("leasehold_runs_settled_total", {
    description:
      "Runs settled by a worker, by queue, kind and outcome (completed, failed, retry-scheduled, released, snoozed, suspended, abandoned)",
    incremental: true
  }),
  duration: Metric.histogram("leasehold_run_duration_seconds", {
    description: "From claim to settlement, by queue and kind",
    boundaries: seconds,
    attributes: inSeconds
  }),
  wait: Metric.histogram("leasehold_run_wait_seconds", {
    description: "From due to claim, by queue and kind",
    boundaries: seconds,
    attributes: inSeconds
  }),
  inFlight: Metric.gauge("leasehold_runs_in_flight", { description: "Runs held by this worker" }),
  leasesLost: Metric.counter("leasehold_leases_lost_total", {
    description: "Leases a worker stopped, by reason",
    incremental: true
  }),
  fenceRejections: Metric.counter("leasehold_fence_rejections_total", {
    description: "Writes rejected by the fence, by operation",
    incremental: true
  }),
  renewalDuration: Metric.histogram("leasehold_renewal_duration_seconds", {
    description: "One renewal statement",
    boundaries: seconds,
    attributes: inSeconds
  }),
  renewalLeases: Metric.histogram("leasehold_renewal_leases", {
    description: "Leases carried by one renewal statement",
    boundaries: sizes
  }),
  claimDuration: Metric.histogram("leasehold_claim_duration_seconds", {
    description: "One claim statement",
    boundaries: seconds,
    attributes: inSeconds
  }),
  claimBatch: Metric.histogram("leasehold_claim_batch_size", {
    description: "Runs taken by one claim statement",
    boundaries: sizes
  }),
  completionDuration: Metric.histogram("leasehold_completion_duration_seconds", {
    description: "One batched completion statement",
    boundaries: seconds,
    attributes: inSeconds
  }),
  completionBatch: Metric.histogram("leasehold_completion_batch_size", {
    description: "Runs completed by one statement",
    boundaries: sizes
  }),
  storeErrors: Metric.counter("leasehold_store_errors_total", {
    description: "Store calls that failed, by operation",
    incremental: true
  }),
  queueRuns: Metric.gauge("leasehold_queue_runs", { description: "Runs by queue and state (sampled)" }),
  oldestDue: Metric.gauge("leasehold_oldest_due_seconds", {
    description: "How long the oldest due run has waited (sampled)",
    attributes: inSeconds
  }),
  queueDue: Metric.gauge("leasehold_queue_due_runs", {
    description: "Due runs waiting for a claim, by queue (sampled)"
  }),
  queueOldestDue: Metric.gauge("leasehold_queue_oldest_due_seconds", {
    description: "How long each queue's oldest due run has waited (sampled)",
    attributes: inSeconds
  }),
  enqueued: Metric.counter("leasehold_runs_enqueued_total", {
    description: "Runs enqueued through Client, by queue and kind",
    incremental: true
  }),
  cancelled: Metric.counter("leasehold_runs_cancelled_total", {
    description: "Runs cancelled through Client",
    incremental: true
  })
} as const

// Each series keeps its own state and is registered in the metric registry with a `get` hook
// (`Metric.registerUnsafe`): recording is an increment on a plain number, with no registry lookup
// or context copy per run; the registry reads the state when it is scraped or exported.
interface Series {
  readonly add: (value: number) => void
}

const counterSeries = (
  metric: Metric.Metric<number, unknown>,
  context: Context.Context<never>,
  scope: Array<Metric.Registration>
): Series => {
  let count = 0
  scope.push(Metric.registerUnsafe(metric as Metric.Counter<number>, context, {
    get: () => ({ count, incremental: true }),
    update: () => {},
    modify: () => {}
  }))
  return { add: (value) => void (count += value) }
}

const histogramSeries = (
  metric: Metric.Metric<number, unknown>,
  boundaries: ReadonlyArray<number>,
  context: Context.Context<never>,
  scope: Array<Metric.Registration>
): Series => {
  const buckets = new Uint32Array(boundaries.length + 1)
  let count = 0
  let sum = 0
  let min = Number.MAX_VALUE
  let max = -Number.MAX_VALUE
  scope.push(Metric.registerUnsafe(metric as Metric.Histogram<number>, context, {
    get: () => {
      let cumulated = 0
      return {
        buckets: boundaries.map((boundary, i): [number, number] => [boundary, cumulated += buckets[i]!]),
        count,
        min,
        max,
        sum
      }
    },
    update: () => {},
    modify: () => {}
  }))
  return {
    add: (value) => {
      // The first boundary at or above the value (binary search); past the last, the overflow.
      let low = 0
      let high = boundaries.length
      while (low < high) {
        const mid = (low + high) >>> 1
        if (value <= boundaries[mid]!) high = mid
        else low = mid + 1
      }
      buckets[low]!++
      count++
      sum += value
      if (value < min) min = value
      if (value > max) max = value
    }
  }
}

interface Level {
  series?: Series
  readonly next: Map<string, Level>
}

/** The series of `metric` for these attribute values, registered on first use. */
const seriesTable = (context: Context.Context<never>, scope: Array<Metric.Registration>) => {
  const roots = new Map<unknown, Level>()
  return (
    metric: Metric.Metric<number, unknown>,
    boundaries: ReadonlyArray<number> | undefined,
    names: ReadonlyArray<string>,
    values: ReadonlyArray<string>
  ): Series => {
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
      const tagged = names.length === 0
        ? metric
        : Metric.withAttributes(
          metric,
          Object.fromEntries(names.map((name, i) => [name, values[i]!]))
        ) as Metric.Metric<number, unknown>
      level.series = boundaries === undefined
        ? counterSeries(tagged, context, scope)
        : histogramSeries(tagged, boundaries, context, scope)
    }
    return level.series
  }
}

const seconds1000 = (ms: number) => ms / 1000
const none: ReadonlyArray<string> = []

/** Records one event's metrics synchronously (the worker emits per run: no effect is built for it). */
const recorder = (context: Context.Context<never>, scope: Array<Metric.Registration>) => {
  const series = seriesTable(context, scope)
  const count = (metric: Metric.Metric<number, unknown>, names: ReadonlyArray<string>, values: ReadonlyArray<string>) =>
    series(metric, undefined, names, values).add(1)
  const observe = (
    metric: Metric.Metric<number, unknown>,
    boundaries: ReadonlyArray<number>,
    value: number,
    names: ReadonlyArray<string> = none,
    values: ReadonlyArray<string> = none
  ) => series(metric, boundaries, names, values).add(value)
  return (event: WorkerEvent): void => {
    switch (event._tag) {
      case "Claimed":
        count(metrics.claimed, ["queue", "kind", "via"], [event.queue, event.kind, event.via])
        return observe(metrics.wait, seconds, seconds1000(event.waitMs), ["queue", "kind"], [event.queue, event.kind])
      case "RunSettled":
        count(metrics.settled, ["queue", "kind", "outcome"], [event.queue, event.kind, event.outcome])
        return observe(metrics.duration, seconds, seconds1000(event.durationMs), ["queue", "kind"], [
          event.queue,
          event.kind
        ])
      case "LeaseLost":
        return count(metrics.leasesLost, ["reason"], [event.reason])
      case "WriteRejected":
        return count(metrics.fenceRejections, ["operation"], [event.operation])
      case "HeartbeatConfirmed":
        observe(metrics.renewalDuration, seconds, seconds1000(event.durationMs))
        return observe(metrics.renewalLeases, sizes, event.renewed.length + event.lost.length)
      case "ClaimBatch":
        observe(metrics.claimDuration, seconds, seconds1000(event.durationMs))
        return observe(metrics.claimBatch, sizes, event.count)
      case "CompletionFlush":
        observe(metrics.completionDuration, seconds, seconds1000(event.durationMs))
        return observe(metrics.completionBatch, sizes, event.count)
      case "StoreError":
        return count(metrics.storeErrors, ["operation"], [event.operation])
      case "HeartbeatFailed":
        return count(metrics.storeErrors, ["operation"], ["renew"])
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
    const registrations: Array<Metric.Registration> = [registration]
    yield* Effect.addFinalizer(() => Effect.sync(() => registrations.forEach((r) => r.remove())))
    const record = recorder(context, registrations)
    return {
      emit: (event) => {
        record(event)
        return next.emit(event)
      }
    } satisfies Sink
  })

/** One sample: each gauge series (a metric with its attributes) and its value. */
type Sample = Map<string, { readonly metric: Metric.Metric<number, unknown>; readonly value: number }>

const sampleOf = (stats: Stats): Sample => {
  const sample: Sample = new Map()
  const put = (metric: Metric.Metric<number, unknown>, attributes: Record<string, string>, value: number) =>
    sample.set(`${metric.id}\u0000${JSON.stringify(attributes)}`, {
      metric: Metric.withAttributes(metric, attributes),
      value
    })
  for (const row of stats.byStateAndQueue) put(metrics.queueRuns, { queue: row.queue, state: row.state }, row.count)
  put(metrics.oldestDue, {}, stats.oldestPendingSeconds ?? 0)
  for (const row of stats.dueByQueue) {
    put(metrics.queueDue, { queue: row.queue }, row.due)
    put(metrics.queueOldestDue, { queue: row.queue }, row.oldestDueSeconds)
  }
  return sample
}

/**
 * Samples runs by queue and state and the oldest due run's wait from the store's counters, every
 * `interval`, forever. (Sampled rather than counted per transition: a counter row updated on every
 * claim would be the hottest row in the database.) A series the last sample had and this one has
 * not (its queue's runs all ended) is set to 0: left as it was, it would report the old count for
 * ever. Sampling makes no trace: it is the worker's background, not a run's work.
 *
 * @category constructors
 */
export const sampler = (store: RunStore["Service"], interval: Duration.Input = "10 seconds"): Effect.Effect<never> =>
  Effect.suspend(() => {
    let previous: Sample = new Map()
    const record = (sample: Sample) =>
      Effect.andThen(
        Effect.forEach(
          [...previous].filter(([key]) => !sample.has(key)),
          ([, { metric }]) => Metric.update(metric, 0),
          { discard: true }
        ),
        Effect.forEach(sample.values(), ({ metric, value }) => Metric.update(metric, value), { discard: true })
      ).pipe(Effect.andThen(Effect.sync(() => void (previous = sample))))
    return Effect.forever(
      // Waits first: a worker starting on a large backlog does not add a count of it to its first
      // seconds, and steady state pays one sample per interval.
      Effect.andThen(
        Effect.sleep(Duration.fromInputUnsafe(interval)),
        store.stats.pipe(Effect.map(sampleOf), Effect.flatMap(record), Effect.ignore)
      )
    ).pipe(Effect.withTracerEnabled(false))
  })
