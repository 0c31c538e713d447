/**
 * The reclaim bound (I27) with real worker processes: worker A holds 10 runs and dies (`kill -9`)
 * or is cut off from the database (its TCP proxy stops forwarding, both ways, for 3× the TTL)
 * while worker B is busy with a backlog much larger than its slots. Every one of A's runs must be
 * running under fence 2 on B within TTL + one poll interval + a margin of the kill or the cut.
 *
 * Times are the database's: the kill and the cut are stamped with `clock_timestamp()` just
 * before they happen, and each reclaim with the `reclaimed` history row its claim wrote (`at` is
 * the claim's `now()`). The margin covers what the bound leaves out: B's slots are all busy, so a
 * sweep waits for one to free (B's runs last 200 ms) and each reclaim after the first waits for
 * the next freed slot; and the two cores this runs on are shared by both workers and the database.
 */
import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Effect, Layer, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { afterEach, assert, describe, it } from "vitest"
import { databaseUrl, freshSchema } from "./support/db.js"

const ttlMs = 3_000
const pollMs = 1_000
/** Beyond TTL + poll interval, for the slots B must wait for and a shared machine's stalls. */
const marginMs = 1_000
const bound = ttlMs + pollMs + marginMs
const held = 10
/** B's backlog: 400 runs of 200 ms on 10 slots, about 8 s of work, more than the test lasts. */
const backlog = 400

interface Env {
  readonly schema: string
  readonly run: <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) => Promise<A>
  readonly dispose: () => Promise<void>
}

const setup = async (): Promise<Env> => {
  const schema = freshSchema("reclaim")
  const runtime = ManagedRuntime.make(
    PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 3 })))
  )
  const run = <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) => runtime.runPromise(effect)
  await run(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(WorkerProcess.createEffectsTable(`"${schema}".effects`)))
  )
  return { schema, run, dispose: () => runtime.dispose() }
}

const query = <Row extends object>(env: Env, text: string, params: ReadonlyArray<unknown> = []) =>
  env.run(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<Row>(text, params as Array<unknown>)))

/** The database's clock now, in epoch milliseconds. */
const databaseNow = (env: Env) =>
  query<{ ms: number }>(env, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms").then((rows) =>
    Number(rows[0]!.ms)
  )

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
    ttl: `${ttlMs} millis`,
    heartbeat: "1 second",
    pollInterval: `${pollMs} millis`,
    concurrency: 10
  })
  cleanup.push(() => worker.kill())
  await worker.waitFor("started", (r) => r.type === "started")
  return worker
}

/**
 * A holds `held` runs that work until told to finish; then B starts and gets a backlog of short
 * runs much larger than its slots, and is seen at capacity.
 */
const scene = async () => {
  const env = await setup()
  cleanup.push(env.dispose)
  const heldRuns = await env.run(
    Effect.flatMap(
      RunStore,
      (store) => store.enqueue(Array.from({ length: held }, () => ({ kind: "long-step", payload: {}, maxAttempts: 5 })))
    )
  )
  const ids = heldRuns.map((r) => r.id)
  const a = await startWorker(env, "worker-a")
  for (const id of ids) {
    await a.waitFor(
      `A claims ${id}`,
      (r) => r.type === "event" && r._tag === "Claimed" && r.runId === id && r.fence === 1
    )
  }
  await a.waitFor("A renews its leases", (r) => r.type === "event" && r._tag === "HeartbeatConfirmed")
  const b = await startWorker(env, "worker-b")
  await env.run(
    Effect.flatMap(
      RunStore,
      (store) =>
        store.enqueue(Array.from({ length: backlog }, () => ({ kind: "chaos-step", payload: { workMs: 200 } })))
    )
  )
  // B is busy: its slots are full and slots keep freeing (runs complete).
  await b.waitFor(
    "B completes backlog runs",
    () => WorkerProcess.events(b, "Claimed").filter((e) => e.kind === "chaos-step").length >= 20
  )
  return { env, ids, a, b }
}

interface Reclaim {
  readonly run_id: string
  readonly owner: string
  readonly at_ms: number
}

/** Waits until every run of `ids` was reclaimed (a `reclaimed` row at fence 2), or `timeoutMs` passes. */
const reclaims = async (env: Env, ids: ReadonlyArray<string>, timeoutMs: number): Promise<ReadonlyArray<Reclaim>> => {
  const deadline = Date.now() + timeoutMs
  while (true) {
    const rows = await query<Reclaim>(
      env,
      `SELECT run_id::text, owner, (extract(epoch FROM at) * 1000)::float8 AS at_ms FROM "${env.schema}".run_events
       WHERE kind = 'reclaimed' AND fence = 2 AND run_id = ANY($1::bigint[]) ORDER BY at`,
      [ids]
    )
    if (rows.length === ids.length || Date.now() > deadline) return rows.map((r) => ({ ...r, at_ms: Number(r.at_ms) }))
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Every run of `ids` reclaimed by B within the bound of `fromMs`, and running (or done) under fence 2. */
const assertReclaimedWithinBound = async (
  env: Env,
  ids: ReadonlyArray<string>,
  fromMs: number,
  rows: ReadonlyArray<Reclaim>
) => {
  const after = rows.map((r) => Math.round(r.at_ms - fromMs))
  console.log(
    `reclaimed ${rows.length}/${ids.length} runs after (ms, database clock): ${after.join(", ")}; bound ${bound} ms`
  )
  assert.deepStrictEqual(rows.map((r) => r.run_id).sort(), [...ids].sort(), "every one of A's runs reclaimed")
  assert.deepStrictEqual([...new Set(rows.map((r) => r.owner))], ["worker-b"])
  for (const ms of after) {
    assert.isAtMost(ms, bound, `reclaimed within TTL ${ttlMs} + poll ${pollMs} + margin ${marginMs} ms`)
  }
  const states = await query<{ id: string; state: string; fence: string; lease_owner: string | null }>(
    env,
    `SELECT id::text, state, fence::text, lease_owner FROM "${env.schema}".runs_now WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids]
  )
  for (const row of states) {
    assert.include(["running", "completed"], row.state, `run ${row.id}`)
    assert.strictEqual(row.fence, "2", `run ${row.id}`)
    if (row.state === "running") assert.strictEqual(row.lease_owner, "worker-b", `run ${row.id}`)
  }
}

describe("reclaim bound across worker processes (TTL 3 s, poll 1 s, B at 10 slots with a 400-run backlog)", () => {
  it(
    "a worker killed with kill -9 holding 10 runs: every one runs under fence 2 on the busy worker within TTL + poll + 1 s of the kill",
    async () => {
      const { a, env, ids } = await scene()
      const killedAt = await databaseNow(env)
      a.signal("SIGKILL")
      await a.exited
      const rows = await reclaims(env, ids, bound + 5_000)
      await assertReclaimedWithinBound(env, ids, killedAt, rows)
    },
    60_000
  )

  it(
    "a worker cut off from the database for 3× the TTL holding 10 runs: every one runs under fence 2 on the busy worker within TTL + poll + 1 s of the cut",
    async () => {
      const { a, env, ids } = await scene()
      const cutAt = await databaseNow(env)
      a.proxy.partition()
      const rows = await reclaims(env, ids, 3 * ttlMs)
      // The partition lasts 3× the TTL whatever happened meanwhile.
      const left = cutAt + 3 * ttlMs - (await databaseNow(env))
      if (left > 0) await new Promise((resolve) => setTimeout(resolve, left))
      await assertReclaimedWithinBound(env, ids, cutAt, rows)
      // None of A's runs is still at fence 1 under an expired lease.
      const stale = await query<{ id: string }>(
        env,
        `SELECT id::text FROM "${env.schema}".runs_now WHERE id = ANY($1::bigint[]) AND fence = 1`,
        [ids]
      )
      assert.deepStrictEqual(stale, [])
      a.proxy.heal()
    },
    60_000
  )
})
