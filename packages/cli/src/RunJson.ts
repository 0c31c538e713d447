/**
 * The stable JSON shapes `--json` prints for runs and their events. Built field by field, so a
 * change to the domain types does not silently change what scripts read.
 *
 * @since 0.1.0
 */
import { type AttemptLogs, attemptSeen, type RunEvent, type RunRecord } from "@leasehold/core"
import { isoTime } from "./Output.js"

/** The trace id of a stored W3C `traceparent` (what the console shows), or null. */
export const traceIdOf = (traceParent: string | null): string | null =>
  traceParent === null ? null : /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(traceParent)?.[1] ?? null

/** A run as `runs list --json` and `runs show --json` print it. */
export const run = (record: RunRecord) => ({
  id: record.id,
  kind: record.kind,
  queue: record.queue,
  state: record.state,
  priority: record.priority,
  fence: record.fence,
  // The attempt its handler saw (a suspended run's was given back while it waits: attemptSeen).
  attempt: attemptSeen(record),
  maxAttempts: record.maxAttempts,
  leaseOwner: record.leaseOwner,
  leaseExpiresAt: isoTime(record.leaseExpiresAt),
  runAt: isoTime(record.runAt),
  signal: record.signalName === null
    ? null
    : { name: record.signalName, token: record.signalToken, deadline: isoTime(record.suspendDeadline) },
  signals: record.signals,
  traceId: traceIdOf(record.traceParent),
  idempotencyKey: record.idempotencyKey,
  concurrencyKey: record.concurrencyKey,
  keySlot: record.keySlot,
  waitingForKey: record.waitingForKey,
  // The enqueue's attempt timeout (null: its handler's, if it has one) and the run's deadline.
  attemptTimeoutMs: record.attemptTimeoutMs,
  deadline: isoTime(record.deadline),
  payload: record.payload ?? null,
  checkpoint: record.checkpoint ?? null,
  result: record.result ?? null,
  error: record.error ?? null,
  createdAt: isoTime(record.createdAt),
  updatedAt: isoTime(record.updatedAt),
  finishedAt: isoTime(record.finishedAt)
})

/** One history row, as stored. */
export const event = (e: RunEvent) => ({
  id: e.id,
  kind: e.kind,
  fence: e.fence,
  owner: e.owner,
  detail: e.detail ?? null,
  at: isoTime(e.at)
})

/** One attempt's kept log lines (`AttemptLogs`). */
export const attemptLog = (log: AttemptLogs.AttemptLog) => ({
  fence: log.fence,
  attempt: log.attempt,
  outcome: log.outcome,
  dropped: log.dropped,
  at: isoTime(log.at),
  lines: log.lines.map((line) => ({
    level: line.level,
    at: isoTime(line.at),
    message: line.message,
    annotations: line.annotations,
    cut: line.cut
  }))
})
