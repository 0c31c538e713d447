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
import { callbacksOptions, postJson, request } from "./support/http.js"
import { databaseUrl, freshSchema } from "./support/db.js"
import { eventually } from "./support/workers.js"
import { execFileSync } from "node:child_process"
import { chromium } from "playwright-core"

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

const token = "admin-token-for-tests-0123456789"
const bearer = { authorization: `Bearer ${token}` }

const setUp = Effect.gen(function*() {
  const schema = freshSchema("wfappr")
  const context = yield* Layer.build(
    Layer.mergeAll(PayoutLayer, SettlementLayer).pipe(
      Layer.provideMerge(LeaseholdWorkflows.layer({ schema })),
      Layer.provideMerge(WorkflowJournal.layer({ schema })),
      Layer.provideMerge(PgRunStore.layer({ schema })),
      Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 6 }))
    )
  )
  yield* LeaseholdWorkflows.worker({ owner: "w", ttl: "2 seconds", heartbeat: "300 millis", pollInterval: "50 millis", shutdownGrace: "300 millis" })
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
        decide: (execution, deferred, value) => journal.deferredDone(execution, deferred, WorkflowJournal.succeeded(value))
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
  eventually("the workflow's run suspends", Effect.map(
    sql.unsafe<{ id: string; state: string }>(`SELECT id::text AS id, state FROM "${schema}".runs WHERE idempotency_key = $1`, [key]),
    (rows) => rows[0]?.state === "suspended" ? rows[0].id : undefined
  ), "20 seconds")

describe("workflow approvals", () => {
  it.live("a workflow awaiting a person/ deferred is an approval: its page names the deferred, and Approve completes it (the workflow finishes with the decision)", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const executionId = yield* Payout.execute({ order: "P-1" }, { discard: true }).pipe(Effect.provideContext(context))
      const key = LeaseholdWorkflows.executionKey("Payout", executionId)
      const id = yield* suspendedRun(sql, schema, key)

      const page = yield* request(`${origin}/api/runs/${id}`, { headers: bearer })
      assert.deepStrictEqual(page.body.run.workflow, {
        execution: key,
        awaiting: [{ name: "person/approve-payout", forPerson: true, wakeAt: null }]
      })
      const inbox = yield* request(`${origin}/api/runs?state=suspended`, { headers: bearer })
      assert.deepStrictEqual(inbox.body.runs.find((r: { id: string }) => r.id === id).workflow.awaiting.map((a: { name: string }) => a.name), [
        "person/approve-payout"
      ])

      const approved = yield* postJson(`${origin}/api/runs/${id}/resume`, { payload: { approved: true, note: "looks right" } }, bearer)
      assert.strictEqual(approved.status, 200, JSON.stringify(approved.body))
      assert.deepStrictEqual(approved.body, { id, deferred: "person/approve-payout" })
      const result = yield* Payout.execute({ order: "P-1" }).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(result, { order: "P-1", approved: true, note: "looks right" })
    }))

  it.live("a workflow awaiting a deferred that is not for a person is named on its page and refused as an approval (409, nothing written)", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const executionId = yield* Settlement.execute({ order: "S-1" }, { discard: true }).pipe(Effect.provideContext(context))
      const key = LeaseholdWorkflows.executionKey("Settlement", executionId)
      const id = yield* suspendedRun(sql, schema, key)
      const page = yield* request(`${origin}/api/runs/${id}`, { headers: bearer })
      assert.deepStrictEqual(page.body.run.workflow.awaiting, [{ name: "bank-settled", forPerson: false, wakeAt: null }])
      const deferreds = () => sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".workflow_deferreds`)
      const refused = yield* postJson(`${origin}/api/runs/${id}/resume`, { payload: { approved: true } }, bearer)
      assert.strictEqual(refused.status, 409)
      assert.strictEqual(refused.body.error, "workflow-run")
      assert.strictEqual((yield* deferreds())[0]!.n, 0, "no deferred completed")
      const run = yield* sql.unsafe<{ state: string }>(`SELECT state FROM "${schema}".runs WHERE id = ${Number(id)}`)
      assert.strictEqual(run[0]!.state, "suspended")
    }))

  it.live("in the console (chromium): the approvals inbox offers the workflow awaiting a person, not the other; Approve there finishes the workflow", () =>
    Effect.gen(function*() {
      const { context, origin, schema, sql } = yield* setUp
      const payout = yield* Payout.execute({ order: "P-2" }, { discard: true }).pipe(Effect.provideContext(context))
      const settlement = yield* Settlement.execute({ order: "S-2" }, { discard: true }).pipe(Effect.provideContext(context))
      const payoutRun = yield* suspendedRun(sql, schema, LeaseholdWorkflows.executionKey("Payout", payout))
      const settlementRun = yield* suspendedRun(sql, schema, LeaseholdWorkflows.executionKey("Settlement", settlement))
      const executablePath = process.env.CHROMIUM_PATH || execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim()
      const browser = yield* Effect.acquireRelease(
        Effect.promise(() => chromium.launch({ executablePath, args: ["--headless", "--no-sandbox", "--disable-gpu"] })),
        (b) => Effect.promise(() => b.close())
      )
      yield* Effect.promise(async () => {
        const page = await browser.newPage({ httpCredentials: { username: "admin", password: token } })
        // The payout's page shows its journal: the quote activity with its fence and result, the person's deferred awaited.
        await page.goto(`${origin}/#/runs/${payoutRun}`)
        const journal = page.locator("section[aria-labelledby=journal] tbody tr")
        await journal.first().waitFor({ timeout: 10_000 })
        const entries = await journal.evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll("td")].slice(1).map((td) => td.textContent?.trim())))
        assert.deepStrictEqual(entries, [
          ["activity", "quote", "1", "1", "succeeded", "42"],
          ["deferred", "person/approve-payout", "", "", "awaited", ""]
        ])
        if (process.env.UPDATE_SCREENSHOTS === "1") {
          await page.screenshot({ path: new URL("../docs/console-workflow.png", import.meta.url).pathname, fullPage: true })
        }
        await page.goto(`${origin}/#/approvals`)
        const card = page.locator(`article.approval[data-run-id="${payoutRun}"]`)
        await card.waitFor({ timeout: 10_000 })
        assert.include(await card.textContent(), `deferred "person/approve-payout" (for a person)`)
        assert.strictEqual(await page.locator(`article.approval[data-run-id="${settlementRun}"]`).count(), 0, "not an approval")
        await card.getByLabel("Note (optional)").fill("paid")
        await card.getByRole("button", { name: "Approve" }).click()
        await card.getByText("Approved: the run is resuming.").waitFor({ timeout: 10_000 })
        await page.goto(`${origin}/#/runs/${settlementRun}`)
        await page.getByText(`deferred "bank-settled"`).waitFor({ timeout: 10_000 })
        assert.strictEqual(await page.getByRole("button", { name: "Approve" }).count(), 0, "no decision offered on its page")
      })
      const result = yield* Payout.execute({ order: "P-2" }).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(result, { order: "P-2", approved: true, note: "paid" })
    }))
})
