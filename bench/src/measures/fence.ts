/**
 * Measure 6 (Leasehold): what the fence costs at completion. Batches of freshly claimed runs are
 * completed alternately by the real guarded statement (`completeBatch`, id + fence + running) and by
 * the bench-only variant without the fence predicate; the order within each pair is random. Both
 * are timed from the call to the mapped result (one round trip each).
 */
import { StoreSchema } from "@leasehold/sql"
import { Duration, Effect } from "effect"
import { completeBatch } from "../../../packages/sql/dist/internal/statements/guarded.js"
import type { BenchContext } from "../context.js"
import * as Pg from "../pg.js"
import { log, status } from "../progress.js"
import { median, monotonicMs } from "../stats.js"
import { KIND, openStore, SCHEMA } from "../systems/leasehold.js"
import { completeBatchWithoutFence } from "./unfencedComplete.js"

export interface FenceResult {
  readonly repeat: number
  readonly batches: number
  readonly batchSize: number
  /** Median time of one batch completion (ms). */
  readonly fencedMs: number
  readonly unfencedMs: number
  /** Per run (µs). */
  readonly fencedUsPerRun: number
  readonly unfencedUsPerRun: number
  /** (fenced − unfenced) / unfenced, from the medians. */
  readonly overhead: number
  /** Median of the per-pair differences (ms): the paired estimate. */
  readonly pairedDiffMs: number
  readonly allCompleted: boolean
}

export const fence = async (
  ctx: BenchContext,
  repeat: number,
  batches: number,
  batchSize: number
): Promise<FenceResult> => {
  const database = await Pg.createDatabase(ctx.serverUrl, "leasehold_fence")
  const url = Pg.databaseUrl(ctx.serverUrl, database)
  // The row statement's fence predicate is what this measures: the runs are recorded in their rows.
  const opened = await openStore(url, { maxConnections: 2, migrate: true, storage: "rows" })
  try {
    const { store, sql } = opened
    const s = StoreSchema.make(SCHEMA)
    const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
    const claimBatch = async () => {
      await run(store.enqueue(Array.from({ length: batchSize }, (_, k) => ({ kind: KIND, payload: { i: k } }))))
      const claimed = await run(
        store.claim({
          owner: "bench-fence",
          queues: ["default"],
          kinds: [KIND],
          limit: batchSize,
          ttl: Duration.minutes(1)
        })
      )
      return claimed.map((c) => ({ runId: c.id, fence: c.fence, result: null }))
    }
    const fenced: Array<number> = []
    const unfenced: Array<number> = []
    const diffs: Array<number> = []
    let allCompleted = true
    // Warm both statements (plans, caches) before measuring.
    for (let k = -2; k < batches; k++) {
      const order = Math.random() < 0.5 ? ["fenced", "unfenced"] as const : ["unfenced", "fenced"] as const
      const pair: Record<string, number> = {}
      for (const which of order) {
        const items = await claimBatch()
        const t0 = monotonicMs()
        if (which === "fenced") {
          const outcome = await run(completeBatch(sql, s, items))
          pair[which] = monotonicMs() - t0
          if (outcome.some((o) => o._tag !== "Finalized")) allCompleted = false
        } else {
          const outcome = await run(completeBatchWithoutFence(sql, s, items))
          pair[which] = monotonicMs() - t0
          if (outcome.some((o) => !o.ok)) allCompleted = false
        }
      }
      if (k >= 0) {
        fenced.push(pair.fenced!)
        unfenced.push(pair.unfenced!)
        diffs.push(pair.fenced! - pair.unfenced!)
      }
      status(`  fence: batch pair ${k + 1} / ${batches}`)
    }
    const fencedMs = median(fenced)
    const unfencedMs = median(unfenced)
    const result: FenceResult = {
      repeat,
      batches,
      batchSize,
      fencedMs,
      unfencedMs,
      fencedUsPerRun: (fencedMs * 1000) / batchSize,
      unfencedUsPerRun: (unfencedMs * 1000) / batchSize,
      overhead: (fencedMs - unfencedMs) / unfencedMs,
      pairedDiffMs: median(diffs),
      allCompleted
    }
    log(
      `  fence: completion of ${batchSize} runs ${fencedMs.toFixed(2)} ms with the fence, ${
        unfencedMs.toFixed(2)
      } ms without ` +
        `(${(result.overhead * 100).toFixed(1)}%, paired difference ${result.pairedDiffMs.toFixed(2)} ms)`
    )
    return result
  } finally {
    await opened.close()
    if (!ctx.keepDatabases) await Pg.dropDatabase(ctx.serverUrl, database).catch(() => undefined)
  }
}
