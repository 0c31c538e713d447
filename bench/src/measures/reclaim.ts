/**
 * Measure 5 (Leasehold): worker process A holds K leases; worker process B is idle beside it. A is
 * killed with SIGKILL at a random point of its heartbeat cycle; the time until B has claimed every
 * one of A's runs is the reclaim time, reported next to the TTL and to how much lease A had left.
 *
 * With a backlog (`--reclaim-backlog N`), A claims its K runs one at a time (K claim batches of one
 * run: the ledger's worst shape for a sweep), then N more runs are enqueued and B drains them while
 * A is killed: the reclaim happens behind a backlog, and the time is read from the database (the
 * `reclaimed` events), since B claims far more than A's runs.
 */
import { spawnWorker, type WorkerProcess } from "../children.js"
import type { BenchContext } from "../context.js"
import * as Pg from "../pg.js"
import { log, status } from "../progress.js"
import { monotonicMs, sleep } from "../stats.js"
import { leasehold, type LeaseholdOptions, SCHEMA } from "../systems/leasehold.js"

export interface ReclaimResult {
  readonly repeat: number
  readonly leases: number
  readonly ttlMs: number
  readonly pollIntervalMs: number
  /** SIGKILL to the last of A's runs claimed by B. */
  readonly reclaimMs: number
  /** Lease A had left (latest expiry − now(), in the database) just before the kill. */
  readonly leaseLeftMs: number
  /** reclaimMs − leaseLeftMs: how long after expiry B noticed (bounded by its poll interval). */
  readonly afterExpiryMs: number
  /** Every run re-claimed under fence 2 with a `reclaimed` history row. */
  readonly verified: boolean
  /** Runs enqueued behind A's for B to drain (0: B idle). */
  readonly backlog: number
  /** Of those, still not completed when the last of A's runs was reclaimed. */
  readonly backlogLeft: number
}

export interface ReclaimParams {
  readonly leases: number
  readonly ttl: string
  readonly ttlMs: number
  readonly pollInterval: string
  readonly pollIntervalMs: number
  readonly backlog: number
}

export const reclaim = async (ctx: BenchContext, repeat: number, params: ReclaimParams): Promise<ReclaimResult> => {
  const database = await Pg.createDatabase(ctx.serverUrl, "leasehold_reclaim")
  const url = Pg.databaseUrl(ctx.serverUrl, database)
  const spawned: Array<WorkerProcess> = []
  try {
    const backlog = params.backlog
    const session = await leasehold.enqueueSession(url, {} as LeaseholdOptions)
    if (backlog === 0) await session.enqueueMany(Array.from({ length: params.leases }, (_, k) => k))
    const options: LeaseholdOptions = {
      concurrency: params.leases,
      maxCompletionBatch: 500,
      ttl: params.ttl,
      pollInterval: params.pollInterval,
      shutdownGrace: "0 millis",
      maxConnections: 4
    }
    const claimedAll = (w: WorkerProcess) =>
      new Promise<number>((resolve) => w.onMessage((m) => m.t === "claimedAll" && resolve(m.at)))

    const a = spawnWorker({ variant: "leasehold", url, role: "hold", options, claimTarget: params.leases })
    spawned.push(a)
    const aClaimed = claimedAll(a)
    await a.ready
    a.go()
    if (backlog > 0) {
      // One run at a time, each claimed on its own notification: a claim batch per run.
      for (let k = 0; k < params.leases; k++) {
        await session.enqueueMany([k])
        await sleep(10)
      }
    }
    await aClaimed
    const [batches] = await Pg.query<{ n: number }>(
      url,
      `SELECT count(*)::int AS n FROM ${SCHEMA}.claim_batches WHERE settled_at IS NULL`
    )
    status(`  reclaim: worker A holds ${params.leases} leases in ${batches!.n} claim batches`)
    for (let k = 0; k < backlog; k += 5_000) {
      await session.enqueueMany(
        Array.from({ length: Math.min(5_000, backlog - k) }, (_, j) => params.leases + k + j)
      )
    }
    await session.close()

    const b = backlog === 0
      ? spawnWorker({ variant: "leasehold", url, role: "hold", options, claimTarget: params.leases })
      : spawnWorker({
        variant: "leasehold",
        url,
        role: "drain",
        options: { ...options, concurrency: 20, maxCompletionBatch: 20 }
      })
    spawned.push(b)
    const bClaimed = backlog === 0 ? claimedAll(b) : undefined
    await b.ready
    b.go()
    // Kill at a random point of A's renewal cycle (default heartbeat: TTL / 3).
    await sleep(500 + Math.random() * (params.ttlMs / 3))
    const [left] = await Pg.query<{ ms: number }>(
      url,
      // Leases kept in the run rows and in the ledger's open claim batches.
      `SELECT (extract(epoch FROM max(e) - now()) * 1000)::float8 AS ms FROM (
         SELECT lease_expires_at AS e FROM ${SCHEMA}.runs WHERE state = 'running'
         UNION ALL SELECT expires_at FROM ${SCHEMA}.claim_batches WHERE settled_at IS NULL AND owner = (
           SELECT owner FROM ${SCHEMA}.claim_batches ORDER BY batch LIMIT 1)) l`
    )
    const killedAt = monotonicMs()
    a.kill9()
    status(`  reclaim: worker A killed, waiting for B`)
    const timeout = sleep(params.ttlMs + 30_000).then(() => undefined)
    const reclaimedAt = await Promise.race([bClaimed ?? allReclaimed(url, params.leases), timeout])
    if (reclaimedAt === undefined) throw new Error("reclaim: B did not reclaim every lease in time")
    const [leftOver] = await Pg.query<{ n: number }>(
      url,
      `SELECT count(*)::int AS n FROM ${SCHEMA}.runs_now WHERE state <> 'completed' AND id > (
         SELECT min(id) + ${params.leases - 1} FROM ${SCHEMA}.runs)`
    )
    const [check] = await Pg.query<{ fence2: number; events: number }>(
      url,
      `SELECT (SELECT count(*) FROM ${SCHEMA}.runs_now WHERE state IN ('running', 'completed') AND fence = 2)::int AS fence2,
         (SELECT count(*) FROM ${SCHEMA}.run_events WHERE kind = 'reclaimed')::int AS events`
    )
    const reclaimMs = reclaimedAt - killedAt
    const leaseLeftMs = Number(left!.ms)
    const result: ReclaimResult = {
      repeat,
      leases: params.leases,
      ttlMs: params.ttlMs,
      pollIntervalMs: params.pollIntervalMs,
      reclaimMs,
      leaseLeftMs,
      afterExpiryMs: reclaimMs - leaseLeftMs,
      verified: check!.fence2 === params.leases && check!.events === params.leases,
      backlog,
      backlogLeft: backlog === 0 ? 0 : leftOver!.n
    }
    log(
      `  reclaim: ${params.leases} leases reclaimed ${(reclaimMs / 1000).toFixed(2)} s after kill -9 ` +
        (backlog === 0 ? "" : `behind a backlog of ${backlog} runs (${result.backlogLeft} left then) `) +
        `(TTL ${params.ttlMs / 1000} s, lease left ${(leaseLeftMs / 1000).toFixed(2)} s, verified: ${
          result.verified ? "yes" : "NO"
        })`
    )
    return result
  } finally {
    for (const w of spawned) w.kill9()
    await Promise.all(spawned.map((w) => w.exited))
    if (!ctx.keepDatabases) await Pg.dropDatabase(ctx.serverUrl, database).catch(() => undefined)
  }
}

/** Resolves (monotonic ms) once every one of A's runs has a `reclaimed` event, polling the database. */
const allReclaimed = async (url: string, leases: number): Promise<number> => {
  for (;;) {
    const [row] = await Pg.query<{ n: number }>(
      url,
      `SELECT count(*)::int AS n FROM ${SCHEMA}.run_events WHERE kind = 'reclaimed'`
    )
    if (row!.n >= leases) return monotonicMs()
    await sleep(20)
  }
}
