/**
 * Signed callback URLs for Effect workflows' durable deferreds. Effect's `DurableDeferred` tokens
 * are unsigned (anyone who can name an execution can complete its deferreds); a URL from `url`
 * carries an expiry and an HMAC over the workflow, the execution, the deferred and the expiry,
 * with the same secrets as run callbacks (`Callbacks`). `POST`ing JSON to it completes the deferred
 * with that value, through the `WorkflowEngine`; the first completion stands.
 *
 * | status | when |
 * | --- | --- |
 * | 202 | accepted: the deferred is completed with this value, or was completed before (the first stands) |
 * | 400 | the body is not JSON, does not decode with the deferred's success schema, or holds a value the journal cannot keep (a NUL) |
 * | 401 | `exp` or `sig` missing |
 * | 403 | the signature does not match the workflow, execution, deferred and expiry, or `exp` is not 1 to 12 digits |
 * | 404 | the route does not serve a deferred of that name |
 * | 405 | any method but POST |
 * | 410 | the URL expired |
 * | 413 | the body is over the limit (1 MiB by default) |
 * | 415 | the content type is not JSON (`application/json` or `application/<x>+json`, UTF-8) |
 * | 503 | the engine's store failed: nothing is known, retry |
 *
 * @since 0.1.0
 */
import { InvalidConfig, Json, Limits, type UnstorableValue } from "@leasehold/core"
import { Cause, Clock, Duration, Effect, Exit, Option, Schema } from "effect"
import { HttpRouter, HttpServerRequest } from "effect/http"
import type { DurableDeferred } from "effect/workflow"
import { WorkflowEngine, WorkflowInstance } from "effect/workflow/WorkflowEngine"
import { Callbacks } from "./Callbacks.js"
import { parseExp } from "./internal/CallbackSignature.js"
import { bodyFailureResponse, json, notJson, parseJson, postOnly, problem, readBody, secure } from "./internal/Http.js"

/** The path the route answers on. @category constants */
export const path = "/workflow-callbacks/:workflow/:execution/:deferred" as const

/** @category models */
export interface UrlOptions {
  /** How long the URL accepts deliveries, from now. */
  readonly expiresIn: Duration.Input
}

/**
 * The signed URL completing `deferred` of the workflow execution this runs in. Its expiry counts
 * from now: make it inside an activity, so that a replay hands out the recorded URL.
 *
 * @category constructors
 */
export const url = Effect.fn("DeferredCallbacks.url")(function*(deferred: DurableDeferred.Any, options: UrlOptions) {
  const instance = yield* WorkflowInstance
  const callbacks = yield* Callbacks
  const expiresIn = Option.filter(
    Duration.fromInput(options.expiresIn),
    (d) => Duration.isFinite(d) && Duration.toMillis(d) > 0
  )
  if (Option.isNone(expiresIn)) {
    return yield* new InvalidConfig({
      option: "expiresIn",
      issue: `${JSON.stringify(options.expiresIn)} is not a positive duration`
    })
  }
  if (Duration.toMillis(expiresIn.value) > Limits.maxDelayMs) {
    return yield* new InvalidConfig({
      option: "expiresIn",
      issue: `is longer than ${Limits.maxDelayMs} ms (100 years)`
    })
  }
  const now = yield* Clock.currentTimeMillis
  const exp = String(Math.ceil((now + Duration.toMillis(expiresIn.value)) / 1000))
  const workflow = instance.workflow._tag
  // Signed as its own parts, under a domain of its own: never a run callback's signature.
  const sig = callbacks.signDeferred({ workflow, executionId: instance.executionId, deferred: deferred.name }, exp)
  const parts = [workflow, instance.executionId, deferred.name].map(encodeURIComponent).join("/")
  return `${callbacks.baseUrl}/workflow-callbacks/${parts}?exp=${exp}&sig=${sig}`
})

/** @category models */
export interface DeferredCallbackRoutesOptions {
  /** The deferreds the route completes, by name: a body must decode with its success schema. */
  readonly deferreds: ReadonlyArray<DurableDeferred.Any>
  /** Largest accepted body in bytes. Default 1 MiB. */
  readonly maxBodySize?: number | undefined
  /** A path prefix to serve the route under; `Callbacks.baseUrl` must include it. */
  readonly prefix?: string | undefined
}

const complete = (options: DeferredCallbackRoutesOptions) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const query = yield* HttpServerRequest.ParsedSearchParams
    const params = yield* HttpRouter.params
    const callbacks = yield* Callbacks
    const engine = yield* WorkflowEngine
    const limit = options.maxBodySize ?? 1024 * 1024
    const workflow = params.workflow ?? ""
    const executionId = params.execution ?? ""
    const name = params.deferred ?? ""
    const exp = typeof query.exp === "string" ? query.exp : undefined
    const sig = typeof query.sig === "string" ? query.sig : undefined

    if (exp === undefined || sig === undefined) {
      return problem(401, "signature-missing", "the callback URL needs its exp and sig parameters")
    }
    const expSeconds = parseExp(exp)
    if (expSeconds === undefined) return problem(403, "exp-invalid", "exp must be unix seconds, 1 to 12 digits")
    if (!callbacks.verifyDeferred({ workflow, executionId, deferred: name }, exp, sig)) {
      return problem(
        403,
        "signature-invalid",
        "the signature does not match this workflow, execution, deferred and expiry"
      )
    }
    if (expSeconds * 1000 <= (yield* Clock.currentTimeMillis)) {
      return problem(410, "expired", "this callback URL has expired")
    }
    const deferred = options.deferreds.find((d) => d.name === name)
    if (deferred === undefined) {
      return problem(404, "deferred-not-served", "this server does not complete that deferred")
    }
    const contentType = notJson(request.headers["content-type"])
    if (contentType !== undefined) return contentType

    const body = yield* Effect.result(readBody(request, limit))
    if (body._tag === "Failure") return bodyFailureResponse(body.failure, limit)
    const parsed = parseJson(body.success)
    if (parsed === undefined) return problem(400, "invalid-json", "the body is not JSON")
    const schema = Schema.toCodecJson(
      (deferred as DurableDeferred.DurableDeferred<Schema.Top, Schema.Top>).successSchema
    )
    const value = yield* Effect.result(
      Schema.decodeUnknownEffect(schema)(parsed.value) as Effect.Effect<unknown, Schema.SchemaError>
    )
    if (value._tag === "Failure") return problem(400, "invalid-payload", value.failure.message.split("\n").join(" "))
    // Checked here, not by the journal's statement: a value jsonb refuses is the sender's fault.
    const storable = Json.encode(parsed.value, "deferred value")
    if (Exit.isFailure(storable)) {
      return problem(400, "unstorable", (Cause.squash(storable.cause) as UnstorableValue).message)
    }

    // The engine's store failing is a defect of `deferredDone`: nothing is known, the sender retries.
    const done = yield* Effect.exit(
      engine.deferredDone(deferred as DurableDeferred.DurableDeferred<Schema.Top, Schema.Top>, {
        workflowName: workflow,
        executionId,
        deferredName: name,
        exit: Exit.succeed(value.success)
      }) as Effect.Effect<void>
    )
    if (Exit.isFailure(done)) {
      yield* Effect.logWarning("deferred callback failed", Cause.pretty(done.cause).split("\n")[0])
      return problem(503, "store-unavailable", "try again")
    }
    return json(202, { status: "accepted", workflow, executionId, deferred: name })
  }).pipe(Effect.map(secure))

/**
 * The route, added to the application's `HttpRouter`. Requires `Callbacks` and the
 * `WorkflowEngine` per request.
 *
 * @category layers
 */
export const layer = (options: DeferredCallbackRoutesOptions) =>
  postOnly(path, complete(options), "deferred callbacks", options.prefix)
