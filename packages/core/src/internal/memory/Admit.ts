/**
 * Admission (`packages/sql/src/internal/statements/admit.ts`, migration 0013's `key_slot_hand_off`):
 * a keyed run under a limit waits, pending without a slot, until it is given a free slot of its
 * key. The slots a statement's rows gave back are handed on at its end, a completion's by its own
 * statement (`handOffSet`); `admit` gives the rest their slots.
 *
 * @internal
 */
import { Duration } from "effect"
import * as KeyLimits from "../../KeyLimits.js"
import type { ClaimedRun } from "../../RunRecord.js"
import type { ClaimNext } from "../../RunStore.js"
import { claimOne, inClaimOrder } from "./ClaimFragments.js"
import { holders, keyName, perKey } from "./Slots.js"
import type { Released, State } from "./State.js"
import type { StoredRun } from "./StoredRun.js"

/** The end of a statement: the row trigger's hand-offs, in the order the rows were written. */
export const endStatement = (state: State, now: number): void => {
  const handOffs = state.handOffs
  state.handOffs = []
  for (const released of handOffs) handOffOne(state, released, now)
}

/** `key_slot_hand_off`: one slot given back goes to its key's next waiting due run. */
const handOffOne = (state: State, { run, scope, slot }: Released, now: number): void => {
  const name = keyName(run, scope)
  const per = perKey(state, scope, name)
  if (per === undefined || slot >= per) return
  if (holders(state, scope, name, run.concurrencyKey!).some((o) => o.keySlot! >= per)) return
  const successor = waiting(state, scope, name, run.concurrencyKey!, now)[0]
  if (successor === undefined) return
  successor.keySlot = slot
  state.outbox.push({ _tag: "RunsAvailable", queue: successor.queue })
}

/** A key's waiting due runs in claim order (`runs_waiting_kind`, `runs_waiting_queue`), paused queues' left out. */
const waiting = (
  state: State,
  scope: KeyLimits.KeyLimitScope,
  name: string,
  key: string,
  now: number
): Array<StoredRun> => {
  return [...state.runs.values()]
    .filter((o) =>
      o.state === "pending" && o.keyScope === scope && o.keySlot === null && keyName(o, scope) === name &&
      o.concurrencyKey === key && o.runAt <= now && !state.paused.has(o.queue)
    )
    .sort(inClaimOrder)
}

/**
 * `handOff`: the slots a completion statement gave back, handed on set-based: each key's freed
 * slots below its limit, in order, to its first waiting due runs in claim order; none to a key
 * that held a slot above its limit when the statement began (`above`).
 */
export const handOffSet = (
  state: State,
  released: ReadonlyArray<Released>,
  above: ReadonlySet<string>,
  now: number,
  next?: ClaimNext
): Map<string, ClaimedRun> => {
  const successors = new Map<string, ClaimedRun>()
  const byKey = new Map<
    string,
    { scope: KeyLimits.KeyLimitScope; name: string; key: string; slots: Array<number>; after: Array<string> }
  >()
  for (const { run, scope, slot } of released) {
    const name = keyName(run, scope)
    const per = perKey(state, scope, name)
    if (per === undefined || slot >= per) continue
    const id = `${scope}\u0000${name}\u0000${run.concurrencyKey}`
    if (above.has(id)) continue
    const group = byKey.get(id) ?? { scope, name, key: run.concurrencyKey!, slots: [], after: [] }
    group.slots.push(slot)
    group.after.push(run.id)
    byKey.set(id, group)
  }
  for (const { after, key, name, scope, slots } of byKey.values()) {
    const order = slots.map((slot, i) => ({ slot, after: after[i]! })).sort((a, b) => a.slot - b.slot)
    waiting(state, scope, name, key, now).slice(0, order.length).forEach((run, i) => {
      run.keySlot = order[i]!.slot
      // Claimed at once for the completion's owner when it asked, and the run is its to take.
      // A run a rate limit governs is given its slot, not started: only the rated claim starts it.
      if (
        next !== undefined && run.rateScope === null && next.kinds.includes(run.kind) &&
        next.queues.includes(run.queue) &&
        !state.paused.has(run.queue)
      ) {
        successors.set(order[i]!.after, claimOne(state, run, next.owner, Duration.toMillis(next.ttl), now))
      } else {
        state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
      }
    })
  }
  return successors
}

/** The keys holding a slot at or above their limit now (a lowered limit): `handOffSet`'s `above`. */
export const keysAboveLimit = (state: State): Set<string> => {
  const above = new Set<string>()
  for (const o of state.runs.values()) {
    if (o.keySlot === null || o.keyScope === null) continue
    const name = keyName(o, o.keyScope)
    const per = perKey(state, o.keyScope, name)
    if (per !== undefined && o.keySlot >= per) above.add(`${o.keyScope}\u0000${name}\u0000${o.concurrencyKey}`)
  }
  return above
}

/**
 * `admit`: each key of the named kinds' and queues' limits (or only the named keys) gives its
 * free slots (below its limit, less as many as runs hold above it) to its waiting due runs in
 * claim order. (Postgres reads at most `RunStorage.scanPastLimit` keys of a limit per sweep; a
 * model never has that many.)
 */
export const admit = (
  state: State,
  scope:
    & ({ readonly kinds: ReadonlyArray<string>; readonly queues: ReadonlyArray<string> } | { readonly every: true })
    & { readonly keys?: ReadonlyArray<string> },
  now: number
): void => {
  const woken = new Set<string>()
  for (const limit of state.keyLimitsByScope.values()) {
    if (!("every" in scope) && !(limit.scope === "kind" ? scope.kinds : scope.queues).includes(limit.name)) continue
    const keys = scope.keys ?? [
      ...new Set(
        [...state.runs.values()]
          .filter((o) =>
            o.state === "pending" && o.keyScope === limit.scope && o.keySlot === null &&
            keyName(o, limit.scope) === limit.name
          )
          .map((o) => o.concurrencyKey!)
      )
    ]
    for (const key of new Set(keys)) {
      // The unheld numbers below the limit, no more than the room every held slot leaves.
      const held = holders(state, limit.scope, limit.name, key).map((o) => o.keySlot!)
      const free: Array<number> = []
      for (let slot = 0; slot < limit.perKey && free.length < limit.perKey - held.length; slot++) {
        if (!held.includes(slot)) free.push(slot)
      }
      waiting(state, limit.scope, limit.name, key, now).slice(0, free.length).forEach((run, i) => {
        run.keySlot = free[i]!
        woken.add(run.queue)
      })
    }
  }
  for (const queue of woken) state.outbox.push({ _tag: "RunsAvailable", queue })
}
