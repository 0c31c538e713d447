/**
 * `storeLoop.js layouts [runs] [rounds] [layout,...]`: every layout through the layout loop
 * (LayoutLoop.ts), alternated round by round (forward, then backward: ABBA), with the load
 * average printed before each round, then the medians and ranges as Markdown tables. Runs
 * 20,000 runs per drain and keyed hand-off by default, 10,000 leases renewed, batches of 500.
 */
import { EmbeddedPostgres } from "@leasehold/embedded"
import * as fs from "node:fs"
import * as Pg from "../pg.js"
import { spread } from "../stats.js"
import { graphile } from "./graphile.js"
import type { Layout } from "./Layout.js"
import { type Delta, type LayoutReading, type LoopSizes, Meter, runLayout } from "./LayoutLoop.js"
import { ledger, ledgerAdvisory } from "./ledger.js"
import { today, todayDelete } from "./today.js"

export const layouts: ReadonlyArray<Layout> = [today, todayDelete, graphile, ledger, ledgerAdvisory]

const usage = "usage: storeLoop.js layouts [runs (at least 2,000)] [rounds] [layout,...]"

const fail = (line: string): never => {
  console.error(`storeLoop: ${line}`)
  console.error(usage)
  process.exit(2)
}

const whole = (given: string | undefined, name: string, fallback: number, least: number): number => {
  const value = given === undefined ? fallback : Number(given)
  if (!Number.isInteger(value) || value < least) {
    return fail(`${name} must be a whole number of at least ${least.toLocaleString("en-US")} (got ${given})`)
  }
  return value
}

const parse = (args: ReadonlyArray<string>) => {
  if (args.length > 3) fail(`too many arguments (${args.length}; at most 3)`)
  const runs = whole(args[0], "runs", 20_000, 2_000)
  const rounds = whole(args[1], "rounds", 3, 1)
  const chosen = args[2] === undefined ?
    layouts :
    args[2].split(",").map((id) =>
      layouts.find((l) => l.id === id) ?? fail(`no layout "${id}" (layouts: ${layouts.map((l) => l.id).join(", ")})`)
    )
  const sizes: LoopSizes = { runs, batch: 500, leases: 10_000, renewals: 5, keys: 1_000, keyedRuns: runs }
  return { sizes, rounds, chosen }
}

const perRun = (d: Delta, value: number) => (d.runs === 0 ? Number.NaN : value / d.runs)
const fmt = (
  n: number,
  digits = 1
) => (Number.isNaN(n)
  ? "n/a"
  : n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits }))
const range = (values: ReadonlyArray<number>, digits = 1) => {
  const s = spread(values.filter((v) => !Number.isNaN(v)))
  if (s.values.length === 0) return "n/a"
  return fmt(s.min, digits) === fmt(s.max, digits)
    ? fmt(s.median, digits)
    : `${fmt(s.median, digits)} (${fmt(s.min, digits)}–${fmt(s.max, digits)})`
}
const sum = (ds: ReadonlyArray<Delta>) => ds.reduce((a, d) => a + d.checkpoints, 0)
/** Checkpoints completed during the measured phases (not the CHECKPOINTs the loop takes between them). */
const checkpointsOf = (r: LayoutReading) =>
  r.enqueue.checkpoints + r.claim.checkpoints + r.completion.checkpoints + r.claimAfterCheckpoint.checkpoints +
  r.completionAfterCheckpoint.checkpoints + sum(r.renewals) + r.reclaim.checkpoints + r.keyed.checkpoints

const line = (r: LayoutReading) => {
  const renew = r.renewals.length === 0 ? "renewal n/a" : `renewal ${r.renewals.map((d) => fmt(d.wallMs)).join("/")} ms`
  return `  ${r.layout.padEnd(12)} enqueue ${fmt(perRun(r.enqueue, r.enqueue.walBytes), 0)} B ${
    fmt(perRun(r.enqueue, r.enqueue.cpuUs))
  } µs; ` +
    `claim ${fmt(perRun(r.claim, r.claim.walBytes), 0)} B ${fmt(perRun(r.claim, r.claim.cpuUs))} µs; ` +
    `completion ${fmt(perRun(r.completion, r.completion.walBytes), 0)} B ${
      fmt(perRun(r.completion, r.completion.cpuUs))
    } µs; ` +
    `after a checkpoint ${
      fmt((r.claimAfterCheckpoint.walBytes + r.completionAfterCheckpoint.walBytes) / r.claimAfterCheckpoint.runs, 0)
    } B; ` +
    `${renew}; reclaim ${fmt(perRun(r.reclaim, r.reclaim.walBytes), 0)} B ${
      fmt(perRun(r.reclaim, r.reclaim.cpuUs))
    } µs; ` +
    `keyed ${fmt(perRun(r.keyed, r.keyed.walBytes), 0)} B ${fmt(perRun(r.keyed, r.keyed.cpuUs))} µs; ` +
    `dead ${r.deadAfterDrain}/${r.deadAtEnd}; checkpoints ${checkpointsOf(r)}`
}

const tables = (readings: ReadonlyMap<string, Array<LayoutReading>>) => {
  const out: Array<string> = []
  out.push("WAL per run (exact), dead tuples, checkpoints taken during the measured phases:")
  out.push("")
  out.push(
    "| layout | enqueue B/run | claim B/run | completion B/run | drain B/run | drain B/run after a CHECKPOINT | renewal B/lease | reclaim B/run | keyed hand-off B/run | dead tuples after drain | dead tuples at end | kept bytes/run after drain | checkpoints |"
  )
  out.push("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
  for (const [id, rs] of readings) {
    out.push(
      `| ${id} | ${range(rs.map((r) => perRun(r.enqueue, r.enqueue.walBytes)), 0)} | ${
        range(rs.map((r) => perRun(r.claim, r.claim.walBytes)), 0)
      } | ${range(rs.map((r) => perRun(r.completion, r.completion.walBytes)), 0)} | ${
        range(rs.map((r) => (r.claim.walBytes + r.completion.walBytes) / r.claim.runs), 0)
      } | ${
        range(
          rs.map((r) =>
            (r.claimAfterCheckpoint.walBytes + r.completionAfterCheckpoint.walBytes) / r.claimAfterCheckpoint.runs
          ),
          0
        )
      } | ${
        range(
          rs.map((r) =>
            r.renewals.length === 0
              ? Number.NaN
              : r.renewals.reduce((a, d) => a + d.walBytes, 0) / r.renewals.reduce((a, d) => a + d.runs, 0)
          ),
          1
        )
      } | ${range(rs.map((r) => perRun(r.reclaim, r.reclaim.walBytes)), 0)} | ${
        range(rs.map((r) => perRun(r.keyed, r.keyed.walBytes)), 0)
      } | ${range(rs.map((r) => r.deadAfterDrain), 0)} | ${range(rs.map((r) => r.deadAtEnd), 0)} | ${
        range(rs.map((r) => r.bytesAfterDrain / (r.claim.runs + r.claimAfterCheckpoint.runs)), 0)
      } | ${rs.map(checkpointsOf).join(", ")} |`
    )
  }
  out.push("")
  out.push("Server CPU per run (µs, the layout's own server processes) and renewal time, median (range) over rounds:")
  out.push("")
  out.push(
    "| layout | enqueue | claim | completion | drain (claim + completion) | renewal of 10,000: wall ms | renewal: server ms | reclaim µs/run | keyed hand-off µs/run |"
  )
  out.push("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
  for (const [id, rs] of readings) {
    const renewals = rs.flatMap((r) => r.renewals)
    out.push(
      `| ${id} | ${range(rs.map((r) => perRun(r.enqueue, r.enqueue.cpuUs)))} | ${
        range(rs.map((r) => perRun(r.claim, r.claim.cpuUs)))
      } | ${range(rs.map((r) => perRun(r.completion, r.completion.cpuUs)))} | ${
        range(rs.map((r) => (r.claim.cpuUs + r.completion.cpuUs) / r.claim.runs))
      } | ${renewals.length === 0 ? "n/a (no renewal)" : range(renewals.map((d) => d.wallMs))} | ${
        renewals.length === 0 ? "n/a" : range(renewals.map((d) => d.cpuUs / 1000))
      } | ${range(rs.map((r) => perRun(r.reclaim, r.reclaim.cpuUs)))} | ${
        range(rs.map((r) => perRun(r.keyed, r.keyed.cpuUs)))
      } |`
    )
  }
  return out.join("\n")
}

export const layoutsMain = async (args: ReadonlyArray<string>) => {
  const { sizes, rounds, chosen } = parse(args)
  const embedded = process.env.DATABASE_URL ? undefined : await EmbeddedPostgres.startUnscoped()
  const serverUrl = process.env.DATABASE_URL || embedded!.url
  const meter = await Meter.open(serverUrl)
  try {
    console.log(`${await Pg.serverVersion(serverUrl)}`)
    const settings = await Pg.query<{ name: string; setting: string }>(
      serverUrl,
      `SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_compression',
        'shared_buffers', 'checkpoint_timeout', 'max_wal_size', 'autovacuum') ORDER BY name`
    )
    if (embedded !== undefined) {
      // The server is this run's own: no timed checkpoint in the middle of a layout's phases.
      await Pg.query(serverUrl, "ALTER SYSTEM SET checkpoint_timeout = '1h'")
      await Pg.query(serverUrl, "SELECT pg_reload_conf()")
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    const timeout = Number(settings.find((r) => r.name === "checkpoint_timeout")?.setting ?? 0)
    console.log(
      `settings: ${settings.map((r) => `${r.name}=${r.setting}`).join(", ")}${
        embedded === undefined ? "" : " (checkpoint_timeout set to 1h)"
      }`
    )
    if (embedded === undefined && timeout < 1800) {
      console.log(
        `note: checkpoint_timeout is ${timeout} s: a timed checkpoint may begin inside a phase (its full-page images then count there)`
      )
    }
    console.log(
      `layouts ${chosen.map((l) => l.id).join(", ")}; ${
        sizes.runs.toLocaleString("en-US")
      } runs per drain and per keyed hand-off ` +
        `(${sizes.keys.toLocaleString("en-US")} keys at a limit of 1), batches of ${sizes.batch}, ${
          sizes.leases.toLocaleString("en-US")
        } leases renewed ` +
        `${sizes.renewals} times, ${rounds} round(s)`
    )
    for (const l of chosen) console.log(`  ${l.id}: ${l.description}`)
    const readings = new Map<string, Array<LayoutReading>>(chosen.map((l) => [l.id, []]))
    for (let round = 1; round <= rounds; round++) {
      const order = round % 2 === 1 ? chosen : [...chosen].reverse()
      console.log(`round ${round}/${rounds} (load average ${fs.readFileSync("/proc/loadavg", "utf8").trim()})`)
      for (const layout of order) {
        const reading = await runLayout(serverUrl, meter, layout, sizes)
        readings.get(layout.id)!.push(reading)
        console.log(line(reading))
      }
    }
    console.log("")
    console.log(tables(readings))
  } finally {
    await meter.close()
    await embedded?.stop()
  }
}
