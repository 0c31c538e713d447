/**
 * `leasehold stats`: how many runs that have not ended are in each state on each queue, how many leases are live, how
 * long the oldest due run has waited, and how often the fence rejected a stale write or a lease
 * expired and was reclaimed; and the per-key limits declared, with the keys they hold.
 */
import { type KeyLimits, type LiveState, type RateLimits, RunStore, type Stats, type Throughput } from "@leasehold/core"
import { Duration, Effect } from "effect"
import { Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, jsonFlag } from "../Flags.js"
import * as Output from "../Output.js"

/** The states stats counts (ADR 0030): ended runs are in the throughput table below, per minute. */
const states: ReadonlyArray<LiveState> = ["pending", "running", "suspended"]

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

/** The declared rate limits, with the starts in each one's last interval and the due runs it governs. */
export const rateLimitsTable = (limits: ReadonlyArray<RateLimits.RateLimitInfo>) =>
  Output.table(
    ["RATE LIMIT", "STARTS", "PER", "PER KEY", "STARTED IN LAST INTERVAL", "DUE"],
    limits.map((l) => [
      `${l.scope} ${l.name}`,
      String(l.limit),
      Duration.format(Duration.millis(l.intervalMs)),
      l.perKey ? "yes" : "no",
      String(l.startedInWindow),
      String(l.due)
    ])
  )

const ms = (
  value: number | undefined
) => (value === undefined ? "-" : value < 1000 ? `${Math.round(value)}ms` : `${(value / 1000).toFixed(1)}s`)

/** Per minute and queue: completions, failures, wait and run time percentiles (`RunStore.throughput`). */
export const throughputTable = (throughput: Throughput.Throughput) =>
  Output.table(
    ["MINUTE", "QUEUE", "COMPLETED", "FAILED", "WAIT P50", "WAIT P95", "RUN P50", "RUN P95"],
    throughput.series.map((m) => [
      m.minute.toISOString().slice(0, 16).replace("T", " "),
      m.queue,
      String(m.completed),
      String(m.failed),
      ms(m.waitMs?.p50),
      ms(m.waitMs?.p95),
      ms(m.runMs?.p50),
      ms(m.runMs?.p95)
    ])
  )

const minutesFlag = Flag.Int("minutes").pipe(
  Flag.withDefault(10),
  Flag.withDescription("minutes of throughput to show per queue and minute (1 to 1440; from the runs finished in them)")
)

export const stats = Command.make(
  "stats",
  { ...connectionFlags, json: jsonFlag, minutes: minutesFlag },
  (flags) =>
    Effect.gen(function*() {
      const [stats, keyLimits, rateLimits, throughput] = yield* Connection.withStore(
        flags,
        RunStore.use((s) => Effect.all([s.stats, s.keyLimits, s.rateLimits, s.throughput({ minutes: flags.minutes })])),
        { migrate: false }
      )
      if (flags.json) {
        const byState = Object.fromEntries(
          states.map((
            state
          ) => [state, stats.byStateAndQueue.filter((r) => r.state === state).reduce((n, r) => n + r.count, 0)])
        )
        return yield* Output.json({
          byState,
          byStateAndQueue: stats.byStateAndQueue.map((r) => ({ queue: r.queue, state: r.state, count: r.count })),
          liveLeases: stats.liveLeases,
          oldestPendingSeconds: stats.oldestPendingSeconds,
          fenceRejections: stats.fenceRejections,
          reclaims: stats.reclaims,
          keyLimits,
          rateLimits,
          throughput
        })
      }
      yield* Output.lines(countsTable(stats))
      yield* Output.line()
      yield* Output.lines(Output.fields([
        ["live leases", String(stats.liveLeases)],
        [
          "oldest pending",
          stats.oldestPendingSeconds === null ? "none due" : `${Output.age(stats.oldestPendingSeconds)} waiting`
        ],
        ["fence rejections", String(stats.fenceRejections)],
        ["reclaims", String(stats.reclaims)]
      ]))
      if (keyLimits.length > 0) {
        yield* Output.line()
        yield* Output.lines(keyLimitsTable(keyLimits))
      }
      if (rateLimits.length > 0) {
        yield* Output.line()
        yield* Output.lines(rateLimitsTable(rateLimits))
      }
      yield* Output.line()
      yield* Output.line(
        `finished in the last ${throughput.minutes} minutes${
          throughput.truncated ? " (the latest runs only: more finished than are read)" : ""
        }:`
      )
      yield* throughput.series.length === 0 ? Output.line("  none") : Output.lines(throughputTable(throughput))
    })
).pipe(
  Command.withDescription(
    "Counts of runs not ended by state and queue, live leases, oldest pending run, fence rejections, reclaims, and per-minute completions, failures and wait/run time percentiles"
  )
)
