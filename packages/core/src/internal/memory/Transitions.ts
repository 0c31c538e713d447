/**
 * The transitions of the memory store not yet in a module of their own (a step of the split).
 *
 * @internal
 */
import { RunNotFound } from "../../Errors.js"
import type { LeaseKey, RunEvent, RunRecord } from "../../RunRecord.js"
import { parse, toRecord } from "./Read.js"
import * as Read from "./Read.js"
import type { StoredRun } from "./StoredRun.js"
import type { ListFilter, LiveLease, LiveSample, StaleWrite, Stats } from "../../RunStore.js"
import { err, ok, type Outcome, type State } from "./State.js"
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

export const leases = (state: State, now: number): Array<LiveLease> => {
  return [...state.runs.values()]
    .filter((r) => r.state === "running" && r.leaseExpiresAt! > now)
    .sort((a, b) => (a.leaseOwner! < b.leaseOwner! ? -1 : a.leaseOwner! > b.leaseOwner! ? 1 : Number(a.id) - Number(b.id)))
    .map((r): LiveLease => ({
      owner: r.leaseOwner!,
      runId: r.id,
      fence: r.fence,
      kind: r.kind,
      queue: r.queue,
      attempt: r.attempt,
      expiresInMs: Math.max(0, r.leaseExpiresAt! - now)
    }))
}

export const get = (state: State, runId: string): Outcome<RunRecord, RunNotFound> => {
  const run = state.find(runId)
  return run === undefined ? err(new RunNotFound({ runId })) : ok(toRecord(run))
}

export const list = (state: State, filter: ListFilter): Array<RunRecord> => {
  return Read.list(state.runs.values(), filter)
}

/** The run's history in the order it happened. */
export const history = (state: State, runId: string): Outcome<Array<RunEvent>, RunNotFound> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  return ok(state.events.filter((e) => e.runId === run.id).map((e): RunEvent => ({ id: String(e.seq), runId: run.id, ...e.event })))
}

export const stats = (state: State, now: number): Stats => {
  return Read.stats(state.runs.values(), state.events, now)
}

export const sample = (state: State, now: number): LiveSample => {
  return Read.sample(state.runs.values(), now)
}
