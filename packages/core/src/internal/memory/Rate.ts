/**
 * Rate limits (`packages/sql/src/internal/statements/rate.ts`): the limits, the starts within each
 * window, and the rated claim, which starts the runs a rate limit governs before the routine claim.
 *
 * @internal
 */
import * as RateLimits from "../../RateLimits.js"
import * as RateWake from "../../RateWakes.js"
import type { ClaimedRun } from "../../RunRecord.js"
import * as RunStorage from "../../RunStorage.js"
import type { ClaimRequest } from "../../RunStore.js"
import { claimOne, inClaimOrder } from "./ClaimFragments.js"
import { order } from "./Read.js"
import type { State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

export const rateGoverning = (state: State, kind: string, queue: string): RateLimits.RateLimitScope | null => {
  return state.rateLimitsByScope.has(`kind\u0000${kind}`)
    ? "kind"
    : state.rateLimitsByScope.has(`queue\u0000${queue}`)
    ? "queue"
    : null
}

const startsSince = (state: State, scope: string, name: string, key: string | undefined, since: number): number => {
  return state.rateStarts.filter((t) =>
    t.scope === scope && t.name === name && (key === undefined || t.key === key) && t.at > since
  ).length
}

/** The rate limit governing a run and the key of its window in it; undefined once no limit governs it. */
const windowOf = (state: State, run: StoredRun) => {
  const name = run.rateScope === "kind" ? run.kind : run.queue
  const limit = state.rateLimitsByScope.get(`${run.rateScope}\u0000${name}`)
  return limit === undefined ? undefined : { limit, key: RunStorage.windowKey(limit.perKey, run.concurrencyKey) }
}

/**
 * `claimRated`: the windows with room of the first due governed runs in claim order (at most
 * `limit` of them), each window's room (its limit less its starts within the interval), that many of its
 * runs, all of them cut to `limit` in claim order; each start recorded.
 */
export const claimRated = (state: State, request: ClaimRequest, ttlMs: number, now: number): Array<ClaimedRun> => {
  state.rateWake = undefined
  if (request.limit <= 0 || request.kinds.length === 0 || state.rateLimitsByScope.size === 0) return []
  const due = [...state.runs.values()].filter((r) =>
    r.state === "pending" && r.rateScope !== null && (r.keyScope === null || r.keySlot !== null) && r.runAt <= now &&
    request.queues.includes(r.queue) && !state.paused.has(r.queue) && request.kinds.includes(r.kind)
  ).sort(inClaimOrder).slice(0, RunStorage.scanPastLimit)
  const windows = new Map<string, { limit: RateLimits.CheckedRateLimit; key: string; runs: Array<StoredRun> }>()
  for (const run of due) {
    const governed = windowOf(state, run)
    if (governed === undefined) continue
    const { key, limit } = governed
    const id = `${limit.scope}\u0000${limit.name}\u0000${key}`
    // A full window takes no place among the claim's: the windows with room behind it start.
    const window = windows.get(id) ??
      (windows.size < request.limit &&
          startsSince(state, limit.scope, limit.name, key, now - limit.intervalMs) < limit.limit
        ? { limit, key, runs: [] }
        : undefined)
    if (window === undefined) continue
    window.runs.push(run)
    windows.set(id, window)
  }
  const picked: Array<{ run: StoredRun; limit: RateLimits.CheckedRateLimit; key: string }> = []
  for (const { key, limit, runs } of windows.values()) {
    const room = limit.limit - startsSince(state, limit.scope, limit.name, key, now - limit.intervalMs)
    for (const run of runs.slice(0, Math.max(0, room))) picked.push({ run, limit, key })
  }
  picked.sort((a, b) => inClaimOrder(a.run, b.run))
  const claimed: Array<ClaimedRun> = []
  for (const { key, limit, run } of picked.slice(0, request.limit)) {
    claimed.push(claimOne(state, run, request.owner, ttlMs, now))
    state.rateStarts.push({ scope: limit.scope, name: limit.name, key, at: now })
  }
  // Starts older than their window's interval count no more.
  state.rateStarts = state.rateStarts.filter((t) => {
    const limit = state.rateLimitsByScope.get(`${t.scope}\u0000${t.name}`)
    return limit !== undefined && t.at > now - limit.intervalMs
  })
  state.rateWake = RateWake.earliest(
    due.filter((run) => run.state === "pending").flatMap((run) => {
      const governed = windowOf(state, run)
      if (governed === undefined) return []
      const { key, limit } = governed
      const starts = state.rateStarts.filter((t) => t.scope === limit.scope && t.name === limit.name && t.key === key)
        .map((t) => t.at)
      return [{ queue: run.queue, limit: limit.limit, intervalMs: limit.intervalMs, starts }]
    })
  )
  return claimed
}

/** Moves the starts of one limit, or of every limit, to `at` (tests: the memory twin of an UPDATE on `rate_starts.started_at`). */
export const setRateStartTimes = (
  state: State,
  at: number,
  limit?: { readonly scope: string; readonly name: string }
): void => {
  state.rateStarts = state.rateStarts.map((t) =>
    limit === undefined || (t.scope === limit.scope && t.name === limit.name) ? { ...t, at } : t
  )
}

const rerate = (state: State, kinds: ReadonlyArray<string>, queues: ReadonlyArray<string>): void => {
  for (const run of state.runs.values()) {
    if (!(run.state === "pending" || run.state === "running" || run.state === "suspended")) continue
    if (kinds.includes(run.kind) || queues.includes(run.queue)) {
      run.rateScope = rateGoverning(state, run.kind, run.queue)
    }
  }
}

export const setRateLimits = (state: State, limits: ReadonlyArray<RateLimits.CheckedRateLimit>): void => {
  for (const limit of limits) state.rateLimitsByScope.set(`${limit.scope}\u0000${limit.name}`, limit)
  rerate(
    state,
    limits.filter((l) => l.scope === "kind").map((l) => l.name),
    limits.filter((l) => l.scope === "queue").map((l) => l.name)
  )
}

export const removeRateLimit = (state: State, scope: RateLimits.RateLimitScope, name: string): boolean => {
  if (!state.rateLimitsByScope.delete(`${scope}\u0000${name}`)) return false
  state.rateStarts = state.rateStarts.filter((t) => !(t.scope === scope && t.name === name))
  rerate(state, scope === "kind" ? [name] : [], scope === "queue" ? [name] : [])
  return true
}

export const rateLimits = (state: State, now: number): Array<RateLimits.RateLimitInfo> => {
  return [...state.rateLimitsByScope.values()]
    .sort((a, b) => order(a.scope, b.scope) || order(a.name, b.name))
    .map((limit) => ({
      ...limit,
      startedInWindow: startsSince(state, limit.scope, limit.name, undefined, now - limit.intervalMs),
      due: [...state.runs.values()].filter((r) =>
        r.state === "pending" && r.rateScope === limit.scope &&
        (limit.scope === "kind" ? r.kind : r.queue) === limit.name &&
        r.runAt <= now && (r.keyScope === null || r.keySlot !== null)
      ).length
    }))
}
