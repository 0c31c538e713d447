/**
 * Retry delays for failed attempts: exponential with jitter, from an Effect Schedule. The delay is
 * computed here but applied by the database (`run_at = now() + delay`), so no worker clock decides
 * when a retry is due.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schedule } from "effect"
import { maxDelayMs } from "../Limits.js"

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

/**
 * A handler's own retry policy (`Handler.make({ retry })`): the delay before retrying after
 * `attempt` failed attempts (1-based), in milliseconds, or `undefined` once the schedule has ended
 * (the run then fails outright, whatever attempts remain). The schedule is replayed from its start
 * at each failure: its `attempt`-th step decides, each step fed this attempt's error and a clock
 * that has advanced by the delays before it (so `Schedule.during` bounds the total delay). Like the
 * default policy's, the delay is applied by the database (`run_at = now() + delay`), capped at
 * `Limits.maxDelayMs`. A schedule that fails or dies ends the retries alike.
 *
 * @category schedules
 */
export const scheduleDelay = (
  schedule: Schedule.Schedule<unknown, unknown>,
  attempt: number,
  error: unknown
): Effect.Effect<number | undefined> =>
  Effect.gen(function*() {
    const step = yield* Schedule.toStep(schedule)
    let now = 0
    let delay = 0
    for (let i = 0; i < Math.max(1, attempt); i++) {
      const [, next] = yield* step(now, error)
      delay = Math.max(0, Duration.toMillis(next))
      now += delay
    }
    return Math.round(Math.min(delay, maxDelayMs))
  }).pipe(Effect.catchCause(() => Effect.succeed(undefined)))
