/**
 * The transitions of the memory store not yet in a module of their own (a step of the split).
 *
 * @internal
 */
import {
  FenceRejected,
  InvalidTransition,
  LeaseNotHeld,
  RunNotFound,
  ScheduleNotFound,
  SignalTokenInUse,
  SignalTokenNotFound
} from "../../Errors.js"
import type {
  FailOutcome,
  FinalizeOutcome,
  LeaseKey,
  PausedQueue,
  RunEvent,
  RunRecord,
  RunState,
  SignalDelivery,
  SignalOutcome,
  SuspendOutcome
} from "../../RunRecord.js"
import { terminalStates } from "../../RunRecord.js"
import * as Schedules from "../../Schedules.js"
import { matches, order, parse, toRecord } from "./Read.js"
import * as Read from "./Read.js"
import type { StoredRun } from "./StoredRun.js"
import type {
  ClaimNext,
  CompleteItem,
  DeliverSignalRequest,
  FailRequest,
  ListFilter,
  LiveLease,
  LiveSample,
  RunFilter,
  SnoozeRequest,
  StaleWrite,
  Stats,
  SuspendRequest
} from "../../RunStore.js"
import { canonicalId, err, ok, type Outcome, type Released, type State } from "./State.js"
import { enter } from "./Slots.js"
import { admit, handOffSet, keysAboveLimit } from "./Admit.js"
import { enqueue } from "./Enqueue.js"

/** JSON equality as jsonb compares: objects by their keys, whatever their order. */
const sameJson = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length &&
    keys.every((k) => Object.hasOwn(b, k) && sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
}

/** The row a guarded write matches: id + fence + running, or nothing. */
export const holder = (state: State, lease: LeaseKey): StoredRun | undefined => {
  const run = state.find(lease.runId)
  return run !== undefined && run.fence === lease.fence && run.state === "running" ? run : undefined
}

/** Why a guarded write matched nothing; a real fence mismatch is recorded in the run's history. */
export const diagnose = (state: State, lease: LeaseKey, operation: string, now: number): StaleWrite => {
  const run = state.find(lease.runId)
  if (run === undefined) return new RunNotFound({ runId: canonicalId(lease.runId) ?? lease.runId })
  if (run.fence !== lease.fence) {
    state.record(run, "stale_write_rejected", lease.fence, null, { operation, storedFence: run.fence, state: run.state }, now)
    return new FenceRejected({ runId: run.id, presentedFence: lease.fence, storedFence: run.fence, operation })
  }
  return new LeaseNotHeld({ runId: run.id, fence: lease.fence, state: run.state, operation })
}

const guarded = <A>(
  state: State,
  lease: LeaseKey,
  operation: string,
  now: number,
  write: (run: StoredRun) => A
): Outcome<A, StaleWrite> => {
  const run = holder(state, lease)
  if (run === undefined) return err(diagnose(state, lease, operation, now))
  run.updatedAt = now
  return ok(write(run))
}

const letGo = (run: StoredRun): void => {
  run.leaseOwner = null
  run.leaseExpiresAt = null
}

/** The completion of one matched run. (Postgres reads this history line off the completed run.) */
export const complete = (state: State, run: StoredRun, result: string, now: number): Released | undefined => {
  const released = enter(state, run, "completed")
  run.result = result
  run.finishedAt = now
  run.updatedAt = now
  letGo(run)
  state.record(run, "completed", run.fence, null, null, now)
  return released
}

/** A completion in the caller's transaction (`transaction`): its slot is handed on at once. */
export const completeInTransaction = (state: State, run: StoredRun, result: string, now: number): void => {
  const above = keysAboveLimit(state)
  const released = complete(state, run, result, now)
  if (released !== undefined) handOffSet(state, [released], above, now)
}

export const completeBatch = (
  state: State,
  items: ReadonlyArray<CompleteItem>,
  now: number,
  next?: ClaimNext
): Array<FinalizeOutcome> => {
  // The statement decides every item first; the ones it missed are diagnosed afterwards.
  const matched = items.map((item) => holder(state, item))
  const above = keysAboveLimit(state)
  const released: Array<Released> = []
  items.forEach((item, i) => {
    if (matched[i] === undefined) return
    const slot = complete(state, matched[i], item.result ?? "null", now)
    // The items said to be unkeyed have no slot read, so none handed on (`handOff`).
    if (slot !== undefined && item.keyed !== false) released.push(slot)
  })
  const successors = handOffSet(state, released, above, now, next)
  return items.map((item, i): FinalizeOutcome => {
    if (matched[i] !== undefined) {
      // A successor goes to the first item naming the run whose slot it took.
      const first = matched.findIndex((run) => run?.id === matched[i]!.id) === i
      const successor = first ? successors.get(matched[i].id) : undefined
      return successor === undefined
        ? { _tag: "Finalized", runId: item.runId, fence: item.fence }
        : { _tag: "Finalized", runId: item.runId, fence: item.fence, next: successor }
    }
    const run = state.find(item.runId)
    // Completed under this very fence: the holder's own completion sent again, acknowledged.
    if (run !== undefined && run.fence === item.fence && run.state === "completed") {
      return { _tag: "Finalized", runId: item.runId, fence: item.fence }
    }
    diagnose(state, item, "complete", now)
    return run === undefined
      ? { _tag: "Rejected", runId: item.runId, fence: item.fence, storedFence: item.fence, state: "missing" }
      : { _tag: "Rejected", runId: item.runId, fence: item.fence, storedFence: run.fence, state: run.state }
  })
}

export const fail = (
  state: State,
  request: FailRequest,
  error: string,
  now: number
): Outcome<FailOutcome, StaleWrite> => {
  return guarded(state, request, "fail", now, (run): FailOutcome => {
    letGo(run)
    run.error = error
    const retrying = request.retryDelayMs !== undefined && run.attempt < run.maxAttempts
    if (retrying) {
      enter(state, run, "pending")
      run.runAt = now + request.retryDelayMs!
      run.finishedAt = null
    } else {
      enter(state, run, "failed")
      run.finishedAt = now
    }
    state.record(run, retrying ? "retry_scheduled" : "failed", run.fence, null, {
      error: parse(error),
      runAt: new Date(run.runAt).toISOString()
    }, now)
    return retrying ? { _tag: "RetryScheduled", delayMs: request.retryDelayMs! } : { _tag: "Failed" }
  })
}

export const release = (state: State, lease: LeaseKey, now: number) => {
  return guarded(state, lease, "release", now, (run) => {
    letGo(run)
    enter(state, run, "pending")
    run.runAt = now
    run.attempt = Math.max(run.attempt - 1, 0)
    state.record(run, "released", run.fence, null, null, now)
    state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
  })
}

/** As `release`, but due `delayMs` from now (`Run.snooze`): the attempt is given back too. */
export const snooze = (state: State, request: SnoozeRequest, now: number) => {
  return guarded(state, request, "snooze", now, (run) => {
    letGo(run)
    enter(state, run, "pending")
    run.runAt = now + request.delayMs
    run.attempt = Math.max(run.attempt - 1, 0)
    state.record(run, "snoozed", run.fence, null, { runAt: new Date(run.runAt).toISOString() }, now)
    if (request.delayMs === 0) state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
  })
}

export const checkpoint = (state: State, lease: LeaseKey, value: string, now: number) => {
  return guarded(state, lease, "checkpoint", now, (run) => {
    run.checkpoint = value
  })
}

export const suspend = (
  state: State,
  request: SuspendRequest,
  timeoutMs: number | null,
  now: number
): Outcome<SuspendOutcome, StaleWrite | SignalTokenInUse> => {
  const run = holder(state, request)
  if (run === undefined) return err(diagnose(state, request, "suspend", now))
  // Delivered while the run was still running: nothing to wait for, nothing written.
  const delivered = (parse(run.signals) as Record<string, SignalOutcome>)[request.signal]
  if (delivered !== undefined) return ok({ _tag: "AlreadySignalled", outcome: delivered })
  // The token names exactly one waiting run (a unique index in Postgres): nothing is written.
  for (const other of state.runs.values()) {
    if (other.signalToken === request.token) return err(new SignalTokenInUse({ runId: run.id, token: request.token }))
  }
  letGo(run)
  enter(state, run, "suspended")
  run.attempt = Math.max(run.attempt - 1, 0)
  run.signalName = request.signal
  run.signalToken = request.token
  run.suspendDeadline = timeoutMs === null ? null : now + timeoutMs
  run.updatedAt = now
  const deadline = run.suspendDeadline === null ? null : new Date(run.suspendDeadline).toISOString()
  state.record(run, "suspended", run.fence, null, { signal: request.signal, deadline }, now)
  return ok({ _tag: "Suspended" })
}

export const callbackExpiry = (
  state: State,
  lease: LeaseKey,
  signal: string,
  expiresInMs: number,
  now: number
): Outcome<Date, StaleWrite> => {
  return guarded(state, lease, "callback", now, (run) => {
    const key = `${run.id}:${signal}`
    const fixed = state.callbacks.get(key) ?? now + expiresInMs
    state.callbacks.set(key, fixed)
    return new Date(fixed)
  })
}

export const deliverSignal = (
  state: State,
  request: DeliverSignalRequest,
  payload: string,
  now: number
): Outcome<SignalDelivery, RunNotFound> => {
  const run = state.find(request.runId)
  if (run === undefined) return err(new RunNotFound({ runId: request.runId }))
  const runId = run.id
  const delivered = (parse(run.signals) as Record<string, SignalOutcome>)[request.signal]
  if (request.deliveryId !== undefined && state.deliveries.has(request.deliveryId)) return ok({ _tag: "Replayed", runId })
  if (delivered !== undefined) {
    if (delivered._tag === "TimedOut") return ok({ _tag: "Gone", runId, reason: "timed-out" })
    return ok({ _tag: sameJson(delivered.payload, parse(payload)) ? "Duplicate" : "Conflict", runId })
  }
  if (terminalStates.includes(run.state)) {
    return ok({ _tag: "Gone", runId, reason: "finished" })
  }
  if (request.deliveryId !== undefined) state.deliveries.add(request.deliveryId)
  if (run.state === "suspended" && run.signalName === request.signal) {
    resume(state, run, payload, now)
    return ok({ _tag: "Resumed", runId })
  }
  run.signals = JSON.stringify({ ...(parse(run.signals) as object), [request.signal]: { _tag: "Signalled", payload: parse(payload) } })
  run.updatedAt = now
  state.record(run, "signal_recorded", run.fence, null, { signal: request.signal, payload: parse(payload) }, now)
  return ok({ _tag: "Recorded", runId })
}

/** The run enqueued under this idempotency key, if any (an execution's run). */
export const byIdempotencyKey = (state: State, key: string): StoredRun | undefined => {
  const id = state.keys.get(key)
  return id === undefined ? undefined : state.runs.get(id)
}

/** Leaves a signal for a running run's holder, whose next suspension on it then returns at once. */
export const leaveSignal = (run: StoredRun, signal: string, payload: string, now: number): void => {
  run.signals = JSON.stringify({ ...(parse(run.signals) as object), [signal]: { _tag: "Signalled", payload: parse(payload) } })
  run.updatedAt = now
}

/** Takes a signal left for the holder, under its fence. */
export const takeSignal = (
  state: State,
  lease: LeaseKey,
  signal: string,
  operation: string,
  now: number
): Outcome<void, StaleWrite> => {
  return guarded(state, lease, operation, now, (run) => {
    const { [signal]: _taken, ...rest } = parse(run.signals) as Record<string, unknown>
    run.signals = JSON.stringify(rest)
  })
}

const resume = (state: State, run: StoredRun, payload: string, now: number): string => {
  enter(state, run, "pending")
  run.runAt = now
  run.signals = JSON.stringify({ ...(parse(run.signals) as object), [run.signalName!]: { _tag: "Signalled", payload: parse(payload) } })
  run.signalName = null
  run.signalToken = null
  run.suspendDeadline = null
  run.updatedAt = now
  state.record(run, "resumed", run.fence, null, { payload: parse(payload) }, now)
  state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
  // Under a key limit it waits in its key's line, and is admitted at once if there is room.
  if (run.concurrencyKey !== null) admit(state, { kinds: [run.kind], queues: [run.queue], keys: [run.concurrencyKey] }, now)
  return run.id
}

export const resumeById = (
  state: State,
  runId: string,
  payload: string,
  now: number
): Outcome<string, RunNotFound | InvalidTransition> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  if (run.state !== "suspended") return err(new InvalidTransition({ runId: run.id, state: run.state, operation: "resume" }))
  return ok(resume(state, run, payload, now))
}

export const resumeByToken = (
  state: State,
  token: string,
  payload: string,
  now: number
): Outcome<string, SignalTokenNotFound> => {
  for (const run of state.runs.values()) {
    if (run.signalToken === token && run.state === "suspended") return ok(resume(state, run, payload, now))
  }
  return err(new SignalTokenNotFound({ token }))
}

const admin = (
  state: State,
  runId: string,
  operation: string,
  from: ReadonlyArray<RunState>,
  now: number,
  write: (run: StoredRun) => void
): Outcome<void, RunNotFound | InvalidTransition> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  if (!from.includes(run.state)) return err(new InvalidTransition({ runId: run.id, state: run.state, operation }))
  run.fence += 1
  run.updatedAt = now
  write(run)
  return ok(undefined)
}

export const leases = (state: State, now: number): Array<LiveLease> => {
  return [...state.runs.values()]
    .filter((r) => r.state === "running" && r.leaseExpiresAt! > now)
    .sort((a, b) => (a.leaseOwner! < b.leaseOwner! ? -1 : a.leaseOwner! > b.leaseOwner! ? 1 : Number(a.id) - Number(b.id)))
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

/** `cancel` (or `retry`) of every run the filter selects that allows it, in id order. */
export const many = (state: State, filter: RunFilter, operation: "cancel" | "retry", now: number): Array<string> => {
  const ids = [...state.runs.values()].filter((r) => matches(r, filter)).map((r) => r.id).sort((a, b) => Number(a) - Number(b))
  state.retried = []
  const done = ids.filter((id) => (operation === "cancel" ? cancel(state, id, now) : retry(state, id, now)).ok)
  const retried = state.retried
  state.retried = undefined
  if (retried.length > 0) {
    admit(state, {
      kinds: retried.map((r) => r.kind),
      queues: retried.map((r) => r.queue),
      keys: retried.map((r) => r.concurrencyKey!)
    }, now)
  }
  return done
}

export const cancel = (state: State, runId: string, now: number) => {
  return admin(state, runId, "cancel", ["pending", "running", "suspended"], now, (run) => {
    enter(state, run, "cancelled")
    letGo(run)
    run.signalName = null
    run.signalToken = null
    run.suspendDeadline = null
    run.finishedAt = now
    state.record(run, "cancelled", run.fence, null, null, now)
    state.outbox.push({ _tag: "RunCancelled", runId: run.id })
  })
}

export const retry = (state: State, runId: string, now: number) => {
  return admin(state, runId, "retry", ["failed", "cancelled"], now, (run) => {
    enter(state, run, "pending")
    run.attempt = 0
    run.runAt = now
    run.result = null
    run.error = null
    run.finishedAt = null
    state.record(run, "retried", run.fence, null, null, now)
    state.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
    // Under a key limit it waits in its key's line, and is admitted at once if there is room
    // (after the whole statement, for many runs: `retryWhere`).
    if (run.concurrencyKey !== null) {
      if (state.retried !== undefined) state.retried.push(run)
      else admit(state, { kinds: [run.kind], queues: [run.queue], keys: [run.concurrencyKey] }, now)
    }
  })
}

export const get = (state: State, runId: string): Outcome<RunRecord, RunNotFound> => {
  const run = state.find(runId)
  return run === undefined ? err(new RunNotFound({ runId })) : ok(toRecord(run))
}

export const list = (state: State, filter: ListFilter): Array<RunRecord> => {
  return Read.list(state.runs.values(), filter)
}

/** The run's history in the order it happened. */
export const history = (state: State, runId: string): Outcome<Array<RunEvent>, RunNotFound> => {
  const run = state.find(runId)
  if (run === undefined) return err(new RunNotFound({ runId }))
  return ok(state.events.filter((e) => e.runId === run.id).map((e): RunEvent => ({ id: String(e.seq), runId: run.id, ...e.event })))
}

export const stats = (state: State, now: number): Stats => {
  return Read.stats(state.runs.values(), state.events, now)
}

export const sample = (state: State, now: number): LiveSample => {
  return Read.sample(state.runs.values(), now)
}

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

export const registerSchedules = (
  state: State,
  checked: ReadonlyArray<Schedules.CheckedSchedule>,
  now: number
): Array<Schedules.ScheduleRegistered> => {
  const outcomes = checked.map((schedule): Schedules.ScheduleRegistered => {
    const stored = state.schedulesByName.get(schedule.name)
    const { nextTick, outcome } = Schedules.registration(
      stored === undefined ? undefined : { schedule: stored.schedule, nextTick: new Date(stored.nextTick) },
      schedule,
      new Date(now)
    )
    if (outcome !== "unchanged") {
      state.schedulesByName.set(schedule.name, {
        schedule,
        paused: stored?.paused ?? false,
        nextTick: nextTick.getTime(),
        lastTick: stored?.lastTick ?? null
      })
    }
    return { name: schedule.name, outcome }
  })
  if (outcomes.some((o) => o.outcome !== "unchanged")) state.outbox.push({ _tag: "SchedulesChanged" })
  return outcomes
}

export const tickSchedules = (state: State, now: number): Schedules.TickOutcome => {
  const fired: Array<Schedules.FiredTick> = []
  for (const entry of [...state.schedulesByName.values()].sort((a, b) => a.nextTick - b.nextTick)) {
    if (entry.paused || entry.nextTick > now) continue
    const plan = Schedules.planIfPossible(entry.schedule, new Date(entry.nextTick), new Date(now))
    if (plan === undefined) continue
    for (const { backfilled, tick } of plan.fire) {
      const request = Schedules.tickRequest(entry.schedule, tick, backfilled)
      // The payload is a checked JSON object with the tick added: its text is plain JSON.
      const [enqueued] = enqueue(state, [request], [JSON.stringify(request.payload)], now)
      fired.push({ schedule: entry.schedule.name, tick, runId: enqueued!.id, backfilled, created: enqueued!.created })
    }
    entry.lastTick = plan.lastTick.getTime()
    entry.nextTick = plan.nextTick.getTime()
  }
  const next = [...state.schedulesByName.values()].filter((e) => !e.paused).map((e) => e.nextTick)
  return { fired, nextInMs: next.length === 0 ? null : Math.min(...next) - now }
}

export const schedules = (state: State): Array<Schedules.ScheduleInfo> => {
  return [...state.schedulesByName.values()]
    .sort((a, b) => order(a.schedule.name, b.schedule.name))
    .map((e) => ({ ...e.schedule, paused: e.paused, nextTick: new Date(e.nextTick), lastTick: e.lastTick === null ? null : new Date(e.lastTick) }))
}

export const setSchedulePaused = (
  state: State,
  name: string,
  paused: boolean,
  now: number
): Outcome<boolean, ScheduleNotFound> => {
  const entry = state.schedulesByName.get(name)
  if (entry === undefined) return err(new ScheduleNotFound({ name }))
  if (entry.paused === paused) return ok(false)
  entry.paused = paused
  // Ticks that came due while paused were never due: the next one is the first after now.
  if (!paused) {
    entry.nextTick = Schedules.nextTickAfter(entry.schedule, new Date(now)).getTime()
    state.outbox.push({ _tag: "SchedulesChanged" })
  }
  return ok(true)
}

/** Sets a schedule's next tick (tests: the memory twin of an UPDATE on `schedules.next_tick`). */
export const setNextTick = (state: State, name: string, at: number): void => {
  const entry = state.schedulesByName.get(name)
  if (entry !== undefined) entry.nextTick = at
}
