/**
 * The claim (`packages/sql/src/internal/statements/claim.ts`): rated runs first (Rate.ts), then
 * expired leases, passed suspension deadlines and due runs. Every claim raises the fence by exactly
 * 1; a sweep first puts governed suspensions that timed out back in their keys' lines, then admits.
 *
 * @internal
 */
import * as ClaimPosition from "../../ClaimPosition.js"
import type { ClaimedRun } from "../../RunRecord.js"
import * as RunStorage from "../../RunStorage.js"
import type { ClaimRequest } from "../../RunStore.js"
import { admit } from "./Admit.js"
import { claimedView, inClaimOrder } from "./ClaimFragments.js"
import { claimRated } from "./Rate.js"
import { parse } from "./Read.js"
import { enter, governingScope } from "./Slots.js"
import type { State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

/** A keyed run that a declared limit governs (its kind's or its queue's). */
const isGoverned = (state: State, run: StoredRun): boolean => {
  return run.concurrencyKey !== null && governingScope(state, run.kind, run.queue) !== null
}

/**
 * `timeOutGoverned`: governed suspensions of the claim's (unpaused) queues and kinds whose
 * deadline passed become pending with their signal timed out, and wait in their keys' lines.
 */
const timeOutGoverned = (state: State, request: ClaimRequest, now: number): void => {
  const due = [...state.runs.values()]
    .filter((r) =>
      r.state === "suspended" && r.suspendDeadline !== null && r.suspendDeadline <= now && isGoverned(state, r) &&
      request.queues.includes(r.queue) && !state.paused.has(r.queue) && request.kinds.includes(r.kind)
    )
    .sort((a, b) => a.suspendDeadline! - b.suspendDeadline! || Number(a.id) - Number(b.id))
    .slice(0, RunStorage.scanPastLimit)
  for (const run of due) {
    enter(state, run, "pending")
    run.signals = JSON.stringify({ ...(parse(run.signals) as object), [run.signalName!]: { _tag: "TimedOut" } })
    run.signalName = null
    run.signalToken = null
    run.suspendDeadline = null
    run.updatedAt = now
    state.record(run, "signal_timed_out", run.fence, null, { attempt: run.attempt }, now)
  }
}

/**
 * Expired leases by expiry, then passed suspension deadlines by deadline, then due runs by
 * priority DESC, run_at, id; each class capped at `limit`, the classes taken in that order up to
 * `limit`. Every claim raises the fence by exactly 1; an expired lease on its last attempt fails
 * the run instead. Due-only claims skip the first two classes.
 */
export const claim = (state: State, request: ClaimRequest, ttlMs: number, now: number): Array<ClaimedRun> => {
  // Runs a rate limit governs are started first (rate.ts › claimRated), then the routine claim.
  const rated = claimRated(state, request, ttlMs, now)
  const routine = claimRoutine(state, { ...request, limit: request.limit - rated.length }, ttlMs, now)
  return [...rated, ...routine]
}

const claimRoutine = (state: State, request: ClaimRequest, ttlMs: number, now: number): Array<ClaimedRun> => {
  const { limit, owner } = request
  if (limit <= 0 || request.kinds.length === 0) return []
  const sweep = request.dueOnly !== true
  // A sweep first moves governed suspensions that timed out into their keys' lines, then admits
  // keyed runs left waiting with room for them (each its own statement).
  if (sweep) {
    timeOutGoverned(state, request, now)
    admit(state, { kinds: request.kinds, queues: request.queues }, now)
  }
  const all = [...state.runs.values()].filter((r) =>
    request.queues.includes(r.queue) && !state.paused.has(r.queue) && request.kinds.includes(r.kind)
  )
  const byId = (a: StoredRun, b: StoredRun) => Number(a.id) - Number(b.id)
  const expired = sweep
    ? all.filter((r) => r.state === "running" && r.leaseExpiresAt! <= now)
      .sort((a, b) => a.leaseExpiresAt! - b.leaseExpiresAt! || byId(a, b)).slice(0, limit)
    : []
  // Suspensions that timed out, but the governed ones: those joined their keys' lines above.
  const timedOut = sweep
    ? all.filter((r) =>
      r.state === "suspended" && r.suspendDeadline !== null && r.suspendDeadline <= now && !isGoverned(state, r)
    ).sort((a, b) => a.suspendDeadline! - b.suspendDeadline! || byId(a, b)).slice(0, limit)
    : []
  // Due runs: unkeyed ones and admitted ones (a governed run without a slot waits). A due-only
  // claim without a key limit starts each queue at its claim position (ClaimPosition).
  const keyed = request.kinds.some((kind) => state.keyLimitsByScope.has(`kind\u0000${kind}`)) ||
    request.queues.some((queue) => state.keyLimitsByScope.has(`queue\u0000${queue}`))
  const positions = sweep || keyed
    ? new Map<string, ClaimPosition.ClaimPosition>()
    : state.positions.of(request.queues, request.kinds)
  const dueInQueue = (queue: string) =>
    all.filter((r) =>
      r.queue === queue && r.state === "pending" && (r.keyScope === null || r.keySlot !== null) &&
      r.rateScope === null &&
      r.runAt <= now &&
      ClaimPosition.reaches(positions.get(queue), { priority: r.priority, runAtMs: r.runAt })
    ).sort(inClaimOrder).slice(0, limit).map((run) => ({ run }))
  const due = [...new Set(request.queues)].flatMap(dueInQueue).sort((a, b) => inClaimOrder(a.run, b.run)).slice(
    0,
    limit
  )
  const placed = due.map(({ run }) => ({ queue: run.queue, priority: run.priority, runAtMs: run.runAt, id: run.id }))
  // A claim takes no key slot: a reclaimed run keeps the one it holds, an admitted due run the
  // one it was given.
  const picked = [
    ...expired.map((run) => ({ run, origin: 0 })),
    ...timedOut.map((run) => ({ run, origin: 1 })),
    ...due.map(({ run }) => ({ run, origin: 2 }))
  ].slice(0, limit)
  // Positions move by what was claimed (`claimDue`), and a sweep that took a run behind one
  // rewinds it (`claimAll`).
  const pickedDue = new Set(picked.filter((p) => p.origin === 2).map((p) => p.run.id))
  const tookDue = placed.filter((p) => pickedDue.has(p.id))
  if (sweep) state.positions.rewind(request.kinds, tookDue)
  else if (!keyed) state.positions.advance(request.kinds, tookDue)
  const claimed: Array<ClaimedRun> = []
  for (const { origin, run } of picked) {
    const dueAt = origin === 0 ? run.leaseExpiresAt! : origin === 1 ? run.suspendDeadline! : run.runAt
    run.fence += 1
    run.updatedAt = now
    if (origin === 0 && run.attempt >= run.maxAttempts) {
      enter(state, run, "failed")
      run.leaseOwner = null
      run.leaseExpiresAt = null
      run.finishedAt = now
      run.error = JSON.stringify({ message: "lease expired on the last attempt", permanent: true })
      state.record(run, "failed", run.fence, owner, { attempt: run.attempt }, now)
    } else {
      if (origin === 1) {
        run.signals = JSON.stringify({ ...(parse(run.signals) as object), [run.signalName!]: { _tag: "TimedOut" } })
      }
      enter(state, run, "running")
      run.attempt += 1
      run.leaseOwner = owner
      run.leaseExpiresAt = now + ttlMs
      run.finishedAt = null
      const kind = origin === 0 ? "reclaimed" : origin === 1 ? "signal_timed_out" : "claimed"
      state.record(run, kind, run.fence, owner, { attempt: run.attempt }, now)
      claimed.push(
        claimedView(run, origin === 0 ? "expired" : origin === 1 ? "timed-out" : "due", Math.max(0, now - dueAt), now)
      )
    }
    run.signalName = null
    run.signalToken = null
    run.suspendDeadline = null
  }
  return claimed
}
