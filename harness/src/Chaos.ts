/**
 * The randomized fault run (Jepsen's method, on one machine): worker processes run thousands of
 * runs against a PostgreSQL this run owns, while a seeded nemesis kills workers (kill -9, then
 * restarts them), freezes them past their TTL (SIGSTOP/SIGCONT), cuts them off (proxy partition)
 * or resets their connections, and restarts the database server itself. One worker's wall clock is
 * skewed by minutes throughout. Afterwards the system quiesces and `Checker` judges the history.
 * The seed decides the mix of runs and the nemesis's schedule, drawn up front (`Plan`).
 *
 * @since 0.1.0
 */
import { RunStore } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Effect, Layer, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Checker from "./Checker.js"
import * as Plan from "./Plan.js"

export interface ChaosOptions {
  readonly seed: number
  readonly runs: number
  readonly workers: number
  /** How long the nemesis acts. */
  readonly faultSeconds: number
  /** Skew of the last worker's wall clock (faketime syntax); none if this machine cannot. */
  readonly skew: string
  readonly log: (line: string) => void
}

export interface ChaosResult {
  readonly seed: number
  readonly faults: Readonly<Record<Plan.Fault, number>>
  readonly states: Readonly<Record<string, number>>
  readonly checks: ReadonlyArray<Checker.Check>
  readonly ok: boolean
  readonly seconds: number
}

const schema = "chaos"
const effects = `"${schema}".effects`
const ttl = "1500 millis"
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A worker slot: one logical worker, restarted as a new process (generation) after kill -9. */
interface Slot {
  readonly name: string
  readonly skew: string | undefined
  generation: number
  current: WorkerProcess.WorkerProcess
  /** Set while the nemesis is the reason the process may exit. */
  expectingExit: boolean
}

export const run = async (options: ChaosOptions): Promise<ChaosResult> => {
  const started = Date.now()
  // Everything the seed decides is drawn here, before anything runs.
  const plan = Effect.runSync(Plan.make(options))
  const { log } = options
  const faults: Record<Plan.Fault, number> = { kill: 0, pause: 0, partition: 0, reset: 0, "restart-db": 0 }
  const reports: Array<WorkerProcess.Report> = []
  const unexpectedExits: Array<string> = []
  const restarts: Array<number> = []

  // The database belongs to this run, so it may restart it.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-chaos-"))
  fs.chmodSync(dir, 0o777)
  const dataDir = path.join(dir, "pgdata")
  let pg = await EmbeddedPostgres.startUnscoped({ dataDir, persistent: true, settings: { max_connections: "200" } })
  const port = pg.port
  const runtime = ManagedRuntime.make(
    PgRunStore.layer({ schema }).pipe(
      Layer.provideMerge(Database.layerFromUrl(pg.url, { maxConnections: 4, applicationName: "chaos-driver" }))
    )
  )
  // The driver's own statements retry through database restarts.
  const dbRetrying = async <A>(effect: Effect.Effect<A, any, RunStore | SqlClient.SqlClient>): Promise<A> => {
    for (let attempt = 0;; attempt++) {
      try {
        return await runtime.runPromise(effect)
      } catch (error) {
        if (attempt > 120) throw error
        await sleep(250)
      }
    }
  }

  const slots: Array<Slot> = []
  try {
    await dbRetrying(
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(WorkerProcess.createEffectsTable(effects)))
    )

    // The mix of runs, from the seed.
    const { requests } = plan
    for (let i = 0; i < requests.length; i += 500) {
      await dbRetrying(Effect.flatMap(RunStore, (store) => store.enqueue(requests.slice(i, i + 500))))
    }
    log(
      `seed ${options.seed}: ${options.runs} runs enqueued; ${options.workers} workers (the last with its clock at ${options.skew}); nemesis for ${options.faultSeconds} s`
    )

    const spawnSlot = async (slot: Slot) => {
      slot.generation++
      const worker = await WorkerProcess.start({
        owner: `${slot.name}.${slot.generation}`,
        databaseUrl: pg.url,
        schema,
        effects,
        skew: slot.skew,
        ttl,
        heartbeat: "300 millis",
        pollInterval: "100 millis",
        concurrency: 8,
        maxConnections: 4
      })
      worker.onReport((r) => void reports.push(r))
      slot.current = worker
      void worker.exited.then(({ code, signal }) => {
        if (!slot.expectingExit && slot.current === worker) {
          unexpectedExits.push(`${worker.owner} exited (code ${code}, signal ${signal})`)
        }
      })
      await worker.waitFor("start", (r) => r.type === "started", 15_000)
    }
    for (let i = 0; i < options.workers; i++) {
      const slot: Slot = {
        name: `w${i + 1}`,
        skew: i === options.workers - 1 && WorkerProcess.canSkewClocks ? options.skew : undefined,
        generation: 0,
        current: undefined as never,
        expectingExit: false
      }
      slots.push(slot)
      await spawnSlot(slot)
    }

    // The driver resumes suspended runs, as people and webhooks would.
    let driving = true
    const driver = (async () => {
      while (driving) {
        try {
          const waiting = await runtime.runPromise(
            Effect.flatMap(
              SqlClient.SqlClient,
              (sql) =>
                sql.unsafe<{ id: string }>(`SELECT id::text FROM "${schema}".runs WHERE state = 'suspended' LIMIT 200`)
            )
          )
          for (const { id } of waiting) {
            await runtime.runPromise(
              Effect.flatMap(RunStore, (store) => store.resumeById(id, { approvedBy: "driver" })).pipe(Effect.ignore)
            )
          }
        } catch {
          // The database may be restarting; try again shortly.
        }
        await sleep(300)
      }
    })()

    // The nemesis: one fault at a time, each followed by its recovery, in the plan's order until
    // time is up (the plan has more steps than fit).
    const until = Date.now() + options.faultSeconds * 1000
    for (const step of plan.steps) {
      if (Date.now() >= until) break
      await sleep(step.waitMs)
      const { fault, ms } = step
      const slot = slots[step.slot]!
      faults[fault]++
      if (fault === "kill") {
        log(`nemesis: kill -9 ${slot.current.owner}`)
        slot.expectingExit = true
        await slot.current.kill()
        slot.expectingExit = false
        await sleep(ms)
        await spawnSlot(slot)
      } else if (fault === "pause") {
        log(`nemesis: SIGSTOP ${slot.current.owner} for ${ms} ms`)
        slot.current.signal("SIGSTOP")
        await sleep(ms)
        slot.current.signal("SIGCONT")
      } else if (fault === "partition") {
        log(`nemesis: partition ${slot.current.owner} for ${ms} ms`)
        slot.current.proxy.partition()
        await sleep(ms)
        slot.current.proxy.heal()
      } else if (fault === "reset") {
        log(`nemesis: reset every connection of ${slot.current.owner}`)
        slot.current.proxy.reset()
      } else {
        log(`nemesis: restart PostgreSQL (down ${ms} ms)`)
        await pg.stop()
        await sleep(ms)
        pg = await EmbeddedPostgres.startUnscoped({
          dataDir,
          persistent: true,
          port,
          settings: { max_connections: "200" }
        })
        restarts.push(Date.now())
      }
    }
    log("nemesis stops; the system quiesces")
    for (const slot of slots) {
      slot.current.proxy.heal()
      slot.current.signal("SIGCONT")
    }

    // A canary batch after the last fault proves every kind of fault left the workers claiming.
    await dbRetrying(
      Effect.flatMap(RunStore, (store) =>
        store.enqueue(
          Array.from({ length: 30 }, () => ({ kind: "chaos-step", payload: { workMs: 50 }, maxAttempts: 10 }))
        ))
    )
    // Quiesce: wait while the backlog keeps shrinking; a backlog that stops moving for 60 s is stuck.
    let open = Infinity
    let lastProgress = Date.now()
    while (Date.now() - lastProgress < 60_000) {
      const rows = await dbRetrying(
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql.unsafe<{ n: number }>(
            `SELECT count(*)::int AS n FROM "${schema}".runs_now WHERE state IN ('pending', 'running', 'suspended')`
          ))
      )
      if (rows[0]!.n < open) lastProgress = Date.now()
      open = rows[0]!.n
      if (open === 0) break
      await sleep(500)
    }
    driving = false
    await driver
    // Workers stop before the history is read, and it is read in one snapshot.
    for (const slot of slots) slot.expectingExit = true
    await Promise.all(slots.map((slot) => slot.current.stop()))
    const history = await dbRetrying(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql.withTransaction(Effect.andThen(
        sql.unsafe(`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`),
        Effect.all({
          runs: sql.unsafe<{ id: string; state: string; fence: string; kind: string }>(
            `SELECT id::text, state, fence::text, kind FROM "${schema}".runs_now`
          ),
          events: sql.unsafe<{ run_id: string; kind: string; fence: string }>(
            `SELECT run_id::text, kind, fence::text FROM "${schema}".run_history ORDER BY at, seq NULLS LAST`
          ),
          effects: sql.unsafe<{ run_id: string; fence: string; owner: string }>(
            `SELECT run_id::text, fence::text, owner FROM ${effects}`
          )
        })
      ))))

    const checks = Checker.check({
      runs: history.runs.map((r) => ({ id: r.id, state: r.state, fence: Number(r.fence), kind: r.kind })),
      // The id is the event's place in the history's time order.
      events: history.events.map((e, i) => ({ id: i, runId: e.run_id, kind: e.kind, fence: Number(e.fence) })),
      effects: history.effects.map((l) => ({ runId: l.run_id, fence: Number(l.fence), owner: l.owner })),
      reports,
      unexpectedExits,
      claimsAfterRestarts: restarts.map((at) =>
        reports.filter((r) => r.type === "event" && r._tag === "Claimed" && r.receivedAt > at).length
      )
    })
    const states: Record<string, number> = {}
    for (const r of history.runs) states[r.state] = (states[r.state] ?? 0) + 1
    return {
      seed: options.seed,
      faults,
      states,
      checks,
      ok: checks.every((c) => c.ok),
      seconds: Math.round((Date.now() - started) / 1000)
    }
  } finally {
    for (const slot of slots) {
      slot.expectingExit = true
      await slot.current?.kill().catch(() => undefined)
    }
    await runtime.dispose().catch(() => undefined)
    await pg.stop().catch(() => undefined)
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** The result as lines for a person. */
export const describe = (result: ChaosResult): ReadonlyArray<string> => [
  `seed ${result.seed} · ${result.seconds} s`,
  `faults injected: ${Object.entries(result.faults).map(([k, n]) => `${k} ${n}`).join(", ")}`,
  `runs: ${Object.entries(result.states).map(([k, n]) => `${k} ${n}`).join(", ")}`,
  ...result.checks.map((c) => `${c.ok ? "✔" : "✘"} ${c.name}: ${c.detail}`),
  result.ok ? "verdict: PASS" : "verdict: FAIL"
]
