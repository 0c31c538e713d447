/**
 * An agent that refunds an order, but only after a person approves.
 *
 * The handler calls a tool (here a local function standing in for an order-system API), records
 * what it proposes as a checkpoint, and suspends until someone approves: while it waits it holds
 * no lease and no worker slot. The approval resumes it under a new, higher fence; it then writes
 * the refund in its own table and completes the run in one fenced transaction, so the refund lands
 * exactly once even if an older holder of the run wakes up and tries again.
 *
 * Run it: `node examples/agent.ts` (Node 24 runs the TypeScript as is). It uses `DATABASE_URL`, or
 * starts an embedded PostgreSQL in a temporary folder. In a real deployment the worker is its own
 * process and the approval comes from your app, or from `leasehold resume refund-A-1001 --payload
 * '{"approved":true}'`.
 */
import {
  Client,
  CurrentRun,
  Fence,
  type FenceRejected,
  Handler,
  Run,
  type RunRecord,
  RunStore,
  Worker
} from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Effect, Fiber, Layer, Option, Schema } from "effect"
import { SqlClient, type SqlError } from "effect/sql"

// --- The tool -------------------------------------------------------------------------------

/** What the order system knows about an order. */
export interface Order {
  readonly order: string
  readonly customer: string
  readonly totalCents: number
}

let toolCalls = 0
/** How many times the tool was called in this process (the checkpoint saves repeat calls). */
export const toolCallCount = (): number => toolCalls

/** The agent's tool: look an order up. Expensive or rate-limited in real life, so its result is checkpointed. */
export const lookUpOrder = (order: string): Effect.Effect<Order> =>
  Effect.sync(() => {
    toolCalls++
    return { order, customer: "ana@example.com", totalCents: 4200 }
  })

// --- The application's own table ------------------------------------------------------------

const Proposal = Schema.Struct({ order: Schema.String, customer: Schema.String, amountCents: Schema.Number })
export type Proposal = typeof Proposal.Type

/** The refunds this application has issued: its own table, written inside the run's transaction. */
export class Refunds extends Context.Service<Refunds, {
  readonly issue: (
    proposal: Proposal,
    by: { readonly runId: string; readonly fence: number }
  ) => Effect.Effect<void, SqlError.SqlError>
  readonly forOrder: (
    order: string
  ) => Effect.Effect<ReadonlyArray<{ readonly run_id: string; readonly fence: number }>, SqlError.SqlError>
}>()("examples/agent/Refunds") {}

/** Creates the refunds table (in `schema`) and provides `Refunds` over the app's SqlClient. */
export const refundsLayer = (schema: string) =>
  Layer.effect(
    Refunds,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = sql.literal(`"${schema}".refunds`)
      // Serialized, so two processes starting at once do not race to create the table.
      yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`refunds:${schema}`}))`
        // No unique key on order_id on purpose: only the fence keeps a second refund out.
        yield* sql`CREATE TABLE IF NOT EXISTS ${table} (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
          order_id text NOT NULL,
          customer text NOT NULL,
          amount_cents integer NOT NULL,
          run_id bigint NOT NULL,
          fence bigint NOT NULL,
          issued_at timestamptz NOT NULL DEFAULT now()
        )`
      }))
      return Refunds.of({
        issue: (proposal, by) =>
          Effect.asVoid(sql`
            INSERT INTO ${table} (order_id, customer, amount_cents, run_id, fence)
            VALUES (${proposal.order}, ${proposal.customer}, ${proposal.amountCents}, ${by.runId}::bigint, ${by.fence})`),
        forOrder: (order) =>
          sql<{ run_id: string; fence: number }>`
            SELECT run_id::text AS run_id, fence::int AS fence FROM ${table} WHERE order_id = ${order} ORDER BY id`
      })
    })
  )

// --- The handler ----------------------------------------------------------------------------

/** What a person decides. */
const Decision = Schema.Struct({ approved: Schema.Boolean, by: Schema.optional(Schema.String) })

/** What the agent remembers between attempts. */
const Proposed = Schema.Struct({ step: Schema.Literal("proposed"), proposal: Proposal })

export const RefundRequest = Schema.Struct({ order: Schema.String, reason: Schema.String })

/** The token a person approves the refund of `order` with. */
export const approvalToken = (order: string): string => `refund-${order}`

export const refundAgent = Handler.make({
  kind: "refund-agent",
  payload: RefundRequest,
  // A decision that does not decode is refused where it is delivered (HTTP 400, CLI exit 2).
  signals: { approval: Decision },
  handle: (request, signals) =>
    Effect.gen(function*() {
      const run = yield* CurrentRun
      // After the resume the handler starts over: the checkpoint spares it a second tool call.
      const remembered = Schema.decodeUnknownOption(Proposed)(run.checkpoint)
      const proposal: Proposal = Option.isSome(remembered)
        ? remembered.value.proposal
        : yield* Effect.map(lookUpOrder(request.order), (o) => ({
          order: o.order,
          customer: o.customer,
          amountCents: o.totalCents
        }))
      if (Option.isNone(remembered)) yield* Run.checkpoint({ step: "proposed", proposal })

      // The first time, this suspends the run (lease released, worker slot freed) and the
      // handler stops here. Resumed, it returns the person's answer at once.
      // Only a declared signal is accepted, and its outcome comes decoded (a Decision).
      const outcome = yield* signals.await("approval", { token: approvalToken(request.order), timeout: "1 day" })
      if (outcome._tag === "TimedOut" || !outcome.payload.approved) {
        return {
          order: request.order,
          refunded: false,
          why: outcome._tag === "TimedOut" ? "no answer in time" : "declined"
        }
      }

      // Acting: the refund row and the run's completion commit together, under this claim's fence.
      const fence = yield* Fence
      return yield* Run.transaction(Effect.gen(function*() {
        const refunds = yield* Refunds
        yield* refunds.issue(proposal, { runId: fence.runId, fence: fence.fence })
        return {
          order: request.order,
          refunded: true,
          amountCents: proposal.amountCents,
          approvedBy: outcome.payload.by ?? null
        }
      }))
    }).pipe(
      // Superseded: another claim of this run has a higher fence. Nothing this holder wrote under
      // the old fence landed; stop without retrying, the current holder carries on.
      Effect.catchTag("FenceRejected", (e: FenceRejected) =>
        Effect.andThen(
          Effect.logWarning(`run ${e.runId}: superseded (fence ${e.presentedFence} < ${e.storedFence}), stopping`),
          Effect.interrupt
        ))
    )
})

// --- Layers and programs --------------------------------------------------------------------

export interface AgentOptions {
  /** PostgreSQL URL. */
  readonly url: string
  /** Postgres schema for Leasehold's tables and the refunds table. */
  readonly schema: string
}

/**
 * Everything the program needs, as layers: the store (migrated on build) over a PgClient, and the
 * refunds table over the same client, so `Run.transaction` covers both.
 */
export const appLayer = (options: AgentOptions) =>
  refundsLayer(options.schema).pipe(
    Layer.provideMerge(PgRunStore.layer({ schema: options.schema })),
    Layer.provideMerge(Database.layer({ url: options.url }))
  )

/** The worker, serving refund agents until interrupted (then it shuts down gracefully). */
export const worker = Worker.run({
  handlers: [refundAgent],
  concurrency: 4,
  ttl: "10 seconds",
  pollInterval: "200 millis"
})

const waitUntil = (runId: string, done: (run: RunRecord) => boolean) =>
  RunStore.use((store) =>
    Effect.gen(function*() {
      while (true) {
        const run = yield* store.get(runId)
        if (done(run) || run.state === "failed" || run.state === "cancelled") return run
        yield* Effect.sleep("100 millis")
      }
    })
  ).pipe(Effect.timeout("30 seconds"))

/** The application's side: ask for a refund, show the proposal to a person, pass on the approval. */
export const requestAndApprove = (order: string, say: (line: string) => void) =>
  Effect.gen(function*() {
    const { id } = yield* Client.enqueue(refundAgent, { order, reason: "arrived broken" }, {
      idempotencyKey: `refund-request-${order}`
    })
    say(`enqueued refund agent run ${id} for order ${order}`)
    const waiting = yield* waitUntil(id, (run) => run.state === "suspended")
    const asked = Option.match(Schema.decodeUnknownOption(Proposed)(waiting.checkpoint), {
      onNone: () => "(no proposal recorded)",
      onSome: ({ proposal }) => `refund ${(proposal.amountCents / 100).toFixed(2)} to ${proposal.customer}?`
    })
    say(
      `run ${id} is ${waiting.state} (lease owner: ${
        waiting.leaseOwner ?? "none"
      }, fence ${waiting.fence}); asking a person: ${asked}`
    )
    yield* Client.resumeByToken(approvalToken(order), { approved: true, by: "sam@example.com" })
    say("approved by sam@example.com")
    const finished = yield* waitUntil(id, (run) => run.state === "completed")
    say(`run ${id} is ${finished.state} under fence ${finished.fence}: ${JSON.stringify(finished.result)}`)
    const refunds = yield* Refunds.use((r) => r.forOrder(order))
    say(`refunds issued for order ${order}: ${refunds.length}`)
    return { run: finished, refunds }
  })

/**
 * The whole story in one process: the worker runs in the background (`Effect.runFork`), and the
 * application requests and approves a refund over its own connections, as a separate process
 * would; then the worker is interrupted and shuts down.
 */
export const main = async (
  options: AgentOptions & { readonly order?: string | undefined; readonly say?: ((line: string) => void) | undefined }
) => {
  const say = options.say ?? ((line: string) => console.log(line))
  const running = Effect.runFork(worker.pipe(Effect.provide(appLayer(options))))
  try {
    return await Effect.runPromise(
      requestAndApprove(options.order ?? "A-1001", say).pipe(Effect.provide(appLayer(options)))
    )
  } finally {
    await Effect.runPromise(Fiber.interrupt(running))
  }
}

if (import.meta.main) {
  const configured = process.env.DATABASE_URL
  const embedded = configured ? undefined : await EmbeddedPostgres.startUnscoped()
  try {
    await main({ url: configured || embedded!.url, schema: "agent_example", order: `A-${Date.now().toString(36)}` })
  } catch (error) {
    console.error(`agent example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  } finally {
    await embedded?.stop()
  }
}
