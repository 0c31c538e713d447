/**
 * Lease renewal. One statement per worker per interval renews every lease the worker holds, each
 * matched on id + fence + running. A lease that comes back unrenewed was superseded; a renewal that
 * fails, or is not confirmed before a lease's local deadline, stops that lease's RunScope. The
 * worker never continues on the hope that a renewal went through.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Duration, Effect, Exit, Fiber, Queue } from "effect"
import type { LeaseLossReason } from "../Errors.js"
import type { RunStore } from "../RunStore.js"
import * as WorkerEvents from "../WorkerEvents.js"
import * as Deadline from "./Deadline.js"
import { type InFlight, keyOf, type LeaseEntry, renewable } from "./InFlight.js"

/** Milliseconds on the monotonic clock. @category time */
export const monotonicMillis: Effect.Effect<number> = Effect.map(
  Clock.monotonicTimeNanos,
  (n) => Number(n / 1_000_000n)
)

/**
 * Stops a lease's RunScope locally: records why, reports it and interrupts the run's fiber without
 * waiting for its finalizer (which may still have a write to make).
 *
 * @category leases
 */
export const loseLease = (owner: string, entry: LeaseEntry, reason: LeaseLossReason): Effect.Effect<void> =>
  Effect.gen(function*() {
    if (entry.lost !== undefined || entry.finalizing) return
    entry.lost = reason
    entry.span?.event("leasehold.lease_lost", yield* Clock.currentTimeNanos, {
      "leasehold.reason": reason,
      "leasehold.fence": entry.run.fence
    })
    yield* WorkerEvents.emit({ _tag: "LeaseLost", owner, runId: entry.run.id, fence: entry.run.fence, reason })
    const fiber = entry.fiber
    if (fiber !== undefined) yield* Effect.forkDetach(Fiber.interrupt(fiber))
  })

/** When the worker's watchdog looks next; lowered by whoever adds a lease due before that. @category models */
export interface WatchdogState {
  nextCheckAt: number
}

const IDLE_CHECK_MS = 60_000

/**
 * The worker's one deadline watchdog for all its leases: sleeps until the earliest local deadline,
 * interrupts every run whose deadline has passed unrenewed, and is woken early (`wake`) when a
 * lease is added with a deadline before its next check. Deadlines only ever move later (renewals),
 * so looking at the earliest one never misses a lease. Leases being finalized are left alone.
 *
 * @category leases
 */
export const watchdog = (
  owner: string,
  inFlight: InFlight,
  state: WatchdogState,
  wake: Queue.Dequeue<void>
): Effect.Effect<never> =>
  Effect.forever(Effect.gen(function*() {
    const now = yield* monotonicMillis
    let earliest = Number.POSITIVE_INFINITY
    for (const entry of inFlight) {
      if (entry.lost !== undefined || entry.finalizing) continue
      if (now >= entry.deadline) yield* loseLease(owner, entry, "deadline")
      else if (entry.deadline < earliest) earliest = entry.deadline
    }
    const wait = earliest === Number.POSITIVE_INFINITY ? IDLE_CHECK_MS : earliest - now
    state.nextCheckAt = now + wait
    yield* Effect.timeoutOption(Queue.take(wake), Duration.millis(wait))
  }))

/** @category models */
export interface HeartbeatOptions {
  readonly owner: string
  readonly ttl: Duration.Duration
  readonly interval: Duration.Duration
}

/** One renewal round for every lease the worker holds. @category leases */
export const renewOnce = Effect.fnUntraced(function*(
  store: RunStore["Service"],
  inFlight: InFlight,
  options: HeartbeatOptions
) {
  const { owner } = options
  const ttlMs = Duration.toMillis(options.ttl)
  // The deadline a confirmation extends is counted from when the renewal was sent, not received.
  const sentAt = yield* monotonicMillis
  // A lease whose local deadline has passed unrenewed is stopped, not renewed: the database may
  // have let another worker take it already. This happens when the process was stopped for
  // longer than the TTL (SIGSTOP, a long pause) and the heartbeat wakes before the watchdog; it
  // is the watchdog's loss (`deadline`), not a renewal that failed.
  const entries: Array<LeaseEntry> = []
  for (const entry of renewable(inFlight)) {
    if (sentAt >= entry.deadline) yield* loseLease(owner, entry, "deadline")
    else entries.push(entry)
  }
  if (entries.length === 0) return
  const leases = entries.map((e) => ({ runId: e.run.id, fence: e.run.fence }))
  const earliest = Math.min(...entries.map((e) => e.deadline))
  yield* WorkerEvents.emit({ _tag: "HeartbeatSent", owner, leases })
  const result = yield* store.renew(owner, leases, options.ttl).pipe(
    // Answered by the earliest local deadline even if the connection has gone silent: the renewal
    // is abandoned then, not waited on until the driver lets its interruption finish.
    Deadline.within(Duration.millis(Math.max(1, earliest - sentAt))),
    Effect.exit
  )
  // Any failure, a defect included, counts: the renewal was not confirmed.
  if (Exit.isFailure(result)) {
    yield* WorkerEvents.emit({
      _tag: "HeartbeatFailed",
      owner,
      leases,
      error: Cause.pretty(result.cause).split("\n")[0]!
    })
    for (const entry of entries) yield* loseLease(owner, entry, "renewal-failed")
    return
  }
  const renewed = new Set(result.value.map(keyOf))
  const lost: Array<{ runId: string; fence: number }> = []
  for (const entry of entries) {
    if (renewed.has(keyOf({ runId: entry.run.id, fence: entry.run.fence }))) {
      entry.deadline = Math.max(entry.deadline, sentAt + ttlMs)
    } else if (entry.settled === undefined && !entry.finalizing) {
      lost.push({ runId: entry.run.id, fence: entry.run.fence })
      yield* loseLease(owner, entry, "superseded")
    }
  }
  const durationMs = (yield* monotonicMillis) - sentAt
  yield* WorkerEvents.emit({ _tag: "HeartbeatConfirmed", owner, renewed: result.value, lost, durationMs })
})

/** The heartbeat fiber's body: renew, then wait an interval, forever. @category leases */
export const loop = (store: RunStore["Service"], inFlight: InFlight, options: HeartbeatOptions): Effect.Effect<never> =>
  Effect.forever(Effect.andThen(Effect.sleep(options.interval), renewOnce(store, inFlight, options)))
