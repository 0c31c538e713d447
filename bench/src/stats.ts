/** Small statistics over repeats and samples. */

export const median = (values: ReadonlyArray<number>): number => quantile(values, 0.5)

/** Linear-interpolated quantile (q in [0, 1]); NaN for no values. */
export const quantile = (values: ReadonlyArray<number>, q: number): number => {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const pos = (sorted.length - 1) * q
  const lo = Math.floor(pos)
  const hi = Math.ceil(pos)
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo)
}

/** Median with min and max, as every measure reports it over repeats. */
export interface Spread {
  readonly median: number
  readonly min: number
  readonly max: number
  readonly values: ReadonlyArray<number>
}

export const spread = (values: ReadonlyArray<number>): Spread => ({
  median: median(values),
  min: values.length === 0 ? Number.NaN : Math.min(...values),
  max: values.length === 0 ? Number.NaN : Math.max(...values),
  values: [...values]
})

/**
 * Milliseconds on the machine's monotonic clock (`process.hrtime`, CLOCK_MONOTONIC on Linux), with
 * sub-millisecond resolution: one timeline for every process on this machine. (Each process's
 * `performance.timeOrigin` is the wall clock read at its start, so two processes' `timeOrigin +
 * now()` disagree by whatever the wall clock was adjusted meanwhile: a steady-state pickup
 * measured across processes once came out below zero.)
 */
export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1_000_000

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
