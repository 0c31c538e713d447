/**
 * What the console's reads cost on a store with a million completed runs: the throughput
 * aggregates (`RunStore.throughput`), the counts the overview and queues pages show
 * (`RunStore.stats`, `RunStore.sample`) and the runs list and its searches (`RunStore.list`).
 * The store is filled through its own statements (enqueue, claim, completeBatch, fail), half in
 * the batch ledger and half in rows, then its finish times are spread over the last `hours` in id
 * order (as a store written steadily would have them). Each statement the store sends for a read
 * is captured (`Statement.CurrentTransformer`) and run again under EXPLAIN (ANALYZE, BUFFERS).
 * Not a test and not part of `npm run bench`:
 *
 *   npm run build && DATABASE_URL=postgres://root@127.0.0.1:5432/test \
 *     node bench/dist/consoleActivity.js [runs] [hours] [--keep] > /tmp/console-activity.txt
 *
 * The schema is `console_activity_<runs>`; it is reused when already filled (`--keep` keeps it).
 */
import { type ListFilter, RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Duration, Effect, Layer } from "effect"
import { SqlClient, Statement } from "effect/sql"

const args = process.argv.slice(2).filter((a) => !a.startsWith("--"))
const total = Number(args[0] ?? 1_000_000)
const hours = Number(args[1] ?? 24)
const keep = process.argv.includes("--keep")
const url = process.env.DATABASE_URL ?? "postgres://root@127.0.0.1:5432/test"
const schema = `console_activity_${total}`
const chunk = 5_000
const failedRuns = 2_000
const queues = ["default", "emails", "billing", "reports"]
const kinds = Array.from({ length: 7 }, (_, i) => `task-${i}`)

const log = (line: string) => process.stderr.write(`${new Date().toISOString()} ${line}\n`)

/** Enqueues, claims and completes `count` runs through a store of `storage`. */
const fill = (store: RunStore["Service"], count: number, label: string) =>
  Effect.gen(function*() {
    for (let done = 0; done < count; done += chunk) {
      const n = Math.min(chunk, count - done)
      yield* store.enqueue(Array.from({ length: n }, (_, i) => ({
        kind: kinds[(done + i) % kinds.length]!,
        queue: queues[(done + i) % queues.length]!,
        payload: { order: `O-${label}-${done + i}`, customer: `C-${(done + i) % 5000}` }
      })))
      let left = n
      while (left > 0) {
        const claimed = yield* store.claim({
          owner: `bench-${label}`,
          queues,
          kinds,
          limit: 1_000,
          ttl: Duration.minutes(5)
        })
        if (claimed.length === 0) {
          return yield* Effect.die(new Error(`${label}: ${left} runs enqueued but not claimable`))
        }
        yield* store.completeBatch(
          claimed.map((c) => ({ runId: c.id, fence: c.fence, result: JSON.stringify({ ok: c.id }), keyed: false }))
        )
        left -= claimed.length
      }
      if ((done / chunk) % 20 === 0) log(`${label}: ${done + n} of ${count}`)
    }
  })

const failSome = (store: RunStore["Service"], count: number) =>
  Effect.gen(function*() {
    yield* store.enqueue(Array.from({ length: count }, (_, i) => ({
      kind: "charge",
      queue: queues[i % queues.length]!,
      payload: { order: `F-${i}`, customer: `C-${i % 5000}` },
      maxAttempts: 1
    })))
    let left = count
    while (left > 0) {
      const claimed = yield* store.claim({
        owner: "bench-fail",
        queues,
        kinds: ["charge"],
        limit: 500,
        ttl: Duration.minutes(5)
      })
      if (claimed.length === 0) return yield* Effect.die(new Error(`${left} runs to fail but not claimable`))
      for (const c of claimed) {
        yield* Effect.ignore(
          store.fail({
            runId: c.id,
            fence: c.fence,
            error: { message: `card declined for ${c.id}` },
            retryDelayMs: undefined
          })
        )
      }
      left -= claimed.length
    }
  })

/** Spreads finish (and claim) times over the last `hours`, in id order, as a steady store has them. */
const spread = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const s = `"${schema}"`
  const [range] = yield* sql.unsafe<{ lo: string; hi: string }>(
    `SELECT min(id)::text AS lo, max(id)::text AS hi FROM ${s}.runs`
  )
  const span = `(${hours} * interval '1 hour')`
  const back = (id: string) =>
    `${span} * (${range!.hi}::float8 - ${id}) / greatest(1, ${range!.hi}::float8 - ${range!.lo})`
  yield* sql.unsafe(`UPDATE ${s}.runs SET
    run_at = run_at - ${back("id")}, created_at = created_at - ${back("id")}, updated_at = updated_at - ${back("id")},
    claimed_at = claimed_at - ${back("id")}, finished_at = finished_at - ${back("id")}`)
  yield* sql.unsafe(
    `UPDATE ${s}.claim_batches SET claimed_at = claimed_at - ${back("ids[1]")}, expires_at = expires_at - ${
      back("ids[1]")
    }`
  )
  yield* sql.unsafe(`UPDATE ${s}.completion_batches SET at = at - ${back("ids[1]")}`)
  yield* sql.unsafe(`VACUUM ANALYZE ${s}.runs`)
  yield* sql.unsafe(`VACUUM ANALYZE ${s}.claim_batches`)
  yield* sql.unsafe(`VACUUM ANALYZE ${s}.completion_batches`)
  yield* sql.unsafe(`VACUUM ANALYZE ${s}.ready`)
})

/** Runs `read`, capturing the statements it sends, then each again under EXPLAIN (ANALYZE, BUFFERS). */
const explain = <A, E>(name: string, read: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const captured: Array<readonly [string, ReadonlyArray<unknown>]> = []
    const started = performance.now()
    yield* read.pipe(Effect.provideService(Statement.CurrentTransformer, (statement) => {
      captured.push(statement.compile())
      return Effect.succeed(statement)
    }))
    const wallMs = performance.now() - started
    process.stdout.write(
      `\n## ${name}\n\nthe store's read, end to end: ${wallMs.toFixed(1)} ms (${captured.length} statements)\n`
    )
    // In one transaction, as the store sends a read with its SET LOCAL settings.
    yield* sql.withTransaction(Effect.gen(function*() {
      for (const [text, params] of captured) {
        if (/^\s*SET\s/i.test(text)) {
          yield* sql.unsafe(text, params as Array<never>)
          process.stdout.write(`\n${text.trim()}\n`)
          continue
        }
        const plan = yield* sql.unsafe<{ "QUERY PLAN": string }>(
          `EXPLAIN (ANALYZE, BUFFERS) ${text}`,
          params as Array<never>
        )
        const lines = plan.map((r) => r["QUERY PLAN"])
        process.stdout.write(
          `\n${text.replace(/\s+/g, " ").slice(0, 240)}…\n${lines.map((l) => `    ${l}`).join("\n")}\n`
        )
      }
    }))
  })

const main = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* PgRunStore.make({ schema, storage: "rows" })
  const ledger = yield* PgRunStore.make({ schema, storage: "ledger", migrate: false })
  const [existing] = yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".runs`)
  if (existing!.n < total) {
    log(`filling ${schema}: ${total / 2} runs in rows, ${total / 2} in the ledger, ${failedRuns} failed`)
    yield* fill(rows, total / 2, "rows")
    yield* fill(ledger, total / 2, "ledger")
    yield* failSome(rows, failedRuns)
    log(`spreading finish times over ${hours} h`)
    yield* spread
  }
  const [sizes] = yield* sql.unsafe<Record<string, string>>(`SELECT
    (SELECT count(*) FROM "${schema}".runs)::text AS runs,
    (SELECT count(*) FROM "${schema}".runs WHERE state = 'completed')::text AS row_completed,
    (SELECT count(*) FROM "${schema}".runs WHERE state = 'ledger')::text AS ledger_runs,
    (SELECT count(*) FROM "${schema}".runs WHERE state = 'failed')::text AS failed,
    (SELECT count(*) FROM "${schema}".completion_batches)::text AS completion_batches,
    (SELECT count(*) FROM "${schema}".claim_batches)::text AS claim_batches,
    pg_size_pretty(pg_total_relation_size('"${schema}".runs')) AS runs_size,
    version() AS server`)
  process.stdout.write(`# Console reads on ${schema}\n\n${JSON.stringify(sizes, null, 2)}\n`)
  const store = ledger
  const [newest] = yield* sql.unsafe<{ id: string }>(`SELECT max(id)::text AS id FROM "${schema}".runs`)
  const deep = String(BigInt(newest!.id) - BigInt(Math.floor(total * 0.9)))
  const list = (filter: Omit<ListFilter, "limit">) => store.list({ limit: 50, ...filter })
  const reads: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>]> = [
    ["throughput, 60 minutes (the overview's charts)", store.throughput({ minutes: 60 })],
    ["throughput, 5 minutes (the queues page)", store.throughput({ minutes: 5 })],
    ["throughput, 1440 minutes (the most /api/throughput allows)", store.throughput({ minutes: 1440 })],
    ["stats (the overview's and queues page's counts)", store.stats],
    ["sample (the live runs, from indexes)", store.sample],
    ["list: all runs, newest first", list({})],
    ["list: completed, newest first", list({ state: "completed" })],
    ["list: completed, a page 90% deep (before cursor)", list({ state: "completed", before: deep })],
    ["list: failed", list({ state: "failed" })],
    ["list: failed, error text", list({ state: "failed", errorText: "declined for 1" })],
    ["list: error text, any state", list({ errorText: "declined for 1" })],
    ["list: kind and queue", list({ kind: "task-3", queue: "billing" })],
    ["list: payload field", list({ payload: [{ path: ["customer"], value: "C-42" }] })],
    [
      "list: two payload fields",
      list({ payload: [{ path: ["customer"], value: "C-42" }, { path: ["order"], value: "O-rows-42" }] })
    ],
    ["list: run id", list({ ids: [deep] })],
    [
      "list: created in an hour's range",
      list({ createdFrom: new Date(Date.now() - 3 * 3600_000), createdTo: new Date(Date.now() - 2 * 3600_000) })
    ]
  ]
  for (const [name, read] of reads) yield* explain(name, read)
  if (!keep) yield* sql.unsafe(`DROP SCHEMA "${schema}" CASCADE`)
})

main.pipe(
  Effect.scoped,
  Effect.provide(Layer.orDie(Database.layerFromUrl(url, { maxConnections: 4 }))),
  Effect.runPromise
).catch((error) => {
  process.stderr.write(`consoleActivity: ${error}\n`)
  process.exitCode = 1
})
