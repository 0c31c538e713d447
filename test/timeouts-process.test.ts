/**
 * Attempt timeouts and run deadlines with real worker processes on PostgreSQL: a handler that
 * never returns, while its worker's heartbeats keep renewing its lease, is stopped at its attempt
 * timeout (the worker's monotonic clock) and retried under a new fence, then failed on its last
 * attempt; another is stopped at its run's deadline (the database's clock) and failed for good with
 * attempts left. What happened is read back from the database: states, errors and history, with
 * the history's times (the database's clock).
 */
import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Effect, Layer, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { afterEach, assert, describe, it } from "vitest"
import { databaseUrl, freshSchema } from "./support/db.js"

interface Env {
  readonly schema: string
  readonly run: <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) => Promise<A>
  readonly dispose: () => Promise<void>
}

const setup = async (): Promise<Env> => {
  const schema = freshSchema("timeouts")
  const runtime = ManagedRuntime.make(
    PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 3 })))
  )
  const run = <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) => runtime.runPromise(effect)
  await run(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(WorkerProcess.createEffectsTable(`"${schema}".effects`)))
  )
  return { schema, run, dispose: () => runtime.dispose() }
}

let cleanup: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const step of cleanup.reverse()) await step().catch(() => undefined)
  cleanup = []
})

const startWorker = async (env: Env, owner: string) => {
  const worker = await WorkerProcess.start({
    owner,
    databaseUrl: databaseUrl(),
    schema: env.schema,
    ttl: "2 seconds",
    heartbeat: "400 millis",
    pollInterval: "500 millis",
    concurrency: 4
  })
  cleanup.push(() => worker.kill())
  await worker.waitFor("started", (r) => r.type === "started")
  return worker
}

interface Row {
  readonly state: string
  readonly attempt: number
  readonly fence: string
  readonly error: { tag?: string; message?: string } | null
  readonly past_deadline: boolean | null
}

const runRow = (env: Env, id: string) =>
  env.run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe<Row>(
      `SELECT state, attempt, fence::text, error, finished_at >= deadline AS past_deadline
       FROM "${env.schema}".runs_now WHERE id = $1::bigint`,
      [id]
    ))).then((rows) => rows[0]!)

const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

const history = (env: Env, id: string) => env.run(Effect.flatMap(RunStore, (store) => store.history(id)))

/** The worker's heartbeats confirmed while it held `runId` under `fence` (each renews every lease it holds). */
const renewalsWhileHeld = (workers: ReadonlyArray<WorkerProcess.WorkerProcess>, runId: string, fence: number) =>
  workers.reduce((n, w) => {
    const claimed = w.reports.find((r) =>
      r.type === "event" && r._tag === "Claimed" && r.runId === runId && r.fence === fence
    )
    const stopped = w.reports.find((r) => r.type === "handler-interrupted" && r.runId === runId && r.fence === fence)
    if (claimed === undefined || stopped === undefined) return n
    return n +
      WorkerProcess.events(w, "HeartbeatConfirmed").filter((h) => h.mono > claimed.mono && h.mono < stopped.mono).length
  }, 0)

describe("attempt timeouts and run deadlines across worker processes (TTL 2 s, heartbeat 400 ms)", () => {
  it(
    "a handler that never returns but keeps its lease renewed is stopped at its attempt timeout, retried under fence 2, then failed; another is stopped at its run's deadline and failed for good",
    async () => {
      const env = await setup()
      cleanup.push(env.dispose)
      const workers = [await startWorker(env, "worker-a"), await startWorker(env, "worker-b")]
      // Enqueued once both listen, so the deadline is not spent on their start.
      for (const w of workers) await w.waitFor("listening", (r) => r.type === "event" && r._tag === "Listening")
      const [hung, late] = await env.run(Effect.flatMap(RunStore, (store) =>
        store.enqueue([
          // long-step works (reports a tick every 100 ms) until told to finish: never, here.
          { kind: "long-step", payload: {}, maxAttempts: 2, attemptTimeoutMs: 2_500 },
          { kind: "long-step", payload: {}, maxAttempts: 5, deadlineAfterMs: 4_000 }
        ])))

      await until("the hung run has failed", async () => (await runRow(env, hung!.id)).state === "failed")
      const hungRow = await runRow(env, hung!.id)
      assert.deepInclude(hungRow, { state: "failed", attempt: 2, fence: "2" })
      assert.strictEqual(hungRow.error?.tag, "AttemptTimedOut")
      assert.include(hungRow.error?.message, "ran past its timeout of 2500 ms")
      const hungHistory = await history(env, hung!.id)
      assert.deepStrictEqual(hungHistory.map((e) => `${e.kind}@${e.fence}`), [
        "claimed@1",
        "retry_scheduled@1",
        "claimed@2",
        "failed@2"
      ])
      assert.strictEqual((hungHistory[1]!.detail as { error: { tag: string } }).error.tag, "AttemptTimedOut")
      // Each attempt ran its whole timeout (by the database's clock): the timeout never fires early.
      for (const [claimed, ended] of [[0, 1], [2, 3]] as const) {
        const ran = hungHistory[ended]!.at.getTime() - hungHistory[claimed]!.at.getTime()
        assert.isAtLeast(ran, 2_500, `attempt ${claimed / 2 + 1} ran ${ran} ms`)
      }
      // Its handler was interrupted at each attempt, while heartbeats kept renewing its lease.
      for (const fence of [1, 2]) {
        assert.isTrue(
          workers.some((w) =>
            w.reports.some((r) => r.type === "handler-interrupted" && r.runId === hung!.id && r.fence === fence)
          ),
          `interrupted under fence ${fence}`
        )
        assert.isAtLeast(renewalsWhileHeld(workers, hung!.id, fence), 3, `renewed while held under fence ${fence}`)
      }

      await until("the late run has failed", async () => (await runRow(env, late!.id)).state === "failed")
      const lateRow = await runRow(env, late!.id)
      assert.deepInclude(lateRow, { state: "failed", attempt: 1, fence: "1", past_deadline: true })
      assert.strictEqual(lateRow.error?.tag, "RunDeadlinePassed")
      assert.deepStrictEqual((await history(env, late!.id)).map((e) => `${e.kind}@${e.fence}`), [
        "claimed@1",
        "failed@1"
      ])
      // It ran (its handler interrupted at the deadline, not refused at its claim), its lease renewed meanwhile.
      assert.isAtLeast(renewalsWhileHeld(workers, late!.id, 1), 1, "renewed while held")
      // No holder was superseded: no write was refused by a fence, no lease lost.
      for (const id of [hung!.id, late!.id]) {
        assert.isFalse((await history(env, id)).some((e) => e.kind === "stale_write_rejected"))
      }
      for (const w of workers) assert.isEmpty(WorkerProcess.events(w, "LeaseLost"))
    },
    90_000
  )
})
