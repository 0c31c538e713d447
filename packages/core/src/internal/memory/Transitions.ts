/**
 * The transitions of the memory store not yet in a module of their own (a step of the split).
 *
 * @internal
 */
import type { LeaseKey } from "../../RunRecord.js"
import { parse } from "./Read.js"
import type { StoredRun } from "./StoredRun.js"
import type { StaleWrite } from "../../RunStore.js"
import type { Outcome, State } from "./State.js"
import { guarded } from "./Guarded.js"

/** The run enqueued under this idempotency key, if any (an execution's run). */
export const byIdempotencyKey = (state: State, key: string): StoredRun | undefined => {
  const id = state.keys.get(key)
  return id === undefined ? undefined : state.runs.get(id)
}

/** Leaves a signal for a running run's holder, whose next suspension on it then returns at once. */
export const leaveSignal = (run: StoredRun, signal: string, payload: string, now: number): void => {
  run.signals = JSON.stringify({ ...(parse(run.signals) as object), [signal]: { _tag: "Signalled", payload: parse(payload) } })
  run.updatedAt = now
}

/** Takes a signal left for the holder, under its fence. */
export const takeSignal = (
  state: State,
  lease: LeaseKey,
  signal: string,
  operation: string,
  now: number
): Outcome<void, StaleWrite> => {
  return guarded(state, lease, operation, now, (run) => {
    const { [signal]: _taken, ...rest } = parse(run.signals) as Record<string, unknown>
    run.signals = JSON.stringify(rest)
  })
}
