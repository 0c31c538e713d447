/**
 * The writes a handler makes while it holds a run. Each requires the `Fence` service and fails
 * with `FenceRejected` when the fence has moved on: the holder was superseded.
 *
 * @since 0.1.0
 */
import type { Schema } from "effect"
import { Duration, Effect } from "effect"
import { CurrentRun } from "./CurrentRun.js"
import type { InvalidConfig, InvalidPayload, SignalTokenInUse, StoreError, UnstorableValue } from "./Errors.js"
import { Fence, leaseKey } from "./Fence.js"
import * as Handler from "./Handler.js"
import * as AwaitSignal from "./internal/AwaitSignal.js"
import * as Options from "./internal/Options.js"
import * as Settlement from "./internal/Settlement.js"
import * as Limits from "./Limits.js"
import type { SignalOutcome } from "./RunRecord.js"
import { RunStore, type StaleWrite } from "./RunStore.js"

/**
 * Records a checkpoint (progress) for the run under its fence. A later attempt sees it in
 * `CurrentRun.checkpoint`.
 *
 * @category writes
 */
export const checkpoint = Effect.fn("Run.checkpoint")(function*(value: unknown) {
  const fence = yield* Fence
  const store = yield* RunStore
  yield* store.checkpoint(leaseKey(fence), value)
})

/**
 * Runs the application's own SQL and the completion of this run in one transaction under the
 * fence. If the fence is stale, the whole transaction rolls back and this fails with
 * `FenceRejected`: the application's writes never land without the completion.
 *
 * Inside a worker the transaction may sit idle on the server at most one lease TTL (the worker's
 * `ttl`) between its statements: longer, and the server ends it (a holder gone silent lets its
 * locks go), so an effect that waits that long inside it (a slow call between two statements)
 * fails with a `StoreError` or its own statement's connection error, and nothing of it commits.
 * Do such waits before the transaction.
 *
 * @category writes
 */
export const transaction = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  options?: {
    /** The schema the stored result is encoded with (default: the value as JSON). */
    readonly result?: Schema.Codec<A, unknown> | undefined
  }
): Effect.Effect<A, E | StaleWrite | UnstorableValue | StoreError, R | Fence | RunStore | CurrentRun> =>
  Effect.gen(function*() {
    const fence = yield* Fence
    const store = yield* RunStore
    const run = yield* CurrentRun
    const encode = Handler.encoderFor(options?.result)
    const value = yield* store.completeInTransaction(
      leaseKey(fence),
      effect,
      (a) => encode(fence.runId, a),
      Settlement.leaseTtl(run)
    )
    Settlement.report(run, "completed")
    return value
  }).pipe(Effect.withSpan("Run.transaction"))

/** @category models */
export type AwaitSignalOptions = AwaitSignal.AwaitSignalOptions

/**
 * Waits for a named signal (a human approval, a webhook). The first time, this suspends the run:
 * the lease is released outright, heartbeats for it stop and the worker slot is freed; the handler
 * stops here. When the run is resumed it is claimed again under a higher fence, the handler starts
 * over, and this returns the outcome at once. An outcome delivered before the run suspended
 * (`RunStore.deliverSignal`) is returned at once, without suspending.
 *
 * Given the handler's signal schemas first (`Run.awaitSignal(signals, "approval")`, the record
 * given to `Handler.make` as `signals`), only a declared name type-checks and the outcome's payload
 * is decoded with its schema (typed as its `Type`); a handler also gets the same, bound to its
 * declaration, as the second argument of `handle` (`signals.await("approval")`). Without schemas
 * the payload is the JSON delivered (`unknown`).
 *
 * @category writes
 */
export const awaitSignal: {
  <S extends AwaitSignal.SignalSchemas, K extends keyof S & string>(
    schemas: S,
    signal: K,
    options?: AwaitSignalOptions
  ): Effect.Effect<
    SignalOutcome<S[K]["Type"]>,
    StaleWrite | SignalTokenInUse | InvalidConfig | InvalidPayload | StoreError,
    Fence | RunStore | CurrentRun
  >
  (
    signal: string,
    options?: AwaitSignalOptions
  ): Effect.Effect<
    SignalOutcome,
    StaleWrite | SignalTokenInUse | InvalidConfig | StoreError,
    Fence | RunStore | CurrentRun
  >
} =
  ((first: string | AwaitSignal.SignalSchemas, second?: string | AwaitSignalOptions, third?: AwaitSignalOptions) =>
    typeof first === "string"
      ? AwaitSignal.awaitRaw(first, second as AwaitSignalOptions | undefined)
      : AwaitSignal.awaitDecoded(first, second as string, third)) as any

/**
 * Ends this attempt without failing it: the run is due again `duration` from now, by the
 * database's clock (`run_at = now() + duration`), and the handler stops here. The attempt does not
 * count: like a release, the run's attempt number is given back, so a run may snooze any number of
 * times without using up `maxAttempts` (snoozing is waiting, not failing). The lease is let go
 * outright and a key slot it held goes to its key's next run; the write is guarded by the fence, so
 * a superseded holder's snooze fails with `FenceRejected` and changes nothing.
 *
 * @category writes
 */
export const snooze = (
  duration: Duration.Input
): Effect.Effect<never, StaleWrite | InvalidConfig | StoreError, Fence | RunStore | CurrentRun> =>
  Effect.gen(function*() {
    const delay = yield* Options.duration("snooze", duration)
    const delayMs = Duration.toMillis(delay)
    yield* Limits.checkDelay("snooze", delayMs)
    const run = yield* CurrentRun
    const fence = yield* Fence
    const store = yield* RunStore
    // The write and its report as one step: a renewal that finds the run already let go (it may
    // answer while the snooze is in flight) interrupts the handler only once the snooze is
    // recorded as this run's settlement, so the lease is not then released a second time.
    yield* Effect.uninterruptible(
      Effect.tap(
        store.snooze({ ...leaseKey(fence), delayMs }),
        () => Effect.sync(() => Settlement.report(run, "snoozed"))
      )
    )
    // As after a suspension: the run is no longer this handler's, so it stops here, in a way no
    // handler code can swallow by catching errors.
    return yield* Effect.interrupt
  }).pipe(Effect.withSpan("Run.snooze"))
