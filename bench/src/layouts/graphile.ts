/**
 * graphile-worker 0.18's own statements on its own schema, installed by its own migrations: its
 * batched claim (`batchGetJobs`, the get_jobs query its local queue sends), its batched completion
 * (`batchCompleteJobs`, a delete), and its sweep of stale locks (`resetLockedAt`, locks older than
 * 4 hours) followed by a claim as its reclaim. It has no lease renewal. Keyed runs are in named
 * queues (one per key): a queue runs one job at a time, its `_private_job_queues` row locked by
 * the claim and unlocked by the completion; the successor is taken by the next claim.
 */
import { Logger, runMigrations, type TaskList, type WorkerUtils } from "graphile-worker"
import { createRequire } from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import pg from "pg"
import { type Held, KEYED_KIND, KIND, type Layout, type LayoutSession } from "./Layout.js"

const SCHEMA = "lay_graphile"
const POOL_ID = "layout-loop"

const quiet = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`[graphile-worker ${level}] ${message}\n`)
})

/**
 * graphile-worker's own modules for its statements, loaded from its files: its package exports only
 * its index, which does not export the batched claim, completion and stale-lock sweep.
 */
const internals = async () => {
  const dist = path.dirname(createRequire(import.meta.url).resolve("graphile-worker"))
  const load = (file: string) => import(pathToFileURL(path.join(dist, file)).href)
  const [lib, getJobs, completeJobs, resetLockedAt] = await Promise.all([
    load("lib.js"),
    load("sql/getJobs.js"),
    load("sql/completeJobs.js"),
    load("sql/resetLockedAt.js")
  ])
  return {
    getUtilsAndReleasersFromOptions: lib.getUtilsAndReleasersFromOptions as (
      options: object
    ) => Promise<[WorkerUtils & { withPgClient: unknown; addJobs: WorkerUtils["addJobs"] }, () => Promise<void>]>,
    batchGetJobs: getJobs.batchGetJobs as (...args: Array<unknown>) => Promise<Array<unknown>>,
    batchCompleteJobs: completeJobs.batchCompleteJobs as (...args: Array<unknown>) => Promise<void>,
    resetLockedAt: resetLockedAt.resetLockedAt as (...args: Array<unknown>) => Promise<void>
  }
}

const noop = async () => undefined
const unkeyedTasks: TaskList = { [KIND]: noop }
const keyedTasks: TaskList = { [KEYED_KIND]: noop }

interface JobRow {
  readonly id: string
  readonly job_queue_id: number | null
}

const toHeld = (row: JobRow): Held => ({ id: String(row.id), fence: 0, row })

const session = async (url: string): Promise<LayoutSession> => {
  const { getUtilsAndReleasersFromOptions, batchGetJobs, batchCompleteJobs, resetLockedAt } = await internals()
  const pgPool = new pg.Pool({ connectionString: url, max: 1, application_name: "layout" })
  // graphile-worker asks for both handlers (https://err.red/wpeh); a session left open by a failed
  // phase is ended by the database's drop.
  pgPool.on("error", () => undefined)
  pgPool.on("connect", (client) => client.on("error", () => undefined))
  const [compiled, release] = await getUtilsAndReleasersFromOptions({
    pgPool,
    schema: SCHEMA,
    logger: quiet,
    taskList: unkeyedTasks
  })
  // Internal signatures: the options graphile-worker's own runner passes them.
  const options = compiled
  const withPgClient = compiled.withPgClient
  const claim = async (limit: number, keyed = false) =>
    ((await batchGetJobs(options, withPgClient, keyed ? keyedTasks : unkeyedTasks, POOL_ID, null, limit)) as Array<
      JobRow
    >).map(toHeld)
  const complete = (held: ReadonlyArray<Held>) =>
    batchCompleteJobs(options, withPgClient, POOL_ID, held.map((h) => h.row))
  const add = async (
    from: number,
    count: number,
    spec: (i: number) => { identifier: string; payload: unknown; queueName?: string }
  ) => {
    for (let at = from; at < from + count; at += 5_000) {
      await compiled.addJobs(Array.from({ length: Math.min(5_000, from + count - at) }, (_, j) => spec(at + j)))
    }
  }
  return {
    enqueue: (from, count) => add(from, count, (i) => ({ identifier: KIND, payload: { i } })),
    enqueueKeyed: (from, count, keys) =>
      add(from, count, (i) => ({ identifier: KEYED_KIND, payload: { i }, queueName: `k${i % keys}` })),
    claim,
    complete: async (held) => {
      await complete(held)
    },
    completeHandingOff: async (held) => {
      await complete(held)
      return claim(held.length, true)
    },
    expire: async (held) => {
      await pgPool.query(
        `UPDATE "${SCHEMA}"._private_jobs SET locked_at = now() - interval '5 hours' WHERE id = ANY($1::bigint[])`,
        [held.map((h) => h.id)]
      )
    },
    reclaim: async (limit) => {
      await resetLockedAt(options, withPgClient)
      return claim(limit)
    },
    close: async () => {
      await release()
      await pgPool.end()
    }
  }
}

export const graphile: Layout = {
  id: "graphile",
  description: "(c) graphile-worker 0.18: its own schema and statements (update to claim, delete to complete)",
  schema: SCHEMA,
  install: (url) => runMigrations({ connectionString: url, schema: SCHEMA, logger: quiet }),
  open: session
}
