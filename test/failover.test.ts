/**
 * Issue 16, first step: a PostgreSQL failover under a running fleet, with synchronous replication.
 * A real primary and a streaming standby (Debian's binaries); two worker processes reach "the
 * database" through a TCP proxy the test owns, as a virtual IP or a pooler would be switched. Mid
 * drain the primary is stopped at once, the standby promoted and the proxy pointed at it. Nothing
 * committed is lost, so every run completes exactly once and no (run, fence) is granted twice.
 */
import { CurrentRun, Fence, FenceRejected, Run, RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import * as TcpProxy from "@leasehold/testing/TcpProxy"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Context, Duration, Effect, Exit, Layer, Schedule, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { afterEach, assert, describe, it } from "vitest"
import * as Replication from "./support/replication.js"

let cleanup: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined)
  cleanup = []
})

const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 60_000) => {
  const deadline = Date.now() + timeoutMs
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/**
 * A replicated pair (`sync` or not) whose primary is reached through a proxy the test switches, and
 * stores on `schema` through that proxy (each its own pools, as each worker has), all closed with
 * the test.
 */
const throughSwitchedProxy = async (sync: boolean, schema: string) => {
  const scope = Effect.runSync(Scope.make())
  cleanup.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  const pair = await Effect.runPromise(Replication.start({ sync }).pipe(Scope.provide(scope)))
  const proxy = await TcpProxy.start({ host: "127.0.0.1", port: pair.primaryPort })
  cleanup.push(() => proxy.close())
  const url = `postgres://postgres@127.0.0.1:${proxy.port}/postgres`
  const storeOf = () =>
    Effect.runPromise(
      Layer.build(
        PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layerFromUrl(url, { maxConnections: 2 })))
      ).pipe(Scope.provide(scope))
    ).then((context) => ({ store: Context.get(context, RunStore), sql: Context.get(context, SqlClient.SqlClient) }))
  return { pair, proxy, url, storeOf }
}

describe("failover", () => {
  it(
    "synchronous replication: the standby promoted mid-drain loses nothing; every run completes once, no fence is granted twice",
    async () => {
      const schema = "failover"
      const { pair, proxy, storeOf, url } = await throughSwitchedProxy(true, schema)
      // The test's own client, through the same proxy: it follows the switch like the workers.
      const { sql, store } = await storeOf()
      const query = <A extends object>(text: string) => Effect.runPromise(sql.unsafe<A>(text))
      await query(WorkerProcess.createEffectsTable(`"${schema}".effects`))
      const total = 300
      await Effect.runPromise(
        store.enqueue(
          Array.from({ length: total }, () => ({ kind: "process-order", payload: { workMs: 150 }, maxAttempts: 100 }))
        )
      )

      const workers = await Promise.all(
        ["worker-a", "worker-b"].map((owner) =>
          WorkerProcess.start({
            owner,
            databaseUrl: url,
            schema,
            concurrency: 10,
            ttl: "2 seconds",
            heartbeat: "400 millis",
            pollInterval: "100 millis"
          })
        )
      )
      for (const worker of workers) cleanup.push(() => worker.kill())
      await Promise.all(workers.map((w) => w.waitFor("started", (r) => r.type === "started")))
      const completed = async () =>
        Number(
          (await query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".runs_now WHERE state = 'completed'`))[0]!.n
        )
      await until("a third of the runs complete", async () => (await completed()) >= total / 3)
      // B must hold runs when it dies, or there is nothing of its to reclaim: between a wave's
      // completions and its next claim it can hold none.
      const heldNowByB = async () =>
        Number(
          (await query<{ n: string }>(
            `SELECT count(*) AS n FROM "${schema}".runs_now WHERE state = 'running' AND lease_owner = 'worker-b'`
          ))[0]!.n
        )
      await until("worker B holds runs", async () => (await heldNowByB()) >= 3)

      // The primary's loss: stopped at once; the standby promoted; the proxy switched to it. Worker B
      // dies with it (kill -9): the runs it held must be reclaimed by A on the new primary.
      const lostAt = Date.now()
      await workers[1]!.kill()
      pair.stopPrimary()
      pair.promote()
      proxy.retarget({ host: "127.0.0.1", port: pair.standbyPort })
      const promotedAt = Date.now()

      await until("every run completes on the new primary", async () => (await completed()) === total, 90_000)

      // Exactly once: one effect row per run, written under the fence the run completed with.
      const effects = await query<{ run_id: string; fence: string }>(
        `SELECT run_id::text, fence::text FROM "${schema}".effects`
      )
      assert.strictEqual(effects.length, total)
      assert.strictEqual(new Set(effects.map((row) => row.run_id)).size, total)
      const mismatched = await query<{ n: string }>(
        `SELECT count(*) AS n FROM "${schema}".effects l JOIN "${schema}".runs_now r ON r.id = l.run_id WHERE r.fence <> l.fence`
      )
      assert.strictEqual(Number(mismatched[0]!.n), 0)

      // No (run, fence) granted twice: every claim either worker saw, across the failover, is unique.
      const claims = workers.flatMap((w) => WorkerProcess.events(w, "Claimed").map((e) => `${e.runId}:${e.fence}`))
      assert.strictEqual(new Set(claims).size, claims.length)
      // And each run's fences strictly increase in its history, across the failover.
      const history = await query<{ run_id: string; fences: Array<string> }>(
        `SELECT run_id::text, array_agg(fence::text ORDER BY at, fence) AS fences FROM "${schema}".run_history
       WHERE kind IN ('claimed', 'reclaimed') GROUP BY run_id`
      )
      for (const run of history) {
        const fences = run.fences.map(Number)
        assert.isTrue(
          fences.every((fence, i) => i === 0 || fence > fences[i - 1]!),
          `run ${run.run_id}: ${fences.join(", ")}`
        )
      }

      // Worker A came through: it did not crash, and it claims on the new primary, B's held runs too.
      const [a] = workers
      assert.isUndefined(a!.reports.find((r) => r.type === "crashed"))
      const claimsAfter = WorkerProcess.events(a!, "Claimed").filter((e) => e.receivedAt > promotedAt)
      assert.isAbove(claimsAfter.length, 0, "A claimed after the promotion")
      // The runs B held when it died: claimed by B, then reclaimed (by A).
      const heldByB = await query<{ run_id: string }>(
        `SELECT DISTINCT h.run_id::text FROM "${schema}".run_history h
       WHERE h.kind = 'reclaimed' AND h.owner = 'worker-a' AND EXISTS (
         SELECT 1 FROM "${schema}".run_history c WHERE c.run_id = h.run_id AND c.kind = 'claimed' AND c.owner = 'worker-b')`
      )
      assert.isAbove(heldByB.length, 0, "the runs B held were reclaimed")
      const reclaimedAt = claimsAfter.filter((e) => heldByB.some((r) => r.run_id === e.runId)).map((e) => e.receivedAt)
      const firstClaimAfter = Math.min(...claimsAfter.map((e) => e.receivedAt))
      console.log(
        `failover: primary lost → promoted in ${promotedAt - lostAt} ms; first claim on the new primary ${
          firstClaimAfter - lostAt
        } ms after the loss; ` +
          `${heldByB.length} runs held by the killed worker reclaimed, the last ${
            Math.max(...reclaimedAt) - lostAt
          } ms after the loss (TTL 2 s)`
      )
    },
    180_000
  )

  it(
    "asynchronous replication: a claim the promoted standby never received is not granted again; its holder is refused by the fence",
    async () => {
      const schema = "failover_async"
      // Two workers' stores, through the switched proxy.
      const { pair, proxy, storeOf } = await throughSwitchedProxy(false, schema)
      const a = await storeOf()
      const b = await storeOf()
      // Connections cut by the switch fail once; the next attempt reconnects.
      const retried = <A, E>(effect: Effect.Effect<A, E>) =>
        Effect.runPromise(Effect.retry(effect, { times: 20, schedule: Schedule.spaced("100 millis") }))
      await retried(a.sql.unsafe(`CREATE TABLE "${schema}".effects (run_id bigint NOT NULL, fence bigint NOT NULL)`))
      const [run] = await retried(a.store.enqueue([{ kind: "job", payload: null }]))
      await until("the standby has the run", async () => pair.caughtUp())

      // The standby falls behind; A's claim commits on the primary alone (asynchronous: no wait).
      pair.replication.partition()
      const claim = (store: RunStore["Service"], owner: string) =>
        store.claim({ owner, queues: ["default"], kinds: ["job"], limit: 1, ttl: Duration.minutes(1) })
      const [held] = await retried(claim(a.store, "a"))
      assert.strictEqual(held!.fence, 1)

      // The primary is lost with that claim; the standby is promoted; the proxy now reaches it.
      pair.stopPrimary()
      pair.promote()
      proxy.retarget({ host: "127.0.0.1", port: pair.standbyPort })

      // B claims the run on the new primary: the run is pending there (A's claim never arrived), and
      // B's fence is above anything the old primary can have granted, so no (run, fence) is granted twice.
      const [taken] = await retried(claim(b.store, "b"))
      assert.strictEqual(taken!.id, run!.id)
      assert.notStrictEqual(taken!.fence, held!.fence, "the same (run, fence) granted twice")
      assert.isAtLeast(taken!.fence, 2 ** 32)

      // A, still holding fence 1, is refused: its completion and its fenced transaction name both fences.
      const [completion] = await retried(a.store.completeBatch([{ runId: run!.id, fence: 1, result: "1" }]))
      assert.deepInclude(completion, { _tag: "Rejected", fence: 1, storedFence: taken!.fence })
      const stale = await Effect.runPromise(Effect.flip(
        Run.transaction(
          Effect.flatMap(
            SqlClient.SqlClient,
            (sql) => sql.unsafe(`INSERT INTO "${schema}".effects VALUES (${Number(run!.id)}, 1)`)
          )
        ).pipe(
          Effect.provideService(Fence, { runId: run!.id, fence: 1, owner: "a" }),
          Effect.provideService(CurrentRun, {
            kind: "job",
            queue: "default",
            attempt: 1,
            maxAttempts: 5,
            checkpoint: null,
            signals: {}
          }),
          Effect.provideService(RunStore, a.store),
          Effect.provideService(SqlClient.SqlClient, a.sql)
        )
      ))
      assert.instanceOf(stale, FenceRejected)
      assert.deepInclude(stale, { presentedFence: 1, storedFence: taken!.fence, operation: "transaction" })
      assert.strictEqual((await Effect.runPromise(a.sql.unsafe(`SELECT 1 FROM "${schema}".effects`))).length, 0)

      // B's completion under its own fence lands.
      const [done] = await retried(b.store.completeBatch([{ runId: run!.id, fence: taken!.fence, result: "2" }]))
      assert.strictEqual(done!._tag, "Finalized")
    },
    120_000
  )
})
