/**
 * The approval workflow example, run as written against the test PostgreSQL: the refund is paid
 * once, under fence 2, after the approval posted to its signed URL; the order is looked up once;
 * a forged or re-posted approval changes nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { databaseUrl, freshSchema } from "../test/support/db.js"
import { appLayer, lookupCount, main, Refund } from "./approval-workflow.js"

describe("examples/approval-workflow.ts", () => {
  it.live("the refund is paid once, under fence 2, after the approval posted to its signed link", () =>
    Effect.gen(function*() {
      const options = {
        url: databaseUrl(),
        schema: freshSchema("wfexample"),
        secret: "example-secret-0123456789abcdef0123456789"
      }
      const said: Array<string> = []
      const lookupsBefore = lookupCount()
      const outcome = yield* Effect.promise(() =>
        main({ ...options, order: "A-1001", say: (line) => void said.push(line) })
      )
      assert.deepStrictEqual(outcome.result, { order: "A-1001", amountCents: 4200, approvedBy: "sam@example.com" })
      assert.include(said.join("\n"), "approval posted, HTTP 202")
      assert.strictEqual(lookupCount() - lookupsBefore, 1)

      const context = yield* Layer.build(appLayer(options))
      const sql = Context.get(context, SqlClient.SqlClient)
      const refunds = yield* sql.unsafe<{ approved_by: string; fence: string }>(
        `SELECT approved_by, fence::text AS fence FROM "${options.schema}".refunds`
      )
      assert.deepStrictEqual(refunds.map((r) => [r.approved_by, Number(r.fence)]), [["sam@example.com", 2]])
      const [run] = yield* sql.unsafe<{ state: string; fence: string }>(
        `SELECT state, fence::text AS fence FROM "${options.schema}".runs WHERE idempotency_key = $1`,
        [LeaseholdWorkflows.executionKey(Refund._tag, outcome.executionId)]
      )
      assert.deepStrictEqual([run!.state, Number(run!.fence)], ["completed", 2])

      // Through a server of this test's own: a forged signature is refused, and posting the link
      // again with another approver is accepted but changes nothing (the first completion stands).
      const post = (link: string, body: unknown) =>
        Effect.promise(() =>
          fetch(link, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })
            .then((r) => r.status)
        )
      const { HttpServer } = yield* Effect.promise(() => import("effect/http"))
      const address = Context.get(context, HttpServer.HttpServer).address
      assert(address._tag !== "UnixPathAddress")
      const link = new URL(outcome.link)
      link.port = String(address.port)
      const forged = new URL(link)
      forged.searchParams.set("sig", "0".repeat(64))
      assert.strictEqual(yield* post(forged.toString(), { approvedBy: "mallory@example.com" }), 403)
      assert.strictEqual(yield* post(link.toString(), { approvedBy: 42 }), 400)
      assert.strictEqual(yield* post(link.toString(), { approvedBy: "mallory@example.com" }), 202)
      const deferreds = yield* sql.unsafe<{ exit: unknown }>(`SELECT exit FROM "${options.schema}".workflow_deferreds`)
      assert.deepStrictEqual(deferreds.map((d) => d.exit), [{
        _tag: "Success",
        value: { approvedBy: "sam@example.com" }
      }])
      const refundsAfter = yield* sql.unsafe(`SELECT 1 FROM "${options.schema}".refunds`)
      assert.strictEqual(refundsAfter.length, 1)
    }))
})
