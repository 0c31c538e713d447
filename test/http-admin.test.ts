/**
 * The admin API over a real server and a real PostgreSQL: authentication (bearer and basic),
 * read-only mode and CSRF, each refusal checked as "nothing written"; runs, history, enqueue,
 * transitions and bulk actions end to end; the event stream; security headers; `leasehold serve`.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { assert, describe, it } from "@effect/vitest"
import { Handler, RunStore } from "@leasehold/core"
import { Callbacks, Handlers, Server } from "@leasehold/http"
import { Cause, Context, Duration, Effect, Exit, Layer, Schema } from "effect"
import { HttpRouter, HttpServer, HttpServerResponse } from "effect/http"
import * as http from "node:http"
import { createServer } from "node:http"
import { background, connection, leasehold } from "./support/cli.js"
import {
  callbacksOptions,
  callbackUrl,
  postJson,
  request,
  secretNew,
  snapshot,
  startServer,
  webhookSecret
} from "./support/http.js"
import { type Stores, twoStores } from "./support/stores.js"
import { eventually } from "./support/workers.js"

const refund = Handler.make({
  kind: "refund",
  payload: Schema.Struct({ order: Schema.String, amount: Schema.Number }),
  handle: () => Effect.void
})

const token = "admin-token-for-tests-0123456789"
const bearer = { authorization: `Bearer ${token}` }
const basic = { authorization: `Basic ${Buffer.from(`ops:${token}`).toString("base64")}` }
const ttl = Duration.seconds(30)

const enqueue = (stores: Stores, order: string, amount = 1) =>
  Effect.map(stores.a.enqueue([{ kind: "refund", payload: { order, amount } }]), ([e]) => e!.id)

describe("admin API access", () => {
  it.live("without the token: 401 asking for basic auth; a wrong token is 401; bearer and basic both read", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      for (
        const headers of [{}, { authorization: "Bearer nope" }, {
          authorization: `Basic ${Buffer.from("ops:nope").toString("base64")}`
        }]
      ) {
        const refused = yield* request(`${origin}/api/runs`, { headers })
        assert.strictEqual(refused.status, 401)
        assert.strictEqual(refused.body.error, "unauthorized")
        assert.match(refused.headers.get("www-authenticate")!, /^Basic realm="leasehold"/)
      }
      // The console's files and the Prometheus endpoint are behind the same door.
      assert.strictEqual((yield* request(`${origin}/`)).status, 401)
      assert.strictEqual((yield* request(`${origin}/metrics`)).status, 401)
      const metrics = yield* Effect.promise(() => fetch(`${origin}/metrics`, { headers: bearer }))
      assert.strictEqual(metrics.status, 200)
      assert.match(metrics.headers.get("content-type")!, /^text\/plain; version=0\.0\.4/)
      assert.strictEqual((yield* request(`${origin}/api/runs`, { headers: bearer })).status, 200)
      assert.strictEqual((yield* request(`${origin}/api/runs`, { headers: basic })).status, 200)
      // A write without a token writes nothing.
      const id = yield* enqueue(stores, "A-1")
      const before = yield* snapshot(stores)
      assert.strictEqual((yield* postJson(`${origin}/api/runs/${id}/cancel`, {})).status, 401)
      assert.strictEqual(
        (yield* postJson(`${origin}/api/runs`, { kind: "refund", payload: { order: "B", amount: 1 } })).status,
        401
      )
      assert.strictEqual(yield* snapshot(stores), before)
    }))

  it.live("CSRF: a write with basic auth (ambient credentials) needs the session's CSRF header; bearer clients are exempt", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const first = yield* enqueue(stores, "A-1")
      const second = yield* enqueue(stores, "A-2")
      const before = yield* snapshot(stores)
      const missing = yield* postJson(`${origin}/api/runs/${first}/cancel`, {}, basic)
      assert.strictEqual(missing.status, 403)
      assert.strictEqual(missing.body.error, "csrf")
      const wrong = yield* postJson(`${origin}/api/runs/${first}/cancel`, {}, { ...basic, "x-leasehold-csrf": "guess" })
      assert.strictEqual(wrong.status, 403)
      assert.strictEqual(yield* snapshot(stores), before)

      const session = yield* request(`${origin}/api/session`, { headers: basic })
      assert.strictEqual(session.body.auth, "basic")
      assert.isFalse(session.body.readOnly)
      const csrf = session.body.csrfToken as string
      assert.isAtLeast(csrf.length, 32)
      const cancelled = yield* postJson(`${origin}/api/runs/${first}/cancel`, {}, {
        ...basic,
        "x-leasehold-csrf": csrf
      })
      assert.deepStrictEqual([cancelled.status, cancelled.body], [200, { id: first }])
      assert.strictEqual((yield* stores.a.get(first)).state, "cancelled")
      const byBearer = yield* postJson(`${origin}/api/runs/${second}/cancel`, {}, bearer)
      assert.strictEqual(byBearer.status, 200)
      assert.strictEqual((yield* stores.a.get(second)).state, "cancelled")
    }))

  it.live("no token on loopback: open for reads, CSRF still required for writes (a cross-site form cannot set the header)", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund] })
      const id = yield* enqueue(stores, "A-1")
      assert.strictEqual((yield* request(`${origin}/api/runs/${id}`)).status, 200)
      const before = yield* snapshot(stores)
      const form = yield* request(`${origin}/api/runs/${id}/cancel`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "x=1"
      })
      assert.strictEqual(form.status, 403)
      assert.strictEqual(form.body.error, "csrf")
      assert.strictEqual(yield* snapshot(stores), before)
      const { csrfToken } = (yield* request(`${origin}/api/session`)).body
      assert.strictEqual(
        (yield* postJson(`${origin}/api/runs/${id}/cancel`, {}, { "x-leasehold-csrf": csrfToken })).status,
        200
      )
    }))

  it.live("no token: a request naming another host (DNS rebinding) is refused, page and API alike", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund] })
      const port = Number(new URL(origin).port)
      const get = (path: string, host: string) =>
        Effect.promise(() =>
          new Promise<{ status: number; body: string }>((resolve, reject) => {
            const req = http.request({ host: "127.0.0.1", port, path, headers: { host } }, (res) => {
              let body = ""
              res.setEncoding("utf8").on("data", (chunk: string) => void (body += chunk))
              res.on("end", () => resolve({ status: res.statusCode!, body }))
            })
            req.on("error", reject)
            req.end()
          })
        )
      for (const path of ["/api/session", "/api/runs", "/"]) {
        const rebound = yield* get(path, `attacker.example:${port}`)
        assert.strictEqual(rebound.status, 403, path)
        assert.strictEqual(JSON.parse(rebound.body).error, "host", path)
        assert.notInclude(rebound.body, "csrfToken", path)
      }
      for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]) {
        assert.strictEqual((yield* get("/api/session", host)).status, 200, host)
      }
    }))

  it.live("no token on a non-loopback address, or a short token: the server refuses to start", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const exit = yield* Effect.exit(startServer(stores, { host: "0.0.0.0" }))
      assert.isTrue(Exit.isFailure(exit))
      const error = Cause.squash((exit as Exit.Failure<unknown, unknown>).cause) as {
        _tag: string
        option: string
        message: string
      }
      assert.strictEqual(error._tag, "InvalidConfig")
      assert.strictEqual(error.option, "LEASEHOLD_ADMIN_TOKEN")
      assert.match(error.message, /required when the admin API is bound to 0\.0\.0\.0/)
      const short = yield* Effect.exit(startServer(stores, { token: "short" }))
      const shortError = Cause.squash((short as Exit.Failure<unknown, unknown>).cause) as {
        option: string
        message: string
      }
      assert.strictEqual(shortError.option, "LEASEHOLD_ADMIN_TOKEN")
      assert.match(shortError.message, /at least 16 characters/)
      assert.notInclude(shortError.message, "short")
    }))

  it.live("read-only: every state-changing route answers 403 and writes nothing; reads work", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token, readOnly: true })
      const id = yield* enqueue(stores, "A-1")
      const before = yield* snapshot(stores)
      const writes: Array<[string, unknown]> = [
        ["/api/runs", { kind: "refund", payload: { order: "B", amount: 1 } }],
        [`/api/runs/${id}/cancel`, {}],
        [`/api/runs/${id}/retry`, {}],
        [`/api/runs/${id}/resume`, { payload: {} }],
        // Gives signed URLs whole: refused where only reading is allowed.
        [`/api/runs/${id}/signed-urls`, {}],
        ["/api/tokens/t-1/resume", { payload: {} }],
        ["/api/runs/bulk/cancel", { kind: "refund" }],
        ["/api/runs/bulk/retry", { kind: "refund" }],
        ["/api/queues/default/pause", {}],
        ["/api/schedules/nightly/pause", {}]
      ]
      const schedulePut = yield* request(`${origin}/api/schedules/nightly`, {
        method: "PUT",
        headers: { "content-type": "application/json", ...bearer },
        body: JSON.stringify({ cron: "0 3 * * *", kind: "refund" })
      })
      assert.strictEqual(schedulePut.status, 403)
      for (const [path, body] of writes) {
        const answer = yield* postJson(`${origin}${path}`, body, bearer)
        assert.strictEqual(answer.status, 403, path)
        assert.strictEqual(answer.body.error, "read-only", path)
      }
      assert.strictEqual(yield* snapshot(stores), before)
      assert.strictEqual((yield* request(`${origin}/api/runs`, { headers: bearer })).body.runs.length, 1)
      assert.isTrue((yield* request(`${origin}/api/session`, { headers: bearer })).body.readOnly)
    }))
})

describe("admin API routes", () => {
  it.live("enqueue with a unique window: 201 then 200 naming the run that holds it; a bad window is 400 naming it, and nothing is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const body = (amount: number) => ({
        kind: "refund",
        payload: { order: "U-1", amount },
        unique: { key: "U-1", periodMs: 3_600_000 }
      })
      const created = yield* postJson(`${origin}/api/runs`, body(1), bearer)
      assert.strictEqual(created.status, 201)
      const again = yield* postJson(`${origin}/api/runs`, body(2), bearer)
      assert.deepStrictEqual([again.status, again.body], [200, { id: created.body.id, created: false }])
      const before = yield* snapshot(stores)
      const bad = yield* postJson(`${origin}/api/runs`, {
        ...body(3),
        unique: { key: "U-2", states: ["pending", "done"] }
      }, bearer)
      assert.strictEqual(bad.status, 400)
      assert.include(JSON.stringify(bad.body), "unique.states")
      const zero = yield* postJson(`${origin}/api/runs`, { ...body(3), unique: { key: "U-2", periodMs: 0 } }, bearer)
      assert.strictEqual(zero.status, 400)
      assert.include(JSON.stringify(zero.body), "unique.periodMs")
      assert.strictEqual(yield* snapshot(stores), before)
    }))

  it.live("enqueue is checked against the registered handlers; list filters by state, kind and payload field; a run comes with its history", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const before = yield* snapshot(stores)
      const unknown = yield* postJson(`${origin}/api/runs`, { kind: "sms", payload: {} }, bearer)
      assert.deepStrictEqual([unknown.status, unknown.body.error], [400, "unknown-kind"])
      const invalid = yield* postJson(`${origin}/api/runs`, { kind: "refund", payload: { order: 7 } }, bearer)
      assert.deepStrictEqual([invalid.status, invalid.body.error], [400, "invalid-payload"])
      const badOption = yield* postJson(`${origin}/api/runs`, {
        kind: "refund",
        payload: { order: "A", amount: 1 },
        maxAttempts: 0
      }, bearer)
      assert.deepStrictEqual([badOption.status, badOption.body.error], [400, "invalid-option"])
      const notJson = yield* postJson(`${origin}/api/runs`, "{", bearer)
      assert.deepStrictEqual([notJson.status, notJson.body.error], [400, "invalid-json"])
      const tooLarge = yield* postJson(`${origin}/api/runs`, {
        kind: "refund",
        payload: { order: "x".repeat(1024 * 1024), amount: 1 }
      }, bearer)
      assert.deepStrictEqual([tooLarge.status, tooLarge.body.error], [413, "body-too-large"])
      assert.strictEqual(yield* snapshot(stores), before)

      const created = yield* postJson(`${origin}/api/runs`, {
        kind: "refund",
        payload: { order: "A-1", amount: 42 },
        idempotencyKey: "k-1",
        queue: "money"
      }, bearer)
      assert.strictEqual(created.status, 201)
      assert.isTrue(created.body.created)
      const again = yield* postJson(`${origin}/api/runs`, {
        kind: "refund",
        payload: { order: "A-1", amount: 42 },
        idempotencyKey: "k-1",
        queue: "money"
      }, bearer)
      assert.deepStrictEqual([again.status, again.body], [200, { id: created.body.id, created: false }])
      const other = yield* postJson(`${origin}/api/runs`, {
        kind: "refund",
        payload: { order: "B-2", amount: 7 },
        queue: "money",
        attemptTimeoutMs: 60_000,
        deadlineAt: "2099-01-01T00:00:00.000Z"
      }, bearer)
      const badDeadline = yield* postJson(`${origin}/api/runs`, {
        kind: "refund",
        payload: { order: "C-3", amount: 1 },
        deadlineAt: "tomorrow"
      }, bearer)
      assert.deepStrictEqual([badDeadline.status, badDeadline.body.error], [400, "invalid-option"])
      const timed = yield* request(`${origin}/api/runs/${other.body.id}`, { headers: bearer })
      assert.deepInclude(timed.body.run, { attemptTimeoutMs: 60_000, deadline: "2099-01-01T00:00:00.000Z" })

      const byField = yield* request(`${origin}/api/runs?payload.order=A-1`, { headers: bearer })
      assert.deepStrictEqual(byField.body.runs.map((r: { id: string }) => r.id), [created.body.id])
      const byNumber = yield* request(`${origin}/api/runs?payload.amount=7&queue=money&state=pending&kind=refund`, {
        headers: bearer
      })
      assert.deepStrictEqual(byNumber.body.runs.map((r: { id: string }) => r.id), [other.body.id])
      const none = yield* request(`${origin}/api/runs?payload.order=Z`, { headers: bearer })
      assert.deepStrictEqual(none.body.runs, [])
      const badState = yield* request(`${origin}/api/runs?state=sleeping`, { headers: bearer })
      assert.deepStrictEqual([badState.status, badState.body.error], [400, "invalid-request"])
      const paged = yield* request(`${origin}/api/runs?limit=1&offset=1`, { headers: bearer })
      assert.deepStrictEqual(paged.body.runs.map((r: { id: string }) => r.id), [created.body.id])

      yield* stores.a.claim({ owner: "w-1", queues: ["money"], kinds: ["refund"], limit: 10, ttl })
      const shown = yield* request(`${origin}/api/runs/${created.body.id}`, { headers: bearer })
      assert.strictEqual(shown.status, 200)
      assert.strictEqual(shown.body.run.state, "running")
      assert.strictEqual(shown.body.run.fence, 1)
      assert.deepStrictEqual(shown.body.run.payload, { order: "A-1", amount: 42 })
      assert.deepInclude(shown.body.history.events[0], { kind: "claimed", fence: 1, owner: "w-1" })
      assert.deepInclude(shown.body.history.attempts[0], { fence: 1, owner: "w-1", via: "claimed" })
      const missing = yield* request(`${origin}/api/runs/999999`, { headers: bearer })
      assert.deepStrictEqual([missing.status, missing.body.error], [404, "not-found"])

      const workers = yield* request(`${origin}/api/workers`, { headers: bearer })
      assert.strictEqual(workers.body.workers.length, 1)
      assert.strictEqual(workers.body.workers[0].owner, "w-1")
      assert.deepStrictEqual(
        workers.body.workers[0].leases.map((l: { runId: string }) => l.runId).sort(),
        [created.body.id, other.body.id].sort()
      )
      const stats = yield* request(`${origin}/api/stats`, { headers: bearer })
      assert.strictEqual(stats.body.liveLeases, 2)
    }))

  it.live("runs are listed newest first by number (12 down to 1, not as text) and paged by ?before and ?after cursors; a cursor that is not a run id is 400", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const enqueued = yield* stores.a.enqueue(
        Array.from({ length: 12 }, (_, i) => ({ kind: "refund", payload: { order: `o-${i}`, amount: i } }))
      )
      const newestFirst = enqueued.map((e) => e.id).sort((a, b) => Number(b) - Number(a))
      const ids = (query: string) =>
        Effect.map(request(`${origin}/api/runs?${query}`, { headers: bearer }), (r) => ({
          ids: r.body.runs.map((run: { id: string }) => run.id),
          next: r.body.next
        }))
      assert.deepStrictEqual((yield* ids("limit=50")).ids, newestFirst)
      const first = yield* ids("limit=5")
      assert.deepStrictEqual(first, { ids: newestFirst.slice(0, 5), next: newestFirst[4] })
      const second = yield* ids(`limit=5&before=${first.next}`)
      assert.deepStrictEqual(second, { ids: newestFirst.slice(5, 10), next: newestFirst[9] })
      assert.deepStrictEqual(yield* ids(`limit=5&before=${second.next}`), { ids: newestFirst.slice(10), next: null })
      // The page before the second (newer than its first run), newest first.
      assert.deepStrictEqual((yield* ids(`limit=5&after=${second.ids[0]}`)).ids, first.ids)
      for (const query of ["before=abc", "after=-1", "before=1.5"]) {
        const bad = yield* request(`${origin}/api/runs?${query}`, { headers: bearer })
        assert.deepStrictEqual([bad.status, bad.body.error, bad.body.message], [
          400,
          "invalid-request",
          `${query.split("=")[0]} must be a run id (digits)`
        ], query)
      }
    }))

  it.live("a search by payload or error text without from looks back the last hour, said in createdFrom (ADR 0030); a from looks further back; a list without a search has no window", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const [old, recent] = (yield* stores.a.enqueue([
        { kind: "refund", payload: { order: "W-1", amount: 1 } },
        { kind: "refund", payload: { order: "W-1", amount: 2 } }
      ])).map((e) => e.id)
      // The first run was created two hours ago.
      yield* stores.sql.unsafe(
        `UPDATE "${stores.schema}".runs SET created_at = now() - interval '2 hours' WHERE id = ${old}`
      )
      const search = (query: string) => request(`${origin}/api/runs?${query}`, { headers: bearer })
      const windowed = yield* search("payload.order=W-1")
      assert.deepStrictEqual(windowed.body.runs.map((r: { id: string }) => r.id), [recent])
      const since = Date.now() - new Date(windowed.body.createdFrom).getTime()
      assert.isTrue(since > 3_500_000 && since < 3_700_000, `the window starts an hour back: ${since} ms`)
      const further = yield* search(`payload.order=W-1&from=${new Date(Date.now() - 3 * 3_600_000).toISOString()}`)
      assert.deepStrictEqual(further.body.runs.map((r: { id: string }) => r.id), [recent, old])
      const unsearched = yield* search("kind=refund")
      assert.deepStrictEqual(
        [unsearched.body.runs.map((r: { id: string }) => r.id), unsearched.body.createdFrom],
        [[recent, old], null]
      )
    }))

  it.live("cancel, retry and resume by id or by token move the run; a wrong state is 409 and an unknown run or token 404, writing nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const id = yield* enqueue(stores, "A-1")
      const retryPending = yield* postJson(`${origin}/api/runs/${id}/retry`, {}, bearer)
      assert.deepStrictEqual([retryPending.status, retryPending.body.error], [409, "invalid-transition"])
      assert.strictEqual((yield* postJson(`${origin}/api/runs/${id}/cancel`, {}, bearer)).status, 200)
      const before = yield* snapshot(stores)
      const cancelAgain = yield* postJson(`${origin}/api/runs/${id}/cancel`, {}, bearer)
      assert.deepStrictEqual([cancelAgain.status, cancelAgain.body.error], [409, "invalid-transition"])
      const unknown = yield* postJson(`${origin}/api/runs/999999/cancel`, {}, bearer)
      assert.deepStrictEqual([unknown.status, unknown.body.error], [404, "not-found"])
      const noToken = yield* postJson(`${origin}/api/tokens/nobody/resume`, { payload: {} }, bearer)
      assert.deepStrictEqual([noToken.status, noToken.body.error], [404, "not-found"])
      assert.strictEqual(yield* snapshot(stores), before)
      assert.strictEqual((yield* postJson(`${origin}/api/runs/${id}/retry`, {}, bearer)).status, 200)
      assert.strictEqual((yield* stores.a.get(id)).state, "pending")

      // Two suspended runs: one resumed by id, one by its token.
      const [c1, c2] = yield* stores.a.claim({ owner: "w", queues: ["default"], kinds: ["refund"], limit: 2, ttl })
        .pipe(
          Effect.map((claimed) => claimed.toSorted((x, y) => Number(x.id) - Number(y.id)))
        )
      const second = yield* enqueue(stores, "A-2")
      const [c3] = yield* stores.a.claim({ owner: "w", queues: ["default"], kinds: ["refund"], limit: 1, ttl })
      assert.strictEqual(c2, undefined)
      yield* stores.a.suspend({
        runId: c1!.id,
        fence: c1!.fence,
        signal: "approval",
        token: "tok-1",
        timeout: undefined
      })
      yield* stores.a.suspend({
        runId: c3!.id,
        fence: c3!.fence,
        signal: "approval",
        token: "tok-2",
        timeout: undefined
      })
      const byId = yield* postJson(`${origin}/api/runs/${c1!.id}/resume`, { payload: { approved: true } }, bearer)
      assert.deepStrictEqual([byId.status, byId.body], [200, { id: c1!.id }])
      const byToken = yield* postJson(`${origin}/api/tokens/tok-2/resume`, { payload: { approved: false } }, bearer)
      assert.deepStrictEqual([byToken.status, byToken.body], [200, { id: second }])
      assert.deepStrictEqual((yield* stores.a.get(second)).signals, {
        approval: { _tag: "Signalled", payload: { approved: false } }
      })
    }))

  it.live("bulk enqueue writes every run in one batch, or none: a bad run is a 400 naming its index and nothing is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const url = `${origin}/api/runs/bulk/enqueue`
      const good = (i: number) => ({ kind: "refund", payload: { order: `B-${i}`, amount: i } })
      const before = yield* snapshot(stores)
      const cases: Array<[string, unknown, number, string, RegExp]> = [
        [
          "a payload that fails its schema",
          { runs: [good(1), { kind: "refund", payload: { order: 2 } }] },
          400,
          "invalid-payload",
          /run 1: /
        ],
        [
          "an unknown kind",
          { runs: [good(1), good(2), { kind: "sms", payload: {} }] },
          400,
          "unknown-kind",
          /^run 2: unknown kind "sms"/
        ],
        ["a bad option", { runs: [{ ...good(1), priority: 1.5 }] }, 400, "invalid-option", /runs\[0\]\.priority/],
        ["no runs", { runs: [] }, 400, "invalid-request", /runs/],
        ["more than the most", { runs: Array.from({ length: 10_001 }, () => good(1)) }, 400, "invalid-request", /runs/]
      ]
      for (const [name, sent, status, error, message] of cases) {
        const answer = yield* postJson(url, sent, bearer)
        assert.deepStrictEqual([answer.status, answer.body.error], [status, error], name)
        assert.match(answer.body.message, message, name)
        assert.notInclude(answer.body.message, "\n", `${name}: one line`)
      }
      assert.strictEqual(yield* snapshot(stores), before, "nothing written by the refused batches")
      const enqueued = yield* postJson(
        url,
        { runs: [good(1), { ...good(2), queue: "money", idempotencyKey: "k-2" }] },
        bearer
      )
      assert.strictEqual(enqueued.status, 201)
      assert.strictEqual(enqueued.body.runs.length, 2)
      const [first, second] = enqueued.body.runs as Array<{ id: string; created: boolean }>
      assert.deepInclude(yield* stores.a.get(first!.id), { kind: "refund", payload: { order: "B-1", amount: 1 } })
      assert.deepInclude(yield* stores.a.get(second!.id), { queue: "money", idempotencyKey: "k-2" })
      const again = yield* postJson(url, { runs: [{ ...good(2), queue: "money", idempotencyKey: "k-2" }] }, bearer)
      assert.deepStrictEqual([again.status, again.body], [200, { runs: [{ id: second!.id, created: false }] }])
    }))

  it.live("resume by id or by token refuses a payload the signal's declared schema does not decode: 400 in one line, nothing written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const approve = Handler.make({
        kind: "approve",
        payload: Schema.Struct({}),
        signals: { approval: Schema.Struct({ approved: Schema.Boolean }) },
        handle: () => Effect.void
      })
      const { origin } = yield* startServer(stores, { handlers: [approve], token })
      const id = (yield* stores.a.enqueue([{ kind: "approve", payload: {} }]))[0]!.id
      const [held] = yield* stores.a.claim({ owner: "w", queues: ["default"], kinds: ["approve"], limit: 1, ttl })
      yield* stores.a.suspend({ runId: id, fence: held!.fence, signal: "approval", token: "tok-a", timeout: undefined })
      const before = yield* snapshot(stores)
      const refused = yield* postJson(`${origin}/api/runs/${id}/resume`, { payload: { approved: "yes" } }, bearer)
      assert.deepStrictEqual([refused.status, refused.body.error], [400, "invalid-payload"])
      assert.match(refused.body.message, /^invalid payload for kind "approve \(signal approval\)": /)
      assert.notInclude(refused.body.message, "\n")
      const byToken = yield* postJson(`${origin}/api/tokens/tok-a/resume`, { payload: {} }, bearer)
      assert.deepStrictEqual([byToken.status, byToken.body.error], [400, "invalid-payload"])
      assert.match(byToken.body.message, /signal approval/)
      assert.strictEqual(yield* snapshot(stores), before)
      const resumed = yield* postJson(`${origin}/api/runs/${id}/resume`, { payload: { approved: true } }, bearer)
      assert.deepStrictEqual([resumed.status, resumed.body], [200, { id }])
    }))

  it.live("bulk cancel and retry by filter return the ids they moved; an empty filter is refused", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const ids = [yield* enqueue(stores, "A-1"), yield* enqueue(stores, "A-2"), yield* enqueue(stores, "B-1")]
      const before = yield* snapshot(stores)
      const everything = yield* postJson(`${origin}/api/runs/bulk/cancel`, {}, bearer)
      assert.deepStrictEqual([everything.status, everything.body.error], [400, "invalid-request"])
      assert.strictEqual(yield* snapshot(stores), before)
      const cancelled = yield* postJson(
        `${origin}/api/runs/bulk/cancel`,
        { kind: "refund", payload: { order: "A-1" } },
        bearer
      )
      assert.deepStrictEqual(cancelled.body, { affected: [ids[0]] })
      const rest = yield* postJson(`${origin}/api/runs/bulk/cancel`, { state: "pending" }, bearer)
      assert.deepStrictEqual(rest.body.affected.toSorted(), [ids[1], ids[2]].toSorted())
      const retried = yield* postJson(`${origin}/api/runs/bulk/retry`, { kind: "refund" }, bearer)
      assert.deepStrictEqual(retried.body.affected.toSorted(), ids.toSorted())
      for (const id of ids) assert.strictEqual((yield* stores.a.get(id)).state, "pending")
    }))

  it.live("rate limits are put, listed with their starts under /api/limits, and deleted; a bad limit is 400 naming the option and writes nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const put = (scope: string, name: string, body: unknown) =>
        request(`${origin}/api/rate-limits/${scope}/${name}`, {
          method: "PUT",
          headers: { "content-type": "application/json", ...bearer },
          body: JSON.stringify(body)
        })
      const created = yield* put("kind", "refund", { limit: 1, intervalMs: 3_600_000, perKey: false })
      assert.deepStrictEqual([created.status, created.body], [200, {
        scope: "kind",
        name: "refund",
        limit: 1,
        intervalMs: 3_600_000,
        perKey: false
      }])
      yield* enqueue(stores, "R-1")
      yield* enqueue(stores, "R-2")
      const claimed = yield* stores.a.claim({ owner: "w", queues: ["default"], kinds: ["refund"], limit: 10, ttl })
      assert.lengthOf(claimed, 1, "one start per hour")
      const listed = (yield* request(`${origin}/api/limits`, { headers: bearer })).body
      assert.deepStrictEqual(listed.rateLimits, [{
        scope: "kind",
        name: "refund",
        limit: 1,
        intervalMs: 3_600_000,
        perKey: false,
        startedInWindow: 1,
        due: 1
      }])
      for (
        const [body, option] of [[{ limit: 0, intervalMs: 1000 }, "limit"], [{ limit: 5, intervalMs: 0 }, "interval"], [
          { limit: 5, intervalMs: -1 },
          "interval"
        ]] as const
      ) {
        const refused = yield* put("kind", "refund", body)
        assert.strictEqual(refused.status, 400, JSON.stringify(refused.body))
        assert.include(JSON.stringify(refused.body), option)
      }
      assert.strictEqual((yield* put("tenant", "refund", { limit: 5, intervalMs: 1000 })).status, 400)
      assert.strictEqual((yield* put("kind", "refund", { limit: "many", intervalMs: 1000 })).status, 400)
      const rows = yield* stores.sql.unsafe<{ per_interval: number; interval_ms: number }>(
        `SELECT per_interval, interval_ms FROM "${stores.schema}".rate_limits`
      )
      assert.deepStrictEqual(rows, [{ per_interval: 1, interval_ms: 3_600_000 }], "the refused limits wrote nothing")
      const removed = yield* request(`${origin}/api/rate-limits/kind/refund`, { method: "DELETE", headers: bearer })
      assert.deepStrictEqual([removed.status, removed.body], [200, { scope: "kind", name: "refund", removed: true }])
      assert.deepStrictEqual((yield* request(`${origin}/api/limits`, { headers: bearer })).body.rateLimits, [])
    }))

  it.live("queues pause and resume; schedules are put (created, then unchanged), listed with their next ticks, paused and resumed; bad input writes nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const paused = yield* postJson(`${origin}/api/queues/money/pause`, {}, bearer)
      assert.deepStrictEqual([paused.status, paused.body], [200, { queue: "money", paused: true, changed: true }])
      assert.deepStrictEqual(
        (yield* request(`${origin}/api/queues/paused`, { headers: bearer })).body.paused.map((q: any) => q.queue),
        ["money"]
      )
      assert.deepStrictEqual((yield* postJson(`${origin}/api/queues/money/resume`, {}, bearer)).body, {
        queue: "money",
        paused: false,
        changed: true
      })

      const put = (name: string, definition: unknown) =>
        request(`${origin}/api/schedules/${name}`, {
          method: "PUT",
          headers: { "content-type": "application/json", ...bearer },
          body: JSON.stringify(definition)
        })
      const definition = {
        cron: "0 3 * * *",
        timeZone: "Europe/Paris",
        kind: "refund",
        payload: { order: "N", amount: 1 },
        missed: "once"
      }
      const created = yield* put("nightly", definition)
      assert.deepStrictEqual([created.status, created.body], [201, { name: "nightly", outcome: "created" }])
      assert.deepStrictEqual((yield* put("nightly", definition)).body, { name: "nightly", outcome: "unchanged" })
      const [listed] = (yield* request(`${origin}/api/schedules`, { headers: bearer })).body.schedules
      assert.deepInclude(listed, {
        name: "nightly",
        cron: "0 3 * * *",
        timeZone: "Europe/Paris",
        missed: "once",
        paused: false
      })
      assert.strictEqual(listed.nextTicks.length, 3)

      const before = yield* snapshot(stores)
      const badCron = yield* put("other", { ...definition, cron: "61 * * * *" })
      assert.deepStrictEqual([badCron.status, badCron.body.error], [400, "invalid-option"])
      assert.match(badCron.body.message, /cron/)
      const badZone = yield* put("other", { ...definition, timeZone: "Mars/Olympus" })
      assert.deepStrictEqual([badZone.status, badZone.body.error], [400, "invalid-option"])
      const notJson = yield* request(`${origin}/api/schedules/other`, {
        method: "PUT",
        headers: { "content-type": "application/json", ...bearer },
        body: "{"
      })
      assert.strictEqual(notJson.status, 400)
      const unknown = yield* postJson(`${origin}/api/schedules/nope/pause`, {}, bearer)
      assert.deepStrictEqual([unknown.status, unknown.body.error], [404, "not-found"])
      assert.strictEqual(yield* snapshot(stores), before)

      assert.deepStrictEqual((yield* postJson(`${origin}/api/schedules/nightly/pause`, {}, bearer)).body, {
        name: "nightly",
        paused: true,
        changed: true
      })
      assert.deepStrictEqual(
        (yield* request(`${origin}/api/schedules`, { headers: bearer })).body.schedules[0].nextTicks,
        []
      )
      assert.deepStrictEqual((yield* postJson(`${origin}/api/schedules/nightly/resume`, {}, bearer)).body, {
        name: "nightly",
        paused: false,
        changed: true
      })
    }))

  it.live("the event stream delivers a change driven by the store's notifications", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const controller = new AbortController()
      yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
      const response = yield* Effect.promise(() =>
        fetch(`${origin}/api/events`, { headers: bearer, signal: controller.signal })
      )
      assert.strictEqual(response.status, 200)
      assert.match(response.headers.get("content-type")!, /^text\/event-stream/)
      const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader()
      let text = ""
      const readUntil = (needle: string) =>
        Effect.promise(async () => {
          while (!text.includes(needle)) {
            const { value, done } = await reader.read()
            if (done) throw new Error(`stream ended before ${needle}: ${text}`)
            text += value
          }
        })
      // Subscribed: what is sent from now on arrives.
      yield* readUntil("event: ready")
      const created = yield* postJson(`${origin}/api/runs`, {
        kind: "refund",
        payload: { order: "S-1", amount: 1 },
        queue: "live"
      }, bearer)
      assert.strictEqual(created.status, 201)
      yield* readUntil(`data: {"_tag":"RunsAvailable","queue":"live"}`)
      assert.include(text, "event: runs-available")
      yield* stores.a.cancel(created.body.id)
      yield* readUntil(`data: {"_tag":"RunCancelled","runId":"${created.body.id}"}`)
    }))

  it.live("every answer carries the Content-Security-Policy and nosniff headers, the console's files with their content types", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund] })
      for (const path of ["/api/runs", "/api/runs/999999", "/"]) {
        const answer = yield* request(`${origin}${path}`)
        assert.match(answer.headers.get("content-security-policy")!, /default-src 'self'/, path)
        assert.notInclude(answer.headers.get("content-security-policy")!, "unsafe-inline", path)
        assert.strictEqual(answer.headers.get("x-content-type-options"), "nosniff", path)
      }
      const page = yield* request(`${origin}/`)
      assert.strictEqual(page.status, 200)
      assert.match(page.headers.get("content-type")!, /^text\/html/)
    }))
})

describe("long names and tokens in paths, malformed and oversized URLs (issue 40)", () => {
  const rateLimits = (stores: Stores) =>
    Effect.orDie(stores.sql.unsafe<{ name: string }>(`SELECT name FROM "${stores.schema}".rate_limits ORDER BY name`))

  it.live("every route takes a name or token at its documented limit; one byte more is 400 naming the field and writes nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const at = (path: string) => `${origin}${path}`
      const send = (method: string, path: string, body: unknown = {}) =>
        request(at(path), {
          method,
          headers: { "content-type": "application/json", ...bearer },
          body: JSON.stringify(body)
        })
      const schedule = { cron: "0 3 * * *", kind: "refund", payload: { order: "N", amount: 1 } }
      const rate = { limit: 5, intervalMs: 1000 }
      // 255 bytes: 253 ASCII characters and a two-byte "é"; 1,024 bytes for a token.
      const name = "q".repeat(253) + "é"
      const signalToken = "t".repeat(1024)
      const e = encodeURIComponent

      const before = yield* snapshot(stores)
      const over = "q".repeat(256)
      const overToken = "t".repeat(1025)
      const refusals: ReadonlyArray<readonly [string, string, unknown, string]> = [
        ["POST", `/api/queues/${over}/pause`, {}, "queue"],
        ["POST", `/api/queues/${over}/resume`, {}, "queue"],
        ["PUT", `/api/schedules/${over}`, schedule, "name"],
        ["POST", `/api/schedules/${over}/pause`, {}, "name"],
        ["POST", `/api/schedules/${over}/resume`, {}, "name"],
        ["PUT", `/api/rate-limits/kind/${over}`, rate, "name"],
        ["DELETE", `/api/rate-limits/queue/${over}`, {}, "name"],
        ["POST", `/api/tokens/${overToken}/resume`, { payload: {} }, "token"]
      ]
      for (const [method, path, body, field] of refusals) {
        const refused = yield* send(method, path, body)
        assert.deepStrictEqual(
          [refused.status, refused.body.error],
          [400, "invalid-option"],
          `${method} ${path.slice(0, 40)}`
        )
        const bytes = field === "token" ? 1025 : 256
        const max = field === "token" ? 1024 : 255
        assert.strictEqual(
          refused.body.message,
          `invalid option ${field}: is ${bytes} bytes long, over the limit of ${max}`
        )
      }
      // A run id has no byte limit of its own: a long one reaches its route and is no run (the API's 404, not the router's).
      for (
        const [method, path] of [["GET", `/api/runs/${"9".repeat(200)}`], [
          "POST",
          `/api/runs/${"9".repeat(200)}/cancel`
        ]] as const
      ) {
        const unknown = yield* request(
          at(path),
          method === "GET"
            ? { headers: bearer }
            : { method, headers: { "content-type": "application/json", ...bearer }, body: "{}" }
        )
        assert.deepStrictEqual([unknown.status, unknown.body.error], [404, "not-found"], path.slice(0, 40))
      }
      assert.strictEqual(yield* snapshot(stores), before)
      assert.deepStrictEqual(yield* rateLimits(stores), [])

      const paused = yield* send("POST", `/api/queues/${e(name)}/pause`)
      assert.deepStrictEqual([paused.status, paused.body], [200, { queue: name, paused: true, changed: true }])
      const pausedRows = yield* stores.sql.unsafe<{ queue: string }>(
        `SELECT queue FROM "${stores.schema}".paused_queues`
      )
      assert.deepStrictEqual(pausedRows.map((r) => r.queue), [name])
      assert.deepStrictEqual((yield* send("POST", `/api/queues/${e(name)}/resume`)).body, {
        queue: name,
        paused: false,
        changed: true
      })

      assert.deepStrictEqual((yield* send("PUT", `/api/schedules/${e(name)}`, schedule)).body, {
        name,
        outcome: "created"
      })
      assert.deepStrictEqual((yield* send("POST", `/api/schedules/${e(name)}/pause`)).body, {
        name,
        paused: true,
        changed: true
      })
      assert.deepStrictEqual((yield* send("POST", `/api/schedules/${e(name)}/resume`)).body, {
        name,
        paused: false,
        changed: true
      })

      const kind = "k".repeat(255)
      assert.deepStrictEqual((yield* send("PUT", `/api/rate-limits/kind/${kind}`, rate)).status, 200)
      assert.deepStrictEqual((yield* rateLimits(stores)).map((r) => r.name), [kind])
      assert.deepStrictEqual((yield* send("DELETE", `/api/rate-limits/kind/${kind}`)).body, {
        scope: "kind",
        name: kind,
        removed: true
      })

      const id = yield* enqueue(stores, "T-1")
      const [claimed] = yield* stores.a.claim({ owner: "w", queues: ["default"], kinds: ["refund"], limit: 1, ttl })
      yield* stores.a.suspend({
        runId: claimed!.id,
        fence: claimed!.fence,
        signal: "approval",
        token: signalToken,
        timeout: undefined
      })
      const resumed = yield* send("POST", `/api/tokens/${signalToken}/resume`, { payload: { approved: true } })
      assert.deepStrictEqual([resumed.status, resumed.body], [200, { id }])
      assert.strictEqual((yield* stores.a.get(id)).state, "pending")
    }))

  it.live("a path that is not percent-encoded UTF-8 is 400 with one message; a 100 KB URL is 414; nothing is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [refund], token })
      const before = yield* snapshot(stores)
      // A cut sequence, a stray %, an encoded lone surrogate (U+D800 as UTF-8 bytes), an invalid byte.
      for (const segment of ["%E2%82", "100%", "%ED%A0%80", "%FF"]) {
        for (const path of [`/api/queues/${segment}/pause`, `/callbacks/1/${segment}?exp=1&sig=x`]) {
          const refused = yield* postJson(`${origin}${path}`, {}, bearer)
          assert.deepStrictEqual(
            [refused.status, refused.body],
            [400, {
              error: "malformed-path",
              message: "the path is not valid percent-encoded UTF-8 (a stray %, or bytes that are not UTF-8)"
            }],
            path
          )
        }
      }
      const long = yield* request(`${origin}/api/runs?kind=${"k".repeat(100 * 1024)}`, { headers: bearer })
      assert.deepStrictEqual([long.status, long.body.error], [414, "uri-too-long"])
      const longPost = yield* postJson(`${origin}/api/queues/${"q".repeat(100 * 1024)}/pause`, {}, bearer)
      assert.deepStrictEqual([longPost.status, longPost.body.error], [414, "uri-too-long"])
      assert.strictEqual(yield* snapshot(stores), before)
      // The server still answers.
      assert.strictEqual((yield* request(`${origin}/api/runs`, { headers: bearer })).status, 200)
    }))
})

describe("mounted in an application's own server", () => {
  it.live("the routes sit beside the application's own, on its router and server", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const app = Layer.mergeAll(
        Server.layerRoutes({ host: "127.0.0.1", callbacksOnly: true }),
        HttpRouter.add("GET", "/health", HttpServerResponse.text("ok"))
      )
      // What the routes need is provided to the served application, as for any route.
      const context = yield* Layer.build(
        HttpRouter.serve(app, { disableLogger: true }).pipe(
          Layer.provide(Layer.mergeAll(
            Callbacks.layer(callbacksOptions({})),
            Handlers.layer([refund]),
            Layer.succeed(RunStore, stores.a)
          )),
          Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" }))
        )
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      const origin = `http://127.0.0.1:${address._tag === "UnixPathAddress" ? 0 : address.port}`
      assert.strictEqual((yield* request(`${origin}/health`)).body, "ok")
      const exp = Math.floor(Date.now() / 1000) + 60
      const unknown = yield* postJson(callbackUrl(origin, secretNew, "999999", "approval", exp), {})
      assert.deepStrictEqual([unknown.status, unknown.body.error], [404, "run-not-found"])
      // Callbacks only: no admin API here.
      assert.strictEqual((yield* request(`${origin}/api/runs`)).status, 404)
    }))
})

describe("leasehold serve", () => {
  it.live("serves the API with the environment's token and never prints the token or the secrets", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const env = {
        LEASEHOLD_ADMIN_TOKEN: token,
        LEASEHOLD_CALLBACK_SECRETS: secretNew,
        LEASEHOLD_WEBHOOK_SECRETS: webhookSecret
      }
      const { child, exited } = yield* background(["serve", "--port", "0", ...connection(stores.schema)], { env })
      let stdout = ""
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => void (stdout += chunk))
      const origin = yield* eventually(
        "the server says where it listens",
        Effect.sync(() => /serving on (http:\/\/\S+)/.exec(stdout)?.[1])
      )
      assert.strictEqual((yield* request(`${origin}/api/runs`)).status, 401)
      assert.strictEqual((yield* request(`${origin}/api/runs`, { headers: bearer })).status, 200)
      child.kill("SIGTERM")
      const result = yield* Effect.promise(() => exited)
      for (const secret of [token, secretNew, webhookSecret]) {
        assert.notInclude(result.stdout + stdout, secret)
        assert.notInclude(result.stderr, secret)
      }
    }))

  it.live("--callbacks-only serves only the callback route; --read-only refuses writes", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const env = { LEASEHOLD_ADMIN_TOKEN: token, LEASEHOLD_CALLBACK_SECRETS: secretNew }
      const started = (args: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const { child } = yield* background(["serve", "--port", "0", ...args, ...connection(stores.schema)], { env })
          let stdout = ""
          child.stdout!.setEncoding("utf8").on("data", (chunk: string) => void (stdout += chunk))
          const origin = yield* eventually(
            "the server listens",
            Effect.sync(() => /serving on (http:\/\/\S+)/.exec(stdout)?.[1])
          )
          return { origin, line: () => stdout }
        })
      const callbacksOnly = yield* started(["--callbacks-only"])
      assert.include(callbacksOnly.line(), "(callbacks only)")
      assert.strictEqual((yield* request(`${callbacksOnly.origin}/api/runs`, { headers: bearer })).status, 404)
      const exp = Math.floor(Date.now() / 1000) + 60
      const unknown = yield* postJson(callbackUrl(callbacksOnly.origin, secretNew, "999999", "approval", exp), {})
      assert.deepStrictEqual([unknown.status, unknown.body.error], [404, "run-not-found"])

      const readOnly = yield* started(["--read-only"])
      assert.include(readOnly.line(), "(read-only)")
      const id = yield* enqueue(stores, "R-1")
      const before = yield* snapshot(stores)
      const refused = yield* postJson(`${readOnly.origin}/api/runs/${id}/cancel`, {}, bearer)
      assert.deepStrictEqual([refused.status, refused.body.error], [403, "read-only"])
      assert.strictEqual(yield* snapshot(stores), before)
    }))

  it.live("without callback secrets: the admin API and the console alone, saying the callback route is off", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { child } = yield* background(["serve", "--port", "0", ...connection(stores.schema)], {
        env: { LEASEHOLD_ADMIN_TOKEN: token, LEASEHOLD_CALLBACK_SECRETS: "" }
      })
      let stdout = ""
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => void (stdout += chunk))
      const origin = yield* eventually(
        "the server listens",
        Effect.sync(() => /serving on (http:\/\/\S+)/.exec(stdout)?.[1])
      )
      assert.include(stdout, "(no callback route: LEASEHOLD_CALLBACK_SECRETS is not set)")
      assert.strictEqual((yield* request(`${origin}/api/runs`, { headers: bearer })).status, 200)
      assert.strictEqual((yield* request(`${origin}/`, { headers: bearer })).status, 200, "the console")
      const exp = Math.floor(Date.now() / 1000) + 60
      assert.strictEqual((yield* postJson(callbackUrl(origin, secretNew, "999999", "approval", exp), {})).status, 404)
    }))

  it.live("callbacks only without secrets, a secret set but invalid, or no token on a public address: one line naming the variable, exit 2", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const callbacksOnly = yield* leasehold(
        ["serve", "--port", "0", "--callbacks-only", ...connection(stores.schema)],
        {
          env: { LEASEHOLD_CALLBACK_SECRETS: "" }
        }
      )
      assert.strictEqual(callbacksOnly.code, 2)
      assert.match(callbacksOnly.stderr, /^leasehold: invalid option LEASEHOLD_CALLBACK_SECRETS: /)
      assert.strictEqual(callbacksOnly.stderr.split("\n").filter((l) => l.length > 0).length, 1)
      const invalid = yield* leasehold(["serve", "--port", "0", ...connection(stores.schema)], {
        env: { LEASEHOLD_CALLBACK_SECRETS: "short" }
      })
      assert.strictEqual(invalid.code, 2)
      assert.match(invalid.stderr, /^leasehold: invalid option LEASEHOLD_CALLBACK_SECRETS: /)
      const open = yield* leasehold(["serve", "--port", "0", "--host", "0.0.0.0", ...connection(stores.schema)], {
        env: { LEASEHOLD_CALLBACK_SECRETS: secretNew, LEASEHOLD_ADMIN_TOKEN: "" }
      })
      assert.strictEqual(open.code, 2)
      assert.match(open.stderr, /LEASEHOLD_ADMIN_TOKEN/)
    }))
})
