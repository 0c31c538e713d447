/**
 * `leasehold stats`: how many runs are in each state on each queue, how many leases are live, how
 * long the oldest due run has waited, and how often the fence rejected a stale write or a lease
 * expired and was reclaimed; and the per-key limits declared, with the keys they hold.
 */
import { type KeyLimits, RunState, RunStore, type Stats } from "@leasehold/core"
import { Effect } from "effect"
import { Command } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, jsonFlag } from "../Flags.js"
import * as Output from "../Output.js"

const states = RunState.literals

/** Counts per queue (rows) and state (columns), with a total row. */
const countsTable = (stats: Stats) => {
  const queues = [...new Set(stats.byStateAndQueue.map((r) => r.queue))].sort()
  const count = (queue: string | undefined, state: string) =>
    stats.byStateAndQueue
      .filter((r) => (queue === undefined || r.queue === queue) && r.state === state)
      .reduce((sum, r) => sum + r.count, 0)
  const row = (label: string, queue: string | undefined) => {
    const counts = states.map((state) => count(queue, state))
    return [label, ...counts.map(String), String(counts.reduce((a, b) => a + b, 0))]
  }
  return Output.table(
    ["QUEUE", ...states.map((s) => s.toUpperCase()), "TOTAL"],
    [...queues.map((q) => row(q, q)), row("(all)", undefined)]
  )
}

/** The declared per-key limits, with the keys running and the keyed runs due in each scope. */
export const keyLimitsTable = (limits: ReadonlyArray<KeyLimits.KeyLimitInfo>) =>
  Output.table(
    ["KEY LIMIT", "PER KEY", "KEYS RUNNING", "KEYED DUE"],
    limits.map((l) => [`${l.scope} ${l.name}`, String(l.perKey), String(l.keysRunning), String(l.keyedDue)])
  )

export const stats = Command.make("stats", { ...connectionFlags, json: jsonFlag }, (flags) =>
  Effect.gen(function*() {
    const [stats, keyLimits] = yield* Connection.withStore(
      flags,
      RunStore.use((s) => Effect.all([s.stats, s.keyLimits])),
      { migrate: false }
    )
    if (flags.json) {
      const byState = Object.fromEntries(
        states.map((state) => [state, stats.byStateAndQueue.filter((r) => r.state === state).reduce((n, r) => n + r.count, 0)])
      )
      return yield* Output.json({
        byState,
        byStateAndQueue: stats.byStateAndQueue.map((r) => ({ queue: r.queue, state: r.state, count: r.count })),
        liveLeases: stats.liveLeases,
        oldestPendingSeconds: stats.oldestPendingSeconds,
        fenceRejections: stats.fenceRejections,
        reclaims: stats.reclaims,
        keyLimits
      })
    }
    yield* Output.lines(countsTable(stats))
    yield* Output.line()
    yield* Output.lines(Output.fields([
      ["live leases", String(stats.liveLeases)],
      ["oldest pending", stats.oldestPendingSeconds === null ? "none due" : `${Output.age(stats.oldestPendingSeconds)} waiting`],
      ["fence rejections", String(stats.fenceRejections)],
      ["reclaims", String(stats.reclaims)]
    ]))
    if (keyLimits.length > 0) {
      yield* Output.line()
      yield* Output.lines(keyLimitsTable(keyLimits))
    }
  })).pipe(Command.withDescription("Counts by state and queue, live leases, oldest pending run, fence rejections, reclaims"))
