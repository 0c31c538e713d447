/**
 * A lease as a scoped resource. Its entry is in the worker's in-flight set (where the worker's
 * heartbeat and deadline watchdog see it); the finalizer releases the claim according to how the
 * RunScope ended: success queues the completion (batched, guarded; the entry keeps its slot and
 * its renewals until the batch answers), failure records the error and schedules a retry or fails
 * the run, interruption releases the run so another worker can take it at once. Every one of these
 * writes is guarded by the lease's fence.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Schema, Scope } from "effect"
import type { AttemptLogInput } from "../AttemptLogs.js"
import type { StoreError } from "../Errors.js"
import type { ClaimedRun, LeaseKey } from "../RunRecord.js"
import type { RunStore, StaleWrite } from "../RunStore.js"
import * as WorkerEvents from "../WorkerEvents.js"
import * as Backoff from "./Backoff.js"
import type { CompletionBatcher, CompletionExit } from "./CompletionBatcher.js"
import * as Deadline from "./Deadline.js"
import type { InFlight, LeaseEntry } from "./InFlight.js"

/** What the finalizer needs from its worker. @category models */
export interface LeaseContext {
  readonly owner: string
  readonly store: RunStore["Service"]
  /** Where the worker reports (resolved once, not looked up per run). */
  readonly events: WorkerEvents.Sink
  /** Whether `events` listens (`WorkerEvents.isSilent`): no settlement is reported to one that does not. */
  readonly listened: boolean
  readonly batcher: CompletionBatcher
  readonly inFlight: InFlight
  readonly retry: Backoff.RetryPolicy
  /** Bound on each final write, so a partition cannot hold a slot forever. */
  readonly finalizeTimeout: Duration.Duration
  /** Called once the slot is free again (after the run's final write has answered). */
  readonly onSlotFreed: (run: ClaimedRun) => Effect.Effect<void>
  /** The worker's monotonic clock in milliseconds (resolved once, read per settlement). */
  readonly monotonicMillis: () => number
}

/** Marks a failure that retrying cannot fix (a payload that no longer decodes). @category models */
export class PermanentFailure
  extends Schema.TaggedError<PermanentFailure>()("PermanentFailure", { reason: Schema.Defect() })
{}

type Settlement = "completed" | "retry-scheduled" | "failed" | "released" | "snoozed" | "suspended" | "abandoned"

const describe = (error: unknown): { tag?: string; message: string } => {
  if (!(error instanceof Error)) return { message: String(error) }
  const tag = (error as { _tag?: unknown })._tag
  return { tag: typeof tag === "string" ? tag : error.name, message: error.message }
}

// A payload that no longer decodes, or a result JSON cannot hold: the next attempt would fail alike.
// A run past its deadline has no next attempt.
const isPermanent = (error: unknown): boolean => {
  if (error instanceof PermanentFailure) return true
  const tag = (error as { _tag?: unknown } | undefined)?._tag
  return tag === "UnstorableValue" || tag === "RunDeadlinePassed"
}

const errorJson = (error: unknown): unknown => {
  if (error instanceof PermanentFailure) return { ...describe(error.reason), permanent: true }
  return isPermanent(error) ? { ...describe(error), permanent: true } : describe(error)
}

const nullResult: Exit.Exit<string | null, never> = Exit.succeed(null)

// The common case (the handler succeeded) is kept free of generators and closures: it runs once
// per run, where the worker's own cost bounds its throughput (ADR 0018).
const finalize = (ctx: LeaseContext, entry: LeaseEntry, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> => {
  entry.finalizing = true
  if (entry.settled === undefined && Exit.isSuccess(exit)) {
    // The result is encoded here, per run: one that JSON cannot hold fails this run alone instead
    // of the statement its batch shares with others.
    const result = exit.value === undefined || exit.value === null
      ? nullResult
      : entry.encodeResult(entry.run.id, exit.value)
    if (Exit.isFailure(result)) {
      return settled(
        ctx,
        entry,
        settleFailure(ctx, entry, Cause.fail(new PermanentFailure({ reason: Cause.squash(result.cause) })))
      )
    }
    // The completion is handed to the batcher and the RunScope closes at once; the lease stays in
    // the in-flight set (renewed, its slot taken) until the batch answers, and the rest of the
    // settlement runs on the flushing fiber. No fiber per run waits for its batch.
    return Effect.sync(() =>
      ctx.batcher.submit(
        entry.keepLogs === "always" && entry.logs !== undefined
          ? {
            runId: entry.run.id,
            fence: entry.run.fence,
            result: result.value,
            keyed: entry.run.concurrencyKey !== null,
            log: entry.logs.take(entry.run.attempt)
          }
          : {
            runId: entry.run.id,
            fence: entry.run.fence,
            result: result.value,
            keyed: entry.run.concurrencyKey !== null
          },
        (answer) =>
          Exit.isSuccess(answer) && answer.value._tag === "Finalized"
            ? settledAs(ctx, entry, "completed")
            : settled(ctx, entry, completionSettlement(ctx, entry, answer)),
        // The runs of one claim share its send time: one writer completes them all.
        entry.claimedAt
      )
    )
  }
  return settled(
    ctx,
    entry,
    entry.settled === "completed" && entry.keepLogs === "always" && entry.logs !== undefined
      ? keepCompletedLog(ctx, entry, entry.logs.take(entry.run.attempt))
      : entry.settled !== undefined
      ? Effect.succeed(entry.settled)
      : settleFailure(ctx, entry, (exit as Exit.Failure<unknown, unknown>).cause)
  )
}

// A run its handler completed in a fenced transaction: its lines follow the completion (bounded as
// every final write is); the completion stands whether or not they are written.
const keepCompletedLog = (ctx: LeaseContext, entry: LeaseEntry, log: AttemptLogInput): Effect.Effect<Settlement> =>
  ctx.store.keepAttemptLog({ runId: entry.run.id, fence: entry.run.fence }, log).pipe(
    Deadline.within(ctx.finalizeTimeout),
    Effect.catch((error) =>
      ctx.events.emit({ _tag: "StoreError", owner: ctx.owner, operation: "keep attempt log", error: String(error) })
    ),
    Effect.as<Settlement>("completed")
  )

// The failed attempt's lines go with its failure, unless its handler keeps none.
const failedLog = (entry: LeaseEntry): AttemptLogInput | undefined =>
  entry.logs === undefined ? undefined : entry.logs.take(entry.run.attempt)

// Reports the settlement, then frees the slot whatever happened.
const settled = (ctx: LeaseContext, entry: LeaseEntry, settle: Effect.Effect<Settlement>): Effect.Effect<void> =>
  Effect.onExit(
    ctx.listened ? Effect.flatMap(settle, (outcome) => reportSettled(ctx, entry, outcome)) : settle,
    () => freeSlot(ctx, entry)
  )

// The same for an outcome already known (a batched completion that went through).
const settledAs = (ctx: LeaseContext, entry: LeaseEntry, outcome: Settlement): Effect.Effect<void> =>
  ctx.listened ? Effect.onExit(reportSettled(ctx, entry, outcome), () => freeSlot(ctx, entry)) : freeSlot(ctx, entry)

const reportSettled = (ctx: LeaseContext, entry: LeaseEntry, outcome: Settlement): Effect.Effect<void> =>
  ctx.events.emit({
    _tag: "RunSettled",
    owner: ctx.owner,
    runId: entry.run.id,
    fence: entry.run.fence,
    kind: entry.run.kind,
    queue: entry.run.queue,
    durationMs: ctx.monotonicMillis() - entry.claimedAt,
    outcome
  })

const freeSlot = (ctx: LeaseContext, entry: LeaseEntry): Effect.Effect<void> => {
  ctx.inFlight.delete(entry)
  return ctx.onSlotFreed(entry.run)
}

// Recorded for the attempt's span (RunSpans.consumer), which ends after the settlement.
const abandon = (entry: LeaseEntry, reason: string): Effect.Effect<Settlement> =>
  Effect.sync(() => {
    entry.abandoned = reason
    return "abandoned"
  })

const rejectedWrite = (
  ctx: LeaseContext,
  entry: LeaseEntry,
  operation: string,
  presentedFence: number,
  storedFence: number
) =>
  Effect.andThen(
    Effect.andThen(
      Effect.clockWith((clock) =>
        Effect.sync(() =>
          entry.span?.event("leasehold.fence_rejected", clock.currentTimeNanosUnsafe(), {
            "leasehold.operation": operation,
            "leasehold.presented_fence": presentedFence,
            "leasehold.stored_fence": storedFence
          })
        )
      ),
      ctx.events.emit({
        _tag: "WriteRejected",
        owner: ctx.owner,
        runId: entry.run.id,
        operation,
        presentedFence,
        storedFence
      })
    ),
    abandon(entry, `the ${operation} was rejected by the fence (presented ${presentedFence}, stored ${storedFence})`)
  )

const storeFailed =
  (ctx: LeaseContext, entry: LeaseEntry, operation: string) => (error: StoreError | Cause.TimeoutError) =>
    Effect.andThen(
      ctx.events.emit({ _tag: "StoreError", owner: ctx.owner, operation, error: String(error) }),
      abandon(entry, `the ${operation} failed: ${String(error)}`)
    )

// The batcher bounds each batch's write by the finalize timeout itself (one timer per batch).
const completionSettlement = (
  ctx: LeaseContext,
  entry: LeaseEntry,
  answer: CompletionExit
): Effect.Effect<Settlement> =>
  Exit.isFailure(answer)
    ? storeFailed(ctx, entry, "complete")(Cause.squash(answer.cause) as StoreError | Cause.TimeoutError)
    : answer.value._tag === "Finalized"
    ? completedSettlement
    : rejectedWrite(ctx, entry, "complete", answer.value.fence, answer.value.storedFence)
const completedSettlement = Effect.succeed<Settlement>("completed")

const settleFailure = (
  ctx: LeaseContext,
  entry: LeaseEntry,
  cause: Cause.Cause<unknown>
): Effect.Effect<Settlement> => {
  const lease: LeaseKey = { runId: entry.run.id, fence: entry.run.fence }
  const rejected = (operation: string) => (error: StaleWrite) =>
    error._tag === "FenceRejected"
      ? rejectedWrite(ctx, entry, operation, error.presentedFence, error.storedFence)
      : abandon(entry, `the ${operation} found the lease gone (${error._tag})`)
  const bounded = (operation: string, write: Effect.Effect<Settlement, StoreError>): Effect.Effect<Settlement> =>
    // Deadline.within, not Effect.timeout: a write into a silent connection is abandoned at the
    // bound instead of waited on until the driver lets its interruption finish.
    write.pipe(Deadline.within(ctx.finalizeTimeout), Effect.catch(storeFailed(ctx, entry, operation)))
  if (Cause.hasInterruptsOnly(cause)) {
    // Superseded or cancelled: the fence has moved on and there is nothing of ours to release.
    if (entry.lost === "superseded" || entry.lost === "cancelled") {
      return abandon(entry, `the lease was lost (${entry.lost})`)
    }
    return bounded(
      "release",
      ctx.store.release(lease).pipe(
        Effect.as<Settlement>("released"),
        Effect.catchTag(["FenceRejected", "LeaseNotHeld", "RunNotFound"], rejected("release"))
      )
    )
  }
  // The failure is read once: whether to retry, and what to record.
  const error = Cause.squash(cause)
  return Effect.flatMap(
    isPermanent(error)
      ? Effect.succeed(undefined)
      : entry.retrySchedule !== undefined
      ? Backoff.scheduleDelay(entry.retrySchedule, entry.run.attempt, error)
      : Backoff.delayFor(ctx.retry, entry.run.attempt),
    (retryDelayMs) =>
      bounded(
        "fail",
        ctx.store.fail({ ...lease, error: errorJson(error), retryDelayMs, log: failedLog(entry) }).pipe(
          Effect.map((o): Settlement => o._tag === "Failed" ? "failed" : "retry-scheduled"),
          Effect.tap((outcome) => logFailedAttempt(ctx, entry, error, outcome, retryDelayMs)),
          Effect.catchTag(["FenceRejected", "LeaseNotHeld", "RunNotFound"], rejected("fail"))
        )
      )
  )
}

const fieldsOf = (error: unknown): string => {
  if (typeof error !== "object" || error === null) return ""
  const fields = Object.fromEntries(Object.entries(error).filter(([key]) => key !== "_tag"))
  try {
    return Object.keys(fields).length === 0 ? "" : JSON.stringify(fields)
  } catch {
    return ""
  }
}

/**
 * One line per failed attempt, with its error, through Effect's logger (an application replaces
 * it with its own `Logger`): a warning when a retry is scheduled, an error when the run has failed.
 */
const logFailedAttempt = (
  ctx: LeaseContext,
  entry: LeaseEntry,
  error: unknown,
  outcome: Settlement,
  retryDelayMs: number | undefined
): Effect.Effect<void> => {
  const run = entry.run
  const reason = error instanceof PermanentFailure ? error.reason : error
  const { tag, message } = describe(reason)
  // An error without a message (a tagged error of fields only) is told by its fields.
  const detail = message !== "" ? message : fieldsOf(reason)
  const what = tag === undefined ? detail : detail === "" ? tag : `${tag}: ${detail}`
  const next = outcome === "failed"
    ? "the run has failed"
    : `retry in ${Duration.format(Duration.millis(retryDelayMs ?? 0))}`
  const line = `run ${run.id} (${run.kind}) attempt ${run.attempt}/${run.maxAttempts} failed: ${what}; ${next}`
  return (outcome === "failed" ? Effect.logError(line) : Effect.logWarning(line)).pipe(
    Effect.annotateLogs({
      "leasehold.owner": ctx.owner,
      "leasehold.run_id": run.id,
      "leasehold.kind": run.kind,
      "leasehold.queue": run.queue,
      "leasehold.attempt": run.attempt,
      "leasehold.fence": run.fence
    })
  )
}

/**
 * Runs `handle` in a RunScope that holds the lease: `handle` is given the new scope (to provide as
 * `Scope`), and when it exits the scope is closed (the handler's own finalizers, last added
 * first), then the fenced finalizer runs with the handler's exit, whatever the closing gave.
 *
 * @category constructors
 */
export const scoped = <A, E, R>(
  ctx: LeaseContext,
  entry: LeaseEntry,
  handle: (scope: Scope.Scope) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  // The claim is already made, so holding the lease is only this finalizer: the scope is made and
  // closed here rather than by `Effect.scoped` with the finalizer added to it by an effect, which
  // is a few more steps per run for the same order of finalizers.
  const scope = Scope.makeUnsafe()
  return Effect.onExit(handle(scope), (exit) => {
    const closing = Scope.closeUnsafe(scope, exit)
    return closing === undefined ? finalize(ctx, entry, exit) : Effect.ensuring(closing, finalize(ctx, entry, exit))
  })
}
