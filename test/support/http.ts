/**
 * A real `@leasehold/http` server on an ephemeral loopback port over a test store, requests with
 * `fetch`, callback signatures computed independently of the package (node:crypto), and a
 * snapshot of everything a store schema holds, for "nothing written" checks.
 */
import { type Handler, RunStore } from "@leasehold/core"
import { Callbacks, Credentials, Handlers, Server } from "@leasehold/http"
import { Context, Effect, Layer, Redacted } from "effect"
import { HttpServer } from "effect/http"
import { createHmac } from "node:crypto"
import type { Stores } from "./stores.js"

export const secretOld = "old-secret-0123456789abcdef0123456789"
export const secretNew = "new-secret-fedcba9876543210fedcba9876"
export const webhookKey = Buffer.from("webhook key bytes for the tests, 32b")
export const webhookSecret = `whsec_${webhookKey.toString("base64")}`
export const publicBase = "https://callbacks.example.test"

export interface ServerSetup {
  readonly handlers?: ReadonlyArray<Handler.Handler> | undefined
  readonly secrets?: ReadonlyArray<string> | undefined
  readonly webhookSecrets?: ReadonlyArray<string> | undefined
  /** Off unless asked for: most tests post callbacks without `webhook-*` headers. */
  readonly requireWebhookSignature?: boolean | undefined
  readonly token?: string | undefined
  /** Named credentials as `LEASEHOLD_ADMIN_TOKENS` spells them (`Credentials.parse`). */
  readonly credentials?: string | undefined
  readonly readOnly?: boolean | undefined
  readonly callbacksOnly?: boolean | undefined
  readonly host?: string | undefined
  /** The console's trace viewer URL template (`Admin.AdminOptions.traceUrl`). */
  readonly traceUrl?: string | undefined
}

export const callbacksOptions = (setup: ServerSetup): Callbacks.CallbacksOptions => ({
  baseUrl: publicBase,
  secrets: (setup.secrets ?? [secretNew]).map((s) => Redacted.make(s)),
  webhookSecrets: (setup.webhookSecrets ?? [webhookSecret]).map((s) => Redacted.make(s)),
  requireWebhookSignature: setup.requireWebhookSignature ?? false
})

/** Scoped: the server, listening; `origin` is where to send requests. */
export const startServer = (stores: Stores, setup: ServerSetup = {}) =>
  Effect.gen(function*() {
    const credentials = yield* Credentials.parse(setup.credentials)
    const context = yield* Layer.build(
      Server.layer({
        host: setup.host ?? "127.0.0.1",
        port: 0,
        token: setup.token === undefined ? undefined : Redacted.make(setup.token),
        credentials,
        readOnly: setup.readOnly,
        callbacksOnly: setup.callbacksOnly,
        traceUrl: setup.traceUrl
      }).pipe(Layer.provide(Layer.mergeAll(
        Callbacks.layer(callbacksOptions(setup)),
        Handlers.layer(setup.handlers ?? []),
        Layer.succeed(RunStore, stores.a)
      )))
    )
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag === "UnixPathAddress") throw new Error("expected a TCP address")
    return { origin: `http://127.0.0.1:${address.port}` }
  })

/** The same path and query at the test server (callback URLs point at the public base URL). */
export const at = (origin: string, callbackUrl: string): string => {
  const url = new URL(callbackUrl)
  return `${origin}${url.pathname}${url.search}`
}

/** Each part as `<UTF-8 byte length>:<part>`, concatenated: the specification's v2 signed text. */
const lengthPrefixed = (parts: ReadonlyArray<string>) =>
  parts.map((p) => `${new TextEncoder().encode(p).length}:${p}`).join("")

/** `sig` for the parts, as the specification says (base64url HMAC-SHA256 of the length-prefixed v2 text). */
export const signature = (secret: string, runId: string, signal: string, exp: string | number) =>
  createHmac("sha256", secret).update(lengthPrefixed(["leasehold/callback/v2", runId, signal, String(exp)])).digest(
    "base64url"
  )

/** `sig` of a deferred callback URL (v2, its own domain tag). */
export const deferredSignature = (
  secret: string,
  workflow: string,
  executionId: string,
  deferred: string,
  exp: string | number
) =>
  createHmac("sha256", secret)
    .update(lengthPrefixed(["leasehold/deferred-callback/v2", workflow, executionId, deferred, String(exp)]))
    .digest("base64url")

/** `sig` as URLs handed out before v2 carried it: HMAC of `v1.<run>.<signal>.<exp>`. */
export const legacySignature = (secret: string, runId: string, signal: string, exp: string | number) =>
  createHmac("sha256", secret).update(`v1.${runId}.${signal}.${exp}`).digest("base64url")

/** A v1 deferred URL's `sig`: its run part was `workflow:<name>:<execution>`. */
export const legacyDeferredSignature = (
  secret: string,
  workflow: string,
  executionId: string,
  deferred: string,
  exp: string | number
) => legacySignature(secret, `workflow:${workflow}:${executionId}`, deferred, exp)

export const callbackUrl = (origin: string, secret: string, runId: string, signal: string, exp: number) =>
  `${origin}/callbacks/${runId}/${signal}?exp=${exp}&sig=${signature(secret, runId, signal, exp)}`

/** Standard Webhooks headers for a body. */
export const webhookHeaders = (id: string, body: string, options: { timestamp?: number; key?: Buffer } = {}) => {
  const timestamp = String(options.timestamp ?? Math.floor(Date.now() / 1000))
  const sig = createHmac("sha256", options.key ?? webhookKey).update(`${id}.${timestamp}.${body}`).digest("base64")
  return { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": `v1,${sig}` }
}

export interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly body: any
}

export const request = (url: string, init: RequestInit = {}): Effect.Effect<Answer> =>
  Effect.promise(async () => {
    const response = await fetch(url, init)
    const text = await response.text()
    let body: unknown = text
    try {
      body = JSON.parse(text)
    } catch {
      // not JSON: kept as text
    }
    return { status: response.status, headers: response.headers, body }
  })

export const postJson = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  request(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body)
  })

/** Everything the store's schema holds, as text: equal before and after means nothing was written. */
export const snapshot = (stores: Stores) =>
  Effect.gen(function*() {
    const tables = [
      "runs",
      "run_events",
      "callbacks",
      "signal_deliveries",
      "paused_queues",
      "schedules",
      "operator_actions"
    ]
    const parts: Array<string> = []
    for (const table of tables) {
      const rows = yield* stores.sql.unsafe<{ row: string }>(
        `SELECT row_to_json(t)::text AS row FROM "${stores.schema}".${table} t ORDER BY row_to_json(t)::text`
      )
      parts.push(`${table}: ${rows.map((r) => r.row).join("\n")}`)
    }
    return parts.join("\n\n")
  }).pipe(Effect.orDie)
