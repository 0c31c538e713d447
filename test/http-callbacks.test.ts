/**
 * Callback URLs over a real server and a real PostgreSQL: every status code of
 * `POST /callbacks/:runId/:signal`, each refusal checked as "nothing written" in the database,
 * Standard Webhooks verification with replay refusal, key rotation, stable URLs, and a callback
 * that races a reclaim.
 */
import { assert, describe, it } from "@effect/vitest"
import { CurrentRun, Fence, Handler, Run, RunHistory, RunStore } from "@leasehold/core"
import { Callback, Callbacks } from "@leasehold/http"
import { Duration, Effect, Redacted, Schema } from "effect"
import {
  at,
  callbacksOptions,
  callbackUrl,
  legacySignature,
  postJson,
  request,
  secretNew,
  secretOld,
  signature,
  snapshot,
  startServer,
  webhookHeaders
} from "./support/http.js"
import { expireLease, type Stores, twoStores } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

const callbacks = Effect.runSync(Callbacks.make(callbacksOptions({ secrets: [secretNew, secretOld] })))

const approve = Handler.make({
  kind: "approve",
  payload: Schema.Struct({ order: Schema.String }),
  signals: { approval: Schema.Struct({ approved: Schema.Boolean }) },
  handle: ({ order }) =>
    Effect.gen(function*() {
      yield* Callback.url("approval", { expiresIn: "1 hour" })
      const outcome = yield* Run.awaitSignal("approval", { token: `approve-${order}` })
      return { order, outcome }
    }).pipe(Effect.provideService(Callbacks.Callbacks, callbacks))
})

const ttl = Duration.seconds(30)

/** A claimed run (fence 1 unless reclaimed) and its callback URL for `signal`, under that fence. */
const claimWithUrl = (stores: Stores, signal = "approval", order = "A-1") =>
  Effect.gen(function*() {
    const [enqueued] = yield* stores.a.enqueue([{ kind: "approve", payload: { order } }])
    const runId = enqueued!.id
    const [claimed] = yield* stores.a.claim({ owner: "test", queues: ["default"], kinds: ["approve"], limit: 1, ttl })
    assert.strictEqual(claimed!.id, runId)
    const url = yield* urlUnder(stores, runId, claimed!.fence, signal)
    return { runId, fence: claimed!.fence, url }
  })

const urlUnder = (
  stores: Stores,
  runId: string,
  fence: number,
  signal = "approval",
  expiresIn: Duration.Input = "1 hour"
) =>
  Callback.url(signal, { expiresIn }).pipe(
    Effect.provideService(Fence, { runId, fence, owner: "test" }),
    Effect.provideService(RunStore, stores.a),
    Effect.provideService(Callbacks.Callbacks, callbacks)
  )

/** A run suspended on `signal`, with its callback URL. */
const suspended = (stores: Stores, signal = "approval", order = "A-1") =>
  Effect.gen(function*() {
    const run = yield* claimWithUrl(stores, signal, order)
    const outcome = yield* stores.a.suspend({
      runId: run.runId,
      fence: run.fence,
      signal,
      token: `t-${order}`,
      timeout: undefined
    })
    assert.strictEqual(outcome._tag, "Suspended")
    return run
  })

const runRow = (stores: Stores, runId: string) =>
  Effect.map(
    stores.sql.unsafe<{ state: string; fence: bigint; signals: Record<string, unknown> }>(
      `SELECT state, fence, signals FROM "${stores.schema}".runs_now WHERE id = ${Number(runId)}`
    ),
    (rows) => ({ ...rows[0]!, fence: Number(rows[0]!.fence) })
  ).pipe(Effect.orDie)

/** A POST whose body is streamed in 64 KiB chunks, so no content-length announces its size. */
const chunked = (size: number): RequestInit => {
  let sent = 0
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const n = Math.min(64 * 1024, size - sent)
      if (n <= 0) return controller.close()
      controller.enqueue(new Uint8Array(n).fill(32))
      sent += n
    }
  })
  return { method: "POST", headers: { "content-type": "application/json" }, body, duplex: "half" } as RequestInit
}

describe("callback URLs", () => {
  it.live("a signed callback resumes the run; the same outcome again is a 200 no-op, a different one 409, both writing nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const run = yield* suspended(stores)
      const url = at(origin, run.url)

      const resumed = yield* postJson(url, { approved: true })
      assert.strictEqual(resumed.status, 200)
      assert.deepStrictEqual(resumed.body, { status: "resumed", runId: run.runId })
      const row = yield* runRow(stores, run.runId)
      assert.strictEqual(row.state, "pending")
      assert.deepStrictEqual(row.signals, { approval: { _tag: "Signalled", payload: { approved: true } } })
      // The resume is recorded as the signed callback's.
      const resumes = RunHistory.fromEvents(yield* stores.a.history(run.runId)).adminActions
      assert.deepInclude(resumes[0], { action: "resumed", by: "callback", via: "callback" })

      const before = yield* snapshot(stores)
      const again = yield* postJson(url, { approved: true })
      assert.strictEqual(again.status, 200)
      assert.deepStrictEqual(again.body, { status: "duplicate", runId: run.runId })
      const conflict = yield* postJson(url, { approved: false })
      assert.strictEqual(conflict.status, 409)
      assert.strictEqual(conflict.body.error, "conflict")
      assert.strictEqual(yield* snapshot(stores), before)
    }))

  it.live("the same run and signal yield the same URL twice, and it is the URL the specification describes", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const run = yield* claimWithUrl(stores)
      const second = yield* urlUnder(stores, run.runId, run.fence)
      assert.strictEqual(second, run.url)
      const url = new URL(run.url)
      assert.strictEqual(
        `${url.origin}${url.pathname}`,
        `https://callbacks.example.test/callbacks/${run.runId}/approval`
      )
      const exp = url.searchParams.get("exp")!
      assert.match(exp, /^\d+$/)
      // Signed with the first secret, as base64url HMAC-SHA256 over v1.<run>.<signal>.<exp>.
      assert.strictEqual(url.searchParams.get("sig"), signature(secretNew, run.runId, "approval", exp))
      // A superseded holder cannot ask for one.
      yield* expireLease(stores, run.runId)
      yield* stores.b.claim({ owner: "other", queues: ["default"], kinds: ["approve"], limit: 1, ttl })
      const stale = yield* Effect.flip(urlUnder(stores, run.runId, run.fence))
      assert.deepInclude(stale, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 })
    }))

  it.live("every refusal answers its status and reason and writes nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const run = yield* suspended(stores, "approval", "A-1")
      const other = yield* suspended(stores, "approval", "B-2")
      const url = new URL(at(origin, run.url))
      const exp = Number(url.searchParams.get("exp"))
      const sig = url.searchParams.get("sig")!
      const base = `${origin}/callbacks/${run.runId}/approval`
      const before = yield* snapshot(stores)

      const cases: Array<[string, Effect.Effect<{ status: number; body: any }>, number, string]> = [
        ["no sig", postJson(`${base}?exp=${exp}`, { approved: true }), 401, "signature-missing"],
        ["no exp", postJson(`${base}?sig=${sig}`, { approved: true }), 401, "signature-missing"],
        [
          "tampered sig",
          postJson(`${base}?exp=${exp}&sig=${sig.slice(0, -2)}AA`, { approved: true }),
          403,
          "signature-invalid"
        ],
        [
          "tampered exp",
          postJson(`${base}?exp=${exp + 3600}&sig=${sig}`, { approved: true }),
          403,
          "signature-invalid"
        ],
        [
          "tampered run",
          postJson(`${origin}/callbacks/${other.runId}/approval${url.search}`, { approved: true }),
          403,
          "signature-invalid"
        ],
        [
          "tampered signal",
          postJson(`${origin}/callbacks/${run.runId}/other${url.search}`, { approved: true }),
          403,
          "signature-invalid"
        ],
        [
          "signed by an unknown key",
          postJson(callbackUrl(origin, "x".repeat(40), run.runId, "approval", exp), { approved: true }),
          403,
          "signature-invalid"
        ],
        [
          "expired",
          postJson(callbackUrl(origin, secretNew, run.runId, "approval", Math.floor(Date.now() / 1000) - 1), {
            approved: true
          }),
          410,
          "expired"
        ],
        [
          "unknown run",
          postJson(callbackUrl(origin, secretNew, "999999", "approval", exp), { approved: true }),
          404,
          "run-not-found"
        ],
        ["malformed JSON", postJson(url.href, "{\"approved\":", {}), 400, "invalid-json"],
        ["body fails the signal's schema", postJson(url.href, { approved: "yes" }), 400, "invalid-payload"],
        [
          "body over 1 MiB",
          postJson(url.href, { approved: true, pad: "x".repeat(1024 * 1024) }),
          413,
          "body-too-large"
        ],
        [
          "body over 1 MiB, chunked (no content-length)",
          request(url.href, chunked(1024 * 1024 + 1)),
          413,
          "body-too-large"
        ],
        ["GET", request(url.href), 405, "method-not-allowed"],
        ["PUT", request(url.href, { method: "PUT", body: "{}" }), 405, "method-not-allowed"]
      ]
      for (const [name, send, status, error] of cases) {
        const answer = yield* send
        assert.strictEqual(answer.status, status, name)
        assert.strictEqual(answer.body.error, error, name)
      }
      const get = yield* request(url.href)
      assert.strictEqual(get.headers.get("allow"), "POST")
      assert.strictEqual(yield* snapshot(stores), before)
      // The URL itself still works after all that.
      assert.strictEqual((yield* postJson(url.href, { approved: true })).status, 200)
    }))

  it.live("a run that finished or whose signal timed out answers 410 with the reason, writing nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const cancelled = yield* suspended(stores, "approval", "C-1")
      yield* stores.a.cancel(cancelled.runId)

      const timing = yield* claimWithUrl(stores, "approval", "T-1")
      yield* stores.a.suspend({
        runId: timing.runId,
        fence: timing.fence,
        signal: "approval",
        token: "t-T-1",
        timeout: Duration.millis(1)
      })
      // The deadline passes by the database's clock; the sweep records the time-out.
      yield* eventually(
        "the timed-out run is claimed again",
        Effect.map(
          stores.a.claim({ owner: "test", queues: ["default"], kinds: ["approve"], limit: 1, ttl }),
          (c) => c.length > 0
        )
      )

      const before = yield* snapshot(stores)
      const gone = yield* postJson(at(origin, cancelled.url), { approved: true })
      assert.strictEqual(gone.status, 410)
      assert.strictEqual(gone.body.error, "finished")
      const late = yield* postJson(at(origin, timing.url), { approved: true })
      assert.strictEqual(late.status, 410)
      assert.strictEqual(late.body.error, "timed-out")
      assert.strictEqual(yield* snapshot(stores), before)
    }))

  it.live("a store that fails answers 503 without its cause, and nothing is written; the same delivery later succeeds", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const run = yield* suspended(stores)
      const before = yield* snapshot(stores)
      // The store's table disappears from under it: every statement fails.
      yield* stores.sql.unsafe(`ALTER TABLE "${stores.schema}".runs RENAME TO runs_away`)
      const failed = yield* postJson(at(origin, run.url), { approved: true })
      yield* stores.sql.unsafe(`ALTER TABLE "${stores.schema}".runs_away RENAME TO runs`)
      assert.strictEqual(failed.status, 503)
      assert.deepStrictEqual(failed.body, { error: "store-unavailable", message: "try again" })
      assert.strictEqual(yield* snapshot(stores), before)
      const retried = yield* postJson(at(origin, run.url), { approved: true })
      assert.deepStrictEqual(retried.body, { status: "resumed", runId: run.runId })
    }))

  it.live("rotation: a URL signed with the old key still verifies, the service signs with the new one", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve], secrets: [secretNew, secretOld] })
      const run = yield* suspended(stores)
      const other = yield* suspended(stores, "approval", "B-2")
      assert.strictEqual(
        new URL(run.url).searchParams.get("sig"),
        signature(secretNew, run.runId, "approval", new URL(run.url).searchParams.get("exp")!)
      )
      const exp = Math.floor(Date.now() / 1000) + 600
      const old = yield* postJson(callbackUrl(origin, secretOld, run.runId, "approval", exp), { approved: true })
      assert.strictEqual(old.status, 200)
      assert.strictEqual(old.body.status, "resumed")

      // Once the old key is dropped, what it signed is refused.
      const { origin: rotated } = yield* startServer(stores, { handlers: [approve], secrets: [secretNew] })
      const before = yield* snapshot(stores)
      const refused = yield* postJson(callbackUrl(rotated, secretOld, other.runId, "approval", exp), { approved: true })
      assert.strictEqual(refused.status, 403)
      assert.strictEqual(yield* snapshot(stores), before)
      assert.strictEqual((yield* postJson(at(rotated, other.url), { approved: true })).status, 200)
    }))
})

describe("signatures that cannot be re-split (issue 27)", () => {
  it.live("the URL for signal approval.v2 does not verify as signal approval with exp=v2.<exp>, before or after it expires; nothing is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const run = yield* claimWithUrl(stores)
      const genuine = new URL(yield* urlUnder(stores, run.runId, run.fence, "approval.v2", "2 seconds"))
      const exp = genuine.searchParams.get("exp")!
      const sig = genuine.searchParams.get("sig")!
      // v1 signed `v1.<run>.approval.v2.<exp>`: the same text as signal `approval` with exp `v2.<exp>`.
      const resplit = `${origin}/callbacks/${run.runId}/approval?exp=v2.${exp}&sig=${sig}`
      const before = yield* snapshot(stores)

      const early = yield* postJson(resplit, { approved: true })
      assert.deepStrictEqual([early.status, early.body.error], [403, "exp-invalid"])
      yield* Effect.sleep(Duration.millis(Math.max(0, Number(exp) * 1000 - Date.now()) + 100))
      const expired = yield* postJson(at(origin, genuine.href), { approved: true })
      assert.deepStrictEqual([expired.status, expired.body.error], [410, "expired"])
      const late = yield* postJson(resplit, { approved: true })
      assert.deepStrictEqual([late.status, late.body.error], [403, "exp-invalid"])
      // The signal shifted into the exp's place, the other way round, is no better.
      const shifted = yield* postJson(`${origin}/callbacks/${run.runId}/approval.v2.${exp}?exp=&sig=${sig}`, {
        approved: true
      })
      assert.strictEqual(shifted.status, 403)

      assert.strictEqual(yield* snapshot(stores), before)
      assert.deepStrictEqual((yield* runRow(stores, run.runId)).signals, {})
    }))

  it.live("an exp that is not 1 to 12 digits is refused before anything is read, even when it is signed", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const run = yield* suspended(stores)
      const before = yield* snapshot(stores)
      const now = Math.floor(Date.now() / 1000)
      for (
        const exp of [
          "Infinity",
          "1e12",
          `${now + 3600}.5`,
          `+${now + 3600}`,
          ` ${now + 3600}`,
          "0x7fffffff",
          "9".repeat(13),
          "-1"
        ]
      ) {
        const url = `${origin}/callbacks/${run.runId}/approval?exp=${encodeURIComponent(exp)}&sig=${
          signature(secretNew, run.runId, "approval", exp)
        }`
        const answer = yield* postJson(url, { approved: true })
        assert.deepStrictEqual([answer.status, answer.body.error], [403, "exp-invalid"], exp)
      }
      assert.strictEqual(yield* snapshot(stores), before)
    }))

  it.live("a URL signed before v2 verifies where its text has one reading (digits, no dot in the signal), and only there", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const plain = yield* suspended(stores, "approval", "L-1")
      const dotted = yield* suspended(stores, "approval.v2", "L-2")
      const exp = Math.floor(Date.now() / 1000) + 600
      const before = yield* snapshot(stores)
      // Its re-split and a dotted signal's own v1 URL are refused.
      const resplit = yield* postJson(
        `${origin}/callbacks/${dotted.runId}/approval?exp=v2.${exp}&sig=${
          legacySignature(secretNew, dotted.runId, "approval.v2", exp)
        }`,
        { approved: true }
      )
      assert.deepStrictEqual([resplit.status, resplit.body.error], [403, "exp-invalid"])
      const dottedV1 = yield* postJson(
        `${origin}/callbacks/${dotted.runId}/approval.v2?exp=${exp}&sig=${
          legacySignature(secretNew, dotted.runId, "approval.v2", exp)
        }`,
        { approved: true }
      )
      assert.deepStrictEqual([dottedV1.status, dottedV1.body.error], [403, "signature-invalid"])
      assert.strictEqual(yield* snapshot(stores), before)
      const v1 = yield* postJson(
        `${origin}/callbacks/${plain.runId}/approval?exp=${exp}&sig=${
          legacySignature(secretNew, plain.runId, "approval", exp)
        }`,
        { approved: true }
      )
      assert.deepStrictEqual(v1.body, { status: "resumed", runId: plain.runId })
      // The dotted signal's v2 URL works.
      assert.deepStrictEqual((yield* postJson(at(origin, dotted.url), { approved: true })).body, {
        status: "resumed",
        runId: dotted.runId
      })
    }))
})

describe("one spelling of a signature (issue 40)", () => {
  it.live("a URL's sig or a webhook-signature with padding added or removed is refused and writes nothing; the canonical one resumes", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const run = yield* suspended(stores)
      const url = new URL(at(origin, run.url))
      const exp = url.searchParams.get("exp")!
      const sig = url.searchParams.get("sig")!
      const base = `${origin}/callbacks/${run.runId}/approval?exp=${exp}`
      const body = JSON.stringify({ approved: true })
      const before = yield* snapshot(stores)
      // base64url is written unpadded: any "=" (raw or percent-encoded) is another spelling.
      for (const variant of [`${sig}=`, `${sig}==`, `${sig}===`, `${sig}%3D`, `${sig}%3D%3D%3D%3D`]) {
        const answer = yield* postJson(`${base}&sig=${variant}`, body)
        assert.deepStrictEqual([answer.status, answer.body.error], [403, "signature-invalid"], variant)
      }
      // Standard Webhooks' base64 is padded: without it, or with more, it is not the signature.
      const headers = webhookHeaders("msg_pad", body)
      const canonical = headers["webhook-signature"]
      assert.match(canonical, /=$/)
      for (const variant of [canonical.replace(/=+$/, ""), `${canonical}=`, `${canonical}==`]) {
        const answer = yield* postJson(url.href, body, { ...headers, "webhook-signature": variant })
        assert.deepStrictEqual([answer.status, answer.body.message], [401, "no webhook-signature matches"], variant)
      }
      assert.strictEqual(yield* snapshot(stores), before)
      const delivered = yield* postJson(url.href, body, headers)
      assert.deepStrictEqual(delivered.body, { status: "resumed", runId: run.runId })
    }))
})

describe("long signal names (issue 40)", () => {
  it.live("a callback for a 255-byte signal resumes its run; 256 bytes is 400 naming the signal, even signed, and writes nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      // No handler declares these signals: the route checks no schema.
      const { origin } = yield* startServer(stores)
      const signal = "s".repeat(253) + "é"
      const run = yield* suspended(stores, signal)
      const over = "s".repeat(256)
      const exp = Math.floor(Date.now() / 1000) + 3600
      const before = yield* snapshot(stores)
      const refused = yield* postJson(callbackUrl(origin, secretNew, run.runId, over, exp), { approved: true })
      assert.deepStrictEqual([refused.status, refused.body], [400, {
        error: "invalid-signal",
        message: "signal is 256 bytes long, over the limit of 255"
      }])
      assert.strictEqual(yield* snapshot(stores), before)
      const answer = yield* postJson(at(origin, run.url), { approved: true })
      assert.deepStrictEqual([answer.status, answer.body], [200, { status: "resumed", runId: run.runId }])
      assert.strictEqual((yield* runRow(stores, run.runId)).state, "pending")
    }))

  it.live("end to end: the URL a worker's handler minted for a 120-character signal resumes the run, which completes under fence 2", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const signal = "approval-" + "x".repeat(111)
      const minted: Array<string> = []
      const long = Handler.make({
        kind: "approve-long",
        payload: Schema.Struct({}),
        signals: { [signal]: Schema.Struct({ approved: Schema.Boolean }) },
        handle: () =>
          Effect.gen(function*() {
            minted.push(yield* Callback.url(signal, { expiresIn: "1 hour" }))
            return yield* Run.awaitSignal(signal, { token: "long-1" })
          }).pipe(Effect.provideService(Callbacks.Callbacks, callbacks))
      })
      const { origin } = yield* startServer(stores, { handlers: [long] })
      yield* startWorker(stores.a, stores.sql, { handlers: [long], pollInterval: "100 millis" })
      const [enqueued] = yield* stores.a.enqueue([{ kind: "approve-long", payload: {} }])
      const runId = enqueued!.id
      yield* eventually("the run suspends", Effect.map(stores.a.get(runId), (r) => r.state === "suspended"))
      assert.strictEqual(signal.length, 120)
      assert.include(minted[0]!, `/callbacks/${runId}/${signal}?`)
      const answer = yield* postJson(at(origin, minted[0]!), { approved: true })
      assert.deepStrictEqual([answer.status, answer.body], [200, { status: "resumed", runId }])
      const done = yield* eventually(
        "the run completes",
        Effect.map(stores.a.get(runId), (r) => r.state === "completed" && r)
      )
      assert.strictEqual(done.fence, 2)
      assert.deepStrictEqual(done.result, { _tag: "Signalled", payload: { approved: true } })
    }))
})

describe("bad input to a callback (issue 27)", () => {
  it.live("a body jsonb refuses (a NUL) is 400 naming where it is; a non-JSON content type is 415; nothing is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const run = yield* suspended(stores)
      const recording = yield* claimWithUrl(stores, "approval", "R-1")
      const before = yield* snapshot(stores)
      for (const target of [run, recording]) {
        const nul = yield* postJson(at(origin, target.url), "{\"approved\":true,\"note\":\"a\\u0000b\"}")
        assert.strictEqual(nul.status, 400)
        assert.strictEqual(nul.body.error, "unstorable")
        assert.include(nul.body.message, "$.note holds a NUL")
        const key = yield* postJson(at(origin, target.url), "{\"approved\":true,\"\\u0000\":1}")
        assert.strictEqual(key.status, 400)
        assert.include(key.body.message, "(a key) holds a NUL")
      }
      for (
        const contentType of [
          "text/plain",
          "application/x-www-form-urlencoded",
          "application/json; charset=latin1",
          "application/jsonp"
        ]
      ) {
        const answer = yield* request(at(origin, run.url), {
          method: "POST",
          headers: { "content-type": contentType },
          body: "{\"approved\":true}"
        })
        assert.deepStrictEqual([answer.status, answer.body.error], [415, "unsupported-media-type"], contentType)
      }
      const none = yield* request(at(origin, run.url), { method: "POST", body: new Blob(["{\"approved\":true}"]) })
      assert.strictEqual(none.status, 415)
      assert.strictEqual(yield* snapshot(stores), before)
      assert.deepStrictEqual((yield* runRow(stores, recording.runId)).signals, {})
      // JSON by another name is accepted: +json and an explicit UTF-8 charset.
      const accepted = yield* postJson(at(origin, run.url), { approved: true }, {
        "content-type": "application/cloudevents+json; charset=UTF-8"
      })
      assert.deepStrictEqual(accepted.body, { status: "resumed", runId: run.runId })
    }))
})

describe("requiring the body's webhook signature (issue 27)", () => {
  it.live("by default with webhook secrets, a delivery without webhook-* headers is 401 and writes nothing; a signed one resumes", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      // The product's default: required, because webhook secrets are configured.
      const required = yield* Callbacks.make({ ...callbacksOptions({}), requireWebhookSignature: undefined })
      assert.isTrue(required.webhookSignatureRequired)
      const { origin } = yield* startServer(stores, { handlers: [approve], requireWebhookSignature: true })
      const run = yield* suspended(stores)
      const before = yield* snapshot(stores)
      const unsigned = yield* postJson(at(origin, run.url), { approved: true })
      assert.deepStrictEqual([unsigned.status, unsigned.body.error], [401, "webhook-signature-required"])
      assert.strictEqual(yield* snapshot(stores), before)
      const body = JSON.stringify({ approved: true })
      const signed = yield* postJson(at(origin, run.url), body, webhookHeaders("msg_req", body))
      assert.deepStrictEqual(signed.body, { status: "resumed", runId: run.runId })
    }))

  it.live("opted out (or without webhook secrets), the URL's signature is enough; requiring it without secrets is InvalidConfig", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve], requireWebhookSignature: false })
      const run = yield* suspended(stores)
      assert.deepStrictEqual((yield* postJson(at(origin, run.url), { approved: true })).body, {
        status: "resumed",
        runId: run.runId
      })
      const without = yield* Callbacks.make({
        ...callbacksOptions({ webhookSecrets: [] }),
        requireWebhookSignature: undefined
      })
      assert.isFalse(without.webhookSignatureRequired)
      const impossible = yield* Effect.flip(
        Callbacks.make({ ...callbacksOptions({ webhookSecrets: [] }), requireWebhookSignature: true })
      )
      assert.deepInclude(impossible, { _tag: "InvalidConfig", option: "LEASEHOLD_REQUIRE_WEBHOOK_SIGNATURE" })
    }))
})

describe("Callbacks configuration", () => {
  it.effect("a missing, short or malformed secret, or a bad base URL, is an InvalidConfig naming the option, never the value", () =>
    Effect.gen(function*() {
      const options = callbacksOptions({})
      const failures = yield* Effect.all([
        Effect.flip(Callbacks.make({ ...options, secrets: [] })),
        Effect.flip(Callbacks.make({ ...options, secrets: Redacted.make("short-secret") })),
        Effect.flip(Callbacks.make({ ...options, webhookSecrets: Redacted.make("whsec_not*base64") })),
        Effect.flip(Callbacks.make({ ...options, baseUrl: "ftp://example.test" }))
      ])
      assert.deepStrictEqual(failures.map((f) => f.option), [
        "LEASEHOLD_CALLBACK_SECRETS",
        "LEASEHOLD_CALLBACK_SECRETS",
        "LEASEHOLD_WEBHOOK_SECRETS",
        "baseUrl"
      ])
      for (const failure of failures) {
        assert.notInclude(failure.message, "short-secret")
        assert.notInclude(failure.message, "not*base64")
      }
      // Several secrets in one value, comma-separated: the first signs.
      const rotated = yield* Callbacks.make({ ...options, secrets: Redacted.make(`${secretNew}, ${secretOld}`) })
      assert.strictEqual(
        rotated.sign("7", "approval", "1900000000"),
        signature(secretNew, "7", "approval", "1900000000")
      )
      assert.isTrue(rotated.verify("7", "approval", "1900000000", signature(secretOld, "7", "approval", "1900000000")))
      assert.isFalse(rotated.verify("7", "approval", "1900000001", signature(secretOld, "7", "approval", "1900000000")))
    }))
})

describe("Standard Webhooks", () => {
  it.live("a verified delivery resumes the run; a replay, a stale timestamp, a tampered body or a wrong key is refused and writes nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      const run = yield* suspended(stores)
      const other = yield* suspended(stores, "approval", "B-2")
      const url = at(origin, run.url)
      const body = JSON.stringify({ approved: true })

      const stale = yield* postJson(
        url,
        body,
        webhookHeaders("msg_1", body, { timestamp: Math.floor(Date.now() / 1000) - 600 })
      )
      const future = yield* postJson(
        url,
        body,
        webhookHeaders("msg_1", body, { timestamp: Math.floor(Date.now() / 1000) + 600 })
      )
      const tampered = yield* postJson(url, JSON.stringify({ approved: false }), webhookHeaders("msg_1", body))
      const wrongKey = yield* postJson(
        url,
        body,
        webhookHeaders("msg_1", body, { key: Buffer.from("another key entirely, 32 bytes!!") })
      )
      const { "webhook-signature": _, ...incomplete } = webhookHeaders("msg_1", body)
      const missing = yield* postJson(url, body, incomplete)
      for (const [name, answer] of Object.entries({ stale, future, tampered, wrongKey, missing })) {
        assert.strictEqual(answer.status, 401, name)
        assert.strictEqual(answer.body.error, "webhook-invalid", name)
      }
      assert.strictEqual(stale.body.message, "webhook-timestamp is too far from now")
      assert.strictEqual(tampered.body.message, "no webhook-signature matches")
      const none = yield* snapshot(stores)
      assert.notInclude(none, "msg_1")

      // Several signatures may be sent; one that matches is enough.
      const headers = webhookHeaders("msg_1", body)
      const delivered = yield* postJson(url, body, {
        ...headers,
        "webhook-signature": `v1,AAAA ${headers["webhook-signature"]}`
      })
      assert.strictEqual(delivered.status, 200)
      assert.strictEqual(delivered.body.status, "resumed")
      const ids = yield* stores.sql.unsafe<{ id: string; run_id: string }>(
        `SELECT id, run_id::text FROM "${stores.schema}".signal_deliveries`
      )
      assert.deepStrictEqual(ids, [{ id: "msg_1", run_id: run.runId }])

      const before = yield* snapshot(stores)
      const replayed = yield* postJson(url, body, headers)
      assert.strictEqual(replayed.status, 409)
      assert.strictEqual(replayed.body.error, "replayed")
      // The same delivery id replayed against another run's URL is refused as well.
      const elsewhere = yield* postJson(at(origin, other.url), body, webhookHeaders("msg_1", body))
      assert.strictEqual(elsewhere.status, 409)
      assert.strictEqual(elsewhere.body.error, "replayed")
      assert.strictEqual(yield* snapshot(stores), before)
    }))
})

describe("a callback racing a reclaim", () => {
  it.live("the outcome counts once and the run completes once, under the higher fence", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      // Holder A (fence 1) hands out the URL, then stalls past its lease; B reclaims (fence 2).
      const a = yield* claimWithUrl(stores)
      yield* expireLease(stores, a.runId)
      const [b] = yield* stores.b.claim({ owner: "b", queues: ["default"], kinds: ["approve"], limit: 1, ttl })
      assert.strictEqual(b!.fence, 2)
      // B asks for the URL again: the same one (the expiry was fixed under fence 1).
      assert.strictEqual(yield* urlUnder(stores, a.runId, 2), a.url)

      // The callback lands while B runs and before anyone suspended: recorded, once.
      const first = yield* postJson(at(origin, a.url), { approved: true })
      assert.deepStrictEqual(first.body, { status: "recorded", runId: a.runId })
      const second = yield* postJson(at(origin, a.url), { approved: true })
      assert.deepStrictEqual(second.body, { status: "duplicate", runId: a.runId })

      const currentRun = {
        kind: "approve",
        queue: "default",
        attempt: 1,
        maxAttempts: 5,
        checkpoint: null,
        signals: {}
      }
      const awaitAs = (fence: number, store: RunStore["Service"]) =>
        Run.awaitSignal("approval", { token: "t-race" }).pipe(
          Effect.provideService(Fence, { runId: a.runId, fence, owner: fence === 1 ? "a" : "b" }),
          Effect.provideService(RunStore, store),
          Effect.provideService(CurrentRun, currentRun)
        )
      // A comes back: its suspension is refused by the fence.
      const stale = yield* Effect.flip(awaitAs(1, stores.a))
      assert.deepInclude(stale, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 })
      // B's awaitSignal returns the recorded outcome at once, without suspending.
      const outcome = yield* awaitAs(2, stores.b)
      assert.deepStrictEqual(outcome, { _tag: "Signalled", payload: { approved: true } })
      const done = yield* stores.b.completeBatch([{ runId: a.runId, fence: 2, result: "{}" }])
      assert.deepStrictEqual(done.map((d) => d._tag), ["Finalized"])
      const late = yield* stores.a.completeBatch([{ runId: a.runId, fence: 1, result: "{}" }])
      assert.deepStrictEqual(late.map((d) => d._tag), ["Rejected"])

      const row = yield* runRow(stores, a.runId)
      assert.strictEqual(row.state, "completed")
      assert.strictEqual(row.fence, 2)
      const events = yield* stores.a.history(a.runId)
      assert.strictEqual(events.filter((e) => e.kind === "signal_recorded").length, 1)
      assert.strictEqual(events.filter((e) => e.kind === "resumed").length, 0)
      assert.strictEqual(events.filter((e) => e.kind === "completed").length, 1)
      assert.strictEqual(events.find((e) => e.kind === "completed")!.fence, 2)
    }))
})

describe("end to end with a worker", () => {
  it.live("a handler hands out its URL and suspends; the callback resumes it and it completes under fence 2", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const { origin } = yield* startServer(stores, { handlers: [approve] })
      yield* startWorker(stores.a, stores.sql, { handlers: [approve], pollInterval: "100 millis" })
      const [enqueued] = yield* stores.a.enqueue([{ kind: "approve", payload: { order: "E-1" } }])
      const runId = enqueued!.id
      yield* eventually("the run suspends", Effect.map(stores.a.get(runId), (r) => r.state === "suspended"))
      const [stored] = yield* stores.sql.unsafe<{ expires_at: Date }>(
        `SELECT expires_at FROM "${stores.schema}".callbacks WHERE run_id = ${Number(runId)}`
      )
      const exp = Math.floor(stored!.expires_at.getTime() / 1000)
      const answer = yield* postJson(callbackUrl(origin, secretNew, runId, "approval", exp), { approved: true })
      assert.deepStrictEqual(answer.body, { status: "resumed", runId })
      const done = yield* eventually(
        "the run completes",
        Effect.map(stores.a.get(runId), (r) => r.state === "completed" && r)
      )
      assert.strictEqual(done.fence, 2)
      assert.deepStrictEqual(done.result, { order: "E-1", outcome: { _tag: "Signalled", payload: { approved: true } } })
    }))
})
