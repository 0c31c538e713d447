/**
 * The fault suite's checker, run after the nemesis stops and the system quiesces. It reads the
 * history the database kept (runs, run_history, the effects table) and what the workers reported, and
 * judges the properties Leasehold promises. It trusts no worker's clock.
 *
 * @since 0.1.0
 */
import type { Report } from "@leasehold/testing/WorkerProcess"

export interface Check {
  readonly name: string
  readonly ok: boolean
  readonly detail: string
}

export interface History {
  readonly runs: ReadonlyArray<
    { readonly id: string; readonly state: string; readonly fence: number; readonly kind: string }
  >
  readonly events: ReadonlyArray<
    { readonly runId: string; readonly kind: string; readonly fence: number; readonly id: number }
  >
  readonly effects: ReadonlyArray<{ readonly runId: string; readonly fence: number; readonly owner: string }>
  /** Every report of every worker process, all generations. */
  readonly reports: ReadonlyArray<Report>
  /** Worker processes that ended without being killed by the nemesis or the shutdown. */
  readonly unexpectedExits: ReadonlyArray<string>
  /** For each database restart: claims reported after it (receipt time, this process's clock). */
  readonly claimsAfterRestarts: ReadonlyArray<number>
}

const sample = (items: ReadonlyArray<unknown>) => items.slice(0, 5).map((i) => JSON.stringify(i)).join("; ")

export const check = (history: History): ReadonlyArray<Check> => {
  const checks: Array<Check> = []
  const add = (name: string, bad: ReadonlyArray<unknown>, okDetail: string) =>
    checks.push({
      name,
      ok: bad.length === 0,
      detail: bad.length === 0 ? okDetail : `${bad.length} violations, e.g. ${sample(bad)}`
    })

  // 1. Everything ended: nothing pending, running (leased forever) or suspended (the driver resumes all).
  const stuck = history.runs.filter((r) => !["completed", "failed", "cancelled"].includes(r.state))
  add("every run reached a terminal state", stuck, `${history.runs.length} runs terminal`)

  // 2. Exactly one effect row per completed run; none for failed or cancelled runs.
  const entries = new Map<string, Array<{ fence: number; owner: string }>>()
  for (const row of history.effects) entries.set(row.runId, [...(entries.get(row.runId) ?? []), row])
  const completed = history.runs.filter((r) => r.state === "completed")
  const notOnce = completed.filter((r) => (entries.get(r.id)?.length ?? 0) !== 1).map((r) => ({
    run: r.id,
    entries: entries.get(r.id) ?? []
  }))
  add("exactly one effect row per completed run", notOnce, `${completed.length} completed runs, one entry each`)
  const endedWithout = history.runs.filter((r) => r.state !== "completed" && (entries.get(r.id)?.length ?? 0) > 0)
  add(
    "no effect row for failed or cancelled runs",
    endedWithout,
    `${history.runs.length - completed.length} runs ended without completing, none in the effects table`
  )

  // 3. No write committed under fence f once fence f+1 was granted: a run's effect row (written in
  //    the transaction that completed it) carries its final fence, and no claim ever went higher.
  const claimsByRun = new Map<string, Array<number>>()
  const claimEvents = new Map<string, Array<string>>()
  // In the order the database recorded them.
  const events = [...history.events].sort((x, y) => x.id - y.id)
  for (const e of events) {
    if (e.kind === "claimed" || e.kind === "reclaimed" || e.kind === "signal_timed_out") {
      claimsByRun.set(e.runId, [...(claimsByRun.get(e.runId) ?? []), e.fence])
      claimEvents.set(e.runId, [...(claimEvents.get(e.runId) ?? []), `#${e.id} ${e.kind}@${e.fence}`])
    }
  }
  const finalFence = new Map(history.runs.map((r) => [r.id, r.fence]))
  const staleCommits = history.effects.filter((row) =>
    row.fence !== finalFence.get(row.runId) || (claimsByRun.get(row.runId) ?? []).some((f) => f > row.fence)
  )
  add(
    "no write committed under a superseded fence",
    staleCommits,
    `${history.effects.length} effect rows, each under its run's last granted fence`
  )
  const committedReports = history.reports.filter((r) =>
    r.type === "write-result" && r.op === "effect" && r.outcome === "committed"
  )
  const reportedStale = committedReports.filter((r) => r.fence !== finalFence.get(r.runId))
  add(
    "no worker saw a commit under a superseded fence",
    reportedStale,
    `${committedReports.length} commits reported by workers`
  )

  // 4. Per run, every fence sequence strictly increases: in the database's history, and across
  //    what all workers were granted (two claims never share a fence).
  const notIncreasing = [...claimsByRun]
    .filter(([, fences]) => fences.some((f, i) => i > 0 && f <= fences[i - 1]!))
    .map(([runId]) => [runId, claimEvents.get(runId)])
  add(
    "each run's claim fences strictly increase (database history)",
    notIncreasing,
    `${claimsByRun.size} runs' claim histories`
  )
  const granted = new Map<string, Array<string>>()
  for (const r of history.reports) {
    if (r.type === "event" && r._tag === "Claimed") {
      const key = `${r.runId}:${r.fence}`
      granted.set(key, [...(granted.get(key) ?? []), r.owner])
    }
  }
  const shared = [...granted].filter(([, owners]) => owners.length > 1)
  add("no fence was granted twice (worker reports)", shared, `${granted.size} claims reported`)

  // 5. Workers ride out faults: no crash, and claiming resumes after each database restart.
  const crashes = history.reports.filter((r) => r.type === "crashed")
  add(
    "no worker process crashed",
    [...crashes, ...history.unexpectedExits],
    "every exit was one the nemesis or the shutdown caused"
  )
  const silentAfterRestart = history.claimsAfterRestarts.map((n, i) => ({ restart: i + 1, claims: n })).filter((r) =>
    r.claims === 0
  )
  add(
    "workers resumed claiming after every database restart",
    silentAfterRestart,
    `${history.claimsAfterRestarts.length} restarts, claims after each`
  )
  return checks
}
