/**
 * How every store reads throughput (`RunStore.throughput`): the request's check, the window, the
 * percentiles as PostgreSQL's `percentile_cont` computes them, and the memory store's summary of
 * finished runs. For store implementers (`@leasehold/core/store`); users read `Throughput`.
 *
 * @since 0.1.0
 */
import { Exit } from "effect"
import { InvalidConfig } from "./Errors.js"
import type { Percentiles, Throughput, ThroughputMinute, ThroughputRequest } from "./Throughput.js"

/** Finished runs a throughput read takes at most by default. @category constants */
export const defaultMaxRuns = 200_000

/** One finished run, as the memory store reads it. @category models */
export interface FinishedRun {
  readonly queue: string
  readonly state: "completed" | "failed"
  readonly finishedAt: number
  readonly claimedAt: number | null
  readonly dueAt: number
}

const minuteMs = 60_000

/**
 * A percentile by linear interpolation between the closest ranks, as PostgreSQL's
 * `percentile_cont` computes it, of values sorted ascending.
 *
 * @category math
 */
export const percentile = (sorted: ReadonlyArray<number>, fraction: number): number => {
  if (sorted.length === 0) return Number.NaN
  const rank = fraction * (sorted.length - 1)
  const low = Math.floor(rank)
  const high = Math.ceil(rank)
  return sorted[low]! + (sorted[high]! - sorted[low]!) * (rank - low)
}

const percentiles = (values: Array<number>): Percentiles | null => {
  if (values.length === 0) return null
  values.sort((a, b) => a - b)
  return { p50: percentile(values, 0.5), p95: percentile(values, 0.95), p99: percentile(values, 0.99) }
}

/**
 * The window `minutes` back from `now`, starting at a minute's start: the minute `now` is in and
 * the `minutes - 1` before it.
 *
 * @category math
 */
export const windowStart = (now: number, minutes: number): number =>
  Math.floor(now / minuteMs) * minuteMs - (minutes - 1) * minuteMs

/**
 * The throughput of finished runs: the ones in the window, latest finished first up to `maxRuns`,
 * per queue and minute (the memory store's read; `PgRunStore` does the same in SQL).
 *
 * @category constructors
 */
export const summarize = (runs: Iterable<FinishedRun>, now: number, request: ThroughputRequest): Throughput => {
  const since = windowStart(now, request.minutes)
  const inWindow = [...runs].filter((r) => r.finishedAt >= since).sort((a, b) => b.finishedAt - a.finishedAt)
  const maxRuns = request.maxRuns ?? defaultMaxRuns
  const taken = inWindow.slice(0, maxRuns)
  const groups = new Map<
    string,
    { queue: string; minute: number; completed: number; failed: number; wait: Array<number>; run: Array<number> }
  >()
  for (const r of taken) {
    const minute = Math.floor(r.finishedAt / minuteMs) * minuteMs
    const key = `${minute}\u0000${r.queue}`
    const group = groups.get(key) ?? { queue: r.queue, minute, completed: 0, failed: 0, wait: [], run: [] }
    if (r.state === "completed") group.completed += 1
    else group.failed += 1
    if (r.claimedAt !== null) {
      group.wait.push(Math.max(0, r.claimedAt - r.dueAt))
      group.run.push(Math.max(0, r.finishedAt - r.claimedAt))
    }
    groups.set(key, group)
  }
  const series = [...groups.values()]
    .sort((a, b) => a.minute - b.minute || (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : 0))
    .map((g): ThroughputMinute => ({
      queue: g.queue,
      minute: new Date(g.minute),
      completed: g.completed,
      failed: g.failed,
      waitMs: percentiles(g.wait),
      runMs: percentiles(g.run)
    }))
  return { since: new Date(since), minutes: request.minutes, series, truncated: inWindow.length > taken.length }
}

/**
 * The request, checked: a window of 1 to 1440 whole minutes, `maxRuns` a whole number of at
 * least 1. Stores check it first, so a bad one reads nothing.
 *
 * @category validation
 */
export const check = (request: ThroughputRequest): Exit.Exit<ThroughputRequest, InvalidConfig> => {
  if (!(Number.isInteger(request.minutes) && request.minutes >= 1 && request.minutes <= 1440)) {
    return Exit.fail(
      new InvalidConfig({ option: "minutes", issue: `${request.minutes} is not a whole number from 1 to 1440` })
    )
  }
  if (request.maxRuns !== undefined && !(Number.isInteger(request.maxRuns) && request.maxRuns >= 1)) {
    return Exit.fail(
      new InvalidConfig({ option: "maxRuns", issue: `${request.maxRuns} is not a whole number of at least 1` })
    )
  }
  return Exit.succeed(request)
}
