/**
 * Server access for the bench: a fresh database per system and repeat, and the server-side counters
 * that cost per run is computed from (pg_stat_database, the WAL position, pg_stat_user_tables and,
 * when the server preloads it, pg_stat_statements).
 */
import * as fs from "node:fs"
import pg from "pg"

/** The URL of one database on the server. */
export const databaseUrl = (serverUrl: string, database: string): string => {
  const url = new URL(serverUrl)
  url.pathname = `/${database}`
  return url.toString()
}

/** Runs `f` with a short-lived client. */
export const withClient = async <A>(url: string, f: (client: pg.Client) => Promise<A>): Promise<A> => {
  const client = new pg.Client({ connectionString: url, application_name: "leasehold-bench" })
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end().catch(() => undefined)
  }
}

export const query = async <R extends pg.QueryResultRow = any>(
  url: string,
  text: string,
  values: Array<unknown> = []
) => withClient(url, async (client) => (await client.query<R>(text, values)).rows)

let counter = 0

/** Creates a database named bench_<label>_<pid>_<n>; returns its name. */
export const createDatabase = async (serverUrl: string, label: string): Promise<string> => {
  const name = `bench_${label.replace(/[^a-z0-9]/g, "_")}_${process.pid}_${++counter}`
  await query(serverUrl, `CREATE DATABASE "${name}"`)
  return name
}

export const dropDatabase = async (serverUrl: string, name: string): Promise<void> => {
  await query(serverUrl, `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)
}

/** Waits until no session other than the caller's is connected to `database`. */
export const waitForSessionsToEnd = async (serverUrl: string, database: string, timeoutMs = 15_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    const [row] = await query<{ n: string }>(
      serverUrl,
      `SELECT count(*)::text AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
      [database]
    )
    if (Number(row!.n) === 0) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/** Server-side counters at one instant. WAL is cluster-wide; everything else is per database. */
export interface Counters {
  readonly xactCommit: number
  readonly xactRollback: number
  readonly tupInserted: number
  readonly tupUpdated: number
  readonly tupDeleted: number
  readonly walLsn: string
  /** Commits of every other database on the server: how busy the neighbours were. */
  readonly otherCommits: number
  /** Statements executed in this database (pg_stat_statements), or null when it is not loaded. */
  readonly statements: number | null
}

export const counters = async (serverUrl: string, database: string, statements: boolean): Promise<Counters> =>
  withClient(serverUrl, async (client) => {
    await client.query("SELECT pg_stat_clear_snapshot()")
    const { rows } = await client.query(
      `SELECT
         (SELECT xact_commit FROM pg_stat_database WHERE datname = $1)::float8 AS xact_commit,
         (SELECT xact_rollback FROM pg_stat_database WHERE datname = $1)::float8 AS xact_rollback,
         (SELECT tup_inserted FROM pg_stat_database WHERE datname = $1)::float8 AS tup_inserted,
         (SELECT tup_updated FROM pg_stat_database WHERE datname = $1)::float8 AS tup_updated,
         (SELECT tup_deleted FROM pg_stat_database WHERE datname = $1)::float8 AS tup_deleted,
         (SELECT coalesce(sum(xact_commit), 0) FROM pg_stat_database WHERE datname IS DISTINCT FROM $1)::float8 AS other,
         pg_current_wal_lsn()::text AS lsn`,
      [database]
    )
    const row = rows[0]
    let count: number | null = null
    if (statements) {
      const r = await client.query(
        `SELECT coalesce(sum(calls), 0)::float8 AS calls FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`,
        [database]
      )
      count = Number(r.rows[0].calls)
    }
    return {
      xactCommit: Number(row.xact_commit),
      xactRollback: Number(row.xact_rollback),
      tupInserted: Number(row.tup_inserted),
      tupUpdated: Number(row.tup_updated),
      tupDeleted: Number(row.tup_deleted),
      walLsn: row.lsn,
      otherCommits: Number(row.other),
      statements: count
    }
  })

export const walBytesBetween = async (serverUrl: string, from: string, to: string): Promise<number> => {
  const [row] = await query<{ d: string }>(serverUrl, `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::text AS d`, [
    from,
    to
  ])
  return Number(row!.d)
}

/** True when pg_stat_statements is preloaded and readable (the extension is created if needed). */
export const statementsAvailable = async (serverUrl: string): Promise<boolean> => {
  try {
    await query(serverUrl, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    await query(serverUrl, "SELECT count(*) FROM pg_stat_statements")
    return true
  } catch {
    return false
  }
}

/** Dead and live tuples in the system's tables, read from inside the database. */
export const tupleCounts = async (url: string, schemas: ReadonlyArray<string>) => {
  const [row] = await query<{ dead: string; live: string; autovacuums: string }>(
    url,
    `SELECT coalesce(sum(n_dead_tup), 0)::text AS dead, coalesce(sum(n_live_tup), 0)::text AS live,
       coalesce(sum(autovacuum_count), 0)::text AS autovacuums
     FROM pg_stat_user_tables WHERE schemaname = ANY($1::text[])`,
    [schemas]
  )
  return { dead: Number(row!.dead), live: Number(row!.live), autovacuums: Number(row!.autovacuums) }
}

export const serverVersion = async (serverUrl: string): Promise<string> => {
  const [row] = await query<{ v: string }>(serverUrl, "SELECT version() AS v")
  return row!.v
}

export const serverSettings = async (serverUrl: string): Promise<Record<string, string>> => {
  const rows = await query<{ name: string; setting: string }>(
    serverUrl,
    `SELECT name, setting FROM pg_settings WHERE name IN
      ('max_connections', 'shared_buffers', 'fsync', 'synchronous_commit', 'shared_preload_libraries', 'autovacuum')`
  )
  return Object.fromEntries(rows.map((r) => [r.name, r.setting]))
}

/**
 * CPU time (ms) of each server process connected to `database`, read from /proc (the server must
 * run on this machine, as the local and the embedded server do); null when it cannot be read.
 */
export const backendCpu = async (
  serverUrl: string,
  database: string,
  /** Only the sessions of clients (not autovacuum workers, which come and go). */
  clientsOnly = false
): Promise<Map<number, number> | null> => {
  const rows = await query<{ pid: number }>(
    serverUrl,
    `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND (NOT $2 OR backend_type = 'client backend')`,
    [database, clientsOnly]
  )
  const out = new Map<number, number>()
  for (const { pid } of rows) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
      // Fields after the command name (which may contain spaces): utime is the 12th, stime the 13th.
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      out.set(pid, ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS)
    } catch {
      return null
    }
  }
  return out
}

/** Linux reports process CPU in clock ticks of 1/100 s. */
const CLOCK_TICKS = 100

export const cpuBetween = (before: Map<number, number> | null, after: Map<number, number> | null): number | null => {
  if (before === null || after === null) return null
  let total = 0
  for (const [pid, ms] of after) total += ms - (before.get(pid) ?? 0)
  return total
}
