/**
 * Signal delivery from outside and the callback expiries behind it
 * (`packages/sql/src/internal/statements/signals.ts`): the first outcome of a signal stands.
 *
 * @internal
 */
import { RunNotFound } from "../../Errors.js"
import type { LeaseKey, SignalDelivery, SignalOutcome } from "../../RunRecord.js"
import { terminalStates } from "../../RunRecord.js"
import type { DeliverSignalRequest, StaleWrite } from "../../RunStore.js"
import { resume } from "./Admin.js"
import { guarded } from "./Guarded.js"
import { parse } from "./Read.js"
import { err, ok, type Outcome, type State } from "./State.js"

/** JSON equality as jsonb compares: objects by their keys, whatever their order. */
const sameJson = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length &&
    keys.every((k) =>
      Object.hasOwn(b, k) && sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])
    )
}

export const callbackExpiry = (
  state: State,
  lease: LeaseKey,
  signal: string,
  expiresInMs: number,
  now: number
): Outcome<Date, StaleWrite> => {
  return guarded(state, lease, "callback", now, (run) => {
    const key = `${run.id}:${signal}`
    const fixed = state.callbacks.get(key) ?? now + expiresInMs
    state.callbacks.set(key, fixed)
    return new Date(fixed)
  })
}

export const deliverSignal = (
  state: State,
  request: DeliverSignalRequest,
  payload: string,
  now: number
): Outcome<SignalDelivery, RunNotFound> => {
  const run = state.find(request.runId)
  if (run === undefined) return err(new RunNotFound({ runId: request.runId }))
  const runId = run.id
  const delivered = (parse(run.signals) as Record<string, SignalOutcome>)[request.signal]
  if (request.deliveryId !== undefined && state.deliveries.has(request.deliveryId)) {
    return ok({ _tag: "Replayed", runId })
  }
  if (delivered !== undefined) {
    if (delivered._tag === "TimedOut") return ok({ _tag: "Gone", runId, reason: "timed-out" })
    return ok({ _tag: sameJson(delivered.payload, parse(payload)) ? "Duplicate" : "Conflict", runId })
  }
  if (terminalStates.includes(run.state)) {
    return ok({ _tag: "Gone", runId, reason: "finished" })
  }
  if (request.deliveryId !== undefined) state.deliveries.add(request.deliveryId)
  if (run.state === "suspended" && run.signalName === request.signal) {
    resume(state, run, payload, now, request.actor)
    return ok({ _tag: "Resumed", runId })
  }
  run.signals = JSON.stringify({
    ...(parse(run.signals) as object),
    [request.signal]: { _tag: "Signalled", payload: parse(payload) }
  })
  run.updatedAt = now
  state.record(run, "signal_recorded", run.fence, null, { signal: request.signal, payload: parse(payload) }, now)
  return ok({ _tag: "Recorded", runId })
}
