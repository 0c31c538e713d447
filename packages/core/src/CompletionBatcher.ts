/**
 * Batched, guarded completion. Successful runs queue their completion here; one statement
 * finalizes a whole batch, each row matched on id + fence + running. A row that does not match is
 * stale and comes back `Rejected`. Callers wait for the acknowledgement, so a worker slot is freed
 * only once its completion is committed or rejected.
 *
 * @since 0.1.0
 */
import { Deferred, Effect, Exit, Queue, Schedule } from "effect"
import type { SqlError as SqlErrorModule } from "effect/sql"
type SqlError = SqlErrorModule.SqlError
import type { FinalizeOutcome } from "./RunRecord.js"
import type { CompleteItem, RunStore } from "./RunStore.js"

/** @category models */
export interface CompletionBatcher {
  /** Queues a completion and waits until its batch is committed (or the item rejected). */
  readonly complete: (item: CompleteItem) => Effect.Effect<FinalizeOutcome, SqlError>
}

interface Pending {
  readonly item: CompleteItem
  readonly done: Deferred.Deferred<FinalizeOutcome, SqlError>
}

/**
 * Starts the batcher in the current scope. Closing the scope flushes what is queued before the
 * flushing fiber stops.
 *
 * @category constructors
 */
export const make = Effect.fnUntraced(function*(store: RunStore["Service"], maxBatch: number) {
  const queue = yield* Queue.unbounded<Pending>()

  // A transient error is retried briefly: the write is guarded, so repeating it is safe.
  const flush = (batch: ReadonlyArray<Pending>) =>
    store.completeBatch(batch.map((p) => p.item)).pipe(
      Effect.retry(Schedule.exponential("20 millis").pipe(Schedule.upTo({ times: 3 }))),
      Effect.exit,
      Effect.flatMap((exit) =>
        Effect.forEach(batch, (pending, i) =>
          Deferred.done(pending.done, Exit.isSuccess(exit) ? Exit.succeed(exit.value[i]!) : Exit.failCause(exit.cause)), { discard: true })
      ),
      // Once taken from the queue, a batch is always answered.
      Effect.uninterruptible
    )

  const flushAll = Effect.gen(function*() {
    while ((yield* Queue.size(queue)) > 0) {
      yield* flush(yield* Queue.takeBetween(queue, 1, maxBatch))
    }
  })

  yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.takeBetween(queue, 1, maxBatch), flush)))
  yield* Effect.addFinalizer(() => flushAll)

  const complete = (item: CompleteItem) =>
    Effect.gen(function*() {
      const done = yield* Deferred.make<FinalizeOutcome, SqlError>()
      yield* Queue.offer(queue, { item, done })
      return yield* Deferred.await(done)
    })
  return { complete } satisfies CompletionBatcher
})
