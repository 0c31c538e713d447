/**
 * A refund as an Effect workflow (`effect/workflow`) on Leasehold, approved by a person through a
 * signed callback URL.
 *
 * The workflow looks the order up (an activity: recorded, never repeated), asks for approval (an
 * activity that mints a signed URL for the `Approval` deferred and "emails" it, here to an outbox
 * table), and waits. While it waits its run is suspended: no lease, no heartbeat, no worker slot.
 * POSTing `{"approvedBy": "..."}` to the URL completes the deferred and resumes the run under a
 * higher fence; the replay reads the recorded activities back and pays the refund in an activity
 * whose SQL write and recorded result commit in one fenced transaction.
 *
 * Run it: `npx node examples/approval-workflow.ts` (the project's Node 24 runs the TypeScript as
 * is). It uses `DATABASE_URL`, or starts an embedded PostgreSQL in a temporary folder, serves the
 * callback route on a loopback port and approves the refund itself, as a person clicking the link
 * would.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Callbacks, DeferredCallbacks, Server } from "@leasehold/http"
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Effect, Layer, Redacted, Schema } from "effect"
import { ClusterSchema } from "effect/cluster"
import { HttpRouter, HttpServer } from "effect/http"
import { SqlClient } from "effect/sql"
import { Activity, DurableDeferred, Workflow } from "effect/workflow"
import { createServer } from "node:http"

// --- The workflow ----------------------------------------------------------------------------

export const Approval = DurableDeferred.make("approval", { success: Schema.Struct({ approvedBy: Schema.String }) })

export const Refund = Workflow.make("Refund", {
  payload: { order: Schema.String },
  success: Schema.Struct({ order: Schema.String, amountCents: Schema.Number, approvedBy: Schema.String }),
  idempotencyKey: ({ order }) => order
})

/** Where the example keeps its own tables (the outbox and the refunds). */
export class ExampleSchema
  extends Context.Service<ExampleSchema, string>()("examples/approval-workflow/ExampleSchema")
{}

let lookups = 0
/** How many times the order system was asked, in this process. */
export const lookupCount = (): number => lookups

export const RefundLayer = Refund.toLayer(Effect.fnUntraced(function*({ order }, executionId) {
  const sql = yield* SqlClient.SqlClient
  const schema = yield* ExampleSchema
  const amountCents = yield* Activity.make({
    name: "look up the order",
    success: Schema.Number,
    execute: Effect.sync(() => {
      lookups++
      return 4200
    })
  })
  yield* Activity.make({
    name: "ask for approval",
    execute: Effect.gen(function*() {
      const link = yield* DeferredCallbacks.url(Approval, { expiresIn: "7 days" })
      yield* sql`INSERT INTO ${sql(schema)}.outbox (execution, link) VALUES (${executionId}, ${link})`
    }).pipe(Effect.orDie)
  }).annotate(ClusterSchema.WithTransaction, true)
  const { approvedBy } = yield* DurableDeferred.await(Approval)
  yield* Activity.make({
    name: "pay the refund",
    execute: Effect.gen(function*() {
      const fence = yield* LeaseholdWorkflows.currentFence
      yield* sql`INSERT INTO ${sql(schema)}.refunds (execution, amount_cents, approved_by, fence)
        VALUES (${executionId}, ${amountCents}, ${approvedBy}, ${fence.fence})`
    }).pipe(Effect.orDie)
  }).annotate(ClusterSchema.WithTransaction, true)
  return { order, amountCents, approvedBy }
}))

// --- The application -------------------------------------------------------------------------

export interface ExampleOptions {
  readonly url: string
  readonly schema: string
  /** The callback signing secret (at least 32 characters); a random one by default. */
  readonly secret?: string | undefined
}

const tables = Layer.effectDiscard(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const schema = yield* ExampleSchema
  yield* sql`CREATE TABLE IF NOT EXISTS ${sql(schema)}.outbox (execution text PRIMARY KEY, link text NOT NULL)`
  yield* sql`CREATE TABLE IF NOT EXISTS ${sql(schema)}.refunds (
    execution text PRIMARY KEY, amount_cents integer NOT NULL, approved_by text NOT NULL, fence bigint NOT NULL)`
}))

/**
 * The store, the engine serving the workflow with a worker of its own, and an HTTP server on a
 * loopback port for the callback route. The signing secret is generated here; a deployment takes
 * it from `LEASEHOLD_CALLBACK_SECRETS` (`Callbacks.layerConfig`).
 */
export const appLayer = (options: ExampleOptions) => {
  const client = Database.layerFromUrl(options.url, { maxConnections: 6 })
  const engine = LeaseholdWorkflows.layer({ serve: { ttl: "10 seconds", pollInterval: "200 millis" } }).pipe(
    Layer.provideMerge(PgRunStore.layer({ schema: options.schema }))
  )
  const callbacks = Callbacks.layer({
    baseUrl: "http://127.0.0.1",
    secrets: Redacted.make(options.secret ?? crypto.randomUUID() + crypto.randomUUID())
  })
  const http = HttpRouter.serve(DeferredCallbacks.layer({ deferreds: [Approval] }), {
    disableLogger: true,
    disableListenLog: true,
    // Workflow, execution and deferred names longer than Effect's default of 100 characters.
    routerConfig: Server.routerConfig
  }).pipe(
    Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" }))
  )
  return Layer.mergeAll(RefundLayer, http).pipe(
    Layer.provideMerge(tables),
    Layer.provideMerge(engine),
    Layer.provideMerge(callbacks),
    Layer.provideMerge(Layer.succeed(ExampleSchema, options.schema)),
    Layer.provideMerge(client)
  )
}

/** The link the workflow "emailed", once it has. */
const emailedLink = (executionId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* ExampleSchema
    while (true) {
      const rows = yield* sql<{ link: string }>`SELECT link FROM ${sql(schema)}.outbox WHERE execution = ${executionId}`
      if (rows.length > 0) return rows[0]!.link
      yield* Effect.sleep("50 millis")
    }
  })

/** Waits until the execution's run is suspended on the approval: holding no lease, no slot. */
const suspended = (executionId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* ExampleSchema
    const key = LeaseholdWorkflows.executionKey(Refund._tag, executionId)
    while (true) {
      const rows = yield* sql<{ state: string }>`SELECT state FROM ${sql(schema)}.runs WHERE idempotency_key = ${key}`
      if (rows[0]?.state === "suspended") return
      yield* Effect.sleep("50 millis")
    }
  })

/** Starts the refund, approves it through its link (on this server's port) and waits for the result. */
export const refundAndApprove = (order: string, say: (line: string) => void) =>
  Effect.gen(function*() {
    const executionId = yield* Refund.execute({ order }, { discard: true })
    say(`refund ${order}: execution ${executionId} started`)
    const link = new URL(yield* emailedLink(executionId))
    const address = (yield* HttpServer.HttpServer).address
    if (address._tag === "UnixPathAddress") return yield* Effect.die(new Error("expected a TCP server"))
    link.port = String(address.port)
    say(`refund ${order}: waiting for approval (link in the outbox)`)
    yield* suspended(executionId)
    const response = yield* Effect.promise(() =>
      fetch(link, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ approvedBy: "sam@example.com" })
      })
    )
    say(`refund ${order}: approval posted, HTTP ${response.status}`)
    const result = yield* Refund.execute({ order })
    say(`refund ${order}: ${result.amountCents} cents refunded, approved by ${result.approvedBy}`)
    return { executionId, result, link: link.toString() }
  })

export const main = (
  options: ExampleOptions & { readonly order: string; readonly say?: ((line: string) => void) | undefined }
) =>
  Effect.runPromise(
    refundAndApprove(options.order, options.say ?? ((line) => console.log(line))).pipe(
      Effect.provide(appLayer(options))
    )
  )

if (import.meta.main) {
  const configured = process.env.DATABASE_URL
  const embedded = configured ? undefined : await EmbeddedPostgres.startUnscoped()
  try {
    await main({ url: configured || embedded!.url, schema: "workflow_example", order: `A-${Date.now().toString(36)}` })
  } catch (error) {
    console.error(`approval workflow example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  } finally {
    await embedded?.stop()
  }
}
