/**
 * Operators over the admin API, on a real server and a real PostgreSQL: named credentials (a
 * read-only one refused on every write, nothing written; each write recorded under the
 * credential's name, never its secret), deleting runs (count, confirm, 409 when the count changed
 * or a run is running), and the audit of actions not about one run.
 */
import { assert, describe, it } from "@effect/vitest"
import { Handler, RunHistory } from "@leasehold/core"
import { Duration, Effect, Schema } from "effect"
import { background, connection } from "./support/cli.js"
import { postJson, request, secretNew, snapshot, startServer } from "./support/http.js"
import { twoStores } from "./support/stores.js"
import { eventually } from "./support/workers.js"

const refund = Handler.make({
  kind: "refund",
  payload: Schema.Struct({ order: Schema.String }),
  handle: () => Effect.void
})

const aliceSecret = "alice-secret-0123456789abcdef"
const ciSecret = "ci-readonly-secret-0123456789"
const credentials = `alice:rw:${aliceSecret},ci:ro:${ciSecret}`
const alice = { authorization: `Bearer ${aliceSecret}` }
const ci = { authorization: `Bearer ${ciSecret}` }
const browser = (secret: string) => ({ authorization: `Basic ${Buffer.from(`x:${secret}`).toString("base64")}` })

describe("admin API: named credentials", () => {
  it.live("a read-only credential reads but gets 403 on every write, nothing written; a read-write one writes under its name", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], credentials })
      const [run] = yield* stores.a.enqueue([{ kind: "refund", payload: { order: "A" } }])
      assert.strictEqual((yield* request(`${origin}/api/runs`, { headers: ci })).status, 200)
      const before = yield* snapshot(stores)
      const writes: ReadonlyArray<[string, string, unknown]> = [
        ["POST", `/api/runs/${run!.id}/cancel`, {}],
        ["POST", `/api/runs/${run!.id}/retry`, {}],
        ["POST", "/api/runs", { kind: "refund", payload: { order: "B" } }],
        ["POST", "/api/runs/bulk/cancel", { kind: "refund" }],
        ["POST", "/api/runs/bulk/delete", { kind: "refund", expected: 1 }],
        ["DELETE", `/api/runs/${run!.id}`, undefined],
        ["POST", "/api/queues/default/pause", {}],
        ["PUT", "/api/schedules/daily", { cron: "0 * * * *", kind: "refund" }],
        ["PUT", "/api/rate-limits/kind/refund", { limit: 1, intervalMs: 1000 }]
      ]
      for (const [method, path, body] of writes) {
        const answer = yield* request(`${origin}${path}`, {
          method,
          headers: { ...ci, "content-type": "application/json" },
          ...(body === undefined ? {} : { body: JSON.stringify(body) })
        })
        assert.deepStrictEqual([path, answer.status, answer.body.error], [path, 403, "read-only-token"])
        assert.include(answer.body.message, "ci is read-only")
      }
      assert.strictEqual(yield* snapshot(stores), before, "nothing written")
      // The same cancel with the read-write credential: recorded under its name, from the API.
      assert.strictEqual((yield* postJson(`${origin}/api/runs/${run!.id}/cancel`, {}, alice)).status, 200)
      const detail = yield* request(`${origin}/api/runs/${run!.id}`, { headers: ci })
      assert.deepInclude(detail.body.history.adminActions[0], { action: "cancelled", by: "alice", via: "api" })
      const history = RunHistory.fromEvents(yield* stores.a.history(run!.id))
      assert.deepInclude(history.adminActions[0], { by: "alice", via: "api" })
      // The session says who the caller is.
      assert.strictEqual((yield* request(`${origin}/api/session`, { headers: ci })).body.as, "ci")
      // A browser's (basic auth, with the CSRF header) is recorded as from the console.
      const session = yield* request(`${origin}/api/session`, { headers: browser(aliceSecret) })
      const retried = yield* postJson(`${origin}/api/runs/${run!.id}/retry`, {}, {
        ...browser(aliceSecret),
        "x-leasehold-csrf": session.body.csrfToken
      })
      assert.strictEqual(retried.status, 200)
      assert.deepInclude(
        RunHistory.fromEvents(yield* stores.a.history(run!.id)).adminActions[1],
        { action: "retried", by: "alice", via: "console" }
      )
      // No secret anywhere in the store.
      const dump = yield* snapshot(stores)
      for (const secret of [aliceSecret, ciSecret]) assert.notInclude(dump, secret)
    }))

  it.live("an invalid LEASEHOLD_ADMIN_TOKENS stops the start naming the entry, never its secret", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      for (
        const [spec, issue] of [
          [`alice:admin:${aliceSecret}`, "entry 1 (alice): the scope must be ro or rw"],
          [`alice:rw:short`, "the secret of alice needs at least 16 characters"],
          [`alice:rw:${aliceSecret},alice:ro:${ciSecret}`, "the name alice is given twice"],
          [aliceSecret, "entry 1 is not name:scope:secret"]
        ] as const
      ) {
        const failed = yield* Effect.flip(startServer(stores, { credentials: spec }))
        assert.deepInclude(failed, { _tag: "InvalidConfig", option: "LEASEHOLD_ADMIN_TOKENS", issue })
        assert.notInclude(failed.message, aliceSecret)
      }
    }))

  it.live(
    "leasehold serve: named credentials from the environment beside the single token, rotated by adding one; no secret in its output or the store",
    () =>
      Effect.gen(function*() {
        const stores = yield* twoStores
        const oldToken = "the-old-admin-token-0123456789"
        const env = {
          LEASEHOLD_ADMIN_TOKEN: oldToken,
          LEASEHOLD_ADMIN_TOKENS: credentials,
          LEASEHOLD_CALLBACK_SECRETS: secretNew
        }
        const { child, exited } = yield* background(["serve", "--port", "0", ...connection(stores.schema)], { env })
        let stdout = ""
        child.stdout!.setEncoding("utf8").on("data", (chunk: string) => void (stdout += chunk))
        const origin = yield* eventually(
          "the server listens",
          Effect.sync(() => /serving on (http:\/\/\S+)/.exec(stdout)?.[1]),
          // A process's start on a loaded machine may take longer than the default.
          "60 seconds"
        )
        const [run] = yield* stores.a.enqueue([{ kind: "refund", payload: { order: "S" } }])
        // The old single token still works, as a read-write credential named admin.
        const cancelled = yield* postJson(`${origin}/api/runs/${run!.id}/cancel`, {}, {
          authorization: `Bearer ${oldToken}`
        })
        assert.strictEqual(cancelled.status, 200)
        assert.strictEqual((yield* postJson(`${origin}/api/runs/${run!.id}/retry`, {}, ci)).status, 403)
        assert.strictEqual((yield* postJson(`${origin}/api/runs/${run!.id}/retry`, {}, alice)).status, 200)
        assert.strictEqual(
          (yield* request(`${origin}/api/runs`, { headers: { authorization: "Bearer wrong" } })).status,
          401
        )
        const actions = RunHistory.fromEvents(yield* stores.a.history(run!.id)).adminActions
        assert.deepStrictEqual(actions.map((a) => a.by), ["admin", "alice"])
        child.kill("SIGTERM")
        const result = yield* Effect.promise(() => exited)
        const dump = yield* snapshot(stores)
        for (const secret of [oldToken, aliceSecret, ciSecret]) {
          assert.notInclude(result.stdout + stdout + result.stderr, secret)
          assert.notInclude(dump, secret)
        }
      }),
    { timeout: 120_000 }
  )
})

describe("admin API: deleting runs and the audit", () => {
  it.live("a delete by filter: a dry-run count, then the delete of that count; 409 when the count changed or a run is running, nothing written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], credentials })
      const runs = yield* stores.a.enqueue([
        { kind: "refund", payload: { order: "gone-1" }, queue: "erase" },
        { kind: "refund", payload: { order: "gone-2" }, queue: "erase" }
      ])
      const filter = { queue: "erase" }
      const counted = yield* postJson(`${origin}/api/runs/bulk/delete`, { ...filter, dryRun: true }, alice)
      assert.deepStrictEqual(counted.body, { count: 2, busy: 0 })
      const unconfirmed = yield* postJson(`${origin}/api/runs/bulk/delete`, filter, alice)
      assert.deepStrictEqual([unconfirmed.status, unconfirmed.body.error], [400, "invalid-request"])
      // The runs list's search fields select too: a concurrency key, a creation time range.
      yield* stores.a.enqueue([{ kind: "refund", payload: { order: "k" }, concurrencyKey: "acct-9" }])
      const byKey = yield* postJson(`${origin}/api/runs/bulk/delete`, { key: "acct-9", dryRun: true }, alice)
      assert.deepStrictEqual(byKey.body, { count: 1, busy: 0 })
      const future = yield* postJson(`${origin}/api/runs/bulk/delete`, {
        from: new Date(Date.now() + 3_600_000).toISOString(),
        dryRun: true
      }, alice)
      assert.deepStrictEqual(future.body, { count: 0, busy: 0 })
      const badTime = yield* postJson(`${origin}/api/runs/bulk/delete`, { to: "yesterday", dryRun: true }, alice)
      assert.deepStrictEqual([badTime.status, badTime.body.error], [400, "invalid-request"])
      const everything = yield* postJson(`${origin}/api/runs/bulk/delete`, { expected: 5 }, alice)
      assert.deepStrictEqual([everything.status, everything.body.error], [400, "invalid-request"], "a filter is needed")
      // Another run joins the selection: the confirmed count no longer holds.
      const [late] = yield* stores.a.enqueue([{ kind: "refund", payload: { order: "late" }, queue: "erase" }])
      const before = yield* snapshot(stores)
      const changed = yield* postJson(`${origin}/api/runs/bulk/delete`, { ...filter, expected: 2 }, alice)
      assert.deepStrictEqual([changed.status, changed.body.error], [409, "count-changed"])
      assert.include(changed.body.message, "selects 3 runs now, not the 2 confirmed")
      assert.strictEqual(yield* snapshot(stores), before, "nothing deleted")
      // A running run in the selection: refused, cancel first.
      yield* stores.a.claim({ owner: "w", queues: ["erase"], kinds: ["refund"], limit: 1, ttl: Duration.minutes(1) })
      const busy = yield* postJson(`${origin}/api/runs/bulk/delete`, { ...filter, expected: 3 }, alice)
      assert.deepStrictEqual([busy.status, busy.body.error], [409, "runs-running"])
      assert.include(busy.body.message, "cancel them first")
      assert.strictEqual(yield* snapshot(stores), before, "nothing deleted")
      const running = runs[0]!.id
      assert.strictEqual((yield* stores.a.get(running)).state, "running")
      const single = yield* request(`${origin}/api/runs/${running}`, { method: "DELETE", headers: alice })
      assert.deepStrictEqual([single.status, single.body.error], [409, "run-running"])
      assert.include(single.body.message, "cancel it first")
      yield* stores.a.cancel(running)
      const deleted = yield* postJson(`${origin}/api/runs/bulk/delete`, { ...filter, expected: 3 }, alice)
      assert.deepStrictEqual([deleted.status, deleted.body], [200, { deleted: 3 }])
      for (const id of [...runs.map((r) => r.id), late!.id]) {
        assert.strictEqual((yield* request(`${origin}/api/runs/${id}`, { headers: ci })).status, 404)
      }
      // One run by id; then it is gone (404).
      const [one] = yield* stores.a.enqueue([{ kind: "refund", payload: { order: "one" } }])
      const byId = yield* request(`${origin}/api/runs/${one!.id}`, { method: "DELETE", headers: alice })
      assert.deepStrictEqual([byId.status, byId.body], [200, { id: one!.id, deleted: 1 }])
      const again = yield* request(`${origin}/api/runs/${one!.id}`, { method: "DELETE", headers: alice })
      assert.deepStrictEqual([again.status, again.body.error], [404, "not-found"])
      // The audit: who deleted which runs, no payload.
      const audit = yield* request(`${origin}/api/actions`, { headers: ci })
      assert.deepStrictEqual(
        audit.body.actions.map((a: { action: string; by: string; via: string }) => [a.action, a.by, a.via]),
        [["runs.delete", "alice", "api"], ["runs.delete", "alice", "api"]]
      )
      assert.deepStrictEqual(audit.body.actions[1].detail.count, 3)
      assert.notInclude(JSON.stringify(audit.body), "gone-1")
    }))

  it.live("queue, schedule and rate-limit changes are in the audit with who made them; /api/actions pages by id", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], credentials })
      const put = (path: string, body: unknown) =>
        request(`${origin}${path}`, {
          method: "PUT",
          headers: { ...alice, "content-type": "application/json" },
          body: JSON.stringify(body)
        })
      assert.strictEqual((yield* postJson(`${origin}/api/queues/mail/pause`, {}, alice)).status, 200)
      assert.strictEqual((yield* postJson(`${origin}/api/queues/mail/resume`, {}, alice)).status, 200)
      assert.strictEqual((yield* put("/api/schedules/daily", { cron: "0 * * * *", kind: "refund" })).status, 201)
      assert.strictEqual((yield* postJson(`${origin}/api/schedules/daily/pause`, {}, alice)).status, 200)
      assert.strictEqual((yield* put("/api/rate-limits/kind/refund", { limit: 5, intervalMs: 1000 })).status, 200)
      const removed = yield* request(`${origin}/api/rate-limits/kind/refund`, { method: "DELETE", headers: alice })
      assert.strictEqual(removed.status, 200)
      const all = yield* request(`${origin}/api/actions`, { headers: ci })
      assert.deepStrictEqual(
        all.body.actions.map((a: { action: string; target: string; by: string }) => [a.action, a.target, a.by]),
        [
          ["rate-limit.remove", "kind:refund", "alice"],
          ["rate-limit.set", "kind:refund", "alice"],
          ["schedule.pause", "daily", "alice"],
          ["schedule.register", "daily", "alice"],
          ["queue.resume", "mail", "alice"],
          ["queue.pause", "mail", "alice"]
        ]
      )
      const page = yield* request(`${origin}/api/actions?limit=2`, { headers: ci })
      assert.lengthOf(page.body.actions, 2)
      const next = yield* request(`${origin}/api/actions?limit=2&before=${page.body.next}`, { headers: ci })
      assert.deepStrictEqual(next.body.actions.map((a: { action: string }) => a.action), [
        "schedule.pause",
        "schedule.register"
      ])
      const bad = yield* request(`${origin}/api/actions?before=x`, { headers: ci })
      assert.deepStrictEqual([bad.status, bad.body.error], [400, "invalid-request"])
    }))
})
