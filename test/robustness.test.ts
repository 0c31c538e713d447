/**
 * A worker process rides out what the database does to its connections: connections killed with
 * pg_terminate_backend mid-run, and a pool far smaller than its concurrency. It must not crash,
 * and every run must still complete exactly once.
 */
import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Effect, Layer, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { afterEach, assert, describe, it } from "vitest"
import { databaseUrl, freshSchema } from "./support/db.js"

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
let cleanup: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const step of cleanup.reverse()) await step().catch(() => undefined)
  cleanup = []
})

const setup = async (runs: number) => {
  const schema = freshSchema("rb")
  const runtime = ManagedRuntime.make(
    PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 2 })))
  )
  cleanup.push(() => runtime.dispose())
  const db = <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) => runtime.runPromise(effect)
  const sql = (text: string) => db(Effect.flatMap(SqlClient.SqlClient, (client) => client.unsafe<any>(text)))
  await sql(WorkerProcess.createEffectsTable(`"${schema}".effects`))
  await db(
    Effect.flatMap(RunStore, (store) =>
      store.enqueue(
        Array.from(
          { length: runs },
          (_, i) => ({
            kind: "chaos-step",
            payload: { workMs: 40 + (i % 4) * 30, checkpoint: i % 3 === 0 },
            maxAttempts: 20
          })
        )
      ))
  )
  const open = async () =>
    (await sql(`SELECT count(*)::int AS n FROM "${schema}".runs_now WHERE state <> 'completed'`))[0].n as number
  const verdict = async () => ({
    notOnce: await sql(
      `SELECT r.id FROM "${schema}".runs r LEFT JOIN "${schema}".effects l ON l.run_id = r.id GROUP BY r.id HAVING count(l.run_id) <> 1`
    ),
    staleEntries: await sql(
      `SELECT l.run_id FROM "${schema}".effects l JOIN "${schema}".runs_now r ON r.id = l.run_id WHERE l.fence <> r.fence`
    )
  })
  return { schema, sql, open, verdict }
}

const startWorker = async (schema: string, owner: string, settings: Partial<WorkerProcess.WorkerSettings> = {}) => {
  const worker = await WorkerProcess.start({ owner, databaseUrl: databaseUrl(), schema, ...settings })
  cleanup.push(() => worker.kill())
  await worker.waitFor("start", (r) => r.type === "started")
  let exited = false
  void worker.exited.then(() => void (exited = true))
  return { worker, hasExited: () => exited }
}

const waitDone = async (open: () => Promise<number>, timeoutMs = 60_000) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if ((await open()) === 0) return
    await sleep(200)
  }
  assert.fail(`runs still open after ${timeoutMs} ms: ${await open()}`)
}

describe("robustness of a worker process", () => {
  it("survives pg_terminate_backend on its connections, and finishes every run exactly once", async () => {
    const env = await setup(300)
    const owner = `victim-${env.schema}`
    const { hasExited, worker } = await startWorker(env.schema, owner, { concurrency: 8 })
    await worker.waitFor("some progress", (r) => r.type === "write-result" && r.outcome === "committed")
    let terminated = 0
    for (let round = 0; round < 6; round++) {
      const rows = await env.sql(
        `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = '${owner}'`
      )
      terminated += rows.filter((r: any) => r.ok).length
      await sleep(300)
    }
    assert.isAtLeast(terminated, 6, "connections were really killed")
    await waitDone(env.open)
    assert.isFalse(hasExited(), "the worker process is still running")
    assert.deepStrictEqual(worker.reports.filter((r) => r.type === "crashed"), [])
    const verdict = await env.verdict()
    assert.deepStrictEqual(verdict, { notOnce: [], staleEntries: [] })
    assert.isAbove(WorkerProcess.events(worker, "StoreError").length, 0, "the kills were felt")
  }, 90_000)

  it("survives a pool far smaller than its concurrency (one connection for 16 runs at once)", async () => {
    const env = await setup(200)
    const { hasExited, worker } = await startWorker(env.schema, `starved-${env.schema}`, {
      concurrency: 16,
      maxConnections: 1,
      ttl: "3 seconds",
      heartbeat: "500 millis"
    })
    await waitDone(env.open)
    assert.isFalse(hasExited())
    assert.deepStrictEqual(worker.reports.filter((r) => r.type === "crashed"), [])
    assert.deepStrictEqual(await env.verdict(), { notOnce: [], staleEntries: [] })
    const concurrent = Math.max(...WorkerProcess.events(worker, "HeartbeatSent").map((e) => e.leases.length), 0)
    assert.isAbove(concurrent, 1, "several runs were in flight on the one connection")
  }, 90_000)
})
