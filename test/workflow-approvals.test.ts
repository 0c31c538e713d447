/**
 * A workflow awaiting a deferred meant for a person (named `person/...`) against the real engine,
 * store and admin server: the run page names the deferred, the approvals list carries it, and
 * Approve completes that deferred (the workflow finishes with the decision); a workflow awaiting
 * another deferred is refused as an approval, with nothing written. In the console (Debian's
 * chromium): only the first is in the approvals inbox, and approving it there finishes it.
 */
import { assert, describe, it } from "@effect/vitest"
import { RunStore } from "@leasehold/core"
import { Callbacks, Handlers, Server } from "@leasehold/http"
import { Database, PgRunStore, WorkflowJournal } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Effect, Layer, Redacted, Schema } from "effect"
import { HttpServer } from "effect/http"
import { SqlClient } from "effect/sql"
import { Activity, DurableDeferred, Workflow } from "effect/workflow"
import { execFileSync } from "node:child_process"
import { chromium } from "playwright-core"
import { databaseUrl, freshSchema } from "./support/db.js"
import { callbacksOptions, postJson, request } from "./support/http.js"
import { eventually } from "./support/workers.js"

const Decision = Schema.Struct({ approved: Schema.Boolean, note: Schema.String })
const ApprovePayout = DurableDeferred.make("person/approve-payout", { success: Decision })
const Settled = DurableDeferred.make("bank-settled", { success: Schema.String })

const Payout = Workflow.make("Payout", {
  payload: { order: Schema.String },
  success: Schema.Struct({ order: Schema.String, approved: Schema.Boolean, note: Schema.String }),
  idempotencyKey: ({ order }) => order
})
// A payout that quotes first (an activity, journalled under its holder's fence), then asks a person.
const Quote = Activity.make({ name: "quote", success: Schema.Number, execute: Effect.succeed(42) })
const PayoutLayer = Payout.toLayer(Effect.fnUntraced(function*({ order }) {
  yield* Quote
  const decision = yield* DurableDeferred.await(ApprovePayout)
  return { order, ...decision }
}))

const Settlement = Workflow.make("Settlement", {
  payload: { order: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ order }) => order
})
const SettlementLayer = Settlement.toLayer(Effect.fnUntraced(function*() {
  return yield* DurableDeferred.await(Settled)
}))

// A refund whose person's decision has a number: the console's form is built from this schema.
const RefundDecision = Schema.Struct({
  approved: Schema.Boolean,
  amount: Schema.Number,
  note: Schema.optional(Schema.String)
})
const ApproveRefund = DurableDeferred.make("person/approve-refund", { success: RefundDecision })
const Refund = Workflow.make("Refund", {
  payload: { order: Schema.String },
  success: Schema.Struct({ order: Schema.String, decision: RefundDecision }),
  idempotencyKey: ({ order }) => order
})
const RefundLayer = Refund.toLayer(Effect.fnUntraced(function*({ order }) {
  const decision = yield* DurableDeferred.await(ApproveRefund)
  return { order, decision }
}))

// A batch of refunds: each order a child workflow (Refund) awaiting a person; the batch waits for them.
const RefundBatch = Workflow.make("RefundBatch", {
  payload: { orders: Schema.Array(Schema.String) },
  success: Schema.Number,
  idempotencyKey: ({ orders }) => orders.join("+")
})
const RefundBatchLayer = RefundBatch.toLayer(Effect.fnUntraced(function*({ orders }) {
  const done = yield* Effect.forEach(orders, (order) => Refund.execute({ order }), { concurrency: "unbounded" })
  return done.length
}))

const token = "admin-token-for-tests-0123456789"
const bearer = { authorization: `Bearer ${token}` }

const setUp = Effect.gen(function*() {
  const schema = freshSchema("wfappr")
  const context = yield* Layer.build(
    Layer.mergeAll(PayoutLayer, SettlementLayer, RefundLayer, RefundBatchLayer).pipe(
      Layer.provideMerge(LeaseholdWorkflows.layer({ schema })),
      Layer.provideMerge(WorkflowJournal.layer({ schema })),
      Layer.provideMerge(PgRunStore.layer({ schema })),
      Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 6 }))
    )
  )
  yield* LeaseholdWorkflows.worker({
    owner: "w",
    ttl: "2 seconds",
    heartbeat: "300 millis",
    pollInterval: "50 millis",
    shutdownGrace: "300 millis"
  })
    .pipe(Effect.provideContext(context), Effect.forkScoped)
  const journal = Context.get(context, WorkflowJournal.WorkflowJournal)
  const server = yield* Layer.build(
    Server.layer({
      host: "127.0.0.1",
      port: 0,
      token: Redacted.make(token),
      workflows: {
        awaiting: journal.awaiting,
        journal: journal.journal,
        decide: (execution, deferred, value) =>
          journal.deferredDone(execution, deferred, WorkflowJournal.succeeded(value)),
        deferreds: [ApproveRefund]
      }
    }).pipe(Layer.provide(Layer.mergeAll(
      Callbacks.layer(callbacksOptions({})),
      Handlers.layer([]),
      Layer.succeed(RunStore, Context.get(context, RunStore))
    )))
  )
  const address = Context.get(server, HttpServer.HttpServer).address
  if (address._tag === "UnixPathAddress") throw new Error("expected a TCP address")
  return { schema, context, sql: Context.get(context, SqlClient.SqlClient), origin: `http://127.0.0.1:${address.port}` }
})

const suspendedRun = (sql: SqlClient.SqlClient, schema: string, key: string) =>
  eventually(
    "the workflow's run suspends",
    Effect.map(
      sql.unsafe<{ id: string; state: string }>(
        `SELECT id::text AS id, state FROM "${schema}".runs_now WHERE idempotency_key = $1`,
        [key]
      ),
      (rows) => rows[0]?.state === "suspended" ? rows[0].id : undefined
    ),
    "20 seconds"
  )

describe("workflow approvals", () => {
  it.live("a workflow awaiting a person/ deferred is an approval: its page names the deferred, and Approve completes it (the workflow finishes with the decision)", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const executionId = yield* Payout.execute({ order: "P-1" }, { discard: true }).pipe(
        Effect.provideContext(context)
      )
      const key = LeaseholdWorkflows.executionKey("Payout", executionId)
      const id = yield* suspendedRun(sql, schema, key)

      const page = yield* request(`${origin}/api/runs/${id}`, { headers: bearer })
      assert.deepStrictEqual(page.body.run.workflow, {
        execution: key,
        awaiting: [{ name: "person/approve-payout", forPerson: true, wakeAt: null }],
        // A workflow still waiting has no outcome yet.
        outcome: null
      })
      const inbox = yield* request(`${origin}/api/runs?state=suspended`, { headers: bearer })
      assert.deepStrictEqual(
        inbox.body.runs.find((r: { id: string }) => r.id === id).workflow.awaiting.map((a: { name: string }) => a.name),
        [
          "person/approve-payout"
        ]
      )

      const approved = yield* postJson(`${origin}/api/runs/${id}/resume`, {
        payload: { approved: true, note: "looks right" }
      }, bearer)
      assert.strictEqual(approved.status, 200, JSON.stringify(approved.body))
      assert.deepStrictEqual(approved.body, { id, deferred: "person/approve-payout" })
      const result = yield* Payout.execute({ order: "P-1" }).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(result, { order: "P-1", approved: true, note: "looks right" })
    }))

  it.live("a workflow awaiting a deferred that is not for a person is named on its page and refused as an approval (409, nothing written)", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const executionId = yield* Settlement.execute({ order: "S-1" }, { discard: true }).pipe(
        Effect.provideContext(context)
      )
      const key = LeaseholdWorkflows.executionKey("Settlement", executionId)
      const id = yield* suspendedRun(sql, schema, key)
      const page = yield* request(`${origin}/api/runs/${id}`, { headers: bearer })
      assert.deepStrictEqual(page.body.run.workflow.awaiting, [{
        name: "bank-settled",
        forPerson: false,
        wakeAt: null
      }])
      const deferreds = () => sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".workflow_deferreds`)
      const refused = yield* postJson(`${origin}/api/runs/${id}/resume`, { payload: { approved: true } }, bearer)
      assert.strictEqual(refused.status, 409)
      assert.strictEqual(refused.body.error, "workflow-run")
      assert.strictEqual((yield* deferreds())[0]!.n, 0, "no deferred completed")
      const run = yield* sql.unsafe<{ state: string }>(
        `SELECT state FROM "${schema}".runs_now WHERE id = ${Number(id)}`
      )
      assert.strictEqual(run[0]!.state, "suspended")
    }))

  it.live("in the console (chromium): the approvals inbox offers the workflow awaiting a person, not the other; Approve there finishes the workflow", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const payout = yield* Payout.execute({ order: "P-2" }, { discard: true }).pipe(Effect.provideContext(context))
      const settlement = yield* Settlement.execute({ order: "S-2" }, { discard: true }).pipe(
        Effect.provideContext(context)
      )
      const payoutRun = yield* suspendedRun(sql, schema, LeaseholdWorkflows.executionKey("Payout", payout))
      const settlementRun = yield* suspendedRun(sql, schema, LeaseholdWorkflows.executionKey("Settlement", settlement))
      const executablePath = process.env.CHROMIUM_PATH ||
        execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim()
      const browser = yield* Effect.acquireRelease(
        Effect.promise(() =>
          chromium.launch({ executablePath, args: ["--headless", "--no-sandbox", "--disable-gpu"] })
        ),
        (b) => Effect.promise(() => b.close())
      )
      yield* Effect.promise(async () => {
        const page = await browser.newPage({ httpCredentials: { username: "admin", password: token } })
        // The payout's page shows its journal: the quote activity with its fence and result, the person's deferred awaited.
        await page.goto(`${origin}/#/runs/${payoutRun}`)
        const journal = page.locator("section[aria-labelledby=journal] tbody tr")
        await journal.first().waitFor({ timeout: 10_000 })
        const entries = await journal.evaluateAll((rows) =>
          rows.map((r) => [...r.querySelectorAll("td")].slice(1).map((td) => td.textContent?.trim()))
        )
        assert.deepStrictEqual(entries, [
          ["activity", "quote", "1", "1", "succeeded", "42"],
          ["deferred", "person/approve-payout", "", "", "awaited", ""]
        ])
        if (process.env.UPDATE_SCREENSHOTS === "1") {
          await page.screenshot({
            path: new URL("../docs/console-workflow.png", import.meta.url).pathname,
            fullPage: true
          })
        }
        await page.goto(`${origin}/#/approvals`)
        const card = page.locator(`article.approval[data-run-id="${payoutRun}"]`)
        await card.waitFor({ timeout: 10_000 })
        assert.include(await card.textContent(), `deferred "person/approve-payout" (for a person)`)
        assert.strictEqual(
          await page.locator(`article.approval[data-run-id="${settlementRun}"]`).count(),
          0,
          "not an approval"
        )
        await card.getByLabel("Note (optional)").fill("paid")
        await card.getByRole("button", { name: "Approve" }).click()
        await card.getByText("Approved: the run is resuming.").waitFor({ timeout: 10_000 })
        await page.goto(`${origin}/#/runs/${settlementRun}`)
        await page.getByText(`deferred "bank-settled"`).waitFor({ timeout: 10_000 })
        assert.strictEqual(
          await page.getByRole("button", { name: "Approve" }).count(),
          0,
          "no decision offered on its page"
        )
      })
      const result = yield* Payout.execute({ order: "P-2" }).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(result, { order: "P-2", approved: true, note: "paid" })
    }))

  it.live("a decision that does not decode with the deferred's schema is refused (400, nothing written); the schema is the run's signalSchema", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const executionId = yield* Refund.execute({ order: "R-1" }, { discard: true }).pipe(
        Effect.provideContext(context)
      )
      const id = yield* suspendedRun(sql, schema, LeaseholdWorkflows.executionKey("Refund", executionId))
      const page = yield* request(`${origin}/api/runs/${id}`, { headers: bearer })
      const properties = page.body.run.signalSchema.schema.properties
      assert.deepStrictEqual(Object.keys(properties), ["approved", "amount", "note"])
      const refused = yield* postJson(
        `${origin}/api/runs/${id}/resume`,
        { payload: { approved: true, amount: "12" } },
        bearer
      )
      assert.strictEqual(refused.status, 400, JSON.stringify(refused.body))
      assert.strictEqual(refused.body.error, "invalid-payload")
      assert.include(refused.body.message, "amount")
      const deferreds = yield* sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".workflow_deferreds`
      )
      assert.strictEqual(deferreds[0]!.n, 0, "no deferred completed")
      // A workflow without the schema given keeps the default form's { approved, note }.
      const payout = yield* Payout.execute({ order: "P-3" }, { discard: true }).pipe(Effect.provideContext(context))
      const payoutRun = yield* suspendedRun(sql, schema, LeaseholdWorkflows.executionKey("Payout", payout))
      const payoutPage = yield* request(`${origin}/api/runs/${payoutRun}`, { headers: bearer })
      assert.strictEqual(payoutPage.body.run.signalSchema, undefined)
    }))

  it.live("in the console (chromium): a workflow's approval form is built from its deferred's schema; a non-number amount is refused in the page, a number reaches the workflow as a number", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const executionId = yield* Refund.execute({ order: "R-2" }, { discard: true }).pipe(
        Effect.provideContext(context)
      )
      const runId = yield* suspendedRun(sql, schema, LeaseholdWorkflows.executionKey("Refund", executionId))
      const executablePath = process.env.CHROMIUM_PATH ||
        execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim()
      const browser = yield* Effect.acquireRelease(
        Effect.promise(() =>
          chromium.launch({ executablePath, args: ["--headless", "--no-sandbox", "--disable-gpu"] })
        ),
        (b) => Effect.promise(() => b.close())
      )
      const posted: Array<string> = []
      yield* Effect.promise(async () => {
        const page = await browser.newPage({ httpCredentials: { username: "admin", password: token } })
        page.on("request", (r) => {
          if (r.method() === "POST") posted.push(r.postData() ?? "")
        })
        await page.goto(`${origin}/#/approvals`)
        const card = page.locator(`article.approval[data-run-id="${runId}"]`)
        await card.waitFor({ timeout: 10_000 })
        const amount = card.getByLabel("Amount", { exact: true })
        assert.strictEqual(await amount.getAttribute("type"), "number")
        assert.strictEqual(await card.getByLabel("Note (optional)").count(), 1, "the schema's optional note")
        // Text that is not a number: the browser keeps it as bad input, the form says why and sends nothing.
        await amount.focus()
        await page.keyboard.type("1e")
        await card.getByRole("button", { name: "Approve" }).click()
        await card.getByText("Amount must be a number").waitFor({ timeout: 5_000 })
        assert.strictEqual(await amount.getAttribute("aria-invalid"), "true")
        assert.deepStrictEqual(posted, [], "nothing sent")
        await amount.fill("12.5")
        await card.getByRole("button", { name: "Approve" }).click()
        await card.getByText("Approved: the run is resuming.").waitFor({ timeout: 10_000 })
      })
      assert.deepStrictEqual(posted.map((p) => JSON.parse(p)), [{ payload: { approved: true, amount: 12.5 } }])
      const result = yield* Refund.execute({ order: "R-2" }).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(result, { order: "R-2", decision: { approved: true, amount: 12.5 } })
      assert.strictEqual(typeof result.decision.amount, "number")
    }))

  it.live("a workflow's run page lists its child workflows, each linked to its own run page (API and chromium)", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const batch = yield* RefundBatch.execute({ orders: ["C-1", "C-2"] }, { discard: true }).pipe(
        Effect.provideContext(context)
      )
      const batchKey = LeaseholdWorkflows.executionKey("RefundBatch", batch)
      const childRuns = yield* eventually(
        "both children suspend",
        Effect.map(
          sql.unsafe<{ id: string; key: string }>(
            `SELECT id::text AS id, idempotency_key AS key FROM "${schema}".runs WHERE kind = 'workflow/Refund' AND state = 'suspended' ORDER BY id`
          ),
          (rows) => rows.length === 2 ? rows : undefined
        ),
        "20 seconds"
      )
      const batchRun = yield* suspendedRun(sql, schema, batchKey)
      // Another workflow's child is not this one's.
      const other = yield* Refund.execute({ order: "C-9" }, { discard: true }).pipe(Effect.provideContext(context))
      yield* suspendedRun(sql, schema, LeaseholdWorkflows.executionKey("Refund", other))
      const page = yield* request(`${origin}/api/runs/${batchRun}`, { headers: bearer })
      assert.deepStrictEqual(
        page.body.children.map((
          c: { id: string; kind: string; state: string; execution: string }
        ) => [c.id, c.kind, c.state, c.execution]),
        childRuns.map((c) => [c.id, "workflow/Refund", "suspended", c.key])
      )
      const childPage = yield* request(`${origin}/api/runs/${childRuns[0]!.id}`, { headers: bearer })
      assert.deepStrictEqual(childPage.body.children, [], "a child without children of its own")
      const executablePath = process.env.CHROMIUM_PATH ||
        execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim()
      const browser = yield* Effect.acquireRelease(
        Effect.promise(() =>
          chromium.launch({ executablePath, args: ["--headless", "--no-sandbox", "--disable-gpu"] })
        ),
        (b) => Effect.promise(() => b.close())
      )
      yield* Effect.promise(async () => {
        const page = await browser.newPage({ httpCredentials: { username: "admin", password: token } })
        await page.goto(`${origin}/#/runs/${batchRun}`)
        const rows = page.locator("section[aria-labelledby=children] tbody tr")
        await rows.first().waitFor({ timeout: 10_000 })
        const shown = await rows.evaluateAll((trs) =>
          trs.map((tr) => [...tr.querySelectorAll("td")].slice(0, 4).map((td) => td.textContent?.trim()))
        )
        assert.deepStrictEqual(shown.map((r) => r.slice(1)), childRuns.map((c) => ["Refund", c.key, "suspended"]))
        // Its link opens the child's page, by keyboard.
        const link = rows.first().getByRole("link")
        await link.focus()
        await page.keyboard.press("Enter")
        await page.waitForURL(`**/#/runs/${childRuns[0]!.id}`)
        await page.locator("h1", { hasText: "Run" }).waitFor()
        await page.locator("section[aria-labelledby=children]").getByText("No child workflow.").waitFor({
          timeout: 10_000
        })
      })
    }))
})
