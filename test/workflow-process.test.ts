/**
 * Issue 14's process tests: workflows run by worker processes (`test/fixtures/workflows.ts` run as
 * a program). One worker is SIGKILLed in the middle of an activity; one is cut off from the
 * database by a TCP proxy the test owns (as in the partition acceptance test) and then replays the
 * execution under its old fence. Lease time is real and short (TTL 2 s).
 */
import { RunStore } from "@leasehold/core"
import * as TcpProxy from "@leasehold/testing/TcpProxy"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Effect, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { DurableDeferred } from "effect/workflow"
import { type ChildProcess, spawn } from "node:child_process"
import * as readline from "node:readline"
import { fileURLToPath } from "node:url"
import { afterEach, assert, describe, it } from "vitest"
import { appLayer, createLedger, Dispatch, ledger, Released, Shipment } from "./fixtures/workflows.js"
import { databaseUrl, freshSchema } from "./support/db.js"

const program = fileURLToPath(new URL("./fixtures/workflows.ts", import.meta.url))

interface Worker {
  readonly child: ChildProcess
  readonly lines: Array<Record<string, any>>
  readonly waitFor: (
    what: string,
    match: (line: Record<string, any>) => boolean,
    timeoutMs?: number
  ) => Promise<Record<string, any>>
  readonly send: (command: Record<string, unknown>) => void
}

let cleanup: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined)
  cleanup = []
})

const startWorker = async (url: string, schema: string, owner: string, chargeMillis: number): Promise<Worker> => {
  const child = spawn(process.execPath, [program], {
    env: { ...process.env, DATABASE_URL: url, SCHEMA: schema, OWNER: owner, CHARGE_MILLIS: String(chargeMillis) },
    stdio: ["pipe", "pipe", "pipe"]
  })
  cleanup.push(() => void child.kill("SIGKILL"))
  const lines: Array<Record<string, any>> = []
  const listeners = new Set<() => void>()
  let stderr = ""
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => void (stderr += chunk))
  readline.createInterface({ input: child.stdout! }).on("line", (line) => {
    try {
      lines.push(JSON.parse(line))
    } catch {
      return
    }
    for (const listener of listeners) listener()
  })
  const waitFor = (what: string, match: (line: Record<string, any>) => boolean, timeoutMs = 15_000) =>
    new Promise<Record<string, any>>((resolve, reject) => {
      const check = () => {
        const found = lines.find(match)
        if (found === undefined) return
        listeners.delete(check)
        clearTimeout(timer)
        resolve(found)
      }
      const timer = setTimeout(() => {
        listeners.delete(check)
        reject(new Error(`${owner}: timed out waiting for ${what}\n${stderr}`))
      }, timeoutMs)
      listeners.add(check)
      check()
    })
  const worker: Worker = {
    child,
    lines,
    waitFor,
    send: (command) => void child.stdin!.write(JSON.stringify(command) + "\n")
  }
  await waitFor("started", (line) => line.type === "started", 30_000)
  return worker
}

const setup = async () => {
  const schema = freshSchema("wfproc")
  const runtime = ManagedRuntime.make(appLayer(databaseUrl(), schema, 0, 3))
  cleanup.push(() => runtime.dispose())
  const run = <A, E>(effect: Effect.Effect<A, E, any>) => runtime.runPromise(effect as Effect.Effect<A, E, never>)
  await run(Effect.flatMap(SqlClient.SqlClient, (sql) => createLedger(sql, schema)))
  const steps = () =>
    run(Effect.flatMap(SqlClient.SqlClient, (sql) => ledger(sql, schema))).then((rows) =>
      rows.map((r) => [r.step, r.fence])
    )
  const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 20_000) => {
    const deadline = Date.now() + timeoutMs
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`)
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
  }
  const runOf = (executionId: string, workflow: { readonly _tag: string } = Shipment) =>
    run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql.unsafe<{ id: string; state: string; fence: string }>(
        `SELECT id::text AS id, state, fence::text AS fence FROM "${schema}".runs_now WHERE idempotency_key = $1`,
        [LeaseholdWorkflows.executionKey(workflow._tag, executionId)]
      ))).then((rows) => ({ ...rows[0]!, fence: Number(rows[0]!.fence) }))
  const start = async (order: string) => {
    await run(Shipment.execute({ order }, { discard: true }))
    return run(Shipment.executionId({ order }))
  }
  return { schema, run, steps, until, runOf, start }
}

describe("workflows across worker processes", () => {
  it(
    "a worker SIGKILLed inside an activity: the execution is reclaimed and every activity's effect lands exactly once",
    async () => {
      const env = await setup()
      const executionId = await env.start("K-1")
      // A's middle step takes 3 s inside its transaction; it is killed during it.
      const a = await startWorker(databaseUrl(), env.schema, "worker-a", 3_000)
      await a.waitFor("A claims the execution", (l) => l.type === "event" && l._tag === "Claimed")
      await env.until("the first step's effect commits", async () => (await env.steps()).length === 1)
      a.child.kill("SIGKILL")
      const b = await startWorker(databaseUrl(), env.schema, "worker-b", 0)
      await env.until("the execution completes", async () => (await env.runOf(executionId)).state === "completed")
      const run = await env.runOf(executionId)
      assert.strictEqual(run.fence, 2)
      // `reserve` is replayed from its recorded result; `charge` never committed under fence 1.
      assert.deepStrictEqual(await env.steps(), [["reserve", 1], ["charge", 2], ["ship", 2]])
      const history = await env.run(Effect.flatMap(RunStore, (store) => store.history(run.id)))
      assert.deepStrictEqual(history.map((e) => [e.kind, e.fence]), [["claimed", 1], ["reclaimed", 2], [
        "completed",
        2
      ]])
      const result = await env.run(Shipment.execute({ order: "K-1" }))
      assert.deepStrictEqual(result, { order: "K-1", steps: 3 })
      b.child.kill("SIGTERM")
    },
    60_000
  )

  it(
    "a partitioned worker's activity result is refused by the fence after the heal, and the execution completes once",
    async () => {
      const env = await setup()
      const target = new URL(databaseUrl())
      const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) })
      cleanup.push(() => proxy.close())
      const viaProxy = new URL(databaseUrl())
      viaProxy.hostname = "127.0.0.1"
      viaProxy.port = String(proxy.port)
      const executionId = await env.start("P-1")

      // 1. A holds the execution under fence 1, inside its 3 s middle step.
      const a = await startWorker(viaProxy.toString(), env.schema, "worker-a", 3_000)
      const claimA = await a.waitFor("A claims", (l) => l.type === "event" && l._tag === "Claimed")
      assert.strictEqual(claimA.fence, 1)
      await env.until("the first step's effect commits", async () => (await env.steps()).length === 1)

      // 2. Cut A off: it stops the run locally when its lease cannot be renewed.
      proxy.partition()
      const lost = await a.waitFor(
        "A loses its lease",
        (l) => l.type === "event" && l._tag === "LeaseLost" && l.fence === 1,
        10_000
      )
      assert.include(["renewal-failed", "deadline"], lost.reason)

      // 3. B reclaims under fence 2; its middle step is slow (6 s), so A can replay meanwhile.
      const b = await startWorker(databaseUrl(), env.schema, "worker-b", 6_000)
      const claimB = await b.waitFor("B reclaims", (l) => l.type === "event" && l._tag === "Claimed", 10_000)
      assert.strictEqual(claimB.fence, 2)

      // 4. Heal. A replays the execution as the holder of fence 1: `reserve` is read back, `charge`
      //    runs, and its result (with its ledger row, in one transaction) is refused by the fence.
      proxy.heal()
      a.send({ cmd: "stale-replay", runId: claimA.runId, fence: 1, executionId })
      const stale = await a.waitFor("A's stale replay answered", (l) => l.type === "stale-replay", 20_000)
      assert.strictEqual(stale.outcome, "Failure")
      assert.deepInclude(stale.error, {
        _tag: "FenceRejected",
        presentedFence: 1,
        storedFence: 2,
        operation: "activity"
      })

      // 5. B completes the execution: each step's effect once, every result recorded under fence 2
      //    except the one A recorded while it held the run.
      await env.until(
        "the execution completes",
        async () => (await env.runOf(executionId)).state === "completed",
        30_000
      )
      assert.deepStrictEqual(await env.steps(), [["reserve", 1], ["charge", 2], ["ship", 2]])
      const recorded = await env.run(
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql.unsafe<{ activity: string; fence: string }>(
            `SELECT activity, fence::text AS fence FROM "${env.schema}".workflow_activities ORDER BY recorded_at`
          ))
      )
      assert.deepStrictEqual(recorded.map((r) => [r.activity, Number(r.fence)]), [["reserve", 1], ["charge", 2], [
        "ship",
        2
      ]])
      assert.strictEqual((await env.runOf(executionId)).fence, 2)
      b.child.kill("SIGTERM")
    },
    90_000
  )
  it(
    "the holder SIGKILLed while a deferred it races completes: the next holder replays, and each activity ran once under its fence",
    async () => {
      const env = await setup()
      await env.run(Dispatch.execute({ order: "D-1" }, { discard: true }))
      const executionId = await env.run(Dispatch.executionId({ order: "D-1" }))
      // A's delivery takes 1.5 s inside its transaction, so the kill lands while A is woken and delivering.
      const a = await startWorker(databaseUrl(), env.schema, "worker-a", 1_500)
      const claimA = await a.waitFor("A claims", (l) => l.type === "event" && l._tag === "Claimed")
      assert.strictEqual(claimA.fence, 1)
      await env.until("loaded, and racing the release against the hold", async () => (await env.steps()).length === 1)
      await new Promise((resolve) => setTimeout(resolve, 300))
      const token = DurableDeferred.tokenFromExecutionId(Released, { workflow: Dispatch, executionId })
      await env.run(DurableDeferred.succeed(Released, { token, value: "ana" }))
      // A is woken where it stands: its race is decided (the race's outcome is recorded) while A is
      // still the holder, and A goes on to deliver.
      await env.until(
        "A's race is decided",
        async () =>
          (await env.run(
            Effect.flatMap(SqlClient.SqlClient, (sql) =>
              sql.unsafe(`SELECT 1 FROM "${env.schema}".workflow_deferreds WHERE name = 'raceAll/release or hold'`))
          ))
            .length === 1,
        5_000
      )
      await new Promise((resolve) => setTimeout(resolve, 200))
      a.child.kill("SIGKILL")
      // Still A's, under fence 1: woken where it stood, not suspended and reclaimed.
      assert.deepInclude(await env.runOf(executionId, Dispatch), { state: "running", fence: 1 })

      const b = await startWorker(databaseUrl(), env.schema, "worker-b", 0)
      await env.until(
        "the execution completes",
        async () => (await env.runOf(executionId, Dispatch)).state === "completed",
        30_000
      )
      assert.strictEqual(await env.run(Dispatch.execute({ order: "D-1" })), "released by ana")
      // The load is replayed from its record; the hold never finished; the delivery A was in when
      // it died never committed, and B's did, once.
      assert.deepStrictEqual(await env.steps(), [["load", 1], ["deliver", 2]])
      const recorded = await env.run(
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql.unsafe<{ activity: string; fence: string }>(
            `SELECT activity, fence::text AS fence FROM "${env.schema}".workflow_activities ORDER BY recorded_at`
          ))
      )
      assert.deepStrictEqual(recorded.map((r) => [r.activity, Number(r.fence)]), [["load", 1], ["deliver", 2]])
      const run = await env.runOf(executionId, Dispatch)
      const history = await env.run(Effect.flatMap(RunStore, (store) => store.history(run.id)))
      assert.deepStrictEqual(history.map((e) => [e.kind, e.fence]), [["claimed", 1], ["reclaimed", 2], [
        "completed",
        2
      ]])
      b.child.kill("SIGTERM")
    },
    60_000
  )
})
