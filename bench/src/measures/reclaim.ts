/**
 * Measure 5 (Leasehold): worker process A holds K leases; worker process B is idle beside it. A is
 * killed with SIGKILL at a random point of its heartbeat cycle; the time until B has claimed every
 * one of A's runs is the reclaim time, reported next to the TTL and to how much lease A had left.
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
}

export interface ReclaimParams {
  readonly leases: number
  readonly ttl: string
  readonly ttlMs: number
  readonly pollInterval: string
  readonly pollIntervalMs: number
}

export const reclaim = async (ctx: BenchContext, repeat: number, params: ReclaimParams): Promise<ReclaimResult> => {
  const database = await Pg.createDatabase(ctx.serverUrl, "leasehold_reclaim")
  const url = Pg.databaseUrl(ctx.serverUrl, database)
  const spawned: Array<WorkerProcess> = []
  try {
    const session = await leasehold.enqueueSession(url, {} as LeaseholdOptions)
    await session.enqueueMany(Array.from({ length: params.leases }, (_, k) => k))
    await session.close()
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
    await aClaimed
    status(`  reclaim: worker A holds ${params.leases} leases`)

    const b = spawnWorker({ variant: "leasehold", url, role: "hold", options, claimTarget: params.leases })
    spawned.push(b)
    const bClaimed = claimedAll(b)
    await b.ready
    b.go()
    // Kill at a random point of A's renewal cycle (default heartbeat: TTL / 3).
    await sleep(500 + Math.random() * (params.ttlMs / 3))
    const [left] = await Pg.query<{ ms: number }>(
      url,
      // Leases kept in the run rows and in the ledger's open claim batches.
      `SELECT (extract(epoch FROM max(e) - now()) * 1000)::float8 AS ms FROM (
         SELECT lease_expires_at AS e FROM ${SCHEMA}.runs WHERE state = 'running'
         UNION ALL SELECT expires_at FROM ${SCHEMA}.claim_batches WHERE settled_at IS NULL) l`
    )
    const killedAt = monotonicMs()
    a.kill9()
    status(`  reclaim: worker A killed, waiting for B`)
    const timeout = sleep(params.ttlMs + 30_000).then(() => undefined)
    const reclaimedAt = await Promise.race([bClaimed, timeout])
    if (reclaimedAt === undefined) throw new Error("reclaim: B did not reclaim every lease in time")
    const [check] = await Pg.query<{ fence2: number; events: number }>(
      url,
      `SELECT (SELECT count(*) FROM ${SCHEMA}.runs_now WHERE state = 'running' AND fence = 2)::int AS fence2,
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
      verified: check!.fence2 === params.leases && check!.events === params.leases
    }
    log(
      `  reclaim: ${params.leases} leases reclaimed ${(reclaimMs / 1000).toFixed(2)} s after kill -9 ` +
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
