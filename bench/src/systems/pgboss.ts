/**
 * pg-boss 12.38 under the bench. The constructor, queue and `work()` options are passed as given in
 * the variant. `boss.start()` (connect, migration check, maintenance timers) is set-up; `work()` is
 * the start. A batch handler returning completes its whole batch in one statement.
 */
import { PgBoss } from "pg-boss"
import type { ConstructorOptions, Queue, WorkOptions } from "pg-boss"
import type { EnqueueSession, System, WorkerHandle, WorkerHooks } from "./system.js"

export const SCHEMA = "pgboss"
export const QUEUE = "noop"

export interface PgBossOptions {
  readonly constructor: Omit<ConstructorOptions, "connectionString">
  readonly queue: Omit<Queue, "name">
  readonly work: WorkOptions
}

const report = (error: Error) => process.stderr.write(`[pg-boss error] ${error.message}\n`)

const enqueueSession = async (url: string, options: PgBossOptions): Promise<EnqueueSession> => {
  // The enqueueing instance only migrates and inserts: no maintenance, no cron.
  const boss = new PgBoss({
    connectionString: url,
    supervise: false,
    schedule: false,
    max: 2,
    application_name: "bench-pgboss-client"
  })
  boss.on("error", report)
  await boss.start()
  await boss.createQueue(QUEUE, options.queue)
  return {
    enqueueMany: (indices) => boss.insert(QUEUE, indices.map((i) => ({ data: { i } }))).then(() => undefined),
    enqueueOne: (i) => boss.send(QUEUE, { i }).then(() => undefined),
    close: () => boss.stop({ graceful: false })
  }
}

const startWorker = async (url: string, options: PgBossOptions, hooks: WorkerHooks): Promise<WorkerHandle> => {
  const boss = new PgBoss({ ...options.constructor, connectionString: url, application_name: "bench-pgboss" })
  boss.on("error", report)
  await boss.start()
  return {
    go: async () => {
      await boss.work<{ i: number }>(QUEUE, options.work, async (jobs: ReadonlyArray<{ data: { i: number } }>) => {
        if (hooks.hold) return new Promise<void>(() => undefined)
        for (const job of jobs) hooks.onRun(job.data.i)
      })
    },
    stop: () => boss.stop({ graceful: true, timeout: 10_000 })
  }
}

export const pgboss: System<PgBossOptions> = {
  name: "pg-boss",
  schemas: [SCHEMA],
  enqueueSession,
  startWorker,
  remainingSql: `SELECT count(*)::int AS n FROM ${SCHEMA}.job WHERE name = '${QUEUE}' AND state < 'completed'`,
  completedSql: () => `SELECT count(*)::int AS n FROM ${SCHEMA}.job WHERE name = '${QUEUE}' AND state = 'completed'`,
  verifySql: `SELECT
      (SELECT count(*) FROM ${SCHEMA}.job WHERE name = '${QUEUE}')::int AS total,
      (SELECT count(*) FROM ${SCHEMA}.job WHERE name = '${QUEUE}' AND state = 'completed')::int AS completed,
      (SELECT count(*) FROM ${SCHEMA}.job WHERE name = '${QUEUE}' AND retry_count > 0)::int AS retried`
}
