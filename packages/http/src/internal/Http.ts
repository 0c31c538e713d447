/** Responses, body reading and headers shared by the routes. */
import { isValueRefused, type StoreError } from "@leasehold/core"
import { ByteSize, Effect } from "effect"
import { HttpIncomingMessage, HttpRouter, type HttpServerRequest, HttpServerResponse } from "effect/http"

/** A JSON response; the values routes answer with are plain data, always encodable. */
export const json = (
  status: number,
  body: unknown,
  headers?: Record<string, string>
): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.jsonUnsafe(body, { status, ...(headers === undefined ? {} : { headers }) })

/** A refusal: `{ error, message }`, `error` a stable machine-readable reason. */
export const problem = (status: number, error: string, message: string, headers?: Record<string, string>) =>
  json(status, { error, message }, headers)

/** The body could not be read: too large (413) or broken off (400). */
export type BodyFailure = { readonly _tag: "TooLarge" } | { readonly _tag: "Unreadable" }

/** The raw body, refused past `limit` bytes (declared or sent) without reading the rest into memory. */
export const readBody = (
  request: HttpServerRequest.HttpServerRequest,
  limit: number
): Effect.Effect<Uint8Array, BodyFailure> => {
  const declared = request.headers["content-length"]
  if (declared !== undefined && /^\d+$/.test(declared) && Number(declared) > limit) {
    return Effect.fail({ _tag: "TooLarge" })
  }
  return request.arrayBuffer.pipe(
    Effect.map((buffer) => new Uint8Array(buffer)),
    Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(limit)),
    Effect.mapError((error): BodyFailure =>
      error.reason._tag === "RequestParseError" && error.reason.reason === "BodyTooLarge"
        ? { _tag: "TooLarge" }
        : { _tag: "Unreadable" }
    )
  )
}

export const bodyFailureResponse = (failure: BodyFailure, limit: number) =>
  failure._tag === "TooLarge"
    ? problem(413, "body-too-large", `the body is larger than ${limit} bytes`)
    : problem(400, "unreadable-body", "the body could not be read")

/**
 * Whether a `content-type` names JSON in UTF-8: `application/json` or `application/<x>+json`
 * (any case), with no `charset` or `charset=utf-8`. Other parameters are ignored.
 */
export const isJsonContentType = (header: string | undefined): boolean => {
  if (header === undefined) return false
  const [type = "", ...parameters] = header.split(";").map((part) => part.trim().toLowerCase())
  if (!/^application\/([a-z0-9!#$&^_.-]+\+)?json$/.test(type)) return false
  return parameters.every((parameter) => !parameter.startsWith("charset=") || /^charset="?utf-8"?$/.test(parameter))
}

/** The 415 for a body that is not declared as JSON, or `undefined` when it is. */
export const notJson = (header: string | undefined): HttpServerResponse.HttpServerResponse | undefined =>
  isJsonContentType(header)
    ? undefined
    : problem(
      415,
      "unsupported-media-type",
      "the body must be JSON: content-type application/json (or application/<x>+json), UTF-8",
      {
        accept: "application/json"
      }
    )

/** What to tell the caller when the database refused a value: its own words, which name no secret. */
export const refusedMessage = (error: { readonly cause: unknown }): string => {
  const reason = (error.cause as { readonly reason?: { readonly cause?: { readonly message?: unknown } } } | undefined)
    ?.reason
  const detail = typeof reason?.cause?.message === "string" ? `: ${reason.cause.message}` : ""
  return `the database refused a value of this request${detail}`
}

/**
 * The answer to a store failure: a value the database refused is the caller's (400: the same
 * request cannot succeed), anything else is ours (503: nothing is known, retry). The cause is
 * logged as `<subject> refused` or `<subject> failed`, never sent.
 */
export const storeFailureResponse = (error: StoreError, subject: string, retry: string) =>
  isValueRefused(error)
    ? Effect.as(
      Effect.logWarning(`${subject} refused`, error.operation, error.message),
      problem(400, "value-refused", refusedMessage(error))
    )
    : Effect.as(
      Effect.logWarning(`${subject} failed`, error.operation, error.reason, error.message),
      problem(503, "store-unavailable", retry)
    )

/** JSON text to a value, or `undefined` when it is not JSON. */
export const parseJson = (bytes: Uint8Array): { readonly value: unknown } | undefined => {
  try {
    return { value: JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes)) }
  } catch {
    return undefined
  }
}

/**
 * Headers on every response: no inline script, no framing, no content sniffing, no referrer (a
 * callback URL's signature must not leak through it).
 */
export const securityHeaders: Readonly<Record<string, string>> = {
  "content-security-policy": [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'"
  ].join("; "),
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY"
}

export const secure = (response: HttpServerResponse.HttpServerResponse) =>
  HttpServerResponse.setHeaders(response, securityHeaders)

/**
 * A route that takes POST only: `deliver` on POST, and 405 naming POST (with `allow`) on every
 * other method, under `prefix` if given.
 */
export const postOnly = <E, R>(
  path: HttpRouter.PathInput,
  deliver: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
  what: string,
  prefix: string | undefined
) => {
  const notAllowed = secure(problem(405, "method-not-allowed", `${what} are delivered with POST`, { allow: "POST" }))
  return HttpRouter.addAll(
    Effect.succeed([
      HttpRouter.route("POST", path, deliver),
      ...(["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"] as const).map((method) =>
        HttpRouter.route(method, path, Effect.succeed(notAllowed))
      )
    ]),
    prefix === undefined ? undefined : { prefix }
  )
}
