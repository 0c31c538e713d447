/**
 * The memory store's reads for operators beside `Read.ts`: the worker registry, per-minute
 * activity and a key limit's keys (`packages/sql/src/internal/statements/operators.ts`).
 *
 * @internal
 */
import { Duration } from "effect"
import type { KeyLimitScope, KeyUsage } from "../../KeyLimits.js"
import type { Throughput, ThroughputRequest } from "../../Throughput.js"
import * as ThroughputStorage from "../../ThroughputStorage.js"
import type { WorkerAnnouncement, WorkerInfo } from "../../WorkerRegistry.js"
import { order } from "./Read.js"
import type { StoredEvent, StoredRun } from "./StoredRun.js"

interface WorkerRow {
  readonly announcement: WorkerAnnouncement
  readonly lastHeartbeatAt: number
  readonly expiresAt: number
}

/** One row per worker, as the `workers` table keeps them. */
export class Workers {
  private readonly rows = new Map<string, WorkerRow>()

  announce(announcement: WorkerAnnouncement, now: number): void {
    // Rows dead for a while go, as the statement deletes them (others' only).
    for (const [owner, row] of this.rows) {
      if (owner !== announcement.owner && row.expiresAt < now - agedOutMs) this.rows.delete(owner)
    }
    this.rows.set(announcement.owner, {
      announcement,
      lastHeartbeatAt: now,
      expiresAt: now + Duration.toMillis(announcement.ttl)
    })
  }

  retire(owner: string): boolean {
    return this.rows.delete(owner)
  }

  list(now: number): Array<WorkerInfo> {
    return this.infos((row) => row.expiresAt > now)
  }

  /** Rows past their expiry that the registry still keeps (as the statement's `gone` reads them). */
  gone(now: number): Array<WorkerInfo> {
    return this.infos((row) => row.expiresAt <= now && row.expiresAt >= now - agedOutMs)
  }

  private infos(keep: (row: WorkerRow) => boolean): Array<WorkerInfo> {
    return [...this.rows.values()]
      .filter(keep)
      .sort((a, b) => order(a.announcement.owner, b.announcement.owner))
      .map(({ announcement: a, expiresAt, lastHeartbeatAt }) => ({
        owner: a.owner,
        host: a.host,
        pid: a.pid,
        version: a.version,
        queues: [...a.queues],
        kinds: [...a.kinds],
        concurrency: a.concurrency,
        runsHeld: a.runsHeld,
        startedAt: new Date(a.startedAt.getTime()),
        lastHeartbeatAt: new Date(lastHeartbeatAt),
        expiresAt: new Date(expiresAt)
      }))
  }
}

/** How long past its expiry a dead worker's row is kept (listed as gone, deleted after). */
export const agedOutMs = 10 * 60_000

/** The latest claim of each run, from its history (the Postgres row keeps it as `claimed_at`). */
const lastClaims = (events: ReadonlyArray<StoredEvent>): Map<string, number> => {
  const claims = new Map<string, number>()
  for (const e of events) {
    if (e.event.kind === "claimed" || e.event.kind === "reclaimed" || e.event.kind === "signal_timed_out") {
      claims.set(e.runId, e.event.at.getTime())
    }
  }
  return claims
}

export const throughput = (
  runs: Iterable<StoredRun>,
  events: ReadonlyArray<StoredEvent>,
  now: number,
  request: ThroughputRequest
): Throughput => {
  const claims = lastClaims(events)
  const finished: Array<ThroughputStorage.FinishedRun> = []
  for (const run of runs) {
    if ((run.state !== "completed" && run.state !== "failed") || run.finishedAt === null) continue
    finished.push({
      queue: run.queue,
      state: run.state,
      finishedAt: run.finishedAt,
      claimedAt: claims.get(run.id) ?? null,
      dueAt: run.runAt
    })
  }
  return ThroughputStorage.summarize(finished, now, request)
}

export const keyUsage = (
  runs: Iterable<StoredRun>,
  scope: KeyLimitScope,
  name: string,
  top: number,
  now: number
): Array<KeyUsage> => {
  const keys = new Map<string, { held: number; waiting: number; oldest: number | null }>()
  for (const run of runs) {
    if (run.concurrencyKey === null || run.keyScope !== scope || (scope === "queue" ? run.queue : run.kind) !== name) {
      continue
    }
    const entry = keys.get(run.concurrencyKey) ?? { held: 0, waiting: 0, oldest: null }
    if (run.keySlot !== null) entry.held += 1
    else if (run.state === "pending" && run.runAt <= now) {
      entry.waiting += 1
      entry.oldest = entry.oldest === null ? run.runAt : Math.min(entry.oldest, run.runAt)
    }
    keys.set(run.concurrencyKey, entry)
  }
  return [...keys.entries()]
    .filter(([, k]) => k.held > 0 || k.waiting > 0)
    .map(([key, k]): KeyUsage => ({
      key,
      held: k.held,
      waiting: k.waiting,
      oldestWaitingSeconds: k.oldest === null ? null : (now - k.oldest) / 1000
    }))
    // Waiting longest first, then the keys holding most, then by name.
    .sort((a, b) =>
      (b.oldestWaitingSeconds ?? -1) - (a.oldestWaitingSeconds ?? -1) || b.held - a.held || order(a.key, b.key)
    )
    .slice(0, top)
}
