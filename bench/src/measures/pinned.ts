/**
 * Pinned MVCC horizon (the shape of PlanetScale's "Keeping a Postgres queue healthy" and Awa's
 * benchmark): a steady producer while REPEATABLE READ readers, staggered, each hold a snapshot
 * open and scan every 500 ms, so vacuum cannot remove what the queue's updates leave behind. The
 * same steady run without readers is the clean baseline. It reports the completion rate under the
 * pinned horizon as a share of the clean one, pickup p99 in both, and, every second, the dead
 * tuples and the size of the system's tables and indexes.
 */
import pg from "pg"
import type { BenchContext } from "../context.js"
import * as Pg from "../pg.js"
import { log } from "../progress.js"
import { monotonicMs, sleep } from "../stats.js"
import type { Variant } from "../variants.js"
import { type Beside, steady, type SteadyParams, type SteadyResult } from "./steady.js"

export interface PinnedParams extends SteadyParams {
  /** Readers holding a snapshot, each for `holdMs`, started `staggerMs` apart (and again when done). */
  readonly readers: number
  readonly holdMs: number
  readonly staggerMs: number
  readonly scanMs: number
}

export interface PinnedSample {
  readonly t: number
  readonly deadTuples: number
  readonly totalBytes: number
}

export interface PinnedResult {
  readonly variant: string
  readonly repeat: number
  readonly clean: SteadyResult
  readonly pinned: SteadyResult
  /** Pickup rate under the pinned horizon as a share of the clean run's. */
  readonly share: number
  readonly cleanSeries: ReadonlyArray<PinnedSample>
  readonly pinnedSeries: ReadonlyArray<PinnedSample>
}

/** Samples dead tuples and table + index size of the system's schemas every second. */
const sampler = (schemas: ReadonlyArray<string>, series: Array<PinnedSample>): Beside => (url, began) => {
  let running = true
  const loop = (async () => {
    while (running) {
      const [row] = (await Pg.query(
        url,
        `SELECT coalesce(sum(n_dead_tup), 0)::float8 AS dead, coalesce(sum(pg_total_relation_size(relid)), 0)::float8 AS bytes
         FROM pg_stat_user_tables WHERE schemaname = ANY($1)`,
        [schemas]
      ).catch(() => [])) as Array<{ dead: number; bytes: number }>
      if (row !== undefined) {
        series.push({ t: (monotonicMs() - began) / 1000, deadTuples: row.dead, totalBytes: row.bytes })
      }
      await sleep(1_000)
    }
  })()
  return { stop: async () => void (running = false, await loop) }
}

/** Readers that pin the horizon: each opens REPEATABLE READ, scans every `scanMs`, holds `holdMs`. */
const readers = (params: PinnedParams, schemas: ReadonlyArray<string>): Beside => (url) => {
  let running = true
  const reader = async (offsetMs: number) => {
    await sleep(params.warmupMs + offsetMs)
    while (running) {
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      try {
        await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        const held = monotonicMs() + params.holdMs
        while (running && monotonicMs() < held) {
          // A scan under the transaction's snapshot, as an analytics query would run.
          await client.query(`SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = ANY($1)`, [schemas])
          await client.query(`SELECT count(*) FROM pg_class`)
          await sleep(params.scanMs)
        }
        await client.query("COMMIT")
      } finally {
        await client.end().catch(() => undefined)
      }
    }
  }
  const all = Array.from({ length: params.readers }, (_, i) => reader(i * params.staggerMs))
  return { stop: async () => void (running = false, await Promise.all(all)) }
}

const both = (...parts: ReadonlyArray<Beside>): Beside => (url, began) => {
  const started = parts.map((p) => p(url, began))
  return { stop: async () => void (await Promise.all(started.map((s) => s.stop()))) }
}

export const pinned = async (
  ctx: BenchContext,
  variant: Variant,
  repeat: number,
  params: PinnedParams
): Promise<PinnedResult> => {
  const schemas = variant.system.schemas
  const cleanSeries: Array<PinnedSample> = []
  const clean = await steady(ctx, variant, repeat, params, sampler(schemas, cleanSeries))
  const pinnedSeries: Array<PinnedSample> = []
  const underReaders = await steady(
    ctx,
    variant,
    repeat,
    params,
    both(sampler(schemas, pinnedSeries), readers(params, schemas))
  )
  const share = underReaders.pickupRate / Math.max(1, clean.pickupRate)
  const last = (series: ReadonlyArray<PinnedSample>) => series.at(-1)
  log(
    `  ${variant.label}: pinned horizon → ${(share * 100).toFixed(1)}% of the clean pickup rate, ` +
      `p99 ${underReaders.p99.toFixed(2)} ms (clean ${clean.p99.toFixed(2)}), dead tuples ${
        last(pinnedSeries)?.deadTuples ?? "?"
      } ` +
      `(clean ${last(cleanSeries)?.deadTuples ?? "?"})`
  )
  return { variant: variant.id, repeat, clean, pinned: underReaders, share, cleanSeries, pinnedSeries }
}
