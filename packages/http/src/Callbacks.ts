/**
 * The secrets behind callback URLs and webhook ingress. Callback URLs are signed with the first of
 * `LEASEHOLD_CALLBACK_SECRETS` and verified against all of them (rotation: add the new key first,
 * drop the old one once its URLs have expired). Standard Webhooks deliveries are verified with the
 * `whsec_` keys of `LEASEHOLD_WEBHOOK_SECRETS`. Secrets are `Redacted` and never leave this module.
 *
 * @since 0.1.0
 */
import { InvalidConfig } from "@leasehold/core"
import { Config, Context, Duration, Effect, Layer, Option, Redacted } from "effect"
import * as CallbackSignature from "./internal/CallbackSignature.js"
import * as WebhookSignature from "./internal/WebhookSignature.js"

/** What verifying a Standard Webhooks delivery found. @category models */
export type WebhookVerification = WebhookSignature.Verification

/** @category services */
export class Callbacks extends Context.Service<Callbacks, {
  /** Where callback URLs point: the server's public origin (and prefix), without a trailing slash. */
  readonly baseUrl: string
  /** The `sig` of a callback URL, with the signing (first) secret. */
  readonly sign: (runId: string, signal: string, exp: string) => string
  /** Whether `sig` signs these parts under one of the secrets; constant time. */
  readonly verify: (runId: string, signal: string, exp: string, sig: string) => boolean
  /** Whether Standard Webhooks keys are configured (deliveries with `webhook-*` headers need one). */
  readonly webhooksConfigured: boolean
  /** Verifies a Standard Webhooks delivery's headers against its raw body. */
  readonly verifyWebhook: (delivery: {
    readonly id: string | undefined
    readonly timestamp: string | undefined
    readonly signature: string | undefined
    readonly body: Uint8Array
    readonly nowMillis: number
  }) => WebhookVerification
}>()("@leasehold/http/Callbacks") {}

/** @category models */
export interface CallbacksOptions {
  /** The public origin (and path prefix) the callback routes are reachable at, e.g. `https://ops.example.com`. */
  readonly baseUrl: string
  /** Signing secrets: the first signs, all verify. A single value may hold several, comma-separated. */
  readonly secrets: Redacted.Redacted<string> | ReadonlyArray<Redacted.Redacted<string>>
  /** Standard Webhooks secrets (`whsec_<base64>`), comma- or space-separated; none by default. */
  readonly webhookSecrets?: Redacted.Redacted<string> | ReadonlyArray<Redacted.Redacted<string>> | undefined
  /** How far `webhook-timestamp` may be from now. Default 5 minutes. */
  readonly webhookTolerance?: Duration.Input | undefined
}

const split = (
  values: Redacted.Redacted<string> | ReadonlyArray<Redacted.Redacted<string>> | undefined,
  separator: RegExp
): Array<string> =>
  (values === undefined ? [] : Redacted.isRedacted(values) ? [values] : values)
    .flatMap((value) => Redacted.value(value).split(separator))
    .map((secret) => secret.trim())
    .filter((secret) => secret.length > 0)

/**
 * Builds the service; fails with `InvalidConfig` (naming the option, never a secret's value) when
 * there is no signing secret, one is shorter than 32 characters, a webhook secret is not base64,
 * or the base URL is not an http(s) URL.
 *
 * @category constructors
 */
export const make = Effect.fnUntraced(function*(options: CallbacksOptions) {
  const secrets = split(options.secrets, /,/)
  if (secrets.length === 0) {
    return yield* new InvalidConfig({ option: "LEASEHOLD_CALLBACK_SECRETS", issue: "no secret is set" })
  }
  if (secrets.some((secret) => secret.length < 32)) {
    return yield* new InvalidConfig({ option: "LEASEHOLD_CALLBACK_SECRETS", issue: "every secret needs at least 32 characters" })
  }
  const keys: Array<Uint8Array> = []
  for (const [index, secret] of split(options.webhookSecrets, /[,\s]+/).entries()) {
    const key = WebhookSignature.parseSecret(secret)
    if (key === undefined) {
      return yield* new InvalidConfig({ option: "LEASEHOLD_WEBHOOK_SECRETS", issue: `secret ${index + 1} is not whsec_<base64>` })
    }
    keys.push(key)
  }
  const baseUrl = options.baseUrl.replace(/\/+$/, "")
  if (!/^https?:\/\/[^/]/.test(baseUrl) || !URL.canParse(baseUrl)) {
    return yield* new InvalidConfig({ option: "baseUrl", issue: `${JSON.stringify(options.baseUrl)} is not an http(s) URL` })
  }
  const tolerance = Option.getOrUndefined(Duration.fromInput(options.webhookTolerance ?? "5 minutes"))
  if (tolerance === undefined || !Duration.isFinite(tolerance)) {
    return yield* new InvalidConfig({ option: "webhookTolerance", issue: "not a finite duration" })
  }
  const toleranceSeconds = Duration.toSeconds(tolerance)
  const signing = secrets[0]!
  return Callbacks.of({
    baseUrl,
    sign: (runId, signal, exp) => CallbackSignature.sign(signing, runId, signal, exp),
    verify: (runId, signal, exp, sig) => CallbackSignature.verify(secrets, runId, signal, exp, sig),
    webhooksConfigured: keys.length > 0,
    verifyWebhook: (delivery) =>
      WebhookSignature.verify({ ...delivery, keys, nowSeconds: Math.floor(delivery.nowMillis / 1000), toleranceSeconds })
  })
})

/** @category layers */
export const layer = (options: CallbacksOptions): Layer.Layer<Callbacks, InvalidConfig> => Layer.effect(Callbacks, make(options))

/**
 * The environment's configuration: `LEASEHOLD_CALLBACK_SECRETS` (required),
 * `LEASEHOLD_WEBHOOK_SECRETS` (optional) and `LEASEHOLD_CALLBACK_BASE_URL` (unless `baseUrl` is
 * given, as `leasehold serve` does with its own address).
 *
 * @category layers
 */
export const layerConfig = (defaults: { readonly baseUrl?: string | undefined } = {}): Layer.Layer<Callbacks, InvalidConfig> =>
  Layer.effect(
    Callbacks,
    Effect.gen(function*() {
      const secrets = yield* Config.Redacted("LEASEHOLD_CALLBACK_SECRETS").pipe(required("LEASEHOLD_CALLBACK_SECRETS"))
      const webhookSecrets = yield* Config.option(Config.Redacted("LEASEHOLD_WEBHOOK_SECRETS")).pipe(
        required("LEASEHOLD_WEBHOOK_SECRETS")
      )
      const baseUrlConfig = Config.String("LEASEHOLD_CALLBACK_BASE_URL")
      const baseUrl = yield* (defaults.baseUrl === undefined ? baseUrlConfig : Config.withDefault(baseUrlConfig, defaults.baseUrl))
        .pipe(required("LEASEHOLD_CALLBACK_BASE_URL"))
      return yield* make({ baseUrl, secrets, webhookSecrets: Option.getOrUndefined(webhookSecrets) })
    })
  )

/** A configuration error names the variable, never its value. */
const required = (name: string) => <A>(config: Config.Config<A>): Effect.Effect<A, InvalidConfig> =>
  Effect.mapError(config, () => new InvalidConfig({ option: name, issue: "is missing or invalid in the environment" }))
