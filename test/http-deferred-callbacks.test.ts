/**
 * `POST /workflow-callbacks/:workflow/:execution/:deferred` over a real server and PostgreSQL:
 * each refusal's status, with nothing written (the journal's deferreds and the run unchanged), the
 * re-splits of a signed text refused, and the accepted completion that resumes the suspended workflow.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { assert, describe, it } from "@effect/vitest"
import { Callbacks, DeferredCallbacks } from "@leasehold/http"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Effect, Layer, Redacted } from "effect"
import { HttpRouter, HttpServer } from "effect/http"
import { SqlClient } from "effect/sql"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import { createServer } from "node:http"
import { appLayer, Approved, createLedger, Refund } from "./fixtures/workflows.js"
import { databaseUrl, freshSchema } from "./support/db.js"
import { deferredSignature, legacyDeferredSignature, secretNew } from "./support/http.js"
import { eventually } from "./support/workers.js"

const callbacksLayer = Callbacks.layer({ baseUrl: "https://callbacks.example.test", secrets: Redacted.make(secretNew) })

describe("deferred callback URLs", () => {
  it.live("refusals write nothing; the signed URL completes the deferred and the workflow resumes", () =>
    Effect.gen(function*() {
      const schema = freshSchema("wfhttp")
      const server = HttpRouter.serve(DeferredCallbacks.layer({ deferreds: [Approved], maxBodySize: 1024 }), {
        disableLogger: true,
        disableListenLog: true
      }).pipe(Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })))
      const context = yield* Layer.build(
        server.pipe(Layer.provideMerge(callbacksLayer), Layer.provideMerge(appLayer(databaseUrl(), schema, 0)))
      )
      const sql = Context.get(context, SqlClient.SqlClient)
      yield* createLedger(sql, schema)
      yield* LeaseholdWorkflows.worker({ ttl: "2 seconds", pollInterval: "50 millis", shutdownGrace: "200 millis" })
        .pipe(
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
        sql.unsafe<{ state: string; fence: string }>(
          `SELECT state, fence::text AS fence FROM "${schema}".runs WHERE idempotency_key = $1`,
          [
            LeaseholdWorkflows.executionKey(Refund._tag, executionId)
          ]
        ),
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

      // Re-splits of signed texts (issue 27). v1 signed `v1.workflow:<name>:<execution>.<deferred>.<exp>`:
      // a URL for deferred `approved.v2` also verified as deferred `approved` with `exp=v2.<exp>`, which
      // never expired, and the colons let the workflow name and the execution id trade characters.
      const signedFor = (workflowTag: string, execution: string, deferredName: string) =>
        DeferredCallbacks.url({ name: deferredName } as any, { expiresIn: "1 hour" }).pipe(
          Effect.provideService(
            WorkflowInstance,
            WorkflowInstance.initial({ ...Refund, _tag: workflowTag } as any, execution)
          ),
          Effect.provideContext(context)
        )
      const dotted = new URL(yield* signedFor(Refund._tag, executionId, "approved.v2"))
      const dottedExp = dotted.searchParams.get("exp")!
      const resplitExp = `${origin}/workflow-callbacks/${Refund._tag}/${
        encodeURIComponent(executionId)
      }/approved?exp=v2.${dottedExp}&sig=${dotted.searchParams.get("sig")}`
      const colons = new URL(yield* signedFor(Refund._tag, `x:${executionId}`, "approved"))
      const resplitColon = `${origin}/workflow-callbacks/${encodeURIComponent(`${Refund._tag}:x`)}/${
        encodeURIComponent(executionId)
      }/approved${colons.search}`
      // The same two shifts under URLs signed the v1 way, as handed out before v2.
      const exp = Number(new URL(link).searchParams.get("exp"))
      const legacyExp = `${origin}/workflow-callbacks/${Refund._tag}/${
        encodeURIComponent(executionId)
      }/approved?exp=v2.${exp}&sig=${legacyDeferredSignature(secretNew, Refund._tag, executionId, "approved.v2", exp)}`
      const legacyColon = `${origin}/workflow-callbacks/${encodeURIComponent(`${Refund._tag}:x`)}/${
        encodeURIComponent(executionId)
      }/approved?exp=${exp}&sig=${legacyDeferredSignature(secretNew, Refund._tag, `x:${executionId}`, "approved", exp)}`
      const resplits: Array<[string, string, number, string]> = [
        ["deferred approved.v2 re-split as approved with exp=v2.<exp>", resplitExp, 403, "exp-invalid"],
        ["execution x:<id> of Refund re-split as execution <id> of Refund:x", resplitColon, 403, "signature-invalid"],
        ["a v1 URL re-split into exp", legacyExp, 403, "exp-invalid"],
        ["a v1 URL re-split around a colon", legacyColon, 403, "signature-invalid"]
      ]
      for (const [what, url, status, error] of resplits) {
        const response = yield* post(url, JSON.stringify({ by: "mallory" }))
        assert.strictEqual(response.status, status, what)
        assert.strictEqual(
          (yield* Effect.promise(() => response.json() as Promise<{ error: string }>)).error,
          error,
          what
        )
        assert.strictEqual(yield* deferreds, 0, `${what}: nothing written`)
        assert.strictEqual(yield* runState, "suspended@1", `${what}: the run is untouched`)
      }
      // A signed exp that is not 1 to 12 digits is refused even with a valid signature.
      for (const badExp of ["Infinity", "1e12", `${exp}.5`, `+${exp}`, "9".repeat(13)]) {
        const url = `${origin}/workflow-callbacks/${Refund._tag}/${encodeURIComponent(executionId)}/approved?exp=${
          encodeURIComponent(badExp)
        }&sig=${deferredSignature(secretNew, Refund._tag, executionId, "approved", badExp)}`
        const response = yield* post(url, JSON.stringify({ by: "mallory" }))
        assert.strictEqual(response.status, 403, badExp)
        assert.strictEqual(
          (yield* Effect.promise(() => response.json() as Promise<{ error: string }>)).error,
          "exp-invalid",
          badExp
        )
      }
      // Not JSON by its content type, or a value the journal cannot keep: refused, nothing written.
      const typed = yield* Effect.promise(() =>
        fetch(link, { method: "POST", headers: { "content-type": "text/plain" }, body: JSON.stringify({ by: "sam" }) })
      )
      assert.strictEqual(typed.status, 415)
      const nul = yield* post(link, JSON.stringify({ by: "sam\u0000" }))
      assert.strictEqual(nul.status, 400)
      assert.include(
        (yield* Effect.promise(() => nul.json() as Promise<{ message: string }>)).message,
        "$.by holds a NUL"
      )
      assert.strictEqual(yield* deferreds, 0)
      assert.strictEqual(yield* runState, "suspended@1")
      // The URL's own signature, as the specification describes it (v2, the deferred's own domain).
      assert.strictEqual(
        new URL(signed).searchParams.get("sig"),
        deferredSignature(secretNew, Refund._tag, executionId, "approved", exp)
      )
      // A v1 URL whose text has one reading (no colon in the name, no dot in the parts) still verifies.
      const legacy = `${origin}/workflow-callbacks/${Refund._tag}/${
        encodeURIComponent(executionId)
      }/approved?exp=${exp}&sig=${legacyDeferredSignature(secretNew, Refund._tag, executionId, "approved", exp)}`

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

      const accepted = yield* post(legacy, JSON.stringify({ by: "sam@example.com" }))
      assert.strictEqual(accepted.status, 202)
      assert.deepInclude(yield* Effect.promise(() => accepted.json()), { status: "accepted", deferred: "approved" })
      // The v2 URL after it: the first completion stands.
      assert.strictEqual((yield* post(link, JSON.stringify({ by: "sam@example.com" }))).status, 202)
      const result = yield* Refund.execute(payload).pipe(Effect.provideContext(context))
      assert.deepStrictEqual(result, { order: "H-1", approvedBy: "sam@example.com" })
      assert.strictEqual(yield* runState, "completed@2")
    }))
})
