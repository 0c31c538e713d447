/**
 * Enqueue (`packages/sql/src/internal/statements/enqueue.ts`): a batch of runs, with idempotency
 * keys (a repeated key yields the existing run) and unique windows (migration 0022's
 * `unique_holds`); keyed runs are admitted at once where their keys have room.
 *
 * @internal
 */
import type { Enqueued, EnqueueRequest } from "../../RunRecord.js"
import { uniqueStates } from "../../RunStorage.js"
import { admit } from "./Admit.js"
import { rateGoverning } from "./Rate.js"
import { parse } from "./Read.js"
import { governingScope } from "./Slots.js"
import type { State } from "./State.js"

/** A JSON value's text with every object's keys sorted: equal for values jsonb finds equal. */
const canonicalJson = (value: unknown): string =>
  Array.isArray(value)
    ? `[${value.map(canonicalJson).join(",")}]`
    : typeof value === "object" && value !== null
    ? `{${
      Object.keys(value).sort().map((k) =>
        `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`
      ).join(",")
    }}`
    : JSON.stringify(value)

/** `payloads` are the requests' payloads as JSON text, in order. */
export const enqueue = (
  state: State,
  requests: ReadonlyArray<EnqueueRequest>,
  payloads: ReadonlyArray<string>,
  now: number
): Array<Enqueued> => {
  const woken = new Set<string>()
  const out = requests.map((request, i): Enqueued => {
    // Every request draws an id up front, used or not (the sequence in the statement).
    const id = String(state.nextRunId++)
    const key = request.idempotencyKey ?? null
    const existing = key === null ? undefined : state.keys.get(key)
    if (existing !== undefined) return { id: existing, created: false }
    if (key !== null) state.keys.set(key, id)
    if (request.unique !== undefined) {
      const holder = holdUnique(state, request, payloads[i]!, id, now)
      if (holder !== id) return { id: holder, created: false }
    }
    const queue = request.queue ?? "default"
    state.runs.set(id, {
      id,
      queue,
      kind: request.kind,
      payload: payloads[i]!,
      priority: request.priority ?? 0,
      maxAttempts: request.maxAttempts ?? 5,
      idempotencyKey: key,
      concurrencyKey: request.concurrencyKey ?? null,
      keyScope: request.concurrencyKey === undefined || request.concurrencyKey === null
        ? null
        : governingScope(state, request.kind, queue),
      keySlot: null,
      rateScope: rateGoverning(state, request.kind, queue),
      traceParent: request.traceParent ?? null,
      attemptTimeoutMs: request.attemptTimeoutMs ?? null,
      deadline: request.deadlineAt !== undefined
        ? request.deadlineAt.getTime()
        : request.deadlineAfterMs !== undefined
        ? now + request.deadlineAfterMs
        : null,
      createdAt: now,
      runAt: now + (request.delayMs ?? 0),
      state: "pending",
      attempt: 0,
      fence: 0,
      leaseOwner: null,
      leaseExpiresAt: null,
      checkpoint: null,
      result: null,
      error: null,
      signalName: null,
      signalToken: null,
      suspendDeadline: null,
      signals: "{}",
      updatedAt: now,
      finishedAt: null
    })
    woken.add(queue)
    return { id, created: true }
  })
  for (const queue of woken) state.outbox.push({ _tag: "RunsAvailable", queue })
  const keys = [
    ...new Set(
      requests.flatMap((r) => r.concurrencyKey === undefined || r.concurrencyKey === null ? [] : [r.concurrencyKey])
    )
  ]
  if (keys.length > 0) {
    admit(state, { kinds: requests.map((r) => r.kind), queues: requests.map((r) => r.queue ?? "default"), keys }, now)
  }
  return out
}

/**
 * The run holding `request`'s unique window, after `id` took it if it was free: the window's
 * holder keeps it while it is in the window's states (every state, deleted or not, when it has
 * none) and its period has not passed.
 */
const holdUnique = (state: State, request: EnqueueRequest, payload: string, id: string, now: number): string => {
  const window = request.unique!
  const of = window.key !== undefined ? `key:${window.key}` : `payload:${canonicalJson(parse(payload))}`
  const slot = `${request.kind}\u0000${of}`
  const hold = state.uniqueHolds.get(slot)
  if (hold !== undefined) {
    const run = state.runs.get(hold.runId)
    const inStates = hold.states === undefined || (run !== undefined && hold.states.has(run.state))
    if (inStates && (hold.until === undefined || now < hold.until)) return hold.runId
  }
  const states = uniqueStates(window)
  state.uniqueHolds.set(slot, {
    runId: id,
    states: states === undefined ? undefined : new Set(states),
    until: window.periodMs === undefined ? undefined : now + window.periodMs
  })
  return id
}

/** Moves the end of every unique window that has a period to `at` (tests: the twin of an UPDATE on `unique_holds.held_until`). */
export const setUniqueHoldEnds = (state: State, at: number): void => {
  for (const hold of state.uniqueHolds.values()) if (hold.until !== undefined) hold.until = at
}
