/**
 * What every transition that grants a claim shares (`packages/sql/src/internal/statements/claimFragments.ts`):
 * the claim order, the claimed run as its worker is handed it, and the claim of one due run outside
 * a claim statement (a completion's hand-off, a rated claim), so a run is claimed the same way
 * wherever it is claimed.
 *
 * @internal
 */
import type { ClaimedRun } from "../../RunRecord.js"
import { parse } from "./Read.js"
import { enter } from "./Slots.js"
import type { State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

/** Claim order: priority DESC, run_at, id. */
export const inClaimOrder = (a: StoredRun, b: StoredRun) =>
  b.priority - a.priority || a.runAt - b.runAt || Number(a.id) - Number(b.id)

/** A claimed run as the store hands it to its worker. */
export const claimedView = (run: StoredRun, via: ClaimedRun["via"], waitMs: number, now: number): ClaimedRun => ({
  id: run.id,
  queue: run.queue,
  kind: run.kind,
  payload: parse(run.payload),
  attempt: run.attempt,
  maxAttempts: run.maxAttempts,
  fence: run.fence,
  checkpoint: parse(run.checkpoint),
  signals: parse(run.signals) as ClaimedRun["signals"],
  concurrencyKey: run.concurrencyKey,
  via,
  waitMs,
  traceParent: run.traceParent,
  attemptTimeoutMs: run.attemptTimeoutMs,
  deadlineInMs: run.deadline === null ? null : run.deadline - now
})

/** A due run claimed for `owner` outside a claim statement (a completion's hand-off, `handOff`). */
export const claimOne = (state: State, run: StoredRun, owner: string, ttlMs: number, now: number): ClaimedRun => {
  run.fence += 1
  run.updatedAt = now
  enter(state, run, "running")
  run.attempt += 1
  run.leaseOwner = owner
  run.leaseExpiresAt = now + ttlMs
  run.finishedAt = null
  state.record(run, "claimed", run.fence, owner, { attempt: run.attempt }, now)
  return claimedView(run, "due", Math.max(0, now - run.runAt), now)
}
