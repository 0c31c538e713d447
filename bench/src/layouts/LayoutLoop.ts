/**
 * The layout loop: each layout's routine statements in a closed loop on a database of its own,
 * one statement at a time, metered from outside. Per phase: WAL bytes (the server's insert
 * position before and after: exact when nothing else writes on the server), the CPU of the
 * layout's own server processes (`/proc/<pid>/schedstat`, nanoseconds), wall time, and the
 * checkpoints completed meanwhile (a checkpoint makes the next write of every page carry a full
 * page image, so WAL figures are comparable only between phases that took none).
 */
import * as fs from "node:fs"
import pg from "pg"
import * as Pg from "../pg.js"
import { monotonicMs } from "../stats.js"
import type { Held, Layout, LayoutSession } from "./Layout.js"

export interface LoopSizes {
  /** Runs enqueued, then claimed and completed in the drain. */
  readonly runs: number
  /** Runs per claim and per completion statement. */
  readonly batch: number
  /** Leases held while renewals are measured. */
  readonly leases: number
  /** Renewals measured (each of every held lease). */
  readonly renewals: number
  /** Keys of the keyed hand-off, at a limit of 1 each, and its runs. */
  readonly keys: number
  readonly keyedRuns: number
}

/** What one phase cost: totals over its statements. */
export interface Delta {
  readonly runs: number
  readonly walBytes: number
  readonly cpuUs: number
  readonly wallMs: number
  readonly checkpoints: number
  readonly statements: number
}

export interface LayoutReading {
  readonly layout: string
  readonly enqueue: Delta
  readonly claim: Delta
  readonly completion: Delta
  /** The second half of the drain, after a CHECKPOINT: its first write of each page carries the page. */
  readonly claimAfterCheckpoint: Delta
  readonly completionAfterCheckpoint: Delta
  readonly deadAfterDrain: number
  /** Bytes of the layout's tables and indexes after the drain (the history kept). */
  readonly bytesAfterDrain: number
  readonly renewals: ReadonlyArray<Delta>
  readonly reclaim: Delta
  readonly keyed: Delta
  readonly deadAtEnd: number
}

const zero: Delta = { runs: 0, walBytes: 0, cpuUs: 0, wallMs: 0, checkpoints: 0, statements: 0 }
const add = (a: Delta, b: Delta): Delta => ({
  runs: a.runs + b.runs,
  walBytes: a.walBytes + b.walBytes,
  cpuUs: a.cpuUs + b.cpuUs,
  wallMs: a.wallMs + b.wallMs,
  checkpoints: a.checkpoints + b.checkpoints,
  statements: a.statements + b.statements
})

/** An LSN ("hi/lo" in hex) as a byte position. */
const lsnBytes = (lsn: string): bigint => {
  const [hi, lo] = lsn.split("/")
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`)
}

/** CPU time (ns) a process has run for, from the scheduler's own count. */
const cpuNs = (pid: number): number => {
  try {
    return Number(fs.readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0])
  } catch {
    throw new Error(`cannot read /proc/${pid}/schedstat: run the server on this machine`)
  }
}

interface Snapshot {
  readonly lsn: bigint
  readonly checkpoints: number
  readonly cpu: ReadonlyMap<number, number>
}

/** Reads the server's counters from a connection of its own, outside the measured database. */
export class Meter {
  private constructor(private readonly control: pg.Client, private readonly checkpointSql: string) {}

  static async open(serverUrl: string): Promise<Meter> {
    const control = new pg.Client({ connectionString: serverUrl, application_name: "layout-meter" })
    await control.connect()
    const { rows } = await control.query<{ v: number }>("SELECT current_setting('server_version_num')::int AS v")
    // PostgreSQL 17 moved the checkpoint counters to pg_stat_checkpointer.
    const checkpointSql = rows[0]!.v >= 170000
      ? "(SELECT num_timed + num_requested FROM pg_stat_checkpointer)"
      : "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)"
    return new Meter(control, checkpointSql)
  }

  async snapshot(database: string): Promise<Snapshot> {
    const { rows } = await this.control.query<{ lsn: string; checkpoints: string; pids: Array<number> }>(
      `SELECT pg_current_wal_insert_lsn()::text AS lsn, ${this.checkpointSql}::text AS checkpoints,
        ARRAY(SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'
          AND application_name LIKE 'layout%') AS pids`,
      [database]
    )
    const row = rows[0]!
    return {
      lsn: lsnBytes(row.lsn),
      checkpoints: Number(row.checkpoints),
      cpu: new Map(row.pids.map((pid) => [pid, cpuNs(pid)]))
    }
  }

  /** Runs `f` between two snapshots; `runs` says how many runs its delta is for. */
  async measure<A>(database: string, f: () => Promise<A>, runs: (a: A) => number): Promise<[A, Delta]> {
    const before = await this.snapshot(database)
    // Wall time of the statements alone, not of the meter's own round trips.
    const startedAt = monotonicMs()
    const value = await f()
    const wallMs = monotonicMs() - startedAt
    const after = await this.snapshot(database)
    let ns = 0
    // A process that appeared meanwhile (a pool's first connection) counts from its start.
    for (const [pid, total] of after.cpu) ns += total - (before.cpu.get(pid) ?? 0)
    return [value, {
      runs: runs(value),
      walBytes: Number(after.lsn - before.lsn),
      cpuUs: ns / 1000,
      wallMs,
      checkpoints: after.checkpoints - before.checkpoints,
      statements: 1
    }]
  }

  /**
   * A checkpoint now, so that the phases after it take none (with a checkpoint_timeout longer than
   * a layout's run) and every page they first touch was written since its redo point.
   */
  async checkpoint(): Promise<void> {
    const count = async () =>
      Number((await this.control.query<{ n: string }>(`SELECT ${this.checkpointSql}::text AS n`)).rows[0]!.n)
    const before = await count()
    await this.control.query("CHECKPOINT")
    // The checkpointer publishes its count a moment later: wait for it, so that this checkpoint is
    // not counted in the phase that follows.
    for (let i = 0; i < 40 && (await count()) <= before; i++) {
      await this.control.query("SELECT pg_stat_clear_snapshot()")
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  close(): Promise<void> {
    return this.control.end()
  }
}

/** Dead and live tuples and bytes of a schema's tables, read once every session has closed. */
const tables = async (url: string, schema: string) => {
  // Sessions flush their table statistics as they exit; give the last one a moment.
  await new Promise((resolve) => setTimeout(resolve, 700))
  const [row] = await Pg.query<{ dead: string; bytes: string }>(
    url,
    `SELECT coalesce(sum(s.n_dead_tup), 0)::text AS dead,
       coalesce(sum(pg_total_relation_size(s.relid)), 0)::text AS bytes
     FROM pg_stat_user_tables s WHERE s.schemaname = $1`,
    [schema]
  )
  return { dead: Number(row!.dead), bytes: Number(row!.bytes) }
}

/** Statistics taken and autovacuum off on every table of the schema: steady plans, no vacuum mid-phase. */
const settle = async (url: string, schema: string) => {
  const rows = await Pg.query<{ t: string }>(
    url,
    `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = $1`,
    [
      schema
    ]
  )
  for (const { t } of rows) {
    await Pg.query(url, `ALTER TABLE ${t} SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)`)
    await Pg.query(url, `ANALYZE ${t}`)
  }
}

/** Claims `count` runs in batches (not measured): the leases the renewal and the reclaim need. */
const claimAll = async (session: LayoutSession, count: number, batch: number) => {
  const held: Array<Held> = []
  while (held.length < count) {
    const got = await session.claim(Math.min(batch, count - held.length))
    if (got.length === 0) throw new Error(`claimed ${held.length} of ${count} runs: the claim found no more`)
    held.push(...got)
  }
  return held
}

/** One layout through every phase, on a database of its own (dropped afterwards). */
export const runLayout = async (
  serverUrl: string,
  meter: Meter,
  layout: Layout,
  sizes: LoopSizes
): Promise<LayoutReading> => {
  const database = await Pg.createDatabase(serverUrl, `layout_${layout.id}`)
  const url = Pg.databaseUrl(serverUrl, database)
  try {
    await layout.install(url)
    const measure = <A>(f: () => Promise<A>, runs: (a: A) => number) => meter.measure(database, f, runs)

    await meter.checkpoint()
    // The enqueue and the drain: claim a batch, complete it, until every run is done. The second
    // half of the drain comes after a CHECKPOINT (what a drain pays for the full-page images).
    let session = await layout.open(url)
    const [, enqueue] = await measure(() => session.enqueue(0, sizes.runs), () => sizes.runs)
    await settle(url, layout.schema)
    const drain = async (count: number) => {
      let claim = zero
      let completion = zero
      let done = 0
      while (done < count) {
        const [held, c] = await measure(() => session.claim(Math.min(sizes.batch, count - done)), (h) => h.length)
        if (held.length === 0) throw new Error(`${layout.id}: the drain found no run after ${done} of ${count}`)
        claim = add(claim, c)
        const [, d] = await measure(() => session.complete(held), () => held.length)
        completion = add(completion, d)
        done += held.length
      }
      return { claim, completion }
    }
    const firstHalf = Math.floor(sizes.runs / 2 / sizes.batch) * sizes.batch
    const { claim, completion } = await drain(firstHalf)
    await meter.checkpoint()
    const afterCheckpoint = await drain(sizes.runs - firstHalf)
    await meter.checkpoint()
    await session.close()
    const afterDrain = await tables(url, layout.schema)

    // Renewals of `leases` held leases, then the reclaim of one expired batch of them.
    session = await layout.open(url)
    await session.enqueue(sizes.runs, sizes.leases)
    const held = await claimAll(session, sizes.leases, sizes.batch)
    const renewals: Array<Delta> = []
    if (session.renew !== undefined) {
      for (let i = 0; i < sizes.renewals; i++) {
        const [renewed, r] = await measure(() => session.renew!(held), () => held.length)
        if (renewed !== held.length) throw new Error(`${layout.id}: renewed ${renewed} of ${held.length} leases`)
        renewals.push(r)
      }
    }
    const expiring = held.slice(0, sizes.batch)
    await session.expire(expiring)
    const [reclaimed, reclaim] = await measure(() => session.reclaim(sizes.batch), (r) => r.length)
    const expected = new Set(expiring.map((h) => h.id))
    if (reclaimed.length !== expiring.length || reclaimed.some((r) => !expected.has(r.id))) {
      throw new Error(
        `${layout.id}: the reclaim took ${reclaimed.length} runs, not the ${expiring.length} expired ones`
      )
    }
    for (const r of reclaimed) {
      const before = expiring.find((h) => h.id === r.id)!
      if (layout.id !== "graphile" && r.fence !== before.fence + 1) {
        throw new Error(`${layout.id}: run ${r.id} reclaimed at fence ${r.fence} after ${before.fence}`)
      }
    }

    // The keyed hand-off: each completion hands its key's slot to the key's next run and claims it.
    await session.enqueueKeyed(0, sizes.keyedRuns, sizes.keys)
    await settle(url, layout.schema)
    const first = await session.claim(sizes.keys, true)
    if (first.length !== sizes.keys) {
      throw new Error(`${layout.id}: the first keyed claim took ${first.length} runs, not one per key`)
    }
    const measured = sizes.keyedRuns - sizes.keys
    let keyed = zero
    let inFlight: Array<Held> = [...first]
    let handed = 0
    while (handed < measured) {
      if (inFlight.length === 0) {
        // A layout whose completion hands nothing on (graphile-worker's: the next claim takes the
        // successors) may answer fewer successors than it freed; its next claim is part of the loop.
        const [more, c] = await measure(() => session.claim(sizes.batch, true), () => 0)
        if (more.length === 0) break
        keyed = add(keyed, c)
        inFlight = [...more]
      }
      const taken = inFlight.slice(0, sizes.batch)
      inFlight = inFlight.slice(sizes.batch)
      const [next, k] = await measure(() => session.completeHandingOff(taken), () => taken.length)
      keyed = add(keyed, k)
      handed += taken.length
      inFlight.push(...next)
    }
    if (handed < measured) throw new Error(`${layout.id}: the keyed chains ended after ${handed} of ${measured} runs`)
    await session.close()
    const atEnd = await tables(url, layout.schema)
    return {
      layout: layout.id,
      enqueue,
      claim,
      completion,
      claimAfterCheckpoint: afterCheckpoint.claim,
      completionAfterCheckpoint: afterCheckpoint.completion,
      deadAfterDrain: afterDrain.dead,
      bytesAfterDrain: afterDrain.bytes,
      renewals,
      reclaim,
      keyed,
      deadAtEnd: atEnd.dead
    }
  } finally {
    await Pg.dropDatabase(serverUrl, database)
  }
}
