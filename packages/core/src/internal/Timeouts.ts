/**
 * An attempt's two time bounds, applied around its handler: the attempt timeout (the enqueue's,
 * else its handler's) and what is left of the run's deadline. Both are counted by the worker's
 * monotonic clock (Effect's `Clock`) from the handler's start: the attempt runs here, and a
 * duration measured on one machine needs no agreement between clocks. The deadline itself is the
 * store's: the claim tells how far off it was by the store's `now()` (`ClaimedRun.deadlineInMs`),
 * and the store's `fail` decides again by its own clock. Neither bound moves the fence: the
 * interrupted attempt fails through the lease's finalizer like any other failure.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import { AttemptTimedOut, RunDeadlinePassed } from "../Errors.js"
import type { ClaimedRun } from "../RunRecord.js"

/** The failure of an attempt whose run was claimed past its deadline: its handler is not started. */
export const deadlinePassed = (run: ClaimedRun): Effect.Effect<never, RunDeadlinePassed> =>
  Effect.fail(new RunDeadlinePassed({ runId: run.id, attempt: run.attempt }))

/**
 * `handle` bounded by the run's attempt timeout and deadline, whichever comes first: at the bound
 * the handler's fiber is interrupted (its finalizers run, heartbeats or not) and the attempt fails
 * with `AttemptTimedOut` or `RunDeadlinePassed`. Unbounded, `handle` is returned as it is (no timer).
 */
export const bounded = <A, E, R>(
  run: ClaimedRun,
  handlerTimeoutMs: number | undefined,
  handle: Effect.Effect<A, E, R>
): Effect.Effect<A, E | AttemptTimedOut | RunDeadlinePassed, R> => {
  const timeoutMs = run.attemptTimeoutMs ?? handlerTimeoutMs
  const deadlineMs = run.deadlineInMs ?? undefined
  if (timeoutMs === undefined && deadlineMs === undefined) return handle
  const deadlineFirst = deadlineMs !== undefined && (timeoutMs === undefined || deadlineMs <= timeoutMs)
  return Effect.timeoutOrElse(handle, {
    duration: Duration.millis(deadlineFirst ? deadlineMs : timeoutMs!),
    orElse: (): Effect.Effect<never, AttemptTimedOut | RunDeadlinePassed> =>
      deadlineFirst
        ? Effect.fail(new RunDeadlinePassed({ runId: run.id, attempt: run.attempt }))
        : Effect.fail(new AttemptTimedOut({ runId: run.id, attempt: run.attempt, timeoutMs: timeoutMs! }))
  })
}
