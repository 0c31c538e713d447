/**
 * Measures 1 and 3: bulk-enqueue N no-op runs, drain them with the worker processes, and read what
 * the drain cost the server. The clock starts when the already-connected workers are told to go and
 * stops at the first completion poll that finds nothing left; every run must have been executed
 * exactly once and be completed in the database.
 */
import pg from "pg"
import { spawnWorker, type WorkerProcess } from "../children.js"
import type { BenchContext } from "../context.js"
import * as Pg from "../pg.js"
import { log, status } from "../progress.js"
import type { StoreProfile } from "../protocol.js"
import { monotonicMs, sleep } from "../stats.js"
import type { System } from "../systems/system.js"
import type { Variant } from "../variants.js"

export interface ExactlyOnce {
  readonly ok: boolean
  readonly executions: number
  readonly distinct: number
  readonly duplicates: number
  readonly dbCompleted: number
  readonly checks: Record<string, number>
  readonly problems: ReadonlyArray<string>
}

export interface Cost {
  readonly commitsPerRun: number
  readonly statementsPerRun: number | null
  readonly walBytesPerRun: number
  readonly rowsInsertedPerRun: number
  readonly rowsUpdatedPerRun: number
  readonly rowsDeletedPerRun: number
  readonly deadTuples: number
  readonly deadTuplesPerRun: number
  readonly autovacuums: number
  readonly rollbacks: number
  /** Commits of other databases on the server during the drain (noise indicator). */
  readonly neighbourCommits: number
}

/** Where the time went during the drain. */
export interface DrainProfile {
  /** CPU of the worker processes (user + system), per completed run (µs). */
  readonly workerCpuUsPerRun: number | null
  /** CPU of the server processes serving this database, per completed run (µs). */
  readonly serverCpuUsPerRun: number | null
  /** Wall time of the drain × cores, per run (µs): what one run may cost to keep up. */
  readonly budgetUsPerRun: number
  /** Leasehold: store calls summed over the worker processes. */
  readonly store: StoreProfile | null
}

export interface DrainResult {
  readonly variant: string
  readonly repeat: number
  readonly runs: number
  readonly enqueueMs: number
  readonly drainMs: number
  readonly completed: number
  /** The drain hit the time cap before every run completed. */
  readonly capped: boolean
  readonly throughput: number
  readonly exactlyOnce: ExactlyOnce
  readonly cost: Cost
  readonly profile: DrainProfile
}

const CHUNK = 5_000

const fmtUs = (us: number | null) => (us === null ? "n/a" : `${Math.round(us)} µs`)

/** A database that already holds a store (history), drained into and kept; counted by `system`. */
export interface OnDatabase {
  readonly database: string
  readonly system: System<unknown>
}

export const drain = async (
  ctx: BenchContext,
  variant: Variant,
  repeat: number,
  runs: number,
  on?: OnDatabase
): Promise<DrainResult> => {
  const system = on?.system ?? variant.system
  const database = on?.database ?? await Pg.createDatabase(ctx.serverUrl, `${variant.id}_drain`)
  const url = Pg.databaseUrl(ctx.serverUrl, database)
  const workers: Array<WorkerProcess> = []
  try {
    // Enqueue (migrations first, by the system's own client).
    const session = await system.enqueueSession(url, variant.options)
    const enqueueStart = monotonicMs()
    for (let from = 0; from < runs; from += CHUNK) {
      const indices = Array.from({ length: Math.min(CHUNK, runs - from) }, (_, k) => from + k)
      await session.enqueueMany(indices)
      status(
        `  ${variant.label}: enqueued ${(from + indices.length).toLocaleString("en-US")} / ${
          runs.toLocaleString("en-US")
        }`
      )
    }
    const enqueueMs = monotonicMs() - enqueueStart
    await session.close()
    // Statistics for the loaded tables, as autovacuum would gather them after a bulk load: without
    // them every system's statements are planned for empty tables.
    await Pg.query(url, "ANALYZE")
    // BENCH_AUTO_EXPLAIN=<ms>: the server logs the plan of every statement of the drain slower than that.
    if (process.env.BENCH_AUTO_EXPLAIN) {
      await Pg.query(ctx.serverUrl, `ALTER DATABASE "${database}" SET session_preload_libraries = 'auto_explain'`)
      await Pg.query(
        ctx.serverUrl,
        `ALTER DATABASE "${database}" SET auto_explain.log_min_duration = ${Number(process.env.BENCH_AUTO_EXPLAIN)}`
      )
      await Pg.query(ctx.serverUrl, `ALTER DATABASE "${database}" SET auto_explain.log_analyze = on`)
      await Pg.query(ctx.serverUrl, `ALTER DATABASE "${database}" SET auto_explain.log_buffers = on`)
    }

    for (let w = 0; w < ctx.workers; w++) workers.push(spawnWorker({ variant: variant.id, url, role: "drain" }))
    await Promise.all(workers.map((w) => w.ready))
    // Set-up statements of the workers reach pg_stat_database within a second of going idle.
    await sleep(1_200)
    const poll = new pg.Client({ connectionString: url, application_name: "bench-poll" })
    await poll.connect()
    let pollQueries = 0
    const before = await Pg.counters(ctx.serverUrl, database, ctx.statements)
    const cpuBefore = await Pg.backendCpu(ctx.serverUrl, database)

    const t0 = monotonicMs()
    for (const w of workers) w.go()
    const capMs = ctx.capSeconds * 1_000
    const executed = () => workers.reduce((sum, w) => sum + w.executed(), 0)
    let lastShown = 0
    let end: number | undefined
    let capped = false
    while (end === undefined) {
      const now = monotonicMs()
      if (now - t0 > capMs) {
        capped = true
        end = now
        break
      }
      if (now - lastShown > 500) {
        lastShown = now
        const done = executed()
        status(
          `  ${variant.label}: ${done.toLocaleString("en-US")} / ${runs.toLocaleString("en-US")} executed, ${
            Math.round(done / ((now - t0) / 1000)).toLocaleString("en-US")
          }/s`
        )
      }
      if (executed() >= runs) {
        // Every handler has run: poll the database until the last completion has committed.
        const at = monotonicMs()
        pollQueries++
        const { rows } = await poll.query(system.remainingSql)
        if (rows[0].n === 0) end = at
        else await sleep(2)
      } else {
        await sleep(10)
      }
    }
    let completed: number
    if (capped) {
      pollQueries++
      completed = (await poll.query(system.completedSql(runs))).rows[0].n
    } else {
      completed = runs
    }
    const drainMs = end - t0
    const cpuAfter = await Pg.backendCpu(ctx.serverUrl, database)
    await poll.end()

    const stopped = await Promise.all(workers.map((w) => w.stop()))
    const lists = stopped.map((s) => s.executed)
    await Promise.all(workers.map((w) => w.exited))
    await Pg.waitForSessionsToEnd(ctx.serverUrl, database)
    const after = await Pg.counters(ctx.serverUrl, database, ctx.statements)
    const walBytes = await Pg.walBytesBetween(ctx.serverUrl, before.walLsn, after.walLsn)

    // Exactly once: every index executed once by some process, and completed in the database.
    const counts = new Uint8Array(runs)
    let executions = 0
    let duplicates = 0
    for (const list of lists) {
      for (const i of list) {
        executions++
        if (counts[i]! > 0) duplicates++
        counts[i] = Math.min(255, counts[i]! + 1)
      }
    }
    const distinct = executions - duplicates
    const [checks] = await Pg.query(url, system.verifySql)
    const [dbRow] = await Pg.query(url, system.completedSql(runs))
    const dbCompleted = Number(dbRow.n)
    const problems = workers.flatMap((w) => w.problems)
    const ok = duplicates === 0 && problems.length === 0 &&
      (capped ? distinct >= dbCompleted : distinct === runs && dbCompleted === runs)
    const tuples = await Pg.tupleCounts(url, system.schemas)

    // Cost is divided by what the counters saw completed (a capped drain finishes its in-flight runs).
    const n = Math.max(1, dbCompleted)
    const serverCpuMs = Pg.cpuBetween(cpuBefore, cpuAfter)
    const profiles = stopped.map((s) => s.profile)
    const store: StoreProfile = {}
    for (const p of profiles) {
      for (const [op, v] of Object.entries(p?.store ?? {})) {
        const e = (store[op] ??= { calls: 0, items: 0, ms: 0 })
        e.calls += v.calls
        e.items += v.items
        e.ms += v.ms
      }
    }
    const commits = after.xactCommit - before.xactCommit - pollQueries
    const result: DrainResult = {
      variant: variant.id,
      repeat,
      runs,
      enqueueMs,
      drainMs,
      completed,
      capped,
      throughput: completed / (drainMs / 1000),
      exactlyOnce: { ok, executions, distinct, duplicates, dbCompleted, checks, problems },
      cost: {
        commitsPerRun: commits / n,
        statementsPerRun: after.statements === null || before.statements === null
          ? null
          : (after.statements - before.statements - pollQueries) / n,
        walBytesPerRun: walBytes / n,
        rowsInsertedPerRun: (after.tupInserted - before.tupInserted) / n,
        rowsUpdatedPerRun: (after.tupUpdated - before.tupUpdated) / n,
        rowsDeletedPerRun: (after.tupDeleted - before.tupDeleted) / n,
        deadTuples: tuples.dead,
        deadTuplesPerRun: tuples.dead / n,
        autovacuums: tuples.autovacuums,
        rollbacks: after.xactRollback - before.xactRollback,
        neighbourCommits: after.otherCommits - before.otherCommits
      },
      profile: {
        workerCpuUsPerRun: profiles.some((p) => p === undefined)
          ? null
          : (profiles.reduce((sum, p) => sum + p!.cpuMs, 0) * 1000) / n,
        serverCpuUsPerRun: serverCpuMs === null ? null : (serverCpuMs * 1000) / n,
        budgetUsPerRun: (drainMs * 1000 * ctx.cores) / Math.max(1, completed),
        store: Object.keys(store).length === 0 ? null : store
      }
    }
    log(
      `  ${variant.label}: ${Math.round(result.throughput).toLocaleString("en-US")} runs/s` +
        (capped
          ? ` (capped at ${ctx.capSeconds} s: ${completed.toLocaleString("en-US")} of ${runs.toLocaleString("en-US")})`
          : "") +
        `, exactly once: ${ok ? "yes" : "NO"}, ${result.cost.commitsPerRun.toFixed(2)} commits/run, ` +
        `${Math.round(result.cost.walBytesPerRun)} WAL B/run, CPU/run: workers ${
          fmtUs(result.profile.workerCpuUsPerRun)
        }, ` +
        `server ${fmtUs(result.profile.serverCpuUsPerRun)}, enqueue ${
          Math.round(runs / (enqueueMs / 1000)).toLocaleString("en-US")
        }/s`
    )
    return result
  } finally {
    for (const w of workers) w.kill9()
    if (!ctx.keepDatabases && on === undefined) await Pg.dropDatabase(ctx.serverUrl, database).catch(() => undefined)
  }
}
