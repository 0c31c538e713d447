/**
 * A `PersistedQueueStore` (Effect's `effect/persistence`, behind `DurableQueue`) whose elements
 * are Leasehold runs, so durable queues survive restarts and failover under the same leases and
 * fences as every run:
 * - an offered element is a run of kind `persisted-queue/<name>`, idempotent by the element's id
 *   (an id offered twice is one element, even after it completed, while its run is kept);
 * - a take claims the oldest due element under a TTL lease (a higher fence), heartbeats it while
 *   the taker's scope is open, and settles it under that fence when the scope closes: success
 *   completes it, a failure retries it after the queue's retry delay (or fails it once the
 *   queue's attempts are spent), an interruption releases it without charging an attempt;
 * - a taker that lost its lease (its process stopped, partitioned) settles nothing: its writes are
 *   refused by the fence and the element goes to the next taker.
 *
 * @since 0.1.0
 */
import { RunStore } from "@leasehold/core"
import { Cause, Duration, Effect, Exit, Layer, Predicate, Schedule } from "effect"
import { PersistedQueue } from "effect/persistence"

/** The run kind of a queue's elements. @category naming */
export const kindOf = (queueName: string): string => `persisted-queue/${queueName}`

/** @category models */
export interface LeaseholdQueueStoreOptions {
  /** The Leasehold queue the elements' runs are enqueued on. Default `persisted-queue`. */
  readonly queue?: string | undefined
  /** The lease a take holds, renewed every third of it while the taker works. Default 30 s. */
  readonly ttl?: Duration.Input | undefined
  /** How often an idle take asks for a due element. Default 200 ms. */
  readonly pollInterval?: Duration.Input | undefined
  /** The lease owner this process takes under. Default a random one. */
  readonly owner?: string | undefined
}

// The factory's signal that an element can never be processed (its payload does not decode).
const isDeadLetter = (u: unknown) => Predicate.isTagged(u, "~effect/persistence/PersistedQueue/DeadLetter")
const deadLettered = (cause: Cause.Cause<unknown>) =>
  cause.reasons.some((reason) => Cause.isFailReason(reason) && isDeadLetter(reason.error))

const storeError = (operation: string) => (cause: unknown) =>
  new PersistedQueue.PersistedQueueError({ message: `leasehold queue store: ${operation} failed`, cause })

// Attempts are the queue's (given at each take); the run's own bound only has to exceed them.
const runMaxAttempts = 1_000_000

/** Builds the store over the `RunStore` in context. @category constructors */
export const make = Effect.fnUntraced(function*(options: LeaseholdQueueStoreOptions = {}) {
  const store = yield* RunStore
  const queue = options.queue ?? "persisted-queue"
  const ttl = Duration.fromInputUnsafe(options.ttl ?? "30 seconds")
  const pollInterval = Duration.fromInputUnsafe(options.pollInterval ?? "200 millis")
  const owner = options.owner ?? `persisted-queue/${crypto.randomUUID()}`

  return PersistedQueue.PersistedQueueStore.of({
    offer: ({ delay, element, id, name }) =>
      store.enqueue([{
        kind: kindOf(name),
        queue,
        payload: { id, element },
        idempotencyKey: `${kindOf(name)}/${id}`,
        maxAttempts: runMaxAttempts,
        ...(delay === undefined ? {} : { delayMs: Math.ceil(Duration.toMillis(delay)) })
      }]).pipe(Effect.asVoid, Effect.mapError(storeError("offer"))),

    take: ({ maxAttempts, name, retryDelay }) =>
      Effect.gen(function*() {
        const kind = kindOf(name)
        while (true) {
          const [run] = yield* store.claim({ owner, queues: [queue], kinds: [kind], limit: 1, ttl }).pipe(
            Effect.mapError(storeError("take"))
          )
          if (run === undefined) {
            yield* Effect.sleep(pollInterval)
            continue
          }
          const lease = { runId: run.id, fence: run.fence }
          // Held while the taker works; a renewal that no longer holds the lease stops renewing.
          yield* store.renew(owner, [lease], ttl).pipe(
            Effect.repeat({
              schedule: Schedule.spaced(Duration.divideUnsafe(ttl, 3)),
              while: (held) => held.length > 0
            }),
            Effect.ignore,
            Effect.delay(Duration.divideUnsafe(ttl, 3)),
            Effect.forkScoped
          )
          // Settled under the fence of this take; a stale taker's settlement is refused and ignored.
          yield* Effect.addFinalizer((exit) => {
            if (Exit.isSuccess(exit)) {
              return Effect.ignore(store.completeBatch([{ ...lease, result: null, keyed: false }]))
            }
            const cause = exit.cause
            if (Cause.hasInterruptsOnly(cause)) return Effect.ignore(store.release(lease))
            const exhausted = deadLettered(cause) || run.attempt >= maxAttempts
            return Effect.flatMap(
              exhausted ? Effect.succeed(undefined) : Effect.map(retryDelay(run.attempt), Duration.toMillis),
              (retryDelayMs) => Effect.ignore(store.fail({ ...lease, error: Cause.pretty(cause), retryDelayMs }))
            )
          })
          const payload = run.payload as { readonly id: string; readonly element: unknown }
          return { id: payload.id, attempts: run.attempt, element: payload.element }
        }
      }),

    // Completed elements go with Leasehold's own retention of completed runs.
    cleanup: () => Effect.void
  })
})

/**
 * Effect's `PersistedQueue` (and so `DurableQueue`) over Leasehold runs. Needs the `RunStore`
 * (`PgRunStore.layer` over `Database.layerFromUrl`).
 *
 * @category layers
 */
export const layer = (options: LeaseholdQueueStoreOptions = {}) =>
  PersistedQueue.layer.pipe(Layer.provideMerge(Layer.effect(PersistedQueue.PersistedQueueStore, make(options))))
