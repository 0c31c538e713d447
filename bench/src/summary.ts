/** From raw per-repeat results to the summary, ratios and targets written to JSON and printed. */
import type { DrainResult } from "./measures/drain.js"
import type { EnqueueResult } from "./measures/enqueue.js"
import type { FenceResult } from "./measures/fence.js"
import type { HeartbeatResult } from "./measures/heartbeat.js"
import type { LatencyResult } from "./measures/latency.js"
import type { PinnedResult } from "./measures/pinned.js"
import type { ReclaimResult } from "./measures/reclaim.js"
import type { SteadyResult } from "./measures/steady.js"
import { type Spread, spread } from "./stats.js"
import type { Variant } from "./variants.js"

export interface Raw {
  readonly drain: Array<DrainResult>
  readonly latency: Array<LatencyResult>
  readonly heartbeat: Array<HeartbeatResult>
  readonly reclaim: Array<ReclaimResult>
  readonly fence: Array<FenceResult>
  /** Absent in results written before the measure existed. */
  readonly steady?: Array<SteadyResult> | undefined
  readonly pinned?: Array<PinnedResult> | undefined
  readonly enqueue?: Array<EnqueueResult> | undefined
}

export interface ComparedMeasure {
  readonly id: string
  readonly title: string
  readonly unit: string
  readonly better: "higher" | "lower"
  /** Per variant id; null where the server cannot measure it (statements without pg_stat_statements). */
  readonly byVariant: Record<string, Spread | null>
  /** Leasehold / variant, from the medians. */
  readonly ratio: Record<string, number | null>
  /** Why values are missing, when they are. */
  readonly note?: string | undefined
  /** A shorter title for the chart. */
  readonly short?: string | undefined
}

export interface Target {
  readonly name: string
  readonly met: boolean
  readonly detail: string
}

/** Where the time of a drain went, per completed run (µs), from /proc and the workers' cpuUsage. */
export interface TimeProfile {
  readonly variant: string
  readonly workerCpuUs: Spread | null
  readonly serverCpuUs: Spread | null
  /** Wall time × cores per run: the whole machine's budget for one run at the measured rate. */
  readonly budgetUs: Spread
  /** Leasehold: per store call (summed over processes and repeats). */
  readonly store:
    | Record<string, { readonly calls: number; readonly itemsPerCall: number; readonly msPerCall: number }>
    | null
}

export interface Summary {
  readonly compared: ReadonlyArray<ComparedMeasure>
  /** Variants whose drain hit the time cap (their rate is over what they completed in it). */
  readonly capped: ReadonlyArray<string>
  readonly timeProfile: ReadonlyArray<TimeProfile>
  readonly heartbeat: {
    readonly leases: number
    readonly intervalMs: number
    readonly ttlMs: number
    readonly renewMs: Spread
    readonly renewMaxMs: Spread
    readonly statementsPerRound: Spread
    readonly statementsPerInterval: Spread
    readonly leasesPerStatement: Spread
    readonly dbCommitsPerRound: Spread
  } | null
  readonly reclaim: {
    readonly leases: number
    readonly ttlMs: number
    readonly pollIntervalMs: number
    readonly backlog: number
    readonly backlogLeft: Spread
    readonly reclaimMs: Spread
    readonly leaseLeftMs: Spread
    readonly afterExpiryMs: Spread
    readonly peers: ReadonlyArray<{ readonly system: string; readonly window: string }>
  } | null
  readonly fence: {
    readonly batchSize: number
    readonly fencedMs: Spread
    readonly unfencedMs: Spread
    readonly overhead: Spread
    readonly pairedDiffMs: Spread
  } | null
  readonly checks: {
    readonly exactlyOnce: boolean
    readonly heartbeatOneStatementPerRound: boolean
    readonly reclaimVerified: boolean
    readonly fenceAllCompleted: boolean
  }
  readonly targets: ReadonlyArray<Target>
}

export const PEER_RECLAIM_WINDOWS = [
  {
    system: "graphile-worker",
    window: "~4 h: a job locked by a crashed worker is retried once its lock is 4 hours old (fixed lock timeout)"
  },
  {
    system: "pg-boss",
    window:
      "~15 min: an active job is expired after expireInSeconds (default 900 s), found by the supervisor's maintenance"
  }
]

const byVariant = <R extends { readonly variant: string }>(
  variants: ReadonlyArray<Variant>,
  rows: ReadonlyArray<R>,
  value: (row: R) => number | null
): Record<string, Spread | null> =>
  Object.fromEntries(variants.map((v) => {
    const values = rows.filter((r) => r.variant === v.id).map(value)
    if (values.length === 0 || values.some((x) => x === null || Number.isNaN(x))) return [v.id, null]
    return [v.id, spread(values as Array<number>)]
  }))

const ratios = (values: Record<string, Spread | null>): Record<string, number | null> => {
  const lh = values["leasehold"]
  return Object.fromEntries(
    Object.entries(values).map((
      [id, s]
    ) => [id, lh == null || s == null || s.median === 0 ? null : lh.median / s.median])
  )
}

const cappedNote = (variants: ReadonlyArray<Variant>, raw: Raw): string | undefined => {
  const capped = raw.drain.filter((d) => d.capped)
  if (capped.length === 0) return undefined
  const parts = variants.flatMap((v) => {
    const rows = capped.filter((d) => d.variant === v.id)
    if (rows.length === 0) return []
    const done = rows.map((d) => d.completed)
    return [
      `${v.label} completed ${Math.min(...done).toLocaleString("en-US")}–${
        Math.max(...done).toLocaleString("en-US")
      } of ${rows[0]!.runs.toLocaleString("en-US")}`
    ]
  })
  const cap = Math.round(Math.max(...capped.map((d) => d.drainMs)) / 1000)
  return `capped at ${cap} s (rate over what was completed): ${parts.join("; ")}`
}

export const summarize = (variants: ReadonlyArray<Variant>, raw: Raw, statements: boolean): Summary => {
  const measure = (
    id: string,
    title: string,
    unit: string,
    better: "higher" | "lower",
    values: Record<string, Spread | null>,
    note?: string,
    short?: string
  ): ComparedMeasure => ({ id, title, unit, better, byVariant: values, ratio: ratios(values), note, short })
  const all: Array<ComparedMeasure> = [
    measure(
      "throughput",
      "Throughput",
      "runs/s",
      "higher",
      byVariant(variants, raw.drain, (r) => r.throughput),
      cappedNote(variants, raw)
    ),
    measure("pickupP50", "Pickup latency p50", "ms", "lower", byVariant(variants, raw.latency, (r) => r.p50)),
    measure("pickupP99", "Pickup latency p99", "ms", "lower", byVariant(variants, raw.latency, (r) => r.p99)),
    measure(
      "steadyRate",
      "Steady state: runs picked up per second at a fixed producer rate",
      "runs/s",
      "higher",
      byVariant(variants, raw.steady ?? [], (r) => r.pickupRate),
      undefined,
      "Steady pickup rate"
    ),
    measure(
      "steadyP50",
      "Steady state: pickup latency p50",
      "ms",
      "lower",
      byVariant(variants, raw.steady ?? [], (r) => r.p50)
    ),
    measure(
      "steadyP99",
      "Steady state: pickup latency p99",
      "ms",
      "lower",
      byVariant(variants, raw.steady ?? [], (r) => r.p99)
    ),
    measure(
      "pinnedShare",
      "Pinned MVCC horizon: pickup rate as a share of the clean run",
      "%",
      "higher",
      byVariant(variants, raw.pinned ?? [], (r) => r.share * 100),
      undefined,
      "Pinned horizon share of clean"
    ),
    measure(
      "pinnedP99",
      "Pinned MVCC horizon: pickup latency p99",
      "ms",
      "lower",
      byVariant(variants, raw.pinned ?? [], (r) => r.pinned.p99)
    ),
    measure(
      "pinnedP99Clean",
      "Pinned MVCC horizon: pickup latency p99 of the clean run",
      "ms",
      "lower",
      byVariant(variants, raw.pinned ?? [], (r) => r.clean.p99)
    ),
    measure(
      "pinnedDeadTuples",
      "Pinned MVCC horizon: dead tuples at the end",
      "tuples",
      "lower",
      byVariant(variants, raw.pinned ?? [], (r) => r.pinnedSeries.at(-1)?.deadTuples ?? null)
    ),
    measure(
      "pinnedBytes",
      "Pinned MVCC horizon: tables and indexes at the end",
      "bytes",
      "lower",
      byVariant(variants, raw.pinned ?? [], (r) => r.pinnedSeries.at(-1)?.totalBytes ?? null)
    ),
    measure(
      "statementsPerRun",
      "SQL statements per run",
      "statements",
      "lower",
      byVariant(variants, raw.drain, (r) => r.cost.statementsPerRun),
      statements
        ? undefined
        : "n/a: pg_stat_statements is not preloaded on this server (commits per run below count transactions)"
    ),
    measure(
      "commitsPerRun",
      "Commits per run",
      "commits",
      "lower",
      byVariant(variants, raw.drain, (r) => r.cost.commitsPerRun)
    ),
    measure(
      "walBytesPerRun",
      "WAL per run",
      "bytes",
      "lower",
      byVariant(variants, raw.drain, (r) => r.cost.walBytesPerRun)
    ),
    measure(
      "rowsWrittenPerRun",
      "Rows inserted + updated + deleted per run",
      "rows",
      "lower",
      byVariant(
        variants,
        raw.drain,
        (r) => r.cost.rowsInsertedPerRun + r.cost.rowsUpdatedPerRun + r.cost.rowsDeletedPerRun
      ),
      undefined,
      "Rows written per run"
    ),
    measure(
      "deadTuplesPerRun",
      "Dead tuples after the drain, per run",
      "tuples",
      "lower",
      byVariant(variants, raw.drain, (r) => r.cost.deadTuplesPerRun),
      undefined,
      "Dead tuples after the drain per run"
    )
  ]
  // A measure that did not run is left out; statements stay (as n/a) whenever the drain ran.
  const drained = raw.drain.length > 0
  const compared = all.filter((m) =>
    Object.values(m.byVariant).some((s) => s !== null) || (m.id === "statementsPerRun" && drained)
  )

  const timeProfile: Array<TimeProfile> = variants.flatMap((v) => {
    const rows = raw.drain.filter((d) => d.variant === v.id)
    if (rows.length === 0) return []
    const orNull = (values: Array<number | null>) =>
      values.some((x) => x === null) ? null : spread(values as Array<number>)
    const store: Record<string, { calls: number; items: number; ms: number }> = {}
    for (const row of rows) {
      for (const [op, e] of Object.entries(row.profile.store ?? {})) {
        const acc = (store[op] ??= { calls: 0, items: 0, ms: 0 })
        acc.calls += e.calls
        acc.items += e.items
        acc.ms += e.ms
      }
    }
    return [{
      variant: v.id,
      workerCpuUs: orNull(rows.map((r) => r.profile.workerCpuUsPerRun)),
      serverCpuUs: orNull(rows.map((r) => r.profile.serverCpuUsPerRun)),
      budgetUs: spread(rows.map((r) => r.profile.budgetUsPerRun)),
      store: Object.keys(store).length === 0 ? null : Object.fromEntries(
        Object.entries(store).map(([op, e]) => [
          op,
          { calls: e.calls, itemsPerCall: e.items / Math.max(1, e.calls), msPerCall: e.ms / Math.max(1, e.calls) }
        ])
      )
    }]
  })

  const hb = raw.heartbeat
  const heartbeat = hb.length === 0 ? null : {
    leases: hb[0]!.leases,
    intervalMs: hb[0]!.intervalMs,
    ttlMs: hb[0]!.ttlMs,
    renewMs: spread(hb.map((h) => h.renewMs.median)),
    renewMaxMs: spread(hb.map((h) => h.renewMs.max)),
    statementsPerRound: spread(hb.map((h) => h.statementsPerRound)),
    statementsPerInterval: spread(hb.map((h) => h.statementsPerInterval)),
    leasesPerStatement: spread(hb.map((h) => h.leasesPerStatement)),
    dbCommitsPerRound: spread(hb.map((h) => h.dbCommitsPerRound))
  }
  const rc = raw.reclaim
  const reclaim = rc.length === 0 ? null : {
    leases: rc[0]!.leases,
    ttlMs: rc[0]!.ttlMs,
    pollIntervalMs: rc[0]!.pollIntervalMs,
    backlog: rc[0]!.backlog,
    backlogLeft: spread(rc.map((r) => r.backlogLeft)),
    reclaimMs: spread(rc.map((r) => r.reclaimMs)),
    leaseLeftMs: spread(rc.map((r) => r.leaseLeftMs)),
    afterExpiryMs: spread(rc.map((r) => r.afterExpiryMs)),
    peers: PEER_RECLAIM_WINDOWS
  }
  const fc = raw.fence
  const fence = fc.length === 0 ? null : {
    batchSize: fc[0]!.batchSize,
    fencedMs: spread(fc.map((f) => f.fencedMs)),
    unfencedMs: spread(fc.map((f) => f.unfencedMs)),
    overhead: spread(fc.map((f) => f.overhead)),
    pairedDiffMs: spread(fc.map((f) => f.pairedDiffMs))
  }
  const checks = {
    exactlyOnce: raw.drain.every((d) => d.exactlyOnce.ok),
    heartbeatOneStatementPerRound: hb.every((h) =>
      h.statementsPerRound === 1 && h.leasesPerStatement === h.leases && h.renewedMin === h.leases
    ),
    reclaimVerified: rc.every((r) => r.verified),
    fenceAllCompleted: fc.every((f) => f.allCompleted)
  }

  const targets: Array<Target> = []
  const find = (id: string) => compared.find((m) => m.id === id)?.byVariant ?? {}
  const tp = find("throughput")
  const fmtX = (x: number) => `${x.toFixed(2)}×`
  // The targets are for the default store (completed runs kept); the deleting store is reported
  // against the same targets, separately.
  for (const [id, suffix] of [["leasehold", ""], ["leasehold-delete", " (completed runs deleted)"]] as const) {
    const lh = tp[id]
    if (lh != null && tp["graphile-batched"] != null) {
      const r = lh.median / tp["graphile-batched"]!.median
      targets.push({ name: `throughput ≥ 1.25× graphile-worker batched${suffix}`, met: r >= 1.25, detail: fmtX(r) })
    }
    const bossBest = [tp["pgboss-tuned"], tp["pgboss-default"]].filter((s): s is Spread => s != null)
    if (lh != null && bossBest.length > 0) {
      const best = Math.max(...bossBest.map((s) => s.median))
      const r = lh.median / best
      targets.push({ name: `throughput ≥ 2× pg-boss best${suffix}`, met: r >= 2, detail: fmtX(r) })
    }
  }
  // Telemetry's cost: the same drain with metrics (target: at most 5% of throughput) or traces on.
  for (
    const [id, what, limit] of [
      ["leasehold-metrics", "metrics", 0.05],
      ["leasehold-traces", "traces", undefined],
      ["leasehold-traces-sampled", "traces sampled at 10%", undefined]
    ] as const
  ) {
    const on = tp[id]
    const off = tp["leasehold"]
    if (on == null || off == null) continue
    const cost = 1 - on.median / off.median
    targets.push({
      name: limit === undefined
        ? `throughput cost of ${what} (reported)`
        : `${what} cost ≤ ${limit * 100}% of throughput`,
      met: limit === undefined ? true : cost <= limit,
      detail: `${(cost * 100).toFixed(1)}% (${Math.round(on.median).toLocaleString("en-US")} vs ${
        Math.round(off.median).toLocaleString("en-US")
      } runs/s)`
    })
  }
  // Lower is better: Leasehold's median against the best peer's.
  const noWorseThanBestPeer = (id: string, name: string) => {
    const byVariant = find(id)
    const own = byVariant["leasehold"]
    const peers = Object.entries(byVariant).filter(([v, s]) => !v.startsWith("leasehold") && s != null) as Array<
      [string, Spread]
    >
    if (own == null || peers.length === 0) return
    const [bestId, best] = peers.reduce((a, b) => (b[1].median < a[1].median ? b : a))
    targets.push({
      name,
      met: own.median <= best.median,
      detail: `${own.median.toFixed(2)} ms vs ${best.median.toFixed(2)} ms (${bestId})`
    })
  }
  noWorseThanBestPeer("pickupP50", "pickup p50 no worse than the best peer")
  // Issue 15's targets: WAL, steady-state pickup, the pinned horizon, renewal (below).
  const wal = find("walBytesPerRun")
  if (wal["leasehold"] != null && wal["graphile-batched"] != null) {
    targets.push({
      name: "WAL per run no more than graphile-worker batched's",
      met: wal["leasehold"]!.median <= wal["graphile-batched"]!.median,
      detail: `${Math.round(wal["leasehold"]!.median)} vs ${Math.round(wal["graphile-batched"]!.median)} bytes`
    })
  }
  noWorseThanBestPeer("steadyP50", "steady-state pickup p50 no worse than the best peer")
  const pinnedRuns = (raw.pinned ?? []).filter((r) => r.variant === "leasehold")
  if (pinnedRuns.length > 0) {
    const share = Math.min(...pinnedRuns.map((r) => r.share))
    const ratio = Math.max(...pinnedRuns.map((r) => r.pinned.p99 / r.clean.p99))
    targets.push({
      name: "pinned horizon: completion rate ≥ 95% of clean",
      met: share >= 0.95,
      detail: `${(share * 100).toFixed(1)}%`
    })
    targets.push({
      name: "pinned horizon: pickup p99 ≤ 2× clean",
      met: ratio <= 2,
      detail: `${ratio.toFixed(1)}× (${
        pinnedRuns.map((r) => `${r.pinned.p99.toFixed(1)} vs ${r.clean.p99.toFixed(1)} ms`).join(", ")
      })`
    })
  }
  if (heartbeat !== null && heartbeat.leases >= 10_000) {
    targets.push({
      name: `renewal of ${heartbeat.leases.toLocaleString("en-US")} leases ≤ 30 ms`,
      met: heartbeat.renewMs.median <= 30,
      detail: `median ${heartbeat.renewMs.median.toFixed(1)} ms`
    })
  }
  if (heartbeat !== null) {
    targets.push({
      name: "heartbeat: one statement per worker per interval",
      met: checks.heartbeatOneStatementPerRound,
      detail: `${
        heartbeat.statementsPerRound.median.toFixed(2)
      } renew statements per round, ${heartbeat.leasesPerStatement.median} leases each`
    })
    targets.push({
      name: `renewal of ${heartbeat.leases.toLocaleString("en-US")} leases well under the interval (< 10%)`,
      met: heartbeat.renewMaxMs.max < heartbeat.intervalMs / 10,
      detail: `median ${heartbeat.renewMs.median.toFixed(1)} ms, worst ${
        heartbeat.renewMaxMs.max.toFixed(1)
      } ms, interval ${heartbeat.intervalMs} ms`
    })
  }
  if (reclaim !== null) {
    targets.push({
      name: "reclaim within TTL + 1 s",
      met: reclaim.reclaimMs.max <= reclaim.ttlMs + 1_000,
      detail: `worst ${(reclaim.reclaimMs.max / 1000).toFixed(2)} s, TTL ${reclaim.ttlMs / 1000} s`
    })
  }
  const capped = variants.filter((v) => raw.drain.some((d) => d.variant === v.id && d.capped)).map((v) => v.id)
  return { compared, capped, timeProfile, heartbeat, reclaim, fence, checks, targets }
}
