/**
 * Attempt logs (`packages/sql/src/internal/statements/attemptLogs.ts`): one entry per claim (run
 * and fence), written with a failure or after a completion under the same fence, and read back
 * oldest claim first.
 *
 * @internal
 */
import type * as AttemptLogs from "../../AttemptLogs.js"
import * as AttemptLogStorage from "../../AttemptLogStorage.js"
import { RunNotFound } from "../../Errors.js"
import type { LeaseKey } from "../../RunRecord.js"
import { parse } from "./Read.js"
import { err, ok, type Outcome, type State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

/** Keeps an attempt's lines for a run the caller's write matched; a claim's lines are written once. */
export const keep = (
  state: State,
  run: StoredRun,
  fence: number,
  outcome: "failed" | "completed",
  log: AttemptLogs.AttemptLogInput,
  now: number
): boolean => {
  const kept = state.attemptLogs.get(run.id) ?? []
  if (kept.some((entry) => entry.fence === fence)) return false
  const bounded = AttemptLogStorage.bound(log)
  kept.push({
    fence,
    attempt: bounded.attempt,
    outcome,
    lines: AttemptLogStorage.encodeLines(bounded.lines),
    dropped: bounded.dropped,
    at: now
  })
  state.attemptLogs.set(run.id, kept)
  return true
}

/** Keeps a completed attempt's lines while its run stands completed under that fence. */
export const keepCompleted = (
  state: State,
  lease: LeaseKey,
  log: AttemptLogs.AttemptLogInput,
  now: number
): boolean => {
  const run = state.find(lease.runId)
  return run !== undefined && run.state === "completed" && run.fence === lease.fence &&
    keep(state, run, lease.fence, "completed", log, now)
}

export const read = (state: State, runId: string): Outcome<Array<AttemptLogs.AttemptLog>, RunNotFound> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  return ok(
    [...(state.attemptLogs.get(run.id) ?? [])].sort((a, b) => a.fence - b.fence).map((entry) => ({
      runId: run.id,
      fence: entry.fence,
      attempt: entry.attempt,
      outcome: entry.outcome,
      lines: AttemptLogStorage.decodeLines(parse(entry.lines)),
      dropped: entry.dropped,
      at: new Date(entry.at)
    }))
  )
}
