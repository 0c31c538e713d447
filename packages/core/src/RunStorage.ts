/**
 * What every store does the same way with the runs it keeps: the states a unique window holds its
 * key in, the checks of a signal delivery and of a queue name, the error a passed deadline records,
 * how an operator is recorded, how far past a limit a claim scans, a rate window's key, and how
 * many runs one statement of a delete removes. For store implementers (`@leasehold/core/store`),
 * so `PgRunStore` and `MemoryRunStore` decide alike; a user's code never calls these.
 *
 * @since 0.1.0
 */
import { Exit } from "effect"
import { InvalidConfig, UnstorableValue } from "./Errors.js"
import * as Limits from "./Limits.js"
import type { Actor, Via } from "./OperatorActions.js"
import { type RunState, unfinishedStates, type UniqueWindow } from "./RunRecord.js"
import type { RunFilter } from "./RunStore.js"

/**
 * The states a unique window holds its key in (`UniqueWindow.states` or its default); `undefined`:
 * every state, for the window's period.
 *
 * @category models
 */
export const uniqueStates = (window: UniqueWindow): ReadonlyArray<RunState> | undefined =>
  window.states ?? (window.periodMs === undefined ? unfinishedStates : undefined)

/**
 * Checks a signal delivery's names before anything is read or written: a signal name and a
 * `webhook-id` within `Limits`. Both stores run it first.
 *
 * @category validation
 */
export const checkSignalDelivery = (
  request: { readonly runId: string; readonly signal: string; readonly deliveryId?: string | undefined }
): Exit.Exit<void, UnstorableValue> => {
  const signal = Limits.textIssue(request.signal, Limits.maxSignalBytes)
  if (signal !== undefined) {
    return Exit.fail(new UnstorableValue({ what: "signal name", runId: request.runId, issue: signal }))
  }
  const id = request.deliveryId === undefined
    ? undefined
    : Limits.textIssue(request.deliveryId, Limits.maxDeliveryIdBytes)
  if (id !== undefined) return Exit.fail(new UnstorableValue({ what: "webhook-id", runId: request.runId, issue: id }))
  return Exit.void
}

/** Whether a signal token could be held by a run at all (`Limits`); one that cannot names no run. @category validation */
export const isStorableToken = (token: string): boolean =>
  Limits.textIssue(token, Limits.maxSignalTokenBytes) === undefined

/**
 * Checks a queue name given to pause or resume, as enqueue does (`Limits`).
 *
 * @category validation
 */
export const checkQueueName = (queue: string): Exit.Exit<void, InvalidConfig> =>
  Limits.checkText("queue", queue, Limits.maxQueueBytes)

/**
 * The error a store records when a failed attempt would have been retried but its run's deadline
 * passes before the retry is due (`now + delay >= deadline`, by the store's clock): the run fails
 * for good, and the attempt's own error is kept inside. Both stores record exactly this.
 *
 * @category models
 */
export const deadlineFailure = (attemptError: unknown): unknown => ({
  tag: "RunDeadlinePassed",
  message: "the run's deadline passes before its next attempt would be due; the run has failed for good",
  permanent: true,
  attemptError: attemptError ?? null
})

/** The actor as it is kept with an event or an audit entry. @category constructors */
export const detailOf = (actor: Actor | undefined): { readonly by: string; readonly via: Via } | null =>
  actor === undefined ? null : { by: actor.name, via: actor.via }

/**
 * A delete's filter as the audit keeps it: its payload fields by path only. A payload value that
 * selected the runs (a customer's id, for a data-protection request) is part of the payloads the
 * delete removes, so the audit must not keep it.
 *
 * @category constructors
 */
export const auditedFilter = (filter: RunFilter): string =>
  JSON.stringify(
    filter.payload === undefined
      ? filter
      : { ...filter, payload: filter.payload.map((field) => ({ path: field.path })) }
  )

/** Most runs one statement of a delete removes; a bigger selection is deleted in several. @category constants */
export const deleteBatchSize = 500

/**
 * A bound on what one sweep reads for key limits: the keys of a limit whose waiting runs it
 * admits (a loose scan of the waiting runs' keys), and the governed suspensions that timed out
 * it moves into their keys' lines. More are taken by the sweeps after it. (Claims themselves read
 * no window: a run its key holds back waits outside the due index.)
 *
 * @category rules
 */
export const scanPastLimit = 1_000

/**
 * The window a run's start counts in, under the limit that governs it: `""` for a limit without
 * `perKey` and for a run without a key (the empty string is never a concurrency key).
 *
 * @category rules
 */
export const windowKey = (perKey: boolean, concurrencyKey: string | null): string => perKey ? concurrencyKey ?? "" : ""
