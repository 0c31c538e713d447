/**
 * Guarded writes (`packages/sql/src/internal/statements/guarded.ts`): everything a lease holder
 * writes is matched on id + fence + running (`holder`); a write that matches nothing is diagnosed
 * (`diagnose`), and a real fence mismatch is recorded in the run's history.
 *
 * @internal
 */
import { FenceRejected, LeaseNotHeld, RunNotFound, SignalTokenInUse } from "../../Errors.js"
import type { FailOutcome, FinalizeOutcome, LeaseKey, SignalOutcome, SuspendOutcome } from "../../RunRecord.js"
import { deadlineFailure } from "../../RunStorage.js"
import type { ClaimNext, CompleteItem, FailRequest, SnoozeRequest, StaleWrite, SuspendRequest } from "../../RunStore.js"
import { handOffSet, keysAboveLimit } from "./Admit.js"
import * as AttemptLogs from "./AttemptLogs.js"
import { parse } from "./Read.js"
import { enter } from "./Slots.js"
import { canonicalId, err, ok, type Outcome, type Released, type State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

/** The row a guarded write matches: id + fence + running, or nothing. */
export const holder = (state: State, lease: LeaseKey): StoredRun | undefined => {
  const run = state.find(lease.runId)
  return run !== undefined && run.fence === lease.fence && run.state === "running" ? run : undefined
}

/** Why a guarded write matched nothing; a real fence mismatch is recorded in the run's history. */
export const diagnose = (state: State, lease: LeaseKey, operation: string, now: number): StaleWrite => {
  const run = state.find(lease.runId)
  if (run === undefined) return new RunNotFound({ runId: canonicalId(lease.runId) ?? lease.runId })
  if (run.fence !== lease.fence) {
    state.record(run, "stale_write_rejected", lease.fence, null, {
      operation,
      storedFence: run.fence,
      state: run.state
    }, now)
    return new FenceRejected({ runId: run.id, presentedFence: lease.fence, storedFence: run.fence, operation })
  }
  return new LeaseNotHeld({ runId: run.id, fence: lease.fence, state: run.state, operation })
}

export const guarded = <A>(
  state: State,
  lease: LeaseKey,
  operation: string,
  now: number,
  write: (run: StoredRun) => A
): Outcome<A, StaleWrite> => {
  const run = holder(state, lease)
  if (run === undefined) return err(diagnose(state, lease, operation, now))
  run.updatedAt = now
  return ok(write(run))
}

export const letGo = (run: StoredRun): void => {
  run.leaseOwner = null
  run.leaseExpiresAt = null
}

/** The completion of one matched run. (Postgres reads this history line off the completed run.) */
export const complete = (state: State, run: StoredRun, result: string, now: number): Released | undefined => {
  const released = enter(state, run, "completed")
  run.result = result
  run.finishedAt = now
  run.updatedAt = now
  letGo(run)
  state.record(run, "completed", run.fence, null, null, now)
  return released
}

/** A completion in the caller's transaction (`transaction`): its slot is handed on at once. */
export const completeInTransaction = (state: State, run: StoredRun, result: string, now: number): void => {
  const above = keysAboveLimit(state)
  const released = complete(state, run, result, now)
  if (released !== undefined) handOffSet(state, [released], above, now)
}

export const completeBatch = (
  state: State,
  items: ReadonlyArray<CompleteItem>,
  now: number,
  next?: ClaimNext
): Array<FinalizeOutcome> => {
  // The statement decides every item first; the ones it missed are diagnosed afterwards.
  const matched = items.map((item) => holder(state, item))
  const above = keysAboveLimit(state)
  const released: Array<Released> = []
  items.forEach((item, i) => {
    if (matched[i] === undefined) return
    const slot = complete(state, matched[i], item.result ?? "null", now)
    if (item.log !== undefined) AttemptLogs.keep(state, matched[i], item.fence, "completed", item.log, now)
    // The items said to be unkeyed have no slot read, so none handed on (`handOff`).
    if (slot !== undefined && item.keyed !== false) released.push(slot)
  })
  const successors = handOffSet(state, released, above, now, next)
  return items.map((item, i): FinalizeOutcome => {
    if (matched[i] !== undefined) {
      // A successor goes to the first item naming the run whose slot it took.
      const first = matched.findIndex((run) => run?.id === matched[i]!.id) === i
      const successor = first ? successors.get(matched[i].id) : undefined
      return successor === undefined
        ? { _tag: "Finalized", runId: item.runId, fence: item.fence }
        : { _tag: "Finalized", runId: item.runId, fence: item.fence, next: successor }
    }
    const run = state.find(item.runId)
    // Completed under this very fence: the holder's own completion sent again, acknowledged.
    if (run !== undefined && run.fence === item.fence && run.state === "completed") {
      return { _tag: "Finalized", runId: item.runId, fence: item.fence }
    }
    diagnose(state, item, "complete", now)
    return run === undefined
      ? { _tag: "Rejected", runId: item.runId, fence: item.fence, storedFence: item.fence, state: "missing" }
      : { _tag: "Rejected", runId: item.runId, fence: item.fence, storedFence: run.fence, state: run.state }
  })
}

export const fail = (
  state: State,
  request: FailRequest,
  error: string,
  now: number
): Outcome<FailOutcome, StaleWrite> => {
  return guarded(state, request, "fail", now, (run): FailOutcome => {
    letGo(run)
    const wantsRetry = request.retryDelayMs !== undefined && run.attempt < run.maxAttempts
    // No retry is scheduled at or past the run's deadline: the run fails for good now, saying why.
    const stoppedByDeadline = wantsRetry && run.deadline !== null && now + request.retryDelayMs! >= run.deadline
    const retrying = wantsRetry && !stoppedByDeadline
    run.error = stoppedByDeadline ? JSON.stringify(deadlineFailure(parse(error))) : error
    if (retrying) {
      enter(state, run, "pending")
      run.runAt = now + request.retryDelayMs!
      run.finishedAt = null
    } else {
      enter(state, run, "failed")
      run.finishedAt = now
    }
    state.record(run, retrying ? "retry_scheduled" : "failed", run.fence, null, {
      error: parse(run.error),
      runAt: new Date(run.runAt).toISOString()
    }, now)
    if (request.log !== undefined) AttemptLogs.keep(state, run, request.fence, "failed", request.log, now)
    return retrying ? { _tag: "RetryScheduled", delayMs: request.retryDelayMs! } : { _tag: "Failed" }
  })
}

export const release = (state: State, lease: LeaseKey, now: number) => {
  return guarded(state, lease, "release", now, (run) => {
    letGo(run)
    enter(state, run, "pending")
    run.runAt = now
    run.attempt = Math.max(run.attempt - 1, 0)
    state.record(run, "released", run.fence, null, null, now)
    state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
  })
}

/** As `release`, but due `delayMs` from now (`Run.snooze`): the attempt is given back too. */
export const snooze = (state: State, request: SnoozeRequest, now: number) => {
  return guarded(state, request, "snooze", now, (run) => {
    letGo(run)
    enter(state, run, "pending")
    run.runAt = now + request.delayMs
    run.attempt = Math.max(run.attempt - 1, 0)
    state.record(run, "snoozed", run.fence, null, { runAt: new Date(run.runAt).toISOString() }, now)
    if (request.delayMs === 0) state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
  })
}

export const checkpoint = (state: State, lease: LeaseKey, value: string, now: number) => {
  return guarded(state, lease, "checkpoint", now, (run) => {
    run.checkpoint = value
  })
}

export const suspend = (
  state: State,
  request: SuspendRequest,
  timeoutMs: number | null,
  now: number
): Outcome<SuspendOutcome, StaleWrite | SignalTokenInUse> => {
  const run = holder(state, request)
  if (run === undefined) return err(diagnose(state, request, "suspend", now))
  // Delivered while the run was still running: nothing to wait for, nothing written.
  const delivered = (parse(run.signals) as Record<string, SignalOutcome>)[request.signal]
  if (delivered !== undefined) return ok({ _tag: "AlreadySignalled", outcome: delivered })
  // The token names exactly one waiting run (a unique index in Postgres): nothing is written.
  for (const other of state.runs.values()) {
    if (other.signalToken === request.token) return err(new SignalTokenInUse({ runId: run.id, token: request.token }))
  }
  letGo(run)
  enter(state, run, "suspended")
  run.attempt = Math.max(run.attempt - 1, 0)
  run.signalName = request.signal
  run.signalToken = request.token
  run.suspendDeadline = timeoutMs === null ? null : now + timeoutMs
  run.updatedAt = now
  const deadline = run.suspendDeadline === null ? null : new Date(run.suspendDeadline).toISOString()
  state.record(run, "suspended", run.fence, null, { signal: request.signal, deadline }, now)
  return ok({ _tag: "Suspended" })
}
