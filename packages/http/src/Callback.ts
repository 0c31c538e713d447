/**
 * Callback URLs for handlers: a signed, expiring URL that resumes the run with the JSON body
 * POSTed to it. Give it to a person or a third party, then `Run.awaitSignal` the same signal.
 *
 * @since 0.1.0
 */
import { Fence, InvalidConfig, leaseKey, Limits, RunStore } from "@leasehold/core"
import { Duration, Effect, Option } from "effect"
import { Callbacks } from "./Callbacks.js"

/** @category models */
export interface UrlOptions {
  /** How long the URL accepts deliveries, from the first time it is asked for. */
  readonly expiresIn: Duration.Input
}

/**
 * The callback URL for `signal` of the run this handler holds. Its expiry is fixed in the store
 * the first time it is asked for (under the fence), so a handler that asks again after a crash
 * hands out the same URL.
 *
 * @category constructors
 */
export const url = Effect.fn("Callback.url")(function*(signal: string, options: UrlOptions) {
  const fence = yield* Fence
  const store = yield* RunStore
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
  yield* Limits.checkText("signal", signal, Limits.maxSignalBytes)
  const expiry = yield* store.callbackExpiry(leaseKey(fence), signal, expiresIn.value)
  const exp = String(Math.floor(expiry.getTime() / 1000))
  const sig = callbacks.sign(fence.runId, signal, exp)
  return `${callbacks.baseUrl}/callbacks/${encodeURIComponent(fence.runId)}/${
    encodeURIComponent(signal)
  }?exp=${exp}&sig=${sig}`
})
