/**
 * The README's program: a refund that waits for a person's approval, then writes its own row and
 * completes the run in one fenced transaction.
 *
 * Run it from the clone's root: `node examples/refund.ts` (the project's Node 24 runs the
 * TypeScript as is). It uses `DATABASE_URL`, or starts an embedded PostgreSQL in a temporary
 * folder. It enqueues a refund, waits until the handler has suspended (no lease, no worker slot),
 * approves it by its token, and exits 0 once the run has completed under fence 2 with one refund
 * row written.
 */
import { Client, type FenceRejected, Handler, Run, RunStore, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"

// A handler: a kind, the schema its payload must match, and the work.
export const refund = Handler.make({
  kind: "refund",
  payload: Schema.Struct({ order: Schema.String, amount: Schema.Number }),
  handle: ({ order, amount }) =>
    Effect.gen(function*() {
      yield* Run.checkpoint({ step: "drafted" }) // fenced write
      const decision = yield* Run.awaitSignal("approval", { // suspends: lease released
        token: `refund-${order}`,
        timeout: "1 day"
      })
      // The application's own rows and the run's completion commit together, under the fence.
      return yield* Run.transaction(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO refunds (order_id, amount) VALUES (${order}, ${amount})`
        return { order, decision }
      }))
    }).pipe(
      // A superseded holder is told so explicitly; nothing it wrote has landed.
      Effect.catchTag("FenceRejected", (e: FenceRejected) =>
        Effect.logWarning(`superseded: fence ${e.presentedFence} < ${e.storedFence}`))
    )
})

const StoreLive = PgRunStore.layer({ schema: "leasehold" }).pipe(
  Layer.provideMerge(Database.layer({ fallback: EmbeddedPostgres.url() })) // DATABASE_URL, else embedded PostgreSQL
)

// The worker claims refunds until it is interrupted; then it shuts down gracefully.
const worker = Worker.run({ handlers: [refund], concurrency: 20, ttl: "30 seconds" })

// The application's side: enqueue (the payload is checked against the schema), then resume with a
// person's decision, by the token the handler awaits (or by the run's id: `Client.resume`).
export const program = Effect.gen(function*() {
  const order = `A-${Date.now().toString(36)}`
  yield* refundsTable
  const running = yield* Effect.forkChild(worker)
  const { id } = yield* Client.enqueue(refund, { order, amount: 42 })
  yield* waitFor(id, "suspended") // the handler awaits approval, holding no lease and no slot
  yield* Client.resumeByToken(`refund-${order}`, { approved: true })
  const run = yield* waitFor(id, "completed") // re-claimed under fence 2
  yield* Fiber.interrupt(running)
  return { run, refunds: yield* refundsFor(order) }
})

const waitFor = (runId: string, state: string) =>
  RunStore.use((store) =>
    Effect.gen(function*() {
      while (true) {
        const run = yield* store.get(runId)
        if (run.state === state) return run
        if (run.state === "failed" || run.state === "cancelled") {
          return yield* Effect.die(new Error(`run ${runId} ${run.state}`))
        }
        yield* Effect.sleep("100 millis")
      }
    })
  ).pipe(Effect.timeout("30 seconds"))

const refundsTable = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`CREATE TABLE IF NOT EXISTS refunds (order_id text NOT NULL, amount numeric NOT NULL)`
)

const refundsFor = (order: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ amount: string }>`SELECT amount::text AS amount FROM refunds WHERE order_id = ${order}`
  )

if (import.meta.main) {
  Effect.runPromise(program.pipe(Effect.provide(StoreLive))).then(({ refunds, run }) => {
    console.log(`run ${run.id} ${run.state} under fence ${run.fence}, ${refunds.length} refund written`)
    if (run.fence !== 2 || refunds.length !== 1) process.exitCode = 1
  }, (error) => {
    console.error(`refund example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
