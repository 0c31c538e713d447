/**
 * Retry delays for failed attempts: exponential with jitter, from an Effect Schedule. The delay is
 * computed here but applied by the database (`run_at = now() + delay`), so no worker clock decides
 * when a retry is due.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schedule } from "effect"

/** Exponential backoff with jitter: the first retry after about `base`, never more than `max`. */
export interface RetryPolicy {
  readonly base: Duration.Input
  readonly max: Duration.Input
}

/** @category constructors */
export const defaultPolicy: RetryPolicy = { base: "1 second", max: "10 minutes" }

/** The delay before retrying after `attempt` failed attempts (1-based), in milliseconds. @category schedules */
export const delayFor = Effect.fnUntraced(function*(policy: RetryPolicy, attempt: number) {
  const step = yield* Schedule.toStep(Schedule.exponential(policy.base).pipe(Schedule.jittered))
  let delay = Duration.zero
  for (let i = 0; i < Math.max(1, attempt); i++) {
    const [, next] = yield* step(0, undefined)
    delay = next
  }
  return Math.round(Math.min(Duration.toMillis(delay), Duration.toMillis(policy.max)))
}, Effect.orDie)
