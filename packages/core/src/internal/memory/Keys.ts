/**
 * Per-key concurrency limits (`packages/sql/src/internal/statements/keys.ts`): declaring, changing
 * or removing one governs the pending keyed runs of its kind or queue anew and admits their keys.
 *
 * @internal
 */
import * as KeyLimits from "../../KeyLimits.js"
import { admit } from "./Admit.js"
import { order } from "./Read.js"
import { governingScope } from "./Slots.js"
import type { State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

export const setKeyLimits = (state: State, limits: ReadonlyArray<KeyLimits.KeyLimit>, now: number): void => {
  // The last of a batch stands for its scope and name; it changed if it differs from the stored one.
  const last = new Map(limits.map((limit) => [`${limit.scope}\u0000${limit.name}`, limit]))
  const changed = [...last].filter(([id, limit]) => state.keyLimitsByScope.get(id)?.perKey !== limit.perKey).map((
    [, limit]
  ) => limit)
  for (const [id, limit] of last) state.keyLimitsByScope.set(id, limit)
  regovern(state, changed, now)
}

export const removeKeyLimit = (state: State, scope: KeyLimits.KeyLimitScope, name: string, now: number): boolean => {
  const removed = state.keyLimitsByScope.delete(`${scope}\u0000${name}`)
  if (removed) regovern(state, [{ scope, name }], now)
  return removed
}

/**
 * `regovern`: the pending keyed runs of the changed kinds and queues are governed by the limits
 * as they are now and give back the slots they were admitted with; then the changed kinds' and
 * every queue limit's keys are admitted again.
 */
const regovern = (
  state: State,
  changed: ReadonlyArray<{ readonly scope: KeyLimits.KeyLimitScope; readonly name: string }>,
  now: number
): void => {
  if (changed.length === 0) return
  const kinds = changed.filter((c) => c.scope === "kind").map((c) => c.name)
  const queues = changed.filter((c) => c.scope === "queue").map((c) => c.name)
  for (const run of state.runs.values()) {
    if (
      run.state !== "pending" || run.concurrencyKey === null ||
      !(kinds.includes(run.kind) || queues.includes(run.queue))
    ) continue
    const scope = governingScope(state, run.kind, run.queue)
    if (scope !== run.keyScope || run.keySlot !== null) {
      run.keyScope = scope
      run.keySlot = null
    }
  }
  admit(state, { every: true }, now)
}

export const keyLimits = (state: State, now: number): Array<KeyLimits.KeyLimitInfo> => {
  return [...state.keyLimitsByScope.values()]
    .sort((a, b) => order(a.scope, b.scope) || order(a.name, b.name))
    .map((limit) => {
      const inScope = (r: StoredRun) =>
        r.concurrencyKey !== null && (limit.scope === "queue" ? r.queue : r.kind) === limit.name
      const keys = new Set<string>()
      let keyedDue = 0
      for (const r of state.runs.values()) {
        if (!inScope(r)) continue
        if (r.state === "running") keys.add(r.concurrencyKey!)
        if (r.state === "pending" && r.runAt <= now) keyedDue += 1
      }
      return { ...limit, keysRunning: keys.size, keyedDue }
    })
}
