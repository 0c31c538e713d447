/**
 * Operator and application transitions (`packages/sql/src/internal/statements/admin.ts`): resume a
 * suspended run, cancel, retry, one run or every run a filter selects. Cancel and retry take a run
 * away from whoever may hold it, so both raise the fence.
 *
 * @internal
 */
import { Cause, Exit } from "effect"
import { type InvalidPayload, InvalidTransition, RunNotFound, SignalTokenNotFound } from "../../Errors.js"
import type { Actor } from "../../OperatorActions.js"
import type { RunState } from "../../RunRecord.js"
import { detailOf } from "../../RunStorage.js"
import type { ResumeCheck, RunFilter } from "../../RunStore.js"
import { admit } from "./Admit.js"
import { letGo } from "./Guarded.js"
import { rateGoverning } from "./Rate.js"
import { matches, parse } from "./Read.js"
import { enter } from "./Slots.js"
import { err, ok, type Outcome, type State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

export const resume = (state: State, run: StoredRun, payload: string, now: number, actor?: Actor): string => {
  enter(state, run, "pending")
  run.runAt = now
  run.signals = JSON.stringify({
    ...(parse(run.signals) as object),
    [run.signalName!]: { _tag: "Signalled", payload: parse(payload) }
  })
  run.signalName = null
  run.signalToken = null
  run.suspendDeadline = null
  run.updatedAt = now
  state.record(run, "resumed", run.fence, null, { payload: parse(payload), ...detailOf(actor) }, now)
  state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
  // Under a key limit it waits in its key's line, and is admitted at once if there is room.
  if (run.concurrencyKey !== null) {
    admit(state, { kinds: [run.kind], queues: [run.queue], keys: [run.concurrencyKey] }, now)
  }
  return run.id
}

/** The check's refusal, when it refuses the run this resume would write to. */
const refused = (run: StoredRun, check: ResumeCheck | undefined): InvalidPayload | undefined => {
  if (check === undefined) return undefined
  const checked = check({ kind: run.kind, signal: run.signalName! })
  return Exit.isFailure(checked) ? Cause.squash(checked.cause) as InvalidPayload : undefined
}

export const resumeById = (
  state: State,
  runId: string,
  payload: string,
  now: number,
  actor?: Actor,
  check?: ResumeCheck
): Outcome<string, RunNotFound | InvalidTransition | InvalidPayload> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  if (run.state !== "suspended") {
    return err(new InvalidTransition({ runId: run.id, state: run.state, operation: "resume" }))
  }
  const refusal = refused(run, check)
  return refusal === undefined ? ok(resume(state, run, payload, now, actor)) : err(refusal)
}

export const resumeByToken = (
  state: State,
  token: string,
  payload: string,
  now: number,
  actor?: Actor,
  check?: ResumeCheck
): Outcome<string, SignalTokenNotFound | InvalidPayload> => {
  for (const run of state.runs.values()) {
    if (run.signalToken === token && run.state === "suspended") {
      const refusal = refused(run, check)
      return refusal === undefined ? ok(resume(state, run, payload, now, actor)) : err(refusal)
    }
  }
  return err(new SignalTokenNotFound({ token }))
}

const admin = (
  state: State,
  runId: string,
  operation: string,
  from: ReadonlyArray<RunState>,
  now: number,
  write: (run: StoredRun) => void
): Outcome<void, RunNotFound | InvalidTransition> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  if (!from.includes(run.state)) return err(new InvalidTransition({ runId: run.id, state: run.state, operation }))
  run.fence += 1
  run.updatedAt = now
  write(run)
  return ok(undefined)
}

/** `cancel` (or `retry`) of every run the filter selects that allows it, in id order. */
export const many = (
  state: State,
  filter: RunFilter,
  operation: "cancel" | "retry",
  now: number,
  actor?: Actor
): Array<string> => {
  const ids = [...state.runs.values()].filter((r) => matches(r, filter)).map((r) => r.id).sort((a, b) =>
    Number(a) - Number(b)
  )
  state.retried = []
  const done = ids.filter((id) =>
    (operation === "cancel" ? cancel(state, id, now, actor) : retry(state, id, now, actor)).ok
  )
  const retried = state.retried
  state.retried = undefined
  if (retried.length > 0) {
    admit(state, {
      kinds: retried.map((r) => r.kind),
      queues: retried.map((r) => r.queue),
      keys: retried.map((r) => r.concurrencyKey!)
    }, now)
  }
  return done
}

export const cancel = (state: State, runId: string, now: number, actor?: Actor) => {
  return admin(state, runId, "cancel", ["pending", "running", "suspended"], now, (run) => {
    enter(state, run, "cancelled")
    letGo(run)
    run.signalName = null
    run.signalToken = null
    run.suspendDeadline = null
    run.finishedAt = now
    state.record(run, "cancelled", run.fence, null, detailOf(actor), now)
    state.outbox.push({ _tag: "RunCancelled", runId: run.id })
  })
}

export const retry = (state: State, runId: string, now: number, actor?: Actor) => {
  return admin(state, runId, "retry", ["failed", "cancelled"], now, (run) => {
    enter(state, run, "pending")
    run.attempt = 0
    run.runAt = now
    // Governed by the rate limits in force now (only unfinished runs are regoverned).
    run.rateScope = rateGoverning(state, run.kind, run.queue)
    run.result = null
    run.error = null
    run.finishedAt = null
    state.record(run, "retried", run.fence, null, detailOf(actor), now)
    state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
    // Under a key limit it waits in its key's line, and is admitted at once if there is room
    // (after the whole statement, for many runs: `retryWhere`).
    if (run.concurrencyKey !== null) {
      if (state.retried !== undefined) state.retried.push(run)
      else admit(state, { kinds: [run.kind], queues: [run.queue], keys: [run.concurrencyKey] }, now)
    }
  })
}
