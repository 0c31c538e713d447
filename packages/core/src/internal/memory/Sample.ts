/**
 * What `sample` reads (`packages/sql/src/internal/statements/sample.ts`): the runs that have not
 * ended, by queue and state, the due ones and the live leases.
 *
 * @internal
 */
import type { LiveSample, LiveState } from "../../RunStore.js"
import { order } from "./Read.js"
import type { StoredRun } from "./StoredRun.js"

export const sample = (runs: Iterable<StoredRun>, now: number): LiveSample => {
  const counts = new Map<string, { queue: string; state: LiveState; count: number }>()
  const due = new Map<string, { count: number; oldest: number }>()
  let liveLeases = 0
  for (const run of runs) {
    if (run.state !== "pending" && run.state !== "running" && run.state !== "suspended") continue
    const key = `${run.queue}\u0000${run.state}`
    const entry = counts.get(key) ?? { queue: run.queue, state: run.state, count: 0 }
    entry.count += 1
    counts.set(key, entry)
    if (run.state === "running" && run.leaseExpiresAt! > now) liveLeases += 1
    const waitingForKey = run.keyScope !== null && run.keySlot === null
    if (run.state === "pending" && !waitingForKey && run.runAt <= now) {
      const queue = due.get(run.queue) ?? { count: 0, oldest: run.runAt }
      due.set(run.queue, { count: queue.count + 1, oldest: Math.min(queue.oldest, run.runAt) })
    }
  }
  return {
    byStateAndQueue: [...counts.values()].sort((a, b) => order(a.queue, b.queue) || order(a.state, b.state)),
    dueByQueue: [...due.entries()].sort(([a], [b]) => order(a, b))
      .map(([queue, d]) => ({ queue, due: d.count, oldestDueSeconds: (now - d.oldest) / 1000 })),
    liveLeases
  }
}
