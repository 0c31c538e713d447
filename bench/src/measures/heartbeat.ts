/**
 * Measure 4 (Leasehold): one worker process holding L in-flight leases (handlers that never end).
 * Every renewal is counted and timed at the store boundary (one `RunStore.renew` call is one SQL
 * statement, `renew.ts`), against the worker's own HeartbeatSent events and against the database's
 * commit counter over the same window.
 */
import { spawnWorker, type WorkerProcess } from "../children.js"
import type { BenchContext } from "../context.js"
import * as Pg from "../pg.js"
import { log, status } from "../progress.js"
import { median, monotonicMs, quantile } from "../stats.js"
import { leasehold, type LeaseholdOptions } from "../systems/leasehold.js"

export interface HeartbeatResult {
  readonly repeat: number
  readonly leases: number
  readonly intervalMs: number
  readonly ttlMs: number
  /** Renewal rounds observed in the measured window. */
  readonly rounds: number
  /** Renew statements per HeartbeatSent event (one round): must be 1. */
  readonly statementsPerRound: number
  /** Renew statements per heartbeat interval of wall time in the window. */
  readonly statementsPerInterval: number
  /** Leases carried by each renew statement (median) and renewed by it (min). */
  readonly leasesPerStatement: number
  readonly renewedMin: number
  /** Time of one renewal statement, sent to answered (ms). */
  readonly renewMs: { readonly median: number; readonly p99: number; readonly max: number }
  /** Commits in the database per renewal round over the window (nothing else runs there). */
  readonly dbCommitsPerRound: number
  /** Time from go to every lease claimed (one claim statement at this concurrency). */
  readonly claimAllMs: number
}

/** How long a backend may hold back its commit counts (PGSTAT_IDLE_INTERVAL, 10 s) and a margin. */
const SETTLE_MS = 10_500

export interface HeartbeatParams {
  readonly leases: number
  readonly ttl: string
  readonly heartbeat: string
  readonly intervalMs: number
  readonly ttlMs: number
  readonly rounds: number
}

export const heartbeat = async (
  ctx: BenchContext,
  repeat: number,
  params: HeartbeatParams
): Promise<HeartbeatResult> => {
  const database = await Pg.createDatabase(ctx.serverUrl, "leasehold_heartbeat")
  const url = Pg.databaseUrl(ctx.serverUrl, database)
  let worker: WorkerProcess | undefined
  try {
    const session = await leasehold.enqueueSession(url, {} as LeaseholdOptions)
    for (let from = 0; from < params.leases; from += 5_000) {
      await session.enqueueMany(Array.from({ length: Math.min(5_000, params.leases - from) }, (_, k) => from + k))
    }
    await session.close()
    await Pg.query(url, "ANALYZE")
    // BENCH_LOG_STATEMENTS=1: the server logs every statement run in this database (to see what commits).
    if (process.env.BENCH_LOG_STATEMENTS) {
      await Pg.query(ctx.serverUrl, `ALTER DATABASE "${database}" SET log_statement = 'all'`)
    }
    const options: LeaseholdOptions = {
      concurrency: params.leases,
      maxCompletionBatch: 500,
      ttl: params.ttl,
      heartbeat: params.heartbeat,
      pollInterval: "1 second",
      shutdownGrace: "0 millis",
      maxConnections: 10
    }
    worker = spawnWorker({
      variant: "leasehold",
      url,
      role: "hold",
      options,
      claimTarget: params.leases,
      observeRenewals: true
    })
    const w = worker
    await w.ready
    const renewals: Array<{ at: number; ms: number; leases: number; renewed: number; commitsBefore?: number }> = []
    let sent = 0
    let claimedAt: number | undefined
    const windowStart = { commits: 0, renewals: 0, sent: 0, at: 0 }
    const needed = params.rounds + Math.ceil(SETTLE_MS / params.intervalMs) + 1
    const done = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`heartbeat: saw ${renewals.length} renewals of ${needed} in time`)),
        (needed + 3) * params.intervalMs + 30_000
      )
      w.onMessage((m) => {
        if (m.t === "claimedAll") claimedAt = m.at
        else if (m.t === "heartbeatSent") sent++
        else if (m.t === "renew") {
          renewals.push({ at: m.sentAt, ms: m.ms, leases: m.leases, renewed: m.renewed })
          status(
            `  heartbeat: ${renewals.length} / ${needed} renewals of ${m.leases.toLocaleString("en-US")} leases, last ${
              m.ms.toFixed(1)
            } ms`
          )
          if (windowStart.renewals > 0 && renewals.length >= windowStart.renewals + params.rounds) {
            clearTimeout(timer)
            resolve()
          }
        }
      })
    })
    const t0 = monotonicMs()
    w.go()
    // The window opens at the first renewal sent 10.5 s or more after the start: a backend publishes
    // its commit counts when it goes idle, at most once a second, and one that stays idle (the
    // LISTEN connection, the claim's) only after 10 s; by then everything before is counted.
    let windowOpened = false
    const windowOpen = new Promise<void>((resolve) => {
      w.onMessage(async (m) => {
        if (m.t === "renew" && !windowOpened && m.sentAt - t0 >= SETTLE_MS) {
          windowOpened = true
          const c = await Pg.counters(ctx.serverUrl, database, false)
          Object.assign(windowStart, { commits: c.xactCommit, renewals: renewals.length, sent, at: m.sentAt })
          resolve()
        }
      })
    })
    await windowOpen
    await done
    const last = renewals[renewals.length - 1]!
    const end = await Pg.counters(ctx.serverUrl, database, false)
    const window = renewals.slice(windowStart.renewals)
    const rounds = window.length
    const windowMs = last.at - windowStart.at
    const result: HeartbeatResult = {
      repeat,
      leases: params.leases,
      intervalMs: params.intervalMs,
      ttlMs: params.ttlMs,
      rounds,
      statementsPerRound: renewals.length / Math.max(1, sent),
      statementsPerInterval: rounds / (windowMs / params.intervalMs),
      leasesPerStatement: median(renewals.map((r) => r.leases)),
      renewedMin: Math.min(...renewals.map((r) => r.renewed)),
      renewMs: {
        median: median(renewals.map((r) => r.ms)),
        p99: quantile(renewals.map((r) => r.ms), 0.99),
        max: Math.max(...renewals.map((r) => r.ms))
      },
      dbCommitsPerRound: (end.xactCommit - windowStart.commits) / Math.max(1, rounds),
      claimAllMs: claimedAt === undefined ? Number.NaN : claimedAt - t0
    }
    log(
      `  heartbeat: ${params.leases.toLocaleString("en-US")} leases, ${
        result.statementsPerRound.toFixed(2)
      } renew statement(s) per round, ` +
        `${result.statementsPerInterval.toFixed(2)} per ${params.heartbeat}, ${
          result.dbCommitsPerRound.toFixed(2)
        } commits per round, ` +
        `renewal ${result.renewMs.median.toFixed(1)} ms (max ${result.renewMs.max.toFixed(1)})`
    )
    return result
  } finally {
    worker?.kill9()
    if (worker !== undefined) await worker.exited
    if (!ctx.keepDatabases) await Pg.dropDatabase(ctx.serverUrl, database).catch(() => undefined)
  }
}
