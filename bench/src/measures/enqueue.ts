/**
 * Bulk enqueue: N runs written through each system's bulk API as an application calls it
 * (Leasehold's `Client.enqueueMany`, graphile-worker's `addJobs`, pg-boss's `insert`), in batches
 * of the same size, into a fresh database with no worker. The clock covers the calls only (the
 * migrations and the connection are set-up); afterwards every run must be in the database.
 */
import type { BenchContext } from "../context.js"
import * as Pg from "../pg.js"
import { log, status } from "../progress.js"
import { monotonicMs } from "../stats.js"
import type { Variant } from "../variants.js"

export interface EnqueueResult {
  readonly variant: string
  readonly repeat: number
  readonly runs: number
  readonly batch: number
  readonly enqueueMs: number
  readonly runsPerSecond: number
  /** Runs found in the database afterwards (must equal `runs`). */
  readonly stored: number
  readonly walBytesPerRun: number
}

export const enqueue = async (
  ctx: BenchContext,
  variant: Variant,
  repeat: number,
  runs: number,
  batch: number
): Promise<EnqueueResult> => {
  const { system } = variant
  const database = await Pg.createDatabase(ctx.serverUrl, `${variant.id}_enqueue`)
  const url = Pg.databaseUrl(ctx.serverUrl, database)
  try {
    const session = await system.enqueueSession(url, variant.options)
    const bulk = session.enqueueBulk ?? session.enqueueMany
    const before = await Pg.counters(ctx.serverUrl, database, false)
    const start = monotonicMs()
    for (let from = 0; from < runs; from += batch) {
      await bulk(Array.from({ length: Math.min(batch, runs - from) }, (_, k) => from + k))
      status(`  ${variant.label}: enqueued ${Math.min(runs, from + batch).toLocaleString("en-US")}`)
    }
    const enqueueMs = monotonicMs() - start
    await session.close()
    const after = await Pg.counters(ctx.serverUrl, database, false)
    const walBytes = await Pg.walBytesBetween(ctx.serverUrl, before.walLsn, after.walLsn)
    const [row] = await Pg.query(url, system.remainingSql)
    const result: EnqueueResult = {
      variant: variant.id,
      repeat,
      runs,
      batch,
      enqueueMs,
      runsPerSecond: runs / (enqueueMs / 1000),
      stored: Number(row.n),
      walBytesPerRun: walBytes / runs
    }
    log(
      `  ${variant.label}: ${Math.round(result.runsPerSecond).toLocaleString("en-US")} runs/s ` +
        `(${runs.toLocaleString("en-US")} in batches of ${batch.toLocaleString("en-US")}, ${
          Math.round(enqueueMs)
        } ms), ${Math.round(result.walBytesPerRun)} WAL B/run, stored: ${
          result.stored === runs ? "all" : `${result.stored} of ${runs}`
        }`
    )
    if (result.stored !== runs) throw new Error(`${variant.id}: ${result.stored} of ${runs} runs stored`)
    return result
  } finally {
    if (!ctx.keepDatabases) await Pg.dropDatabase(ctx.serverUrl, database).catch(() => undefined)
  }
}
