/**
 * Wakes for runs a rate limit holds back, for stores (`RateLimits`): a claim that left governed due
 * runs waiting for their window says when it has room again, and the store announces their queues
 * to its own listeners then (`RunsAvailable`, as an enqueue does), so an idle worker claims as the
 * window opens instead of at its next poll. One wake per queue is pending at a time, the earliest
 * asked for; a wake that finds the window still full (the clocks a millisecond apart) only leads to
 * the next one.
 *
 * @since 0.1.0
 */
import { type Clock, Duration, Effect } from "effect"

/** A window that holds back due runs: its limit, its interval, the starts it counts, a queue of its runs. @category models */
export interface HeldBack {
  readonly queue: string
  readonly limit: number
  readonly intervalMs: number
  /** The start times within the interval, any order. */
  readonly starts: ReadonlyArray<number>
}

/** When to wake the workers of `queues`: the first moment a window holding their runs back has room. @category models */
export interface Wake {
  readonly at: number
  readonly queues: ReadonlyArray<string>
}

/**
 * The moment a window with these starts has room for one more: its (count - limit + 1)-th oldest
 * start leaves the interval (`started_at > now - interval` counts no more). Undefined while it has
 * room now.
 *
 * @category rules
 */
export const reopensAt = (starts: ReadonlyArray<number>, limit: number, intervalMs: number): number | undefined => {
  if (starts.length < limit) return undefined
  const sorted = [...starts].sort((a, b) => a - b)
  return sorted[starts.length - limit]! + intervalMs
}

/** The soonest of these wakes, with the queues of every one due then. @category rules */
export const soonest = (wakes: ReadonlyArray<Wake>): Wake | undefined => {
  let first: { at: number; queues: Set<string> } | undefined
  for (const wake of wakes) {
    if (first === undefined || wake.at < first.at) first = { at: wake.at, queues: new Set(wake.queues) }
    else if (wake.at === first.at) { for (const queue of wake.queues) first.queues.add(queue) }
  }
  return first === undefined ? undefined : { at: first.at, queues: [...first.queues] }
}

/** The earliest reopening among the windows, with the queues of the windows that reopen then. @category rules */
export const earliest = (held: ReadonlyArray<HeldBack>): Wake | undefined =>
  soonest(held.flatMap((window) => {
    const at = reopensAt(window.starts, window.limit, window.intervalMs)
    return at === undefined ? [] : [{ at, queues: [window.queue] }]
  }))

/** @category models */
export interface RateWakes {
  /** Announces `wake.queues` at `wake.at` (the store's clock, read at `now`), unless an earlier wake is pending. */
  readonly schedule: (wake: Wake, now: number) => Effect.Effect<void>
}

/**
 * A store's wakes on `clock` (the store's own: `TestClock` in tests), each announcing a queue with
 * `announce`. `fork` runs each pending wake: a store with a scope forks it there, so no wake
 * outlives the store (default: detached, for a store without one).
 *
 * @category constructors
 */
export const make = (
  clock: Clock.Clock,
  announce: (queue: string) => Effect.Effect<unknown>,
  fork: (wake: Effect.Effect<void>) => Effect.Effect<unknown> = Effect.forkDetach
): RateWakes => {
  const pending = new Map<string, number>()
  return {
    schedule: (wake, now) =>
      Effect.suspend(() => {
        const queues = wake.queues.filter((queue) => !((pending.get(queue) ?? Number.POSITIVE_INFINITY) <= wake.at))
        if (queues.length === 0) return Effect.void
        for (const queue of queues) pending.set(queue, wake.at)
        const fire = Effect.forEach(queues, (queue) => {
          if (pending.get(queue) !== wake.at) return Effect.void
          pending.delete(queue)
          return Effect.asVoid(announce(queue))
        }, { discard: true })
        // Forked: the wake outlives the claim that asked for it.
        return Effect.asVoid(fork(Effect.andThen(clock.sleep(Duration.millis(Math.max(1, wake.at - now))), fire)))
      })
  }
}
