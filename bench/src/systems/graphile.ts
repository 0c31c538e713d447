/**
 * graphile-worker 0.18 under the bench. Options are passed to `run()` as given in the variant; the
 * pool is created up front (`pgPool`, sized `maxPoolSize`) so connecting is set-up, as it is for the
 * other systems. Success logging is off (`NO_LOG_SUCCESS=1`, set by the parent in the child's
 * environment, as graphile-worker's own perf test does) and the logger prints warnings and errors only.
 */
import { Logger, makeWorkerUtils, run, runMigrations, type Runner, type RunnerOptions } from "graphile-worker"
import pg from "pg"
import type { EnqueueSession, System, WorkerHandle, WorkerHooks } from "./system.js"

export const SCHEMA = "graphile_worker"
export const TASK = "noop"

export interface GraphileOptions {
  /** Top-level `run()` options (`concurrency`, `pollInterval`, …); `maxPoolSize` sizes the pool. */
  readonly run: Omit<RunnerOptions, "taskList" | "pgPool" | "connectionString" | "logger">
}

const quietLogger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`[graphile-worker ${level}] ${message}\n`)
})

const enqueueSession = async (url: string): Promise<EnqueueSession> => {
  await runMigrations({ connectionString: url, logger: quietLogger })
  const utils = await makeWorkerUtils({ connectionString: url, logger: quietLogger })
  return {
    enqueueMany: (indices) =>
      utils.addJobs(indices.map((i) => ({ identifier: TASK, payload: { i } }))).then(() => undefined),
    enqueueOne: (i) => utils.addJob(TASK, { i }).then(() => undefined),
    close: async () => {
      await utils.release()
    }
  }
}

const startWorker = async (url: string, options: GraphileOptions, hooks: WorkerHooks): Promise<WorkerHandle> => {
  const pgPool = new pg.Pool({
    connectionString: url,
    max: options.run.maxPoolSize ?? 10,
    application_name: "bench-graphile"
  })
  // graphile-worker asks for both handlers (https://err.red/wpeh): idle-client errors and per-client errors.
  const onError = (error: Error) => process.stderr.write(`[graphile-worker pool] ${error.message}\n`)
  pgPool.on("error", onError)
  pgPool.on("connect", (client) => client.on("error", onError))
  await runMigrations({ pgPool, logger: quietLogger })
  let runner: Runner | undefined
  return {
    go: async () => {
      runner = await run({
        ...options.run,
        pgPool,
        logger: quietLogger,
        noHandleSignals: true,
        taskList: {
          [TASK]: async (payload) => {
            if (hooks.hold) return new Promise<void>(() => undefined)
            hooks.onRun((payload as { i: number }).i)
          }
        }
      })
    },
    stop: async () => {
      if (runner !== undefined) await runner.stop()
      await pgPool.end()
    }
  }
}

export const graphile: System<GraphileOptions> = {
  name: "graphile-worker",
  schemas: [SCHEMA],
  enqueueSession: (url) => enqueueSession(url),
  startWorker,
  // Successful jobs are deleted; a failed attempt stays with last_error set.
  remainingSql: `SELECT count(*)::int AS n FROM ${SCHEMA}._private_jobs`,
  completedSql: (total) => `SELECT (${total} - count(*))::int AS n FROM ${SCHEMA}._private_jobs`,
  verifySql: `SELECT
      (SELECT count(*) FROM ${SCHEMA}._private_jobs)::int AS left_in_table,
      (SELECT count(*) FROM ${SCHEMA}._private_jobs WHERE last_error IS NOT NULL)::int AS with_errors`
}
