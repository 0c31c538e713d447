/**
 * Rate limits: a queue or a kind declares how many of its runs may *start* per interval, across
 * every worker, for example 10 calls a second to a partner's API, or, `perKey`, 10 a second per
 * tenant (per concurrency key, `EnqueueRequest.concurrencyKey`). Per-key concurrency
 * (`KeyLimits`) bounds how many run at once; a rate limit bounds how many begin in any window of
 * `interval`, however short they are. The two combine: a run under both waits for its key's slot,
 * then for room in its window.
 *
 * A run is governed by its kind's rate limit if its kind declares one, else by its queue's. The
 * claim enforces it: a start is a claim of a due run, recorded with the database's clock, and a
 * claim starts a governed run only while fewer than `limit` starts of its window (its limit, and
 * its key when `perKey`) fall within the last `interval` (a sliding window). Runs a rate limit holds
 * back wait outside the claims' due index, so they never block the runs behind them; runs of
 * other windows and unlimited runs keep starting. Reclaims of expired leases and timed-out
 * suspensions continue runs already started, and are not held back.
 *
 * @since 0.1.0
 */
import { Duration, Exit, Option } from "effect"
import { InvalidConfig } from "./Errors.js"
import * as Limits from "./Limits.js"

/** @category models */
export type RateLimitScope = "queue" | "kind"

/** At most `limit` runs started per `interval` among the runs of a queue or a kind (per key when `perKey`). @category models */
export interface RateLimit {
  readonly scope: RateLimitScope
  /** The queue's or the kind's name. */
  readonly name: string
  /** Starts allowed in any window of `interval`. */
  readonly limit: number
  readonly interval: Duration.Input
  /** One window per concurrency key (runs without a key share one); default false: one window for the scope. */
  readonly perKey?: boolean | undefined
}

/** A rate limit as checked and stored: the interval in milliseconds. @category models */
export interface CheckedRateLimit {
  readonly scope: RateLimitScope
  readonly name: string
  readonly limit: number
  readonly intervalMs: number
  readonly perKey: boolean
}

/** At most `limit` runs of `queue` started per `interval`. @category constructors */
export const perQueue = (
  queue: string,
  limit: number,
  interval: Duration.Input,
  options?: { readonly perKey?: boolean }
): RateLimit => ({
  scope: "queue",
  name: queue,
  limit,
  interval,
  perKey: options?.perKey ?? false
})

/** At most `limit` runs of `kind` started per `interval`. @category constructors */
export const perKind = (
  kind: string,
  limit: number,
  interval: Duration.Input,
  options?: { readonly perKey?: boolean }
): RateLimit => ({
  scope: "kind",
  name: kind,
  limit,
  interval,
  perKey: options?.perKey ?? false
})

/** The longest interval a rate limit may have: one day (the starts of a window are kept that long). @category limits */
export const maxIntervalMs = 24 * 3600 * 1000

/**
 * Checks a rate limit before anything is written: a known scope, a non-empty name, a whole
 * `limit` of at least 1 and an interval that parses, above 0 and at most a day.
 *
 * @category validation
 */
export const check = (limit: RateLimit): Exit.Exit<CheckedRateLimit, InvalidConfig> => {
  const invalid = (option: string, issue: string) => Exit.fail(new InvalidConfig({ option, issue }))
  if (limit.scope !== "queue" && limit.scope !== "kind") {
    return invalid("scope", `"${String(limit.scope)}" is not queue or kind`)
  }
  const nameIssue = Limits.textIssue(limit.name, limit.scope === "kind" ? Limits.maxKindBytes : Limits.maxQueueBytes)
  if (nameIssue !== undefined) return invalid(limit.scope, nameIssue)
  if (!(Number.isInteger(limit.limit) && limit.limit >= 1 && limit.limit < 2 ** 31)) {
    return invalid("limit", `${limit.limit} is not a whole number of at least 1`)
  }
  const parsed =
    typeof limit.interval === "string" || typeof limit.interval === "number" || typeof limit.interval === "object"
      ? Duration.fromInput(limit.interval)
      : Option.none()
  const ms = Option.isSome(parsed) && Duration.isFinite(parsed.value) ? Duration.toMillis(parsed.value) : Number.NaN
  if (!(ms > 0 && ms <= maxIntervalMs)) {
    return invalid(
      "interval",
      `${JSON.stringify(limit.interval)} is not an interval above 0 and at most a day (for example "1 second")`
    )
  }
  if (limit.perKey !== undefined && typeof limit.perKey !== "boolean") return invalid("perKey", "must be true or false")
  return Exit.succeed({
    scope: limit.scope,
    name: limit.name,
    limit: limit.limit,
    intervalMs: ms,
    perKey: limit.perKey === true
  })
}

/** A declared rate limit as the store lists it. @category models */
export interface RateLimitInfo extends CheckedRateLimit {
  /** Starts within the last interval, over every window of the limit. */
  readonly startedInWindow: number
  /** Due runs the limit governs that have not started: the ones it is holding back among them. */
  readonly due: number
}
