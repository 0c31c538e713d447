/**
 * Retention in the memory store (`Retention`; Postgres: `maintain_history`, migration 0033): a run
 * that ended longer ago than its window is dropped with everything kept of it, unless its unique
 * window still names it. The memory store has no ranges: each run is its own.
 *
 * @internal
 */
import type * as Retention from "../../Retention.js"
import { isWorkflowRun } from "../../RunRecord.js"
import type { State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

const ended = (run: StoredRun) => run.state === "completed" || run.state === "failed" || run.state === "cancelled"

/** The runs retention drops now, with the workflow executions whose journals go with them. */
export const maintain = (
  state: State,
  request: Retention.MaintainRequest,
  windowMs: { readonly keep: number; readonly keepFailed: number },
  now: number
): { readonly actions: ReadonlyArray<Retention.Action>; readonly executions: ReadonlySet<string> } => {
  const held = new Set([...state.uniqueHolds.values()].map((hold) => hold.runId))
  const gone = [...state.runs.values()].filter((run) =>
    ended(run) && run.finishedAt !== null && !held.has(run.id)
    && now - run.finishedAt >= (run.state === "completed" ? windowMs.keep : windowMs.keepFailed)
  ).sort((a, b) => Number(a.id) - Number(b.id))
  const actions = gone.map((run): Retention.Action => ({
    action: "drop",
    table: "runs",
    from: run.id,
    to: String(Number(run.id) + 1)
  }))
  if (request.dryRun) return { actions, executions: new Set() }
  const ids = new Set(gone.map((run) => run.id))
  for (const run of gone) {
    state.runs.delete(run.id)
    state.attemptLogs.delete(run.id)
    if (run.idempotencyKey !== null && state.keys.get(run.idempotencyKey) === run.id) {
      state.keys.delete(run.idempotencyKey)
    }
  }
  for (const key of state.callbacks.keys()) if (ids.has(key.slice(0, key.indexOf(":")))) state.callbacks.delete(key)
  for (let i = state.events.length - 1; i >= 0; i--) if (ids.has(state.events[i]!.runId)) state.events.splice(i, 1)
  // A workflow's journal is kept by its execution: its run's idempotency key (isWorkflowRun).
  return { actions, executions: new Set(gone.filter(isWorkflowRun).map((r) => r.idempotencyKey!)) }
}

/** What is kept: no ranges; the runs, their JSON text's length as the bytes, the oldest run's creation. */
export const status = (state: State): Retention.Status => {
  let bytes = 0
  let oldest: number | null = null
  for (const run of state.runs.values()) {
    bytes += run.payload.length + (run.result?.length ?? 0) + (run.error?.length ?? 0)
    if (oldest === null || run.createdAt < oldest) oldest = run.createdAt
  }
  return { ranges: [], runs: state.runs.size, bytes, oldestKeptAt: oldest === null ? null : new Date(oldest) }
}
