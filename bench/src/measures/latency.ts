/**
 * Measure 2: pickup latency. One run at a time is enqueued by the bench and the next only after the
 * previous handler has started; latency is from just before the enqueue call to the handler's first
 * line (both read on this machine's monotonic clock, `stats.monotonicMs`, with sub-millisecond
 * resolution).
 * LISTEN/NOTIFY is on for every system.
 */
import { spawnWorker, type WorkerProcess } from "../children.js"
import type { BenchContext } from "../context.js"
import * as Pg from "../pg.js"
import { log, status } from "../progress.js"
import { monotonicMs, quantile, sleep } from "../stats.js"
import type { Variant } from "../variants.js"

export interface LatencyResult {
  readonly variant: string
  readonly repeat: number
  readonly samples: number
  readonly p50: number
  readonly p99: number
  readonly mean: number
  readonly max: number
  readonly timeouts: number
}

/**
 * Worker processes that report each handler's start, on a fresh database, with an enqueue session
 * (LISTEN/NOTIFY on: the variant's latency options). `onStarted` hears every start; the fleet is
 * ready but not yet told to go. `close` stops what is still running and drops the database.
 */
export const latencyFleet = async (
  ctx: BenchContext,
  variant: Variant,
  label: string,
  onStarted: (i: number, at: number) => void,
  /** A database that already holds a store (history), kept afterwards. */
  on?: string
) => {
  const options = variant.latencyOptions ?? variant.options
  const database = on ?? await Pg.createDatabase(ctx.serverUrl, label)
  const url = Pg.databaseUrl(ctx.serverUrl, database)
  const workers: Array<WorkerProcess> = []
  const close = async () => {
    for (const w of workers) w.kill9()
    if (!ctx.keepDatabases && on === undefined) await Pg.dropDatabase(ctx.serverUrl, database).catch(() => undefined)
  }
  try {
    const session = await variant.system.enqueueSession(url, options)
    for (let w = 0; w < ctx.workers; w++) {
      workers.push(spawnWorker({ variant: variant.id, url, role: "latency", options }))
    }
    await Promise.all(workers.map((w) => w.ready))
    for (const w of workers) {
      w.onMessage((m) => {
        if (m.t === "started") onStarted(m.i, m.at)
      })
    }
    return { url, session, workers, close }
  } catch (error) {
    await close()
    throw error
  }
}

const WARMUP = 10
const SAMPLE_TIMEOUT_MS = 10_000

export const latency = async (
  ctx: BenchContext,
  variant: Variant,
  repeat: number,
  samples: number,
  on?: string
): Promise<LatencyResult> => {
  const waiting = new Map<number, (at: number) => void>()
  const { close, session, workers } = await latencyFleet(
    ctx,
    variant,
    `${variant.id}_latency`,
    (i, at) => waiting.get(i)?.(at),
    on
  )
  try {
    for (const w of workers) w.go()
    // Let every worker reach its idle, listening state.
    await sleep(1_000)

    const values: Array<number> = []
    let timeouts = 0
    for (let k = 0; k < samples + WARMUP; k++) {
      const started = new Promise<number | undefined>((resolve) => {
        const timer = setTimeout(() => resolve(undefined), SAMPLE_TIMEOUT_MS)
        waiting.set(k, (at) => {
          clearTimeout(timer)
          resolve(at)
        })
      })
      const t0 = monotonicMs()
      await session.enqueueOne(k)
      const at = await started
      waiting.delete(k)
      if (at === undefined) timeouts++
      else if (k >= WARMUP) values.push(at - t0)
      if (k % 20 === 0) status(`  ${variant.label}: pickup sample ${k} / ${samples + WARMUP}`)
      // A short, varying gap: the next run is not enqueued in lock-step with the previous completion.
      await sleep(2 + (k % 5))
    }
    await session.close()
    await Promise.all(workers.map((w) => w.stop()))
    const result: LatencyResult = {
      variant: variant.id,
      repeat,
      samples: values.length,
      p50: quantile(values, 0.5),
      p99: quantile(values, 0.99),
      mean: values.reduce((a, b) => a + b, 0) / Math.max(1, values.length),
      max: Math.max(...values),
      timeouts
    }
    log(
      `  ${variant.label}: pickup p50 ${result.p50.toFixed(2)} ms, p99 ${
        result.p99.toFixed(2)
      } ms (${values.length} samples${timeouts > 0 ? `, ${timeouts} timed out` : ""})`
    )
    return result
  } finally {
    await close()
  }
}
