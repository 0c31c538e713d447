/**
 * A bound that holds even when the bounded operation cannot be stopped in time (a query on a
 * silent connection): the caller is answered at the bound and the operation is abandoned, not
 * waited on. Why, and who owns an abandoned operation: docs/adr/0009-bounds-on-silent-connections.md.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Fiber } from "effect"
import { dual } from "effect/Function"

const timeoutError = (duration: Duration.Duration): Cause.TimeoutError =>
  new Cause.TimeoutError(`Operation timed out after '${Duration.format(duration)}'`)

// Requests the interruption of an operation nobody waits for any more, without waiting for it.
const abandon = <A, E>(fiber: Fiber.Fiber<A, E>): Effect.Effect<void> =>
  Effect.suspend(() =>
    fiber.pollUnsafe() !== undefined
      ? Effect.void
      : Effect.asVoid(Effect.forkDetach(Fiber.interrupt(fiber), { startImmediately: true }))
  )

/**
 * Runs `self` and answers within `duration`: its result if it finishes in time, otherwise a
 * `Cause.TimeoutError` as soon as the bound passes, never later. An operation that has not
 * finished by then (or when the caller is interrupted) is interrupted in the background and
 * not waited for. `self` starts at once, on its own interruptible fiber, even when the caller
 * runs uninterruptibly (a finalizer, a batch flush); its own uninterruptible regions are kept.
 *
 * @category combinators
 */
export const within: {
  (duration: Duration.Input): <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E | Cause.TimeoutError, R>
  <A, E, R>(self: Effect.Effect<A, E, R>, duration: Duration.Input): Effect.Effect<A, E | Cause.TimeoutError, R>
} = dual(
  2,
  <A, E, R>(self: Effect.Effect<A, E, R>, duration: Duration.Input): Effect.Effect<A, E | Cause.TimeoutError, R> => {
    const bound = Duration.fromInputUnsafe(duration)
    // Masked so that no interruption lands between the fork and the handler that abandons it.
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(Effect.forkDetach(self, { startImmediately: true }), (fiber) =>
        restore(
          // Waiting on a fiber is interrupted at once: only the wait is cut short, not the operation.
          Effect.timeoutOrElse(Fiber.join(fiber), { duration: bound, orElse: () => Effect.fail(timeoutError(bound)) })
        ).pipe(Effect.onExit(() => abandon(fiber))))
    )
  }
)
