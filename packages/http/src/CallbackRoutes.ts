/**
 * `POST /callbacks/:runId/:signal?exp&sig`: delivers the JSON body as the signal's outcome. Every
 * check happens before the one write (`RunStore.deliverSignal`), so every refusal writes nothing.
 *
 * | status | when |
 * | --- | --- |
 * | 200 | resumed, recorded before the run suspended, or the same outcome delivered again (no-op) |
 * | 400 | the signal name is over 255 bytes; the body is not JSON, fails the schema the handler declares for the signal, or holds a value the store cannot keep (a NUL) |
 * | 401 | `exp` or `sig` missing; Standard Webhooks headers incomplete, stale, unverifiable or wrong, or absent where they are required |
 * | 403 | the signature does not match the run, signal and expiry, or `exp` is not 1 to 12 digits |
 * | 404 | no such run |
 * | 405 | any method but POST |
 * | 409 | a different outcome was delivered first, or this `webhook-id` was seen before |
 * | 410 | the URL expired, the signal timed out, or the run finished |
 * | 413 | the body is over the limit (1 MiB by default) |
 * | 415 | the content type is not JSON (`application/json` or `application/<x>+json`, UTF-8) |
 * | 503 | the store failed: nothing is known, retry |
 *
 * @since 0.1.0
 */
import { Handler, Limits, type OperatorActions, RunStore } from "@leasehold/core"
import { Clock, Effect, Option } from "effect"
import { HttpRouter, HttpServerRequest } from "effect/http"
import { Callbacks } from "./Callbacks.js"
import { Handlers } from "./Handlers.js"
import { parseExp } from "./internal/CallbackSignature.js"
import {
  bodyFailureResponse,
  json,
  notJson,
  parseJson,
  postOnly,
  problem,
  readBody,
  secure,
  storeFailureResponse
} from "./internal/Http.js"

/** Who a signed callback's resume is recorded as (its signature is the credential; its holder is unnamed). @category constants */
export const callbackActor: OperatorActions.Actor = { name: "callback", via: "callback" }

/** @category models */
export interface CallbackRoutesOptions {
  /** Largest accepted body in bytes. Default 1 MiB. */
  readonly maxBodySize?: number | undefined
  /** A path prefix to serve the route under (`/hooks` → `/hooks/callbacks/...`); `Callbacks.baseUrl` must include it. */
  readonly prefix?: string | undefined
}

/** The path the routes answer on (relative to where they are mounted). @category constants */
export const path = "/callbacks/:runId/:signal" as const

const deliver = (options: CallbackRoutesOptions) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const query = yield* HttpServerRequest.ParsedSearchParams
    const params = yield* HttpRouter.params
    const callbacks = yield* Callbacks
    const store = yield* RunStore
    const handlers = yield* Effect.serviceOption(Handlers)
    const limit = options.maxBodySize ?? 1024 * 1024
    const runId = params.runId ?? ""
    const signal = params.signal ?? ""
    const exp = typeof query.exp === "string" ? query.exp : undefined
    const sig = typeof query.sig === "string" ? query.sig : undefined

    // Over its documented limit, no handler could have minted the URL: named, before any check reads.
    const signalIssue = Limits.textIssue(signal, Limits.maxSignalBytes)
    if (signalIssue !== undefined) return problem(400, "invalid-signal", `signal ${signalIssue}`)
    if (exp === undefined || sig === undefined) {
      return problem(401, "signature-missing", "the callback URL needs its exp and sig parameters")
    }
    // Refused before the signature is checked: only digits can name an expiry that passes.
    const expSeconds = parseExp(exp)
    if (expSeconds === undefined) return problem(403, "exp-invalid", "exp must be unix seconds, 1 to 12 digits")
    if (!callbacks.verify(runId, signal, exp, sig)) {
      return problem(403, "signature-invalid", "the signature does not match this run, signal and expiry")
    }
    const now = yield* Clock.currentTimeMillis
    if (expSeconds * 1000 <= now) return problem(410, "expired", "this callback URL has expired")
    const contentType = notJson(request.headers["content-type"])
    if (contentType !== undefined) return contentType

    const body = yield* Effect.result(readBody(request, limit))
    if (body._tag === "Failure") return bodyFailureResponse(body.failure, limit)

    const headers = request.headers
    let deliveryId: string | undefined
    const webhook = ["webhook-id", "webhook-timestamp", "webhook-signature"].some((name) => headers[name] !== undefined)
    if (!webhook && callbacks.webhookSignatureRequired) {
      return problem(
        401,
        "webhook-signature-required",
        "this server accepts callbacks only with a Standard Webhooks signature (webhook-id, webhook-timestamp, webhook-signature)"
      )
    }
    if (webhook) {
      const verified = callbacks.verifyWebhook({
        id: headers["webhook-id"],
        timestamp: headers["webhook-timestamp"],
        signature: headers["webhook-signature"],
        body: body.success,
        nowMillis: now
      })
      if (verified._tag === "Invalid") return problem(401, "webhook-invalid", verified.reason)
      deliveryId = verified.id
    }

    const parsed = parseJson(body.success)
    if (parsed === undefined) return problem(400, "invalid-json", "the body is not JSON")

    // The body must match the schema the run's handler declares for this signal, when it does.
    const run = yield* store.get(runId)
    const handler = Option.isSome(handlers) ? handlers.value.get(run.kind) : undefined
    if (handler !== undefined) yield* Handler.decodeSignal(handler, signal, parsed.value)

    const delivery = yield* store.deliverSignal({
      runId,
      signal,
      payload: parsed.value,
      deliveryId,
      actor: callbackActor
    })
    switch (delivery._tag) {
      case "Resumed":
        return json(200, { status: "resumed", runId })
      case "Recorded":
        return json(200, { status: "recorded", runId })
      case "Duplicate":
        return json(200, { status: "duplicate", runId })
      case "Conflict":
        return problem(409, "conflict", "a different outcome was delivered for this signal first")
      case "Replayed":
        return problem(409, "replayed", "this webhook-id was delivered before")
      case "Gone":
        return problem(
          410,
          delivery.reason,
          delivery.reason === "timed-out" ? "the signal timed out" : "the run has finished"
        )
    }
  }).pipe(
    Effect.catchTags({
      RunNotFound: () => Effect.succeed(problem(404, "run-not-found", "no such run")),
      InvalidPayload: (e) => Effect.succeed(problem(400, "invalid-payload", e.issue)),
      UnstorableValue: (e) => Effect.succeed(problem(400, "unstorable", e.message)),
      // The store's own failure: what happened is unknown, the sender should retry. Its cause is
      // logged, not sent. A value the database refused is the sender's: retrying cannot help.
      StoreError: (e) => storeFailureResponse(e, "callback delivery", "try again")
    }),
    Effect.map(secure)
  )

/**
 * The callback route, added to the application's `HttpRouter`. Requires `Callbacks` and
 * `RunStore`; checks bodies against `Handlers` when that is provided.
 *
 * @category layers
 */
export const layer = (options: CallbackRoutesOptions = {}) =>
  postOnly(path, deliver(options), "callbacks", options.prefix)
