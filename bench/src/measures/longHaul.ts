/**
 * `--history N`, beside the operator reads: the drain and the one-run pickup on top of N completed
 * runs kept in day ranges (ADR 0028), side by side with an empty store in the same run, and the
 * retention of the oldest day's range, alone and in the middle of a drain.
 */
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { BenchContext } from "../context.js"
import * as History from "../history.js"
import * as Pg from "../pg.js"
import { log } from "../progress.js"
import { median, monotonicMs, sleep } from "../stats.js"
import { historyFloor, pastHistory } from "../systems/leasehold.js"
import type { Variant } from "../variants.js"
import { drain, type DrainResult } from "./drain.js"
import { latency, type LatencyResult } from "./latency.js"

/** The history's span: one range a day, as `maintain_history` keeps a week. */
export const DAYS = 7

export interface Retention {
  /** A drain was running when the range was dropped. */
  readonly duringDrain: boolean
  readonly ms: number
  readonly walBytes: number
  readonly rangesDropped: number
}

export interface LongHaulResult {
  readonly history: number
  readonly runs: number
  readonly fillSeconds: number
  readonly empty: { readonly drains: ReadonlyArray<DrainResult>; readonly pickups: ReadonlyArray<LatencyResult> }
  readonly kept: { readonly drains: ReadonlyArray<DrainResult>; readonly pickups: ReadonlyArray<LatencyResult> }
  /** Drains on the history store during which its oldest range was dropped. */
  readonly withRetention: ReadonlyArray<DrainResult>
  readonly retention: ReadonlyArray<Retention>
}

const fill = (url: string, history: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* PgRunStore.make({ schema: "leasehold" })
    for (const text of History.statements("leasehold", { runs: history, days: DAYS, dayRanges: true })) {
      yield* sql.unsafe(text)
    }
  }).pipe(Effect.scoped, Effect.provide(Layer.orDie(Database.layerFromUrl(url, { maxConnections: 2 }))))

/**
 * Drops the oldest range of runs (and what goes with it) by the workers' own maintenance, with a
 * window just short of that range's quiet age; its time and WAL from EXPLAIN (ANALYZE, WAL).
 */
const dropOldest = async (url: string, duringDrain: boolean): Promise<Retention> => {
  const ranges = `SELECT count(*)::int AS n FROM leasehold.history_ranges WHERE tbl = 'runs'`
  const [oldest] = await Pg.query(
    url,
    `SELECT extract(epoch FROM now() - quiet_since)::float8 AS age FROM leasehold.history_ranges
     WHERE tbl = 'runs' AND quiet_since IS NOT NULL ORDER BY quiet_since LIMIT 1`
  )
  const keep = `${Math.max(1, Math.floor(Number(oldest?.age ?? 0) - 60))} seconds`
  const [before] = await Pg.query(url, ranges)
  const start = monotonicMs()
  const [row] = await Pg.query(
    url,
    `EXPLAIN (ANALYZE, WAL, FORMAT JSON) SELECT * FROM leasehold.maintain_history('${keep}', '${keep}', 100000)`
  )
  const ms = monotonicMs() - start
  const [after] = await Pg.query(url, ranges)
  const plan = row["QUERY PLAN"][0].Plan
  return { duringDrain, ms, walBytes: Number(plan["WAL Bytes"] ?? 0), rangesDropped: before.n - after.n }
}

export const longHaul = async (
  ctx: BenchContext,
  variant: Variant,
  history: number,
  runs: number,
  repeats: number,
  samples: number
): Promise<LongHaulResult> => {
  const database = await Pg.createDatabase(ctx.serverUrl, "long_haul")
  const url = Pg.databaseUrl(ctx.serverUrl, database)
  try {
    log(`writing ${history.toLocaleString("en-US")} completed runs of history in ${DAYS} day ranges…`)
    const started = monotonicMs()
    await Effect.runPromise(fill(url, history))
    const fillSeconds = (monotonicMs() - started) / 1000
    const empty = { drains: [] as Array<DrainResult>, pickups: [] as Array<LatencyResult> }
    const kept = { drains: [] as Array<DrainResult>, pickups: [] as Array<LatencyResult> }
    const withRetention: Array<DrainResult> = []
    const retention: Array<Retention> = []
    const onHistory = async () => ({ database, system: pastHistory(await historyFloor(url)) as never })
    for (let r = 1; r <= repeats; r++) {
      log(`long haul, repeat ${r}: empty store, then ${history.toLocaleString("en-US")} runs of history`)
      empty.drains.push(await drain(ctx, variant, r, runs))
      kept.drains.push(await drain(ctx, variant, r, runs, await onHistory()))
      // A range dropped a third of the way into a drain of the same size.
      const expected = median(kept.drains.map((d) => d.drainMs))
      const during = drain(ctx, variant, r, runs, await onHistory())
      await sleep(expected / 3 + 3_000)
      retention.push(await dropOldest(url, true))
      withRetention.push(await during)
      empty.pickups.push(await latency(ctx, variant, r, samples))
      kept.pickups.push(await latency(ctx, variant, r, samples, database))
    }
    retention.push(await dropOldest(url, false))
    return { history, runs, fillSeconds, empty, kept, withRetention, retention }
  } finally {
    if (!ctx.keepDatabases) await Pg.dropDatabase(ctx.serverUrl, database).catch(() => undefined)
  }
}

const rate = (ds: ReadonlyArray<DrainResult>) => median(ds.map((d) => d.throughput))

/** The result as Markdown, each target beside its figure. */
export const render = (r: LongHaulResult): string => {
  const p50 = (ls: ReadonlyArray<LatencyResult>) => median(ls.map((l) => l.p50))
  const p99 = (ls: ReadonlyArray<LatencyResult>) => median(ls.map((l) => l.p99))
  const wal = (ds: ReadonlyArray<DrainResult>) => median(ds.map((d) => d.cost.walBytesPerRun))
  const ok = (ds: ReadonlyArray<DrainResult>) => ds.every((d) => d.exactlyOnce.ok)
  const row = (name: string, ds: ReadonlyArray<DrainResult>, ls?: ReadonlyArray<LatencyResult>) =>
    `| ${name} | ${Math.round(rate(ds)).toLocaleString("en-US")} | ${(rate(ds) / rate(r.empty.drains)).toFixed(2)} | ${
      Math.round(wal(ds))
    } | ${ls === undefined ? "—" : `${p50(ls).toFixed(2)} / ${p99(ls).toFixed(2)}`} | ${ok(ds) ? "yes" : "NO"} |`
  return [
    `Drain of ${r.runs.toLocaleString("en-US")} runs and one-run pickup: an empty store beside one holding ${
      r.history.toLocaleString("en-US")
    } completed runs in ${DAYS} day ranges (written in ${
      r.fillSeconds.toFixed(0)
    } s), alternated, ${r.empty.drains.length} repeat(s), medians.`,
    "",
    "| store | drain runs/s | / empty | WAL B/run | pickup p50 / p99 ms | exactly once |",
    "| --- | ---: | ---: | ---: | ---: | --- |",
    row("empty", r.empty.drains, r.empty.pickups),
    row("history kept", r.kept.drains, r.kept.pickups),
    row("history kept, oldest day's range dropped during the drain", r.withRetention),
    "",
    "Retention of the oldest day's range (`maintain_history`, the workers' maintenance; EXPLAIN (ANALYZE, WAL)):",
    "",
    "| when | ms | WAL bytes | ranges dropped |",
    "| --- | ---: | ---: | ---: |",
    ...r.retention.map((x) =>
      `| ${x.duringDrain ? "during a drain" : "alone"} | ${x.ms.toFixed(0)} | ${
        x.walBytes.toLocaleString("en-US")
      } | ${x.rangesDropped} |`
    )
  ].join("\n")
}
