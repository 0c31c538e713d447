/**
 * `npm run bench`: Leasehold side by side with graphile-worker and pg-boss on one PostgreSQL
 * (`DATABASE_URL`, else an embedded server started for the run), a fresh database per system and
 * repeat, the same runs and the same number of worker processes for each. Prints the tables on
 * stdout, progress on stderr, and writes results/latest.json and results/latest.svg.
 */
import { EmbeddedPostgres } from "@leasehold/embedded"
import { execSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import type { BenchContext } from "./context.js"
import { drain } from "./measures/drain.js"
import { enqueue, type EnqueueResult } from "./measures/enqueue.js"
import { fence } from "./measures/fence.js"
import { heartbeat, type HeartbeatParams } from "./measures/heartbeat.js"
import * as History from "./measures/history.js"
import { latency } from "./measures/latency.js"
import * as LongHaul from "./measures/longHaul.js"
import { pinned, type PinnedResult } from "./measures/pinned.js"
import { reclaim, type ReclaimParams } from "./measures/reclaim.js"
import { steady, type SteadyResult } from "./measures/steady.js"
import * as Pg from "./pg.js"
import { log } from "./progress.js"
import { render, renderOptions } from "./report.js"
import { type Raw, summarize } from "./summary.js"
import { renderSvg } from "./svg.js"
import { pinnedChart } from "./timeseries.js"
import { variantById, variants as allVariants } from "./variants.js"

const MEASURES = ["drain", "latency", "heartbeat", "reclaim", "fence", "steady", "pinned", "enqueue"] as const
// All run unless --measures names others.
const DEFAULT_MEASURES = MEASURES
// Steady state and the pinned horizon measure the systems tuned to keep up (the default modes poll
// one job at a time); the pinned horizon, 2 × its window per system, runs in the first repeat only.
const STEADY_SYSTEMS = ["leasehold", "leasehold-delete", "graphile-batched", "pgboss-tuned"]
const PINNED_SYSTEMS = ["leasehold", "graphile-batched", "pgboss-tuned"]
// Bulk enqueue depends on no worker option: one variant a system.
const ENQUEUE_SYSTEMS = ["leasehold", "graphile-batched", "pgboss-tuned"]

const usage = `usage: npm run bench -- [--quick] [--runs N] [--repeats R] [--workers W] [--samples S] [--leases L]
  [--reclaim-leases K] [--reclaim-backlog N] [--fence-batches B] [--fence-batch-size S] [--cap SECONDS]
  [--only leasehold,leasehold-delete,graphile-batched,graphile-default,pgboss-tuned,pgboss-default
          (also leasehold-metrics, leasehold-traces: telemetry's cost; leasehold-keyed, leasehold-rated, leasehold-unique, leasehold-idempotent: keys', rate limits', unique windows' and idempotency keys' cost; leasehold-logs-never, leasehold-logs, leasehold-logs-always: attempt logs' cost; only when named)]
  [--measures drain,latency,heartbeat,reclaim,fence | steady,pinned | enqueue] [--enqueue-runs N] [--enqueue-batch B] [--steady-rate N] [--pinned-window SECONDS] [--out-dir DIR] [--database-url URL] [--keep-databases]
  [--rerender results/latest.json]  (recompute the tables and the chart of a finished run, measuring nothing)
  [--history N]  (the long haul: on N completed runs of history beside an empty store, the operator reads, then
                  the leasehold drain (--runs, --repeats) and pickup (--samples), and the retention of a day's range
                  alone and during a drain: results/history-latest.md)`

const parse = () => {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      runs: { type: "string" },
      repeats: { type: "string" },
      workers: { type: "string" },
      samples: { type: "string" },
      leases: { type: "string" },
      "reclaim-leases": { type: "string" },
      "reclaim-backlog": { type: "string" },
      "fence-batches": { type: "string" },
      "fence-batch-size": { type: "string" },
      cap: { type: "string" },
      "steady-rate": { type: "string" },
      "pinned-window": { type: "string" },
      "enqueue-runs": { type: "string" },
      "enqueue-batch": { type: "string" },
      only: { type: "string" },
      measures: { type: "string" },
      "out-dir": { type: "string" },
      "database-url": { type: "string" },
      "keep-databases": { type: "boolean", default: false },
      rerender: { type: "string" },
      history: { type: "string" },
      help: { type: "boolean", default: false }
    },
    strict: true
  })
  if (values.help) {
    process.stdout.write(`${usage}\n`)
    process.exit(0)
  }
  const quick = values.quick
  const int = (name: string, raw: string | undefined, fallback: number) => {
    if (raw === undefined) return fallback
    const n = Number(raw)
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer (got ${raw})`)
    return n
  }
  const measures = values.measures === undefined ? [...DEFAULT_MEASURES] : values.measures.split(",")
  for (const m of measures) {
    if (!(MEASURES as ReadonlyArray<string>).includes(m)) throw new Error(`unknown measure ${m}`)
  }
  const only = values.only?.split(",")
  const variants = only === undefined
    ? allVariants.filter((v) => v.optIn !== true)
    : allVariants.filter((v) => only.includes(v.id))
  if (only !== undefined && variants.length !== only.length) throw new Error(`unknown variant in --only ${values.only}`)
  return {
    profile: quick ? "quick" : "full",
    runs: int("runs", values.runs, quick ? 2_000 : 200_000),
    repeats: int("repeats", values.repeats, quick ? 1 : 3),
    workers: int("workers", values.workers, 2),
    samples: int("samples", values.samples, quick ? 100 : 500),
    leases: int("leases", values.leases, quick ? 1_000 : 10_000),
    reclaimLeases: int("reclaim-leases", values["reclaim-leases"], quick ? 200 : 1_000),
    reclaimBacklog: int("reclaim-backlog", values["reclaim-backlog"], 0),
    fenceBatches: int("fence-batches", values["fence-batches"], quick ? 10 : 40),
    fenceBatchSize: int("fence-batch-size", values["fence-batch-size"], quick ? 200 : 500),
    capSeconds: int("cap", values.cap, quick ? 10 : 60),
    steady: {
      rate: int("steady-rate", values["steady-rate"], quick ? 500 : 2_000),
      warmupMs: quick ? 1_000 : 5_000,
      windowMs: quick ? 3_000 : 20_000
    },
    // PlanetScale's shape: 800/s, three REPEATABLE READ readers held 120 s, 20 s apart, scanning
    // every 500 ms, over 15 minutes; the quick profile scales the readers and the window down.
    pinned: {
      rate: 800,
      readers: 3,
      holdMs: quick ? 8_000 : 120_000,
      staggerMs: quick ? 3_000 : 20_000,
      scanMs: 500,
      warmupMs: quick ? 2_000 : 10_000,
      windowMs: int("pinned-window", values["pinned-window"], quick ? 15 : 900) * 1000
    },
    enqueue: {
      runs: int("enqueue-runs", values["enqueue-runs"], quick ? 10_000 : 100_000),
      batch: int("enqueue-batch", values["enqueue-batch"], 1_000)
    },
    measures,
    variants,
    outDir: values["out-dir"] ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../results"),
    databaseUrl: values["database-url"] ?? (process.env.DATABASE_URL || undefined),
    keepDatabases: values["keep-databases"],
    rerender: values.rerender,
    history: values.history === undefined ? undefined : int("history", values.history, 1)
  }
}

const machine = () => {
  const tryRun = (cmd: string) => {
    try {
      return execSync(cmd, { encoding: "utf8" }).trim()
    } catch {
      return "n/a"
    }
  }
  return {
    cpus: os.availableParallelism(),
    cpuModel: os.cpus()[0]?.model ?? "n/a",
    nproc: tryRun("nproc"),
    memory: tryRun("free -h"),
    node: process.version,
    platform: `${os.type()} ${os.release()} ${os.arch()}`
  }
}

const chartSubtitle = (runs: number, workers: number, repeats: number, version: string, cores: number, date: string) =>
  `${runs.toLocaleString("en-US")} runs, ${workers} worker processes, ${repeats} repeat(s), ` +
  `${version.split(" on ")[0]}, ${cores} cores, ${date.slice(0, 10)}; bars: median, whiskers: min–max`

/** Recomputes summary, tables and chart from a results file's raw measurements. */
const rerender = (file: string) => {
  const result = JSON.parse(fs.readFileSync(file, "utf8"))
  const variants = result.variants.map((v: { id: string }) => variantById(v.id))
  const summary = summarize(variants, result.raw, result.server.pgStatStatements)
  const text = render(summary, variants, result.params)
  process.stdout.write(`${text}\n`)
  fs.writeFileSync(file, `${JSON.stringify({ ...result, summary, table: text }, null, 2)}\n`)
  const subtitle = chartSubtitle(
    result.params.runs,
    result.params.workers,
    result.params.repeats,
    result.server.version,
    result.machine.cpus,
    result.finishedAt
  )
  fs.writeFileSync(path.join(path.dirname(file), "latest.svg"), `${renderSvg(summary, variants, subtitle)}\n`)
  if ((result.raw.pinned ?? []).length > 0) {
    // Files from before the parameters were recorded: the full profile's shape.
    const p = result.params.pinned ?? { rate: 800, readers: 3, holdMs: 120_000, staggerMs: 20_000 }
    const labels = Object.fromEntries(variants.map((v: { id: string; label: string }) => [v.id, v.label]))
    fs.writeFileSync(
      path.join(path.dirname(file), "pinned.svg"),
      pinnedChart(result.raw.pinned, labels, pinnedSubtitle(p, subtitle))
    )
  }
}

const pinnedSubtitle = (p: { rate: number; readers: number; holdMs: number; staggerMs: number }, subtitle: string) =>
  `${p.rate} runs/s, ${p.readers} readers held ${p.holdMs / 1000} s, ${p.staggerMs / 1000} s apart; ${subtitle}`

const main = async () => {
  const args = parse()
  if (args.rerender !== undefined) return rerender(args.rerender)
  const startedAt = new Date()
  const loadBefore = os.loadavg()
  let embedded: EmbeddedPostgres.RunningPostgres | undefined
  let serverUrl = args.databaseUrl
  if (serverUrl === undefined) {
    log("starting an embedded PostgreSQL for the run (pg_stat_statements preloaded)…")
    embedded = await EmbeddedPostgres.startUnscoped({
      settings: { shared_preload_libraries: "pg_stat_statements", max_connections: "200" }
    })
    serverUrl = embedded.url
  }
  try {
    const statements = await Pg.statementsAvailable(serverUrl)
    const ctx: BenchContext = {
      serverUrl,
      statements,
      workers: args.workers,
      capSeconds: args.capSeconds,
      keepDatabases: args.keepDatabases,
      cores: os.availableParallelism()
    }
    if (args.history !== undefined) {
      log(
        `history: ${args.history.toLocaleString("en-US")} completed runs, load ${
          loadBefore.map((l) => l.toFixed(2)).join(" ")
        }`
      )
      const result = await History.historyReads(serverUrl, args.history, args.keepDatabases)
      const haul = await LongHaul.longHaul(
        ctx,
        variantById("leasehold"),
        args.history,
        args.runs,
        args.repeats,
        args.samples
      )
      const text = `${History.render(result)}\n\n${LongHaul.render(haul)}\n\nload before ${
        loadBefore.map((l) => l.toFixed(2)).join(" ")
      }, after ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}; ${await Pg.serverVersion(serverUrl)}\n`
      fs.mkdirSync(args.outDir, { recursive: true })
      fs.writeFileSync(path.join(args.outDir, "history-latest.md"), text)
      fs.writeFileSync(
        path.join(args.outDir, "history-latest.json"),
        JSON.stringify({ reads: result, longHaul: haul }, null, 2)
      )
      process.stdout.write(text)
      return
    }
    const version = await Pg.serverVersion(serverUrl)
    const settings = await Pg.serverSettings(serverUrl)
    log(
      `server: ${version}${embedded ? " (embedded)" : ""}; pg_stat_statements: ${
        statements ? "yes" : "not preloaded (statements n/a)"
      }`
    )
    log(
      `profile ${args.profile}: ${
        args.runs.toLocaleString("en-US")
      } runs, ${args.repeats} repeat(s), ${args.workers} worker processes, ` +
        `${args.samples} pickup samples, ${args.leases.toLocaleString("en-US")} heartbeat leases, load ${
          loadBefore.map((l) => l.toFixed(2)).join(" ")
        }`
    )
    log(renderOptions(args.variants))

    const steadyResults: Array<SteadyResult> = []
    const pinnedResults: Array<PinnedResult> = []
    const enqueueResults: Array<EnqueueResult> = []
    const raw: Raw = {
      drain: [],
      latency: [],
      heartbeat: [],
      reclaim: [],
      fence: [],
      steady: steadyResults,
      pinned: pinnedResults,
      enqueue: enqueueResults
    }
    const hbParams: HeartbeatParams = args.profile === "quick"
      ? { leases: args.leases, ttl: "3 seconds", heartbeat: "1500 millis", intervalMs: 1_500, ttlMs: 3_000, rounds: 3 }
      : { leases: args.leases, ttl: "6 seconds", heartbeat: "2 seconds", intervalMs: 2_000, ttlMs: 6_000, rounds: 5 }
    const rcParams: ReclaimParams = args.profile === "quick"
      ? {
        leases: args.reclaimLeases,
        ttl: "3 seconds",
        ttlMs: 3_000,
        pollInterval: "1 second",
        pollIntervalMs: 1_000,
        backlog: args.reclaimBacklog
      }
      : {
        leases: args.reclaimLeases,
        ttl: "5 seconds",
        ttlMs: 5_000,
        pollInterval: "1 second",
        pollIntervalMs: 1_000,
        backlog: args.reclaimBacklog
      }
    const has = (m: string) => args.measures.includes(m)

    for (let repeat = 1; repeat <= args.repeats; repeat++) {
      const tag = `[repeat ${repeat}/${args.repeats}]`
      if (has("drain")) {
        log(`${tag} throughput and cost: ${args.runs.toLocaleString("en-US")} runs, ${args.workers} worker processes`)
        for (const v of args.variants) raw.drain.push(await drain(ctx, v, repeat, args.runs))
      }
      if (has("steady")) {
        log(
          `${tag} steady state: ${args.steady.rate} runs/s for ${args.steady.windowMs / 1000} s after ${
            args.steady.warmupMs / 1000
          } s`
        )
        for (const v of args.variants) {
          if (STEADY_SYSTEMS.includes(v.id)) steadyResults.push(await steady(ctx, v, repeat, args.steady))
        }
      }
      if (has("pinned") && repeat === 1) {
        const p = args.pinned
        log(
          `${tag} pinned MVCC horizon: ${p.rate} runs/s, ${p.readers} REPEATABLE READ readers held ${
            p.holdMs / 1000
          } s, ${p.staggerMs / 1000} s apart, over ${p.windowMs / 1000} s (and the same without readers)`
        )
        for (const v of args.variants) {
          if (PINNED_SYSTEMS.includes(v.id)) pinnedResults.push(await pinned(ctx, v, repeat, p))
        }
      }
      if (has("enqueue")) {
        const { runs, batch } = args.enqueue
        log(`${tag} bulk enqueue: ${runs.toLocaleString("en-US")} runs in batches of ${batch.toLocaleString("en-US")}`)
        for (const v of args.variants) {
          if (ENQUEUE_SYSTEMS.includes(v.id)) enqueueResults.push(await enqueue(ctx, v, repeat, runs, batch))
        }
      }
      if (has("latency")) {
        log(`${tag} pickup latency: ${args.samples} sequential samples`)
        for (const v of args.variants) raw.latency.push(await latency(ctx, v, repeat, args.samples))
      }
      if (has("heartbeat") && args.variants.some((v) => v.id === "leasehold")) {
        log(`${tag} heartbeat: ${args.leases.toLocaleString("en-US")} leases in one worker`)
        raw.heartbeat.push(await heartbeat(ctx, repeat, hbParams))
      }
      if (has("reclaim") && args.variants.some((v) => v.id === "leasehold")) {
        log(`${tag} reclaim after kill -9: ${args.reclaimLeases.toLocaleString("en-US")} leases`)
        raw.reclaim.push(await reclaim(ctx, repeat, rcParams))
      }
      if (has("fence") && args.variants.some((v) => v.id === "leasehold")) {
        log(`${tag} fence overhead: ${args.fenceBatches} pairs of ${args.fenceBatchSize}-run batches`)
        raw.fence.push(await fence(ctx, repeat, args.fenceBatches, args.fenceBatchSize))
      }
    }

    const summary = summarize(args.variants, raw, statements)
    const loadAfter = os.loadavg()
    const finishedAt = new Date()
    const command = `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`
    const text = render(summary, args.variants, args)
    process.stdout.write(`\n${text}\n`)

    const result = {
      version: 1,
      command,
      profile: args.profile,
      startedAt: startedAt.toISOString(),
      finishedAt: finishedAt.toISOString(),
      durationSeconds: (finishedAt.getTime() - startedAt.getTime()) / 1000,
      params: {
        runs: args.runs,
        repeats: args.repeats,
        workers: args.workers,
        samples: args.samples,
        capSeconds: args.capSeconds,
        heartbeat: hbParams,
        reclaim: rcParams,
        fence: { batches: args.fenceBatches, batchSize: args.fenceBatchSize },
        steady: args.steady,
        pinned: args.pinned,
        enqueue: args.enqueue,
        measures: args.measures
      },
      machine: { ...machine(), loadBefore, loadAfter },
      server: { version, settings, embedded: embedded !== undefined, pgStatStatements: statements },
      variants: args.variants.map((v) => ({
        id: v.id,
        label: v.label,
        system: v.system.name,
        mode: v.mode,
        source: v.source,
        options: v.options,
        latencyOptions: v.latencyOptions ?? v.options
      })),
      summary,
      raw,
      table: text
    }
    fs.mkdirSync(args.outDir, { recursive: true })
    fs.writeFileSync(path.join(args.outDir, "latest.json"), `${JSON.stringify(result, null, 2)}\n`)
    const subtitle = chartSubtitle(
      args.runs,
      args.workers,
      args.repeats,
      version,
      os.availableParallelism(),
      finishedAt.toISOString()
    )
    fs.writeFileSync(path.join(args.outDir, "latest.svg"), `${renderSvg(summary, args.variants, subtitle)}\n`)
    if (pinnedResults.length > 0) {
      const labels = Object.fromEntries(args.variants.map((v) => [v.id, v.label]))
      fs.writeFileSync(
        path.join(args.outDir, "pinned.svg"),
        pinnedChart(pinnedResults, labels, pinnedSubtitle(args.pinned, subtitle))
      )
    }
    log(`wrote ${path.join(args.outDir, "latest.json")} and latest.svg (${result.durationSeconds.toFixed(0)} s)`)
  } finally {
    if (embedded !== undefined) await embedded.stop()
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`bench failed: ${String(error?.stack ?? error)}\n`)
    process.exit(1)
  }
)
