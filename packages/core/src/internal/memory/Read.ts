/**
 * The memory store's reads: a run as a `RunRecord` (values parsed afresh, as a database hands back
 * copies), a filtered page of runs, a run's history, the live leases and the counters of `stats`
 * (`packages/sql/src/internal/statements/read.ts`).
 *
 * @internal
 */
import { RunNotFound } from "../../Errors.js"
import type { RunEvent, RunRecord } from "../../RunRecord.js"
import type { ListFilter, LiveLease, LiveState, RunFilter, Stats } from "../../RunStore.js"
import { err, ok, type Outcome, type State } from "./State.js"
import type { StoredEvent, StoredRun } from "./StoredRun.js"

/** JSON text as a value; SQL NULL as null. */
export const parse = (text: string | null): unknown => text === null ? null : JSON.parse(text)

const date = (ms: number | null): Date | null => ms === null ? null : new Date(ms)

export const toRecord = (run: StoredRun): RunRecord => ({
  id: run.id,
  queue: run.queue,
  kind: run.kind,
  payload: parse(run.payload),
  priority: run.priority,
  runAt: new Date(run.runAt),
  state: run.state,
  attempt: run.attempt,
  maxAttempts: run.maxAttempts,
  fence: run.fence,
  leaseOwner: run.leaseOwner,
  leaseExpiresAt: date(run.leaseExpiresAt),
  checkpoint: parse(run.checkpoint),
  result: parse(run.result),
  error: parse(run.error),
  signalName: run.signalName,
  signalToken: run.signalToken,
  suspendDeadline: date(run.suspendDeadline),
  signals: parse(run.signals) as RunRecord["signals"],
  idempotencyKey: run.idempotencyKey,
  concurrencyKey: run.concurrencyKey,
  keySlot: run.keySlot,
  waitingForKey: run.state === "pending" && run.keyScope !== null && run.keySlot === null,
  traceParent: run.traceParent,
  attemptTimeoutMs: run.attemptTimeoutMs,
  deadline: date(run.deadline),
  createdAt: new Date(run.createdAt),
  updatedAt: new Date(run.updatedAt),
  finishedAt: date(run.finishedAt)
})

/** A payload field as text, as Postgres's `#>>` reads it (a missing field or JSON null: none). */
const fieldText = (payload: unknown, path: ReadonlyArray<string>): string | undefined => {
  let value = payload
  for (const key of path) {
    if (typeof value !== "object" || value === null || Array.isArray(value) || !Object.hasOwn(value, key)) {
      return undefined
    }
    value = (value as Record<string, unknown>)[key]
  }
  if (value === null || value === undefined) return undefined
  return typeof value === "string" ? value : JSON.stringify(value)
}

/** Whether a run is one the filter selects. */
export const matches = (run: StoredRun, filter: RunFilter): boolean => {
  if (filter.state !== undefined && run.state !== filter.state) return false
  if (filter.queue !== undefined && run.queue !== filter.queue) return false
  if (filter.kind !== undefined && run.kind !== filter.kind) return false
  if (filter.ids !== undefined && !filter.ids.some((id) => runNumber(id) !== null && BigInt(id) === BigInt(run.id))) {
    return false
  }
  if (filter.concurrencyKey !== undefined && run.concurrencyKey !== filter.concurrencyKey) return false
  if (filter.idempotencyKey !== undefined && run.idempotencyKey !== filter.idempotencyKey) return false
  if (filter.errorText !== undefined && !(run.error ?? "").toLowerCase().includes(filter.errorText.toLowerCase())) {
    return false
  }
  if (filter.createdFrom !== undefined && run.createdAt < filter.createdFrom.getTime()) return false
  if (filter.createdTo !== undefined && run.createdAt >= filter.createdTo.getTime()) return false
  if (filter.payload === undefined || filter.payload.length === 0) return true
  const payload = parse(run.payload)
  return filter.payload.every((f) => fieldText(payload, f.path) === f.value)
}

/**
 * Newest first by the run's number, as the statement orders by the bigint id, from a keyset
 * cursor: `after` takes the runs nearest above it. A cursor that is not a run id selects nothing.
 */
export const list = (runs: Iterable<StoredRun>, filter: ListFilter): Array<RunRecord> => {
  const cursor = (value: string | undefined) => value === undefined ? undefined : runNumber(value)
  const before = cursor(filter.before)
  const after = cursor(filter.after)
  if (before === null || after === null) return []
  const offset = filter.offset ?? 0
  const selected = [...runs]
    .filter((r) => matches(r, filter))
    .filter((r) => (before === undefined || BigInt(r.id) < before) && (after === undefined || BigInt(r.id) > after))
    .sort((a, b) => compareIds(b.id, a.id))
  const page = after === undefined
    ? selected.slice(offset, offset + filter.limit)
    : selected.reverse().slice(offset, offset + filter.limit).reverse()
  return page.map(toRecord)
}

/** A run id as a number, or null when the text is not one (as the statement's `isRunId`). */
const runNumber = (value: string): bigint | null => /^[0-9]{1,18}$/.test(value) ? BigInt(value) : null

const compareIds = (a: string, b: string) => {
  const x = BigInt(a)
  const y = BigInt(b)
  return x < y ? -1 : x > y ? 1 : 0
}

/** Strings in byte order, as Postgres orders them `COLLATE "C"`. */
export const order = (a: string, b: string) => a < b ? -1 : a > b ? 1 : 0

export const stats = (runs: Iterable<StoredRun>, events: ReadonlyArray<StoredEvent>, now: number): Stats => {
  const counts = new Map<string, { queue: string; state: LiveState; count: number }>()
  let liveLeases = 0
  const due = new Map<string, { count: number; oldest: number }>()
  for (const run of runs) {
    // Live runs only (ADR 0030): the ended ones are activity's, per minute over a window.
    if (run.state !== "pending" && run.state !== "running" && run.state !== "suspended") continue
    const key = `${run.queue}\u0000${run.state}`
    const entry = counts.get(key) ?? { queue: run.queue, state: run.state, count: 0 }
    entry.count += 1
    counts.set(key, entry)
    if (run.state === "running" && run.leaseExpiresAt! > now) liveLeases += 1
    if (run.state === "pending" && run.runAt <= now) {
      const queue = due.get(run.queue) ?? { count: 0, oldest: run.runAt }
      due.set(run.queue, { count: queue.count + 1, oldest: Math.min(queue.oldest, run.runAt) })
    }
  }
  const dueByQueue = [...due.entries()].sort(([a], [b]) => order(a, b))
    .map(([queue, d]) => ({ queue, due: d.count, oldestDueSeconds: (now - d.oldest) / 1000 }))
  return {
    byStateAndQueue: [...counts.values()].sort((a, b) => order(a.queue, b.queue) || order(a.state, b.state)),
    liveLeases,
    // The oldest due run of all is the oldest of the queues'.
    oldestPendingSeconds: dueByQueue.length === 0 ? null : Math.max(...dueByQueue.map((q) => q.oldestDueSeconds)),
    dueByQueue,
    fenceRejections: events.filter((e) => e.event.kind === "stale_write_rejected").length,
    reclaims: events.filter((e) => e.event.kind === "reclaimed").length
  }
}

export const get = (state: State, runId: string): Outcome<RunRecord, RunNotFound> => {
  const run = state.find(runId)
  return run === undefined ? err(new RunNotFound({ runId })) : ok(toRecord(run))
}

/** The run's history in the order it happened. */
export const history = (state: State, runId: string): Outcome<Array<RunEvent>, RunNotFound> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  return ok(
    state.events.filter((e) => e.runId === run.id).map((e): RunEvent => ({
      id: String(e.seq),
      runId: run.id,
      ...e.event
    }))
  )
}

export const leases = (state: State, now: number): Array<LiveLease> => {
  return [...state.runs.values()]
    .filter((r) => r.state === "running" && r.leaseExpiresAt! > now)
    .sort((
      a,
      b
    ) => (a.leaseOwner! < b.leaseOwner! ? -1 : a.leaseOwner! > b.leaseOwner! ? 1 : Number(a.id) - Number(b.id)))
    .map((r): LiveLease => ({
      owner: r.leaseOwner!,
      runId: r.id,
      fence: r.fence,
      kind: r.kind,
      queue: r.queue,
      attempt: r.attempt,
      expiresInMs: Math.max(0, r.leaseExpiresAt! - now)
    }))
}
