/**
 * Batched, guarded completion. Successful runs queue their completion here; one statement
 * finalizes a whole batch, each row matched on id + fence + running. A row that does not match is
 * stale and comes back `Rejected`. Each completion is answered once its batch is written (a
 * callback on the flushing fiber, or a waiting caller), so a worker slot is freed only once its
 * completion is committed or rejected.
 *
 * Each batch's write is bounded by the finalize timeout (one timer per batch, not per run): a
 * batch that times out answers every caller in it with the timeout, so a partition holds a slot
 * for at most the bound of the batch ahead of it plus its own.
 *
 * With several writers, each has a queue of its own and a completion goes to the writer its lane
 * names (the worker gives every run of one claim the same lane). PgRunStore orders the writers of
 * a claim batch by the batch's row lock (docs/adr/0022): two writers sharing the batches of one
 * claim would wait for each other, while writers of different claims write side by side.
 *
 * @since 0.1.0
 */
import { type Cause, Duration, Effect, Exit, FiberSet, Queue, Schedule } from "effect"
import type { StoreError } from "../Errors.js"
import type { ClaimedRun, FinalizeOutcome } from "../RunRecord.js"
import type { ClaimNext, CompleteItem, RunStore } from "../RunStore.js"
import * as Deadline from "./Deadline.js"

/** How a queued completion ended: committed or rejected, or its batch's write failed. */
export type CompletionExit = Exit.Exit<FinalizeOutcome, StoreError | Cause.TimeoutError>

/** @category models */
export interface CompletionBatcher {
  /** Queues a completion and waits until its batch is committed (or the item rejected). */
  readonly complete: (item: CompleteItem) => Effect.Effect<FinalizeOutcome, StoreError | Cause.TimeoutError>
  /**
   * Queues a completion without waiting: `then` runs on the flushing fiber once the batch is
   * answered (it must not fail). The worker's runs use this, so a finished run's fiber ends at
   * once instead of suspending until its batch is written.
   */
  readonly submit: (item: CompleteItem, then: (exit: CompletionExit) => Effect.Effect<void>, lane?: number) => void
}

/**
 * The worker's side of the hand-off: each batch asks the store to claim, for this worker, the runs
 * its completions hand their key slots to (`ClaimNext`; undefined once the worker stops claiming),
 * and the runs claimed so are started before the batch's completions are answered.
 */
export interface HandOff {
  readonly next: () => ClaimNext | undefined
  /** `sentAt`: the monotonic millis before the batch was sent (the leases' local deadlines count from it). */
  readonly started: (runs: ReadonlyArray<ClaimedRun>, sentAt: number) => Effect.Effect<void>
}

interface Pending {
  readonly item: CompleteItem
  readonly answer: (exit: CompletionExit) => Effect.Effect<void>
}

/**
 * Starts the batcher in the current scope. Closing the scope flushes what is queued before the
 * flushing fiber stops.
 *
 * @category constructors
 */
export const make = Effect.fnUntraced(function*(
  store: RunStore["Service"],
  maxBatch: number,
  timeout: Duration.Duration = Duration.seconds(30),
  /** Told of each batch written: its size, how long the write took, and whether it was answered. */
  onFlush: (count: number, durationMs: number, ok: boolean) => Effect.Effect<void> = () => Effect.void,
  handOff?: HandOff,
  /** How many batches may be written at once (each on its own connection). */
  flushers = 1
) {
  // Completions wait in a plain array per writer; a writer is woken at most once per batch, not
  // once per completion (ADR 0018), and writes its batches one after the other.
  const queues = Array.from({ length: Math.max(1, flushers) }, () => ({ queued: [] as Array<Pending> }))
  const wakes = yield* Effect.forEach(queues, () => Queue.sliding<void>(1))
  const takeBatch = (queue: { queued: Array<Pending> }): Array<Pending> => {
    if (queue.queued.length <= maxBatch) {
      const batch = queue.queued
      queue.queued = []
      return batch
    }
    const batch = queue.queued.slice(0, maxBatch)
    queue.queued = queue.queued.slice(maxBatch)
    return batch
  }

  const write = (batch: ReadonlyArray<Pending>) =>
    store.completeBatch(batch.map((p) => p.item), handOff?.next()).pipe(
      Effect.retry(Schedule.exponential("20 millis").pipe(Schedule.upTo({ times: 3 }))),
      // Abandoned at the bound (not waited on) when the connection has gone silent.
      Deadline.within(timeout)
    )
  // Once taken from the queue, a batch is written and answered whole: the write is bounded by the
  // timeout, not cut short by interruption (shutdown waits for a write under way instead of
  // abandoning runs whose completion may be committing), and each answer runs on its own, so a
  // defect in one settlement (an event sink that throws) neither skips the others nor stops the
  // flusher.
  const flush = (batch: ReadonlyArray<Pending>) =>
    Effect.uninterruptible(Effect.clockWith((clock) => {
      const startedAt = clock.monotonicTimeNanosUnsafe()
      return Effect.flatMap(Effect.exit(write(batch)), (exit) =>
        Effect.andThen(
          Effect.andThen(
            Effect.exit(
              onFlush(
                batch.length,
                Number((clock.monotonicTimeNanosUnsafe() - startedAt) / 1_000n) / 1_000,
                Exit.isSuccess(exit)
              )
            ),
            // Runs claimed in the hand-off start before the completions that freed their slots are
            // answered, so a slot of the worker's goes from one run of a key to the next.
            Effect.exit(Effect.suspend(() => {
              if (handOff === undefined || Exit.isFailure(exit)) return Effect.void
              const claimed = exit.value.flatMap((o) => o._tag === "Finalized" && o.next !== undefined ? [o.next] : [])
              return claimed.length === 0 ? Effect.void : handOff.started(claimed, Number(startedAt / 1_000_000n))
            }))
          ),
          Effect.forEach(
            batch,
            (pending, i) =>
              Effect.exit(
                pending.answer(Exit.isSuccess(exit) ? Exit.succeed(exit.value[i]!) : Exit.failCause(exit.cause))
              ),
            { discard: true }
          )
        ))
    }))

  // Up to `flushers` batches are written at once: the next batch fills while one is written, and
  // a worker whose completions also claim (the hand-off) does all its claiming in them.
  const drain = (queue: { queued: Array<Pending> }) =>
    Effect.whileLoop({
      while: () => queue.queued.length > 0,
      body: () => flush(takeBatch(queue)),
      step: () => undefined
    })
  const drainAll = Effect.forEach(queues, drain, { concurrency: "unbounded", discard: true })

  const writing = yield* FiberSet.make<void, never>()
  for (const [i, queue] of queues.entries()) {
    yield* FiberSet.run(writing, Effect.forever(Effect.andThen(Queue.take(wakes[i]!), drain(queue))))
  }
  // Closing: the writers stop (between batches: a batch's flush is uninterruptible), then what is
  // still queued is written.
  yield* Effect.addFinalizer(() => Effect.andThen(FiberSet.clear(writing), drainAll))

  const submit = (
    item: CompleteItem,
    answer: (exit: CompletionExit) => Effect.Effect<void>,
    lane = 0
  ): void => {
    const i = Math.abs(Math.trunc(lane)) % queues.length
    const queue = queues[i]!
    queue.queued.push({ item, answer })
    if (queue.queued.length === 1) Queue.offerUnsafe(wakes[i]!, undefined)
  }
  const complete = (item: CompleteItem) =>
    Effect.callback<FinalizeOutcome, StoreError | Cause.TimeoutError>((resume) => {
      submit(item, (exit) => Effect.sync(() => resume(exit)))
    })
  return { complete, submit } satisfies CompletionBatcher
})
