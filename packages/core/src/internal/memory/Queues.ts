/**
 * Pausing and resuming queues (`packages/sql/src/internal/statements/queues.ts`): a claim leaves a
 * paused queue's runs out.
 *
 * @internal
 */
import type { PausedQueue } from "../../RunRecord.js"
import { admit } from "./Admit.js"
import { order } from "./Read.js"
import type { State } from "./State.js"

/** `pause`: its admitted keyed runs give their slots back, which go to their keys' runs elsewhere. */
export const pauseQueue = (state: State, queue: string, now: number): boolean => {
  if (state.paused.has(queue)) return false
  state.paused.set(queue, now)
  const keys: Array<string> = []
  for (const run of state.runs.values()) {
    if (run.queue !== queue || run.state !== "pending" || run.keySlot === null) continue
    run.keySlot = null
    keys.push(run.concurrencyKey!)
  }
  if (keys.length > 0) {
    admit(state, { every: true, keys }, now)
  }
  return true
}

export const resumeQueue = (state: State, queue: string): boolean => {
  if (!state.paused.delete(queue)) return false
  state.outbox.push({ _tag: "RunsAvailable", queue })
  return true
}

export const pausedQueues = (state: State): Array<PausedQueue> => {
  return [...state.paused].sort(([a], [b]) => order(a, b)).map(([queue, since]) => ({ queue, since: new Date(since) }))
}
