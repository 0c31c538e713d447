/**
 * `POST /workflow-callbacks/:workflow/:execution/:deferred` over a real server and PostgreSQL:
 * each refusal's status, with nothing written (the journal's deferreds and the run unchanged),
 * and the accepted completion that resumes the suspended workflow.
 */
import { assert, describe, it } from "@effect/vitest"
import { Callbacks, DeferredCallbacks } from "@leasehold/http"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Effect, Layer, Redacted } from "effect"
import { HttpRouter, HttpServer } from "effect/http"
import { SqlClient } from "effect/sql"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import { createServer } from "node:http"
import { appLayer, Approved, createLedger, Refund } from "./fixtures/workflows.js"
import { databaseUrl, freshSchema } from "./support/db.js"
import { eventually } from "./support/workers.js"
import { secretNew } from "./support/http.js"

const callbacksLayer = Callbacks.layer({ baseUrl: "https://callbacks.example.test", secrets: Redacted.make(secretNew) })

describe("deferred callback URLs", () => {
  it.live("refusals write nothing; the signed URL completes the deferred and the workflow resumes", () =>
    Effect.gen(function*() {
      const schema = freshSchema("wfhttp")
      const server = HttpRouter.serve(DeferredCallbacks.layer({ deferreds: [Approved], maxBodySize: 1024 }), {
        disableLogger: true,
        disableListenLog: true
      }).pipe(Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })))
      const context = yield* Layer.build(server.pipe(Layer.provideMerge(callbacksLayer), Layer.provideMerge(appLayer(databaseUrl(), schema, 0))))
      const sql = Context.get(context, SqlClient.SqlClient)
      yield* createLedger(sql, schema)
      yield* LeaseholdWorkflows.worker({ ttl: "2 seconds", pollInterval: "50 millis", shutdownGrace: "200 millis" }).pipe(
        Effect.provideContext(context),
        Effect.forkScoped
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      assert(address._tag !== "UnixPathAddress")
      const origin = `http://127.0.0.1:${address.port}`

      const payload = { order: "H-1", cents: 100 }
      const executionId = yield* Refund.executionId(payload)
      yield* Refund.execute(payload, { discard: true }).pipe(Effect.provideContext(context))
      const runState = Effect.map(
        sql.unsafe<{ state: string; fence: string }>(`SELECT state, fence::text AS fence FROM "${schema}".runs WHERE idempotency_key = $1`, [
          LeaseholdWorkflows.executionKey(Refund._tag, executionId)
        ]),
        (rows) => `${rows[0]?.state}@${rows[0]?.fence}`
      )
      yield* eventually("the refund suspends", Effect.map(runState, (s) => s === "suspended@1"))

      const signed = yield* DeferredCallbacks.url(Approved, { expiresIn: "1 hour" }).pipe(
        Effect.provideService(WorkflowInstance, WorkflowInstance.initial(Refund, executionId)),
        Effect.provideContext(context)
      )
      const local = (url: string) => {
        const parsed = new URL(url)
        return `${origin}${parsed.pathname}${parsed.search}`
      }
      const link = local(signed)
      const withParam = (url: string, name: string, value: string) => {
        const changed = new URL(url)
        changed.searchParams.set(name, value)
        return changed.toString()
      }
      const post = (url: string, body: string, method = "POST") =>
        Effect.promise(() =>
          fetch(url, method === "GET" ? { method } : { method, headers: { "content-type": "application/json" }, body })
        )
      const deferreds = Effect.map(sql.unsafe(`SELECT name FROM "${schema}".workflow_deferreds`), (rows) => rows.length)
      const refusals: Array<[string, string, number, string?]> = [
        ["no signature", link.replace(/\?.*$/, ""), 401],
        ["a forged signature", withParam(link, "sig", "A".repeat(43)), 403],
        ["a later expiry", withParam(link, "exp", String(Number(new URL(link).searchParams.get("exp")) + 3600)), 403],
        ["another execution's", link.replace(encodeURIComponent(executionId), "other-execution"), 403],
        ["a deferred the route does not serve", local(signed.replace("/approved?", "/never?")), 403],
        ["not JSON", link, 400, "{"],
        ["a body the schema refuses", link, 400, JSON.stringify({ by: 42 })],
        ["an oversized body", link, 413, JSON.stringify({ by: "x".repeat(4096) })]
      ]
      for (const [what, url, status, body] of refusals) {
        const response = yield* post(url, body ?? JSON.stringify({ by: "sam" }))
        assert.strictEqual(response.status, status, what)
        assert.strictEqual(yield* deferreds, 0, `${what}: nothing written`)
        assert.strictEqual(yield* runState, "suspended@1", `${what}: the run is untouched`)
      }
      assert.strictEqual((yield* post(link, "", "GET")).status, 405)

      // A URL signed for a deferred the route does not serve: signature fine, deferred unknown.
      const unserved = yield* DeferredCallbacks.url({ name: "never" } as any, { expiresIn: "1 hour" }).pipe(
        Effect.provideService(WorkflowInstance, WorkflowInstance.initial(Refund, executionId)),
        Effect.provideContext(context)
      )
      assert.strictEqual((yield* post(local(unserved), JSON.stringify({ by: "sam" }))).status, 404)
      // Expired: a URL whose expiry has passed, signed properly.
      const expired = yield* DeferredCallbacks.url(Approved, { expiresIn: "1 millis" }).pipe(
        Effect.provideService(WorkflowInstance, WorkflowInstance.initial(Refund, executionId)),
        Effect.provideContext(context)
      )
      yield* Effect.sleep("1100 millis")
      assert.strictEqual((yield* post(local(expired), JSON.stringify({ by: "sam" }))).status, 410)
      assert.strictEqual(yield* deferreds, 0)

      const accepted = yield* post(link, JSON.stringify({ by: "sam@example.com" }))
      assert.strictEqual(accepted.status, 202)
      assert.deepInclude(yield* Effect.promise(() => accepted.json()), { status: "accepted", deferred: "approved" })
      const result = yield* Refund.execute(payload).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(result, { order: "H-1", approvedBy: "sam@example.com" })
      assert.strictEqual(yield* runState, "completed@2")
    }))
})
