/**
 * An Effect workflow (`effect/workflow`) on Leasehold, as the workflows guide shows it: a refund
 * that proposes, waits for an approval (a durable deferred), then pays in an activity whose SQL
 * write and recorded result commit in one fenced transaction.
 *
 * Run it from the clone's root: `node examples/workflow.ts`. It uses `DATABASE_URL`, or starts an
 * embedded PostgreSQL in a temporary folder. One process plays both parts: a worker engine serves
 * the workflow, and a client-only engine (which never claims a run) starts the execution, completes
 * its deferred and waits for the result. It exits 0 once the refund is paid once, under fence 2.
 */
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Effect, Layer, Schedule, Schema } from "effect"
import { ClusterSchema } from "effect/cluster"
import { SqlClient } from "effect/sql"
import { Activity, DurableDeferred, Workflow } from "effect/workflow"

const propose = (order: string) => Effect.log(`proposing a refund of ${order}`)
const pay = (order: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`INSERT INTO refund_payments (order_id) VALUES (${order})`).pipe(
    Effect.orDie
  )

const Approval = DurableDeferred.make("approval", { success: Schema.Struct({ approvedBy: Schema.String }) })
const Refund = Workflow.make("Refund", {
  payload: { order: Schema.String },
  success: Schema.Struct({ order: Schema.String, approvedBy: Schema.String }),
  idempotencyKey: ({ order }) => order
})
const RefundLayer = Refund.toLayer(Effect.fnUntraced(function*({ order }) {
  yield* Activity.make({ name: "propose", execute: propose(order) })
  const { approvedBy } = yield* DurableDeferred.await(Approval)
  // Its SQL writes and its recorded result commit in one transaction, under the run's fence.
  yield* Activity.make({ name: "pay", execute: pay(order) }).annotate(ClusterSchema.WithTransaction, true)
  return { order, approvedBy }
}))

// A process that starts, polls or signals executions uses the client-only engine: it never
// claims a run. Worker processes serve the workflows: `layerServe(workerOptions)`, or
// `LeaseholdWorkflows.worker(options)` beside your other handlers.
const client = RefundLayer.pipe(Layer.provideMerge(LeaseholdWorkflows.layerClient()))
const worker = RefundLayer.pipe(Layer.provideMerge(LeaseholdWorkflows.layerServe({ ttl: "30 seconds" })))
const store = PgRunStore.layer().pipe(Layer.provideMerge(Database.layer({ fallback: EmbeddedPostgres.url() })))

const paymentsTable = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`CREATE TABLE IF NOT EXISTS refund_payments (order_id text NOT NULL)`
)

/** Starts a refund, approves it, and reads what it paid; the worker engine serves it meanwhile. */
export const program = Effect.gen(function*() {
  const order = `A-${Date.now().toString(36)}`
  yield* paymentsTable
  yield* Layer.build(worker) // serves the workflow in this scope
  const executionId = yield* Refund.execute({ order }, { discard: true }).pipe(Effect.provide(client))
  yield* runState(executionId).pipe(
    Effect.repeat({ until: (r) => r?.state === "suspended", schedule: Schedule.spaced("100 millis") })
  )
  const token = DurableDeferred.tokenFromExecutionId(Approval, { workflow: Refund, executionId })
  yield* DurableDeferred.succeed(Approval, { token, value: { approvedBy: "sam@example.com" } }).pipe(
    Effect.provide(client)
  )
  const result = yield* Refund.execute({ order }).pipe(Effect.provide(client)) // the same execution: waits for it
  const run = yield* runState(executionId)
  const payments = yield* Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`SELECT 1 FROM refund_payments WHERE order_id = ${order}`
  )
  return { result, run: run!, payments: payments.length }
}).pipe(Effect.scoped)

/** The execution's run: suspended while it waits for the approval, completed once it has paid. */
const runState = (executionId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ state: string; fence: number }>`
      SELECT state, fence::int AS fence FROM leasehold.runs
      WHERE idempotency_key = ${LeaseholdWorkflows.executionKey(Refund._tag, executionId)}`).pipe(
      Effect.map((rows) => rows[0])
    )

if (import.meta.main) {
  Effect.runPromise(program.pipe(Effect.provide(store))).then(({ payments, result, run }) => {
    console.log(
      `refund ${result.order} approved by ${result.approvedBy}: run ${run.state} under fence ${run.fence}, ${payments} payment`
    )
    if (run.state !== "completed" || run.fence !== 2 || payments !== 1) process.exitCode = 1
  }, (error) => {
    console.error(`workflow example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
