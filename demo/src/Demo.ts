/**
 * The demo (what `npm start` runs): leases and fencing at work, live.
 *
 * Enqueues sample runs — short jobs, one long reconciliation, and agent-style refunds that suspend
 * for a person's approval — and starts two worker PROCESSES, each behind its own TCP proxy. Mid-run
 * it cuts one worker off from the database (its sockets stay open: silence, not a reset), and
 * shows its lease expiring, the run reclaimed under a higher fence, and the stale worker's writes
 * rejected with `FenceRejected` when it comes back. The suspended refunds hold no worker until they
 * are approved. It ends by checking itself against the database and succeeds only if every run
 * completed exactly once.
 *
 * The worker processes and their proxies are `@leasehold/testing`'s: the demo is a fault
 * scenario told as it happens, which is why it lives beside the fault harness and not in the
 * published `leasehold` command.
 */
import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as LiveView from "./LiveView.js"

const shortJobs = 24
const refunds = 3
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The demo's own check against the database failed, or a step of the story did not happen. */
export class DemoFailed extends Schema.TaggedError<DemoFailed>()("DemoFailed", { message: Schema.String }) {}

interface RunRow {
  readonly id: string
  readonly kind: string
  readonly state: string
  readonly fence: number
  readonly lease_owner: string | null
}

/** Plays the demo against the PostgreSQL at `url`, in a schema of its own. */
export const run = (url: string) =>
  Effect.gen(function*() {
    const schema = `demo_${Date.now().toString(36)}`
    const effects = `"${schema}".effects`
    return yield* Effect.provide(
      Effect.gen(function*() {
        const store = yield* RunStore
        const sql = yield* SqlClient.SqlClient
        const services = yield* Effect.context<RunStore | SqlClient.SqlClient>()
        const db = <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) =>
          Effect.runPromise(Effect.provideContext(effect, services))
        yield* sql.unsafe(WorkerProcess.createEffectsTable(effects))
        return yield* Effect.tryPromise({
          try: (signal) => play({ url, schema, effects, store, db, signal }),
          catch: (e) => e instanceof DemoFailed ? e : new DemoFailed({ message: String((e as Error)?.message ?? e) })
        })
      }),
      PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layerFromUrl(url)))
    )
  })

interface Stage {
  readonly url: string
  readonly schema: string
  readonly effects: string
  readonly store: RunStore["Service"]
  readonly db: <A, E>(effect: Effect.Effect<A, E, RunStore | SqlClient.SqlClient>) => Promise<A>
  /** Aborted when the demo is interrupted (Ctrl-C): the worker processes are stopped at once. */
  readonly signal: AbortSignal
}

const play = async ({ db, effects, schema, signal, store, url }: Stage) => {
  const view = LiveView.make()
  const say = (line: string) => view.log(line)
  const workers: Array<WorkerProcess.WorkerProcess> = []
  signal.addEventListener("abort", () => void Promise.all(workers.map((w) => w.kill())))
  try {
    say("Leasehold demo — leased, fenced runs on PostgreSQL (TTL 2 s, heartbeat 400 ms)")
    const [long] = await db(store.enqueue([{ kind: "reconcile-accounts", payload: { workMs: 5_000 }, priority: 10 }]))
    const jobs = await db(store.enqueue(Array.from({ length: shortJobs }, (_, i) => ({
      kind: "process-order",
      payload: { workMs: 150 + (i % 5) * 100 }
    }))))
    const approvals = await db(
      store.enqueue(Array.from({ length: refunds }, () => ({ kind: "approve-refund", payload: {} })))
    )
    const total = 1 + jobs.length + approvals.length
    const longId = long!.id
    say(
      `enqueued ${total} runs: 1 long reconciliation (run ${longId}), ${jobs.length} orders, ${refunds} refunds that wait for approval`
    )

    const settings = { databaseUrl: url, schema, effects, concurrency: 4 }
    const a = await WorkerProcess.start({ ...settings, owner: "worker-a" })
    workers.push(a)
    narrate(a, longId, say)
    await a.waitFor("worker-a to start", (r) => r.type === "started")
    await a.waitFor(
      "worker-a to claim the reconciliation",
      (r) => r.type === "event" && r._tag === "Claimed" && r.runId === longId
    )
    const b = await WorkerProcess.start({ ...settings, owner: "worker-b" })
    workers.push(b)
    narrate(b, longId, say)
    await b.waitFor("worker-b to start", (r) => r.type === "started")

    // Refresh the status block while the story unfolds.
    let stop = false
    const refresh = (async () => {
      while (!stop) {
        view.status(await statusBlock(db, schema, total, longId))
        await sleep(250)
      }
    })()

    await a.waitFor(
      "worker-a to work on the reconciliation",
      (r) => r.type === "work" && r.runId === longId && r.n >= 5
    )
    say("")
    say("✂  worker-a is cut off from PostgreSQL mid-run (sockets stay open: it hears only silence)")
    a.proxy.partition()
    await a.waitFor(
      "worker-a to stop the run locally",
      (r) => r.type === "event" && r._tag === "LeaseLost" && r.runId === longId,
      10_000
    )
    const reclaim = await b.waitFor(
      "worker-b to reclaim",
      (r) => r.type === "event" && r._tag === "Claimed" && r.runId === longId,
      15_000
    )
    say("")
    say("⚡ worker-a reconnects, still believing in fence 1 for a moment")
    a.proxy.heal()
    a.send({ cmd: "stale-write", runId: longId, fence: 1 })
    const stale = await a.waitFor(
      "worker-a's stale write",
      (r) => r.type === "write-result" && r.runId === longId && r.fence === 1,
      15_000
    )
    if (stale.outcome !== "rejected" || stale.error?.tag !== "FenceRejected") {
      throw new DemoFailed({
        message: `worker-a's stale write was not rejected by the fence: ${JSON.stringify(stale)}`
      })
    }

    // The refunds: suspended, holding no worker, until a person approves them.
    const suspended = await waitUntil("the refunds to suspend", async () => {
      const rows = await runRows(db, schema)
      const waiting = rows.filter((r) => r.kind === "approve-refund" && r.state === "suspended")
      return waiting.length === refunds ? waiting : undefined
    })
    if (suspended.some((r) => r.lease_owner !== null)) {
      throw new DemoFailed({ message: "a suspended run still has a lease owner" })
    }
    say("")
    say(`⏸  ${refunds} refunds are suspended for approval: no lease owner, no heartbeat, no worker slot`)
    await sleep(1_500)
    for (const refund of suspended) {
      await db(store.resumeById(refund.id, { approved: true, by: "ana@example.com" }))
      say(`👤 ana approves refund run ${refund.id} → claimable again, it will run under fence ${refund.fence + 1}`)
    }

    await waitUntil("every run to complete", async () => {
      const rows = await runRows(db, schema)
      return rows.every((r) => r.state === "completed") ? rows : undefined
    }, 60_000)
    stop = true
    await refresh
    view.status(await statusBlock(db, schema, total, longId))
    view.finish()

    // The summary checks itself against the database.
    const verdict = await db(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const runs = yield* sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".runs_now WHERE state = 'completed'`
      )
      const entries = yield* sql.unsafe<{ run_id: string; n: number; fence: string; final_fence: string }>(
        `SELECT l.run_id::text, count(*)::int AS n, max(l.fence)::text AS fence, max(r.fence)::text AS final_fence
         FROM ${effects} l JOIN "${schema}".runs_now r ON r.id = l.run_id GROUP BY l.run_id`
      )
      const rejected = yield* sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".run_events WHERE kind = 'stale_write_rejected'`
      )
      return { completed: runs[0]!.n, entries, rejected: rejected[0]!.n }
    }))
    const once = verdict.entries.filter((e) => e.n === 1 && e.fence === e.final_fence).length
    const checks = [
      { ok: verdict.completed === total, text: `${verdict.completed}/${total} runs completed` },
      {
        ok: verdict.entries.length === total && once === total,
        text: `effects: ${once} runs with exactly one effect row, written under their final fence (of ${total})`
      },
      { ok: verdict.rejected >= 1, text: `${verdict.rejected} stale writes rejected by the fence` },
      { ok: reclaim.fence >= 2, text: `run ${longId} reclaimed under fence ${reclaim.fence}` }
    ]
    say("")
    for (const check of checks) say(`${check.ok ? "✔" : "✘"} ${check.text}`)
    if (checks.some((c) => !c.ok)) throw new DemoFailed({ message: "the demo's checks against the database failed" })
    say("every run completed exactly once; the partitioned worker's writes were rejected by the fence")
  } finally {
    view.finish()
    await Promise.all(workers.map((w) => w.stop()))
  }
}

/** Prints what a worker does to the interesting run, as it happens. */
const narrate = (worker: WorkerProcess.WorkerProcess, longId: string, say: (line: string) => void) =>
  worker.onReport((r) => {
    if (r.type === "event" && r.runId === longId) {
      if (r._tag === "Claimed") say(`${r.owner} claims run ${longId} under fence ${r.fence}`)
      if (r._tag === "LeaseLost") {
        say(
          `${r.owner}: lease of run ${longId} (fence ${r.fence}) lost (${r.reason}) → its RunScope is interrupted, the work stops`
        )
      }
      if (r._tag === "WriteRejected") {
        say(
          `${r.owner}: its ${r.operation} of run ${longId} under fence ${r.presentedFence} arrives → rejected: FenceRejected (stored fence ${r.storedFence})`
        )
      }
    }
    if (r.type === "write-result" && r.runId === longId) {
      say(
        r.outcome === "committed"
          ? `${r.owner} writes run ${longId}'s effect row and completes it in one fenced transaction (fence ${r.fence})`
          : `${r.owner} tries to write run ${longId}'s effect row under fence ${r.fence} → ${r.error.tag} (presented ${r.error.presentedFence}, stored ${r.error.storedFence}); nothing written`
      )
    }
  })

const runRows = (db: Stage["db"], schema: string) =>
  db(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql.unsafe<RunRow & { fence: any }>(
        `SELECT id::text, kind, state, fence, lease_owner FROM "${schema}".runs_now ORDER BY id`
      ))
  ).then((rows) => rows.map((r) => ({ ...r, fence: Number(r.fence) })))

const statusBlock = async (db: Stage["db"], schema: string, total: number, longId: string) => {
  const rows = await runRows(db, schema)
  const count = (state: string) => rows.filter((r) => r.state === state).length
  const held = (owner: string) => rows.filter((r) => r.lease_owner === owner).length
  const shown = rows.filter((r) => r.id === longId || r.kind === "approve-refund")
  return [
    "",
    `${LiveView.bar(count("completed"), total)}  running ${count("running")} · suspended ${
      count("suspended")
    } · pending ${count("pending")}`,
    `leases held: worker-a ${held("worker-a")}, worker-b ${held("worker-b")}`,
    "run  kind              state      owner     fence",
    ...shown.map((r) =>
      `${r.id.padEnd(4)} ${r.kind.padEnd(17)} ${r.state.padEnd(10)} ${(r.lease_owner ?? "-").padEnd(9)} ${r.fence}`
    )
  ]
}

const waitUntil = async <A>(what: string, check: () => Promise<A | undefined>, timeoutMs = 20_000): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    const value = await check()
    if (value !== undefined) return value
    await sleep(100)
  }
  throw new DemoFailed({ message: `timed out waiting for ${what}` })
}
