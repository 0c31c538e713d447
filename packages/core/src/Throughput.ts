/**
 * Throughput, for operators: per queue and minute, the runs that completed and failed and how long
 * they waited (due → claimed) and ran (claimed → finished), as percentiles. Read by
 * `RunStore.throughput`, shown by the console's charts and `leasehold stats`.
 *
 * @since 0.1.0
 */

/** @category models */
export interface ThroughputRequest {
  /** The window, in whole minutes back from the store's now (1 to 1440). */
  readonly minutes: number
  /**
   * The most finished runs read (the latest finished first); more in the window are left out and
   * `Throughput.truncated` says so. Default: `ThroughputStorage.defaultMaxRuns` (`@leasehold/core/store`).
   */
  readonly maxRuns?: number | undefined
}

/** Milliseconds at the 50th, 95th and 99th percentiles. @category models */
export interface Percentiles {
  readonly p50: number
  readonly p95: number
  readonly p99: number
}

/** @category models */
export interface ThroughputMinute {
  readonly queue: string
  /** The minute's start, by the store's clock. */
  readonly minute: Date
  readonly completed: number
  readonly failed: number
  /** From due to claimed, of the attempt that finished; null when no run of the minute has a claim recorded. */
  readonly waitMs: Percentiles | null
  /** From claimed to finished, of the attempt that finished. */
  readonly runMs: Percentiles | null
}

/** @category models */
export interface Throughput {
  /** The window's start (a minute's start), by the store's clock. */
  readonly since: Date
  readonly minutes: number
  /** By minute, then queue; minutes in which nothing finished are absent. */
  readonly series: ReadonlyArray<ThroughputMinute>
  /** More runs finished in the window than `maxRuns`: the oldest of them are not counted. */
  readonly truncated: boolean
}
