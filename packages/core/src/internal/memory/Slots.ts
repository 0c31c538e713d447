/**
 * Key slots (`packages/sql/src/internal/statements/slots.ts`, migrations 0010 and 0013): the row
 * rules every state change of a run follows (`enter`, migration 0013's `key_slot_rules`) and the
 * lookups admission and the claim share.
 *
 * @internal
 */
import * as KeyLimits from "../../KeyLimits.js"
import type { RunState } from "../../RunRecord.js"
import type { Released, State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

/**
 * A run's state change with the row rules of `key_slot_rules`: a run stops holding its slot
 * when it leaves pending and running (or goes back from running to pending), and a keyed run
 * that becomes pending is governed by the limit declared now, and waits. The slot given back is
 * returned; the row trigger hands it on at the statement's end, except a completion's, which
 * its own statement hands on (`handOffSet`).
 */
export const enter = (state: State, run: StoredRun, to: RunState): Released | undefined => {
  const from = run.state
  const rules = (run.keySlot !== null && to !== "running" && !(from === "pending" && to === "pending")) ||
    (run.concurrencyKey !== null && to === "pending" && from !== "pending")
  let released: Released | undefined
  if (rules) {
    if (run.keySlot !== null) released = { run, scope: run.keyScope!, slot: run.keySlot }
    run.keySlot = null
    if (to === "pending" && run.concurrencyKey !== null) run.keyScope = governingScope(state, run.kind, run.queue)
  }
  run.state = to
  if (released !== undefined && to !== "completed") state.handOffs.push(released)
  return released
}

export const keyName = (run: StoredRun, scope: KeyLimits.KeyLimitScope): string => {
  return scope === "kind" ? run.kind : run.queue
}

/** The runs holding a slot of a key (`heldSlots`). */
export const holders = (state: State, scope: KeyLimits.KeyLimitScope, name: string, key: string): Array<StoredRun> => {
  return [...state.runs.values()].filter((o) =>
    o.keySlot !== null && o.keyScope === scope && keyName(o, scope) === name && o.concurrencyKey === key
  )
}

export const perKey = (state: State, scope: KeyLimits.KeyLimitScope, name: string): number | undefined => {
  return state.keyLimitsByScope.get(`${scope}\u0000${name}`)?.perKey
}

/** The scope of the limit governing runs of `kind` in `queue`: the kind's, else the queue's, else none. */
export const governingScope = (state: State, kind: string, queue: string): KeyLimits.KeyLimitScope | null => {
  return state.keyLimitsByScope.has(`kind\u0000${kind}`)
    ? "kind"
    : state.keyLimitsByScope.has(`queue\u0000${queue}`)
    ? "queue"
    : null
}
