/**
 * Reads and writes for operators beside `read.ts`: the worker registry (migration 0019), the
 * throughput of the last minutes (migration 0020's BRIN index on `finished_at`) and a key limit's keys
 * (the slot and waiting indexes of migrations 0010 and 0013). None is on a worker's run path.
 */
import type { KeyLimits, Throughput, WorkerRegistry } from "@leasehold/core"
import { ThroughputStorage } from "@leasehold/core/store"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { num, textArray, toDate } from "./rows.js"

/** How long past its expiry a dead worker's row is kept before another worker's announcement deletes it. */
const agedOut = "10 minutes"

/**
 * Upserts the worker's row and deletes other workers' rows dead for a while. The refresh changes
 * only unindexed columns: a HOT update.
 */
export const announceWorker = (sql: SqlClient.SqlClient, s: StoreSchema, a: WorkerRegistry.WorkerAnnouncement) =>
  Effect.asVoid(sql`
    WITH aged_out AS (
      DELETE FROM ${s.workers(sql)} WHERE expires_at < now() - ${agedOut}::interval AND owner <> ${a.owner}
    )
    INSERT INTO ${
    s.workers(sql)
  } AS w (owner, host, pid, version, queues, kinds, concurrency, runs_held, started_at, expires_at)
    VALUES (${a.owner}, ${a.host}, ${a.pid}, ${a.version}, ${textArray(a.queues)}, ${
    textArray(a.kinds)
  }, ${a.concurrency},
      ${a.runsHeld}, ${a.startedAt}, now() + ${Duration.toMillis(a.ttl)} * interval '1 millisecond')
    ON CONFLICT (owner) DO UPDATE SET
      runs_held = excluded.runs_held, last_heartbeat_at = now(), expires_at = excluded.expires_at,
      host = excluded.host, pid = excluded.pid, version = excluded.version, queues = excluded.queues,
      kinds = excluded.kinds, concurrency = excluded.concurrency, started_at = excluded.started_at`)

export const retireWorker = (sql: SqlClient.SqlClient, s: StoreSchema, owner: string) =>
  Effect.map(sql`DELETE FROM ${s.workers(sql)} WHERE owner = ${owner} RETURNING owner`, (rows) => rows.length > 0)

/** The live workers, or (`gone`) those past their expiry whose row is not aged out yet. */
export const workers = (sql: SqlClient.SqlClient, s: StoreSchema, which: "alive" | "gone" = "alive") =>
  Effect.map(
    sql<{
      owner: string
      host: string
      pid: number
      version: string
      queues: ReadonlyArray<string>
      kinds: ReadonlyArray<string>
      concurrency: number
      runs_held: number
      started_at: Date
      last_heartbeat_at: Date
      expires_at: Date
    }>`
      SELECT owner, host, pid, version, queues, kinds, concurrency, runs_held, started_at, last_heartbeat_at, expires_at
      FROM ${s.workers(sql)}
      WHERE ${
      sql.literal(
        which === "alive" ? "expires_at > now()" : `expires_at <= now() AND expires_at >= now() - interval '${agedOut}'`
      )
    }
      ORDER BY owner COLLATE "C"`,
    (rows) =>
      rows.map((r): WorkerRegistry.WorkerInfo => ({
        owner: r.owner,
        host: r.host,
        pid: r.pid,
        version: r.version,
        queues: r.queues,
        kinds: r.kinds,
        concurrency: r.concurrency,
        runsHeld: r.runs_held,
        startedAt: toDate(r.started_at),
        lastHeartbeatAt: toDate(r.last_heartbeat_at),
        expiresAt: toDate(r.expires_at)
      }))
  )

type Row = {
  queue: string
  minute: Date
  completed: bigint
  failed: bigint
  wait_p50: number | null
  wait_p95: number | null
  wait_p99: number | null
  run_p50: number | null
  run_p95: number | null
  run_p99: number | null
}

/**
 * The runs finished since the window's start (through `runs_finished_brin`, and the ledger's
 * `completion_batches_at`), the latest `maxRuns + 1` of them read once (the one more says whether
 * the window held more), grouped by queue and minute with `percentile_cont` over due → claimed and
 * claimed → finished.
 */
export const throughput = (sql: SqlClient.SqlClient, s: StoreSchema, request: Throughput.ThroughputRequest) =>
  Effect.gen(function*() {
    const maxRuns = request.maxRuns ?? ThroughputStorage.defaultMaxRuns
    const [window] = yield* sql<{ since: Date }>`
      SELECT date_trunc('minute', now()) - (${request.minutes - 1} * interval '1 minute') AS since`
    const since = toDate(window!.since)
    // Runs finished in their rows (by the BRIN index on finished_at) and in the ledger (its
    // completion batches by time, each run's claim read from its claim batch), the latest first.
    const ledgerFinished = sql`
      SELECT r.queue, 'completed'::text AS state, d.at AS finished_at,
        extract(epoch FROM c.claimed_at - r.run_at) * 1000 AS wait_ms,
        extract(epoch FROM d.at - c.claimed_at) * 1000 AS run_ms
      FROM (
        SELECT * FROM ${s.completionBatches(sql)} WHERE at >= ${since} ORDER BY at DESC LIMIT ${maxRuns + 1}
      ) d
      -- Each batch's claim and each run by its primary key, as many as are read (LIMIT 1 keeps
      -- them probes: told to expect maxRuns rows, the planner would hash whole tables instead).
      CROSS JOIN LATERAL (
        SELECT c.claimed_at, c.closed FROM ${s.claimBatches(sql)} c WHERE c.batch = d.claim_batch LIMIT 1
      ) c
      CROSS JOIN LATERAL unnest(d.ids) AS u(id)
      CROSS JOIN LATERAL (SELECT r.queue, r.run_at FROM ${s.runs(sql)} r WHERE r.id = u.id LIMIT 1) r
      WHERE u.id <> ALL (c.closed)
      LIMIT ${maxRuns + 1}`
    // One pass: the latest `maxRuns + 1` finished runs are read once; the one more says whether
    // the window held more than are counted (`seen`), and only the latest `maxRuns` are grouped.
    const rows = yield* sql<Row & { seen: bigint }>`
      WITH finished AS MATERIALIZED (
        SELECT * FROM (
          (SELECT queue, state, finished_at,
            extract(epoch FROM claimed_at - run_at) * 1000 AS wait_ms,
            extract(epoch FROM finished_at - claimed_at) * 1000 AS run_ms
          FROM ${s.runs(sql)}
          WHERE finished_at >= ${since} AND state IN ('completed', 'failed')
          ORDER BY finished_at DESC LIMIT ${maxRuns + 1})
          UNION ALL
          (${ledgerFinished})
        ) f ORDER BY finished_at DESC LIMIT ${maxRuns + 1}
      ), kept AS (
        SELECT * FROM finished ORDER BY finished_at DESC LIMIT ${maxRuns}
      )
      SELECT queue, date_trunc('minute', finished_at) AS minute,
        count(*) FILTER (WHERE state = 'completed') AS completed,
        count(*) FILTER (WHERE state = 'failed') AS failed,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY greatest(wait_ms, 0)) AS wait_p50,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY greatest(wait_ms, 0)) AS wait_p95,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY greatest(wait_ms, 0)) AS wait_p99,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY greatest(run_ms, 0)) AS run_p50,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY greatest(run_ms, 0)) AS run_p95,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY greatest(run_ms, 0)) AS run_p99,
        (SELECT count(*) FROM finished) AS seen
      FROM kept GROUP BY 2, 1 ORDER BY 2, queue COLLATE "C"`
    const pct = (p50: number | null, p95: number | null, p99: number | null) =>
      p50 === null || p95 === null || p99 === null ? null : { p50: Number(p50), p95: Number(p95), p99: Number(p99) }
    return {
      since,
      minutes: request.minutes,
      series: rows.map((r): Throughput.ThroughputMinute => ({
        queue: r.queue,
        minute: toDate(r.minute),
        completed: num(r.completed),
        failed: num(r.failed),
        waitMs: pct(r.wait_p50, r.wait_p95, r.wait_p99),
        runMs: pct(r.run_p50, r.run_p95, r.run_p99)
      })),
      truncated: rows.length > 0 && num(rows[0]!.seen) > maxRuns
    } satisfies Throughput.Throughput
  })

/**
 * A key limit's keys: slots held (the `runs_key_slots_<scope>` index) and due runs waiting (the
 * `runs_waiting_<scope>` index), waiting longest first.
 */
export const keyUsage = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  scope: KeyLimits.KeyLimitScope,
  name: string,
  top: number
) => {
  // The scope's column, one of two words (checked), so each branch reads its own partial index.
  const column = sql.literal(scope === "kind" ? "kind" : "queue")
  const inScope = sql.literal(scope === "kind" ? "key_scope = 'kind'" : "key_scope = 'queue'")
  return Effect.map(
    sql<{ key: string; held: bigint; waiting: bigint; oldest: number | null }>`
      WITH held AS (
        -- Every held slot, a row run's or a ledger run's, is a key_holds row (migration 0025).
        SELECT key, count(*) AS held FROM ${s.keyHolds(sql)}
        WHERE scope = ${scope} AND name = ${name}
        GROUP BY key
      ), waiting AS (
        SELECT key, sum(n) AS waiting, min(oldest) AS oldest FROM (
          SELECT concurrency_key AS key, count(*) AS n, min(run_at) AS oldest FROM ${s.runs(sql)}
          WHERE state = 'pending' AND ${inScope} AND key_slot IS NULL AND ${column} = ${name} AND run_at <= now()
          GROUP BY concurrency_key
          UNION ALL
          SELECT key, count(*), min(run_at) FROM ${s.waiting(sql)}
          WHERE scope = ${scope} AND name = ${name} AND run_at <= now()
          GROUP BY key
        ) w GROUP BY key
      )
      SELECT * FROM (
        SELECT coalesce(h.key, w.key) AS key, coalesce(h.held, 0) AS held, coalesce(w.waiting, 0) AS waiting,
          extract(epoch FROM now() - w.oldest)::float8 AS oldest
        FROM held h FULL JOIN waiting w ON w.key = h.key
      ) u
      ORDER BY u.oldest DESC NULLS LAST, u.held DESC, u.key COLLATE "C"
      LIMIT ${top}`,
    (rows) =>
      rows.map((r): KeyLimits.KeyUsage => ({
        key: r.key,
        held: num(r.held),
        waiting: num(r.waiting),
        oldestWaitingSeconds: r.oldest === null ? null : Number(r.oldest)
      }))
  )
}
