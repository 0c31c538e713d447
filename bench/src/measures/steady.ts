/**
 * Steady state: a producer enqueues at a fixed rate (one batch every 10 ms) while the workers run,
 * as production queues do, instead of draining a preloaded backlog. After a warm-up, over a fixed
 * window, it measures the rate runs were picked up at and the pickup latency of each (from just
 * before its batch was enqueued to its handler's first line; both on this machine's monotonic
 * clock, `stats.monotonicMs`).
 * LISTEN/NOTIFY is on for every system (the latency options).
 */
import type { BenchContext } from "../context.js"
import { log, status } from "../progress.js"
import { monotonicMs, quantile, sleep } from "../stats.js"
import type { Variant } from "../variants.js"
import { latencyFleet } from "./latency.js"

export interface SteadyParams {
  /** Runs enqueued per second. */
  readonly rate: number
  readonly warmupMs: number
  readonly windowMs: number
}

/** Work started beside the producer (the pinned-horizon readers, a sampler), stopped after it. */
export type Beside = (url: string, began: number) => { readonly stop: () => Promise<void> }

export interface SteadyResult {
  readonly variant: string
  readonly repeat: number
  readonly rate: number
  /** Runs picked up per second during the window. */
  readonly pickupRate: number
  readonly p50: number
  readonly p99: number
  /** Runs enqueued in the window that were not picked up by its end plus one second. */
  readonly late: number
}

const TICK_MS = 10

/** The database a steady run uses (the pinned-horizon sampler reads its tables). */
export const steadyDatabaseLabel = (variant: Variant) => `${variant.id}_steady`

export const steady = async (
  ctx: BenchContext,
  variant: Variant,
  repeat: number,
  params: SteadyParams,
  beside?: Beside
): Promise<SteadyResult> => {
  const enqueuedAt = new Map<number, number>()
  const startedAt = new Map<number, number>()
  const { close, session, url, workers } = await latencyFleet(ctx, variant, steadyDatabaseLabel(variant), (i, at) => {
    if (!startedAt.has(i)) startedAt.set(i, at)
  })
  try {
    for (const w of workers) w.go()
    await sleep(1_000)

    const perTick = params.rate * TICK_MS / 1000
    const began = monotonicMs()
    const alongside = beside?.(url, began)
    const windowStart = began + params.warmupMs
    const windowEnd = windowStart + params.windowMs
    let next = 0
    let owed = 0
    let tick = 0
    while (monotonicMs() < windowEnd) {
      const due = began + tick * TICK_MS
      const wait = due - monotonicMs()
      if (wait > 0) await sleep(wait)
      owed += perTick
      const count = Math.floor(owed)
      owed -= count
      if (count > 0) {
        const batch = Array.from({ length: count }, () => next++)
        const t0 = monotonicMs()
        for (const i of batch) enqueuedAt.set(i, t0)
        await session.enqueueMany(batch)
      }
      tick++
      if (tick % 100 === 0) {
        status(`  ${variant.label}: steady ${params.rate}/s, ${next} enqueued, ${startedAt.size} picked up`)
      }
    }
    await sleep(1_000)
    await alongside?.stop()
    await session.close()
    await Promise.all(workers.map((w) => w.stop()))

    const inWindow = [...enqueuedAt.entries()].filter(([, t]) => t >= windowStart && t < windowEnd)
    const latencies = inWindow.flatMap(([i, t]) => {
      const at = startedAt.get(i)
      return at === undefined ? [] : [at - t]
    })
    const pickedInWindow = [...startedAt.values()].filter((at) => at >= windowStart && at < windowEnd).length
    const result: SteadyResult = {
      variant: variant.id,
      repeat,
      rate: params.rate,
      pickupRate: pickedInWindow / (params.windowMs / 1000),
      p50: quantile(latencies, 0.5),
      p99: quantile(latencies, 0.99),
      late: inWindow.length - latencies.length
    }
    log(
      `  ${variant.label}: steady ${params.rate}/s → picked up ${result.pickupRate.toFixed(0)}/s, ` +
        `pickup p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms${
          result.late > 0 ? `, ${result.late} not picked up` : ""
        }`
    )
    return result
  } finally {
    await close()
  }
}
