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

/** The parts a deferred callback URL signs. @category models */
export type DeferredTarget = CallbackSignature.DeferredTarget

/** @category services */
export class Callbacks extends Context.Service<Callbacks, {
  /** Where callback URLs point: the server's public origin (and prefix), without a trailing slash. */
  readonly baseUrl: string
  /** The `sig` of a run's callback URL, with the signing (first) secret. */
  readonly sign: (runId: string, signal: string, exp: string) => string
  /**
   * Whether `sig` signs this run, signal and expiry under one of the secrets; constant time.
   * False for an `exp` that is not 1 to 12 digits.
   */
  readonly verify: (runId: string, signal: string, exp: string, sig: string) => boolean
  /** The `sig` of a workflow deferred's callback URL, with the signing (first) secret. */
  readonly signDeferred: (target: DeferredTarget, exp: string) => string
  /** Whether `sig` signs this workflow, execution, deferred and expiry under one of the secrets. */
  readonly verifyDeferred: (target: DeferredTarget, exp: string, sig: string) => boolean
  /** Whether Standard Webhooks keys are configured (deliveries with `webhook-*` headers need one). */
  readonly webhooksConfigured: boolean
  /**
   * Whether a callback must carry a verified Standard Webhooks signature of its body, on top of
   * the URL's signature (`requireWebhookSignature`).
   */
  readonly webhookSignatureRequired: boolean
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
  /**
   * Refuse (401) a callback without a verified Standard Webhooks signature of its body. Default:
   * `true` when webhook secrets are given, `false` otherwise (there is nothing to verify with).
   * Configuring webhook secrets says deliveries are signed; accepting an unsigned one would let
   * anyone holding the URL choose the body. Set `false` to accept both (a sender that signs and a
   * person who posts the URL by hand). `true` without webhook secrets is `InvalidConfig`.
   */
  readonly requireWebhookSignature?: boolean | undefined
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
    return yield* new InvalidConfig({
      option: "LEASEHOLD_CALLBACK_SECRETS",
      issue: "every secret needs at least 32 characters"
    })
  }
  const keys: Array<Uint8Array> = []
  for (const [index, secret] of split(options.webhookSecrets, /[,\s]+/).entries()) {
    const key = WebhookSignature.parseSecret(secret)
    if (key === undefined) {
      return yield* new InvalidConfig({
        option: "LEASEHOLD_WEBHOOK_SECRETS",
        issue: `secret ${index + 1} is not whsec_<base64>`
      })
    }
    keys.push(key)
  }
  const baseUrl = options.baseUrl.replace(/\/+$/, "")
  if (!/^https?:\/\/[^/]/.test(baseUrl) || !URL.canParse(baseUrl)) {
    return yield* new InvalidConfig({
      option: "baseUrl",
      issue: `${JSON.stringify(options.baseUrl)} is not an http(s) URL`
    })
  }
  const tolerance = Option.getOrUndefined(Duration.fromInput(options.webhookTolerance ?? "5 minutes"))
  if (tolerance === undefined || !Duration.isFinite(tolerance)) {
    return yield* new InvalidConfig({ option: "webhookTolerance", issue: "not a finite duration" })
  }
  const toleranceSeconds = Duration.toSeconds(tolerance)
  const webhookSignatureRequired = options.requireWebhookSignature ?? keys.length > 0
  if (webhookSignatureRequired && keys.length === 0) {
    return yield* new InvalidConfig({
      option: "LEASEHOLD_REQUIRE_WEBHOOK_SIGNATURE",
      issue: "needs LEASEHOLD_WEBHOOK_SECRETS: no webhook signature can be verified without them"
    })
  }
  const signing = secrets[0]!
  return Callbacks.of({
    baseUrl,
    sign: (runId, signal, exp) => CallbackSignature.signRun(signing, { runId, signal }, exp),
    verify: (runId, signal, exp, sig) => CallbackSignature.verifyRun(secrets, { runId, signal }, exp, sig),
    signDeferred: (target, exp) => CallbackSignature.signDeferred(signing, target, exp),
    verifyDeferred: (target, exp, sig) => CallbackSignature.verifyDeferred(secrets, target, exp, sig),
    webhooksConfigured: keys.length > 0,
    webhookSignatureRequired,
    verifyWebhook: (delivery) =>
      WebhookSignature.verify({
        ...delivery,
        keys,
        nowSeconds: Math.floor(delivery.nowMillis / 1000),
        toleranceSeconds
      })
  })
})

/** @category layers */
export const layer = (options: CallbacksOptions): Layer.Layer<Callbacks, InvalidConfig> =>
  Layer.effect(Callbacks, make(options))

/**
 * The environment's configuration: `LEASEHOLD_CALLBACK_SECRETS` (required),
 * `LEASEHOLD_WEBHOOK_SECRETS` (optional), `LEASEHOLD_REQUIRE_WEBHOOK_SIGNATURE` (`true` or
 * `false`; by default required when webhook secrets are set) and `LEASEHOLD_CALLBACK_BASE_URL`
 * (unless `baseUrl` is given, as `leasehold serve` does with its own address).
 *
 * @category layers
 */
export const layerConfig = (
  defaults: { readonly baseUrl?: string | undefined } = {}
): Layer.Layer<Callbacks, InvalidConfig> =>
  Layer.effect(
    Callbacks,
    Effect.gen(function*() {
      const secrets = yield* Config.Redacted("LEASEHOLD_CALLBACK_SECRETS").pipe(required("LEASEHOLD_CALLBACK_SECRETS"))
      const webhookSecrets = yield* Config.option(Config.Redacted("LEASEHOLD_WEBHOOK_SECRETS")).pipe(
        required("LEASEHOLD_WEBHOOK_SECRETS")
      )
      const requireWebhookSignature = yield* Config.option(Config.Boolean("LEASEHOLD_REQUIRE_WEBHOOK_SIGNATURE")).pipe(
        required("LEASEHOLD_REQUIRE_WEBHOOK_SIGNATURE")
      )
      const baseUrlConfig = Config.String("LEASEHOLD_CALLBACK_BASE_URL")
      const baseUrl =
        yield* (defaults.baseUrl === undefined ? baseUrlConfig : Config.withDefault(baseUrlConfig, defaults.baseUrl))
          .pipe(required("LEASEHOLD_CALLBACK_BASE_URL"))
      return yield* make({
        baseUrl,
        secrets,
        webhookSecrets: Option.getOrUndefined(webhookSecrets),
        requireWebhookSignature: Option.getOrUndefined(requireWebhookSignature)
      })
    })
  )

/** A configuration error names the variable, never its value. */
const required = (name: string) => <A>(config: Config.Config<A>): Effect.Effect<A, InvalidConfig> =>
  Effect.mapError(config, () => new InvalidConfig({ option: name, issue: "is missing or invalid in the environment" }))
