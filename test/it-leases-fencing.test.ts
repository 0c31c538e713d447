/**
 * Partition acceptance: two worker processes, one PostgreSQL, a real cut in the network.
 *
 * Each worker is a separate OS process that reaches the database through its own TCP proxy, owned
 * by this test: `partition()` stops forwarding both ways and keeps the sockets open (silence, as a
 * firewall DROP gives), `heal()` delivers what was held. Lease time is real and short (TTL 2 s,
 * heartbeat 400 ms); nothing here fakes a clock across processes. The same scenario runs again with
 * worker A's wall clock ten minutes behind (Debian's faketime): the stale write is still rejected,
 * and by the fence.
 */
import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Effect, Layer, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { afterEach, assert, describe, it } from "vitest"
import { databaseUrl, freshSchema, setLeaseExpirySql } from "./support/db.js"

interface Env {
  readonly schema: string
  readonly run: <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) => Promise<A>
  readonly dispose: () => Promise<void>
}

/** A fresh schema with the store and the effects table (the handlers' side effect), and a way to query it from the test. */
const setup = async (): Promise<Env> => {
  const schema = freshSchema("it")
  const runtime = ManagedRuntime.make(
    PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 3 })))
  )
  const run = <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) => runtime.runPromise(effect)
  await run(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(WorkerProcess.createEffectsTable(`"${schema}".effects`)))
  )
  return { schema, run, dispose: () => runtime.dispose() }
}

const enqueue = (env: Env, kind: string) =>
  env.run(Effect.flatMap(RunStore, (store) => store.enqueue([{ kind, payload: {}, maxAttempts: 1000 }]))).then(([r]) =>
    r!.id
  )

const effects = (env: Env) =>
  env.run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe<{ run_id: string; fence: string; owner: string }>(
      `SELECT run_id::text, fence::text, owner FROM "${env.schema}".effects ORDER BY at`
    ))).then((rows) => rows.map((r) => ({ runId: r.run_id, fence: Number(r.fence), owner: r.owner })))

const runRow = (env: Env, runId: string) => env.run(Effect.flatMap(RunStore, (store) => store.get(runId)))

const isEvent =
  (tag: string, runId: string, more: (r: WorkerProcess.Report) => boolean = () => true) => (r: WorkerProcess.Report) =>
    r.type === "event" && r._tag === tag && r.runId === runId && more(r)

let cleanup: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const step of cleanup.reverse()) await step().catch(() => undefined)
  cleanup = []
})

const startWorker = async (env: Env, owner: string, skew?: string) => {
  const worker = await WorkerProcess.start({ owner, databaseUrl: databaseUrl(), schema: env.schema, skew })
  cleanup.push(() => worker.kill())
  await worker.waitFor("started", (r) => r.type === "started")
  return worker
}

describe("partition acceptance", () => {
  const scenarios = [
    { name: "clocks in step", skew: undefined },
    { name: "worker A's wall clock ten minutes behind", skew: "-10m" }
  ] as const

  for (const scenario of scenarios) {
    it(
      `a partitioned worker's write is rejected by the fence, and the run completes once (${scenario.name})`,
      async () => {
        const env = await setup()
        cleanup.push(env.dispose)
        const runId = await enqueue(env, "long-step")

        // 1. Worker A claims R under fence 1 and works.
        const a = await startWorker(env, "worker-a", scenario.skew)
        if (scenario.skew !== undefined) {
          const started = a.reports.find((r) => r.type === "started")!
          assert.isBelow(started.wall - Date.now(), -9 * 60_000, "A's wall clock really is behind")
        }
        const claimA = await a.waitFor("A claims R", isEvent("Claimed", runId))
        assert.strictEqual(claimA.fence, 1)
        await a.waitFor("A works", (r) => r.type === "work" && r.runId === runId && r.n >= 3)
        const b = await startWorker(env, "worker-b")

        // 2. Partition A from the database; its lease runs out.
        a.proxy.partition()
        const lost = await a.waitFor("A stops R locally", isEvent("LeaseLost", runId, (r) => r.fence === 1), 6_000)
        assert.include(["renewal-failed", "deadline"], lost.reason)

        // 3. Worker B reclaims R: fence 2.
        const claimB = await b.waitFor("B reclaims R", isEvent("Claimed", runId), 8_000)
        assert.strictEqual(claimB.fence, 2)

        // 4. Heal. A attempts a write under fence 1: its effect row in a fenced transaction.
        a.proxy.heal()
        a.send({ cmd: "stale-write", runId, fence: 1 })
        const stale = await a.waitFor(
          "A's stale write answered",
          (r) => r.type === "write-result" && r.runId === runId && r.fence === 1,
          10_000
        )
        // 5. Rejected by the fence check, for that reason: not a lease timestamp, not a conflict.
        assert.strictEqual(stale.outcome, "rejected")
        assert.deepStrictEqual(stale.error, {
          tag: "FenceRejected",
          presentedFence: 1,
          storedFence: 2,
          operation: "transaction"
        })
        // The release A's finalizer sent into the partition arrives after the heal: rejected too.
        const release = await a.waitFor(
          "A's held release answered",
          (r) => r.type === "event" && (r._tag === "WriteRejected" || r._tag === "StoreError") && r.runId === runId,
          15_000
        )
        assert.deepInclude(release, { _tag: "WriteRejected", operation: "release", presentedFence: 1, storedFence: 2 })

        // 6. B finishes: R completes exactly once, under fence 2, and the effects table says so.
        b.send({ cmd: "finish", runId })
        await b.waitFor("B's effect write", (r) => r.type === "write-result" && r.runId === runId)
        const record = await runRow(env, runId)
        assert.strictEqual(record.state, "completed")
        assert.strictEqual(record.fence, 2)
        assert.deepStrictEqual(await effects(env), [{ runId, fence: 2, owner: "worker-b" }])
        const history = await env.run(Effect.flatMap(RunStore, (store) => store.history(runId)))
        assert.deepStrictEqual(
          history.filter((e) => e.kind === "stale_write_rejected").map((e) => [e.fence, (e.detail as any).storedFence]),
          [[1, 2], [1, 2]]
        )

        // 7. A's failed heartbeat cancelled its RunScope: no work under fence 1 after the interruption.
        const interrupted = await a.waitFor(
          "A's handler interrupted",
          (r) => r.type === "handler-interrupted" && r.runId === runId && r.fence === 1
        )
        const lateWork = a.reports.filter((r) =>
          r.type === "work" && r.runId === runId && r.fence === 1 && r.mono > interrupted.mono
        )
        assert.deepStrictEqual(lateWork, [])
        assert.isAtMost(interrupted.mono - lost.mono, 500, "interrupted as soon as the lease was lost")
        const heartbeatFailures = WorkerProcess.events(a, "HeartbeatFailed").length +
          WorkerProcess.events(a, "LeaseLost").filter((e) => e.reason === "deadline").length
        assert.isAtLeast(heartbeatFailures, 1)
      },
      60_000
    )
  }

  it(
    "a suspended run holds no lease and gets no heartbeat; resuming it re-claims it under a higher fence",
    async () => {
      const env = await setup()
      cleanup.push(env.dispose)
      const a = await startWorker(env, "worker-a")
      const b = await startWorker(env, "worker-b")
      const busy = await enqueue(env, "long-step") // keeps heartbeats flowing during the window
      const waiting = await enqueue(env, "approval")
      const workers = [a, b]
      const claimed = await Promise.any(workers.map((w) => w.waitFor("approval claimed", isEvent("Claimed", waiting))))
      assert.strictEqual(claimed.fence, 1)
      await Promise.any(workers.map((w) => w.waitFor("busy claimed", isEvent("Claimed", busy))))

      // Suspended: owner and expiry cleared in the database.
      let record = await runRow(env, waiting)
      for (let i = 0; record.state !== "suspended" && i < 100; i++) {
        await new Promise((r) => setTimeout(r, 50))
        record = await runRow(env, waiting)
      }
      assert.strictEqual(record.state, "suspended")
      assert.strictEqual(record.leaseOwner, null)
      assert.strictEqual(record.leaseExpiresAt, null)

      // Observe what the workers send over at least six heartbeat intervals: until four heartbeats
      // have gone out (a loaded machine sends them later, not fewer).
      const from = Math.max(...workers.map((w) => w.reports.length))
      const since = workers.map((w) => w.reports.length)
      const heartbeatsSince = () =>
        workers.flatMap((w, i) =>
          w.reports.slice(since[i]).filter((r) => r.type === "event" && r._tag === "HeartbeatSent")
        )
      await new Promise((r) => setTimeout(r, 2_400))
      for (let waited = 0; heartbeatsSince().length < 4 && waited < 20_000; waited += 100) {
        await new Promise((r) => setTimeout(r, 100))
      }
      const sent = heartbeatsSince()
      assert.isAtLeast(sent.length, 4, "heartbeats were being sent during the window")
      for (const heartbeat of sent) {
        const runIds = (heartbeat.leases as Array<{ runId: string }>).map((l) => l.runId)
        assert.include(runIds, busy)
        assert.notInclude(runIds, waiting)
      }
      void from

      // Resume: re-claimed under fence 2, and the handler sees the payload.
      await env.run(Effect.flatMap(RunStore, (store) => store.resumeById(waiting, { approved: true })))
      const reclaimed = await Promise.any(
        workers.map((w) => w.waitFor("approval re-claimed", isEvent("Claimed", waiting, (r) => r.fence > 1)))
      )
      assert.strictEqual(reclaimed.fence, 2)
      const holder = workers.find((w) => w.owner === reclaimed.owner)!
      const signal = await holder.waitFor("signal outcome", (r) => r.type === "signal" && r.runId === waiting)
      assert.deepStrictEqual(signal.outcome, { _tag: "Signalled", payload: { approved: true } })
      await holder.waitFor("effect written", (r) => r.type === "write-result" && r.runId === waiting)
      assert.deepStrictEqual(await effects(env), [{ runId: waiting, fence: 2, owner: holder.owner }])
    },
    60_000
  )

  it(
    "100 claim/expire cycles with the two workers alternating: the run's fence never decreases or repeats",
    async () => {
      const env = await setup()
      cleanup.push(env.dispose)
      const a = await startWorker(env, "worker-a")
      const b = await startWorker(env, "worker-b")
      const runId = await enqueue(env, "long-step")
      const byOwner = new Map([[a.owner, a], [b.owner, b]])
      let holder = byOwner.get(
        (await Promise.any([a, b].map((w) => w.waitFor("first claim", isEvent("Claimed", runId))))).owner
      )!
      let fence = 1
      for (let cycle = 0; cycle < 100; cycle++) {
        const other = holder === a ? b : a
        // Only the other worker can reach the database; the run's lease is expired by the database.
        holder.proxy.partition()
        await env.run(
          Effect.flatMap(
            SqlClient.SqlClient,
            (sql) => sql.unsafe(setLeaseExpirySql(env.schema, runId, "now() - interval '1 second'"))
          )
        )
        const next = await other.waitFor(
          `cycle ${cycle}: claim after fence ${fence}`,
          isEvent("Claimed", runId, (r) => r.fence > fence),
          5_000
        )
        holder.proxy.heal()
        fence = next.fence
        holder = other
      }
      const claims = [a, b]
        .flatMap((w) => WorkerProcess.events(w, "Claimed").filter((e) => e.runId === runId))
        .sort((x, y) => x.fence - y.fence)
      assert.deepStrictEqual(claims.map((c) => c.fence), Array.from({ length: 101 }, (_, i) => i + 1))
      for (let i = 1; i < claims.length; i++) {
        assert.notStrictEqual(
          claims[i]!.owner,
          claims[i - 1]!.owner,
          `claim ${i} alternates`
        )
      }
      const history = await env.run(Effect.flatMap(RunStore, (store) => store.history(runId)))
      const fences = history.filter((e) => e.kind === "claimed" || e.kind === "reclaimed").map((e) => e.fence)
      assert.deepStrictEqual(fences, Array.from({ length: 101 }, (_, i) => i + 1))
      assert.strictEqual((await runRow(env, runId)).fence, 101)
    },
    120_000
  )
})
