/** Responses, body reading and headers shared by the routes. */
import { ByteSize, Effect } from "effect"
import { HttpIncomingMessage, HttpRouter, type HttpServerRequest, HttpServerResponse } from "effect/http"

/** A JSON response; the values routes answer with are plain data, always encodable. */
export const json = (status: number, body: unknown, headers?: Record<string, string>): HttpServerResponse.HttpServerResponse =>
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
  return HttpRouter.addAll(Effect.succeed([
    HttpRouter.route("POST", path, deliver),
    ...(["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"] as const).map((method) =>
      HttpRouter.route(method, path, Effect.succeed(notAllowed))
    )
  ]), prefix === undefined ? undefined : { prefix })
}
