/**
 * The memory store's state machine: runs, their history and the transitions the Postgres
 * statements make (`packages/sql/src/internal/statements/`), one synchronous function per statement. Each
 * takes the store's `now()` and applies the whole transition or nothing, so the effect that calls
 * it is atomic with respect to every other caller. Values are JSON text (encoded by the caller),
 * parsed afresh on every read, as a database hands back copies.
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
  ClaimedRun,
  Enqueued,
  EnqueueRequest,
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
import { Duration } from "effect"
import { terminalStates, uniqueStates } from "../../RunRecord.js"
import * as ClaimPosition from "../../ClaimPosition.js"
import * as KeyLimits from "../../KeyLimits.js"
import * as RateLimits from "../../RateLimits.js"
import * as Schedules from "../../Schedules.js"
import * as RateWake from "../../RateWakes.js"
import * as Read from "./Read.js"
import type { StoredEvent, StoredRun } from "./StoredRun.js"
import type {
  ClaimNext,
  ClaimRequest,
  CompleteItem,
  DeliverSignalRequest,
  FailRequest,
  ListFilter,
  LiveLease,
  LiveSample,
  RunFilter,
  StaleWrite,
  Stats,
  SnoozeRequest,
  StoreNotification,
  SuspendRequest
} from "../../RunStore.js"

/** A time column the tests may move (as they move the database's columns). */
export type TimeColumn = "runAt" | "leaseExpiresAt" | "suspendDeadline"

/** What a transition failed with, or the value it produced. */
export type Outcome<A, E> = { readonly ok: true; readonly value: A } | { readonly ok: false; readonly error: E }

const ok = <A>(value: A): Outcome<A, never> => ({ ok: true, value })
const err = <E>(error: E): Outcome<never, E> => ({ ok: false, error })

/** Run ids are decimal strings of a bigint, as Postgres reads them (`007` is run 7). */
export const canonicalId = (value: string): string | undefined => /^[0-9]{1,18}$/.test(value) ? String(BigInt(value)) : undefined

const parse = Read.parse

/** JSON equality as jsonb compares: objects by their keys, whatever their order. */
const sameJson = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length &&
    keys.every((k) => Object.hasOwn(b, k) && sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
}

/** A JSON value's text with every object's keys sorted: equal for values jsonb finds equal. */
const canonicalJson = (value: unknown): string =>
  Array.isArray(value)
    ? `[${value.map(canonicalJson).join(",")}]`
    : typeof value === "object" && value !== null
    ? `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(",")}}`
    : JSON.stringify(value)

/** A slot a run gave back as it stopped holding it: its scope and number, with the run. */
interface Released {
  readonly run: StoredRun
  readonly scope: KeyLimits.KeyLimitScope
  readonly slot: number
}

/** A claimed run as the store hands it to its worker. */
const claimedView = (run: StoredRun, via: ClaimedRun["via"], waitMs: number): ClaimedRun => ({
  id: run.id,
  queue: run.queue,
  kind: run.kind,
  payload: parse(run.payload),
  attempt: run.attempt,
  maxAttempts: run.maxAttempts,
  fence: run.fence,
  checkpoint: parse(run.checkpoint),
  signals: parse(run.signals) as ClaimedRun["signals"],
  concurrencyKey: run.concurrencyKey,
  via,
  waitMs,
  traceParent: run.traceParent
})

/** Claim order: priority DESC, run_at, id. */
const inClaimOrder = (a: StoredRun, b: StoredRun) => b.priority - a.priority || a.runAt - b.runAt || Number(a.id) - Number(b.id)

export class State {
  readonly runs = new Map<string, StoredRun>()
  readonly events: Array<StoredEvent> = []
  private readonly keys = new Map<string, string>()
  /** Unique windows by kind and key (or payload): the run holding each (migration 0022's unique_holds). */
  private readonly uniqueHolds = new Map<string, { runId: string; states: ReadonlySet<RunState> | undefined; until: number | undefined }>()
  private nextRunId = 1
  private nextEventId = 1
  /** Notifications of the transition under way, published once it has been applied. */
  outbox: Array<StoreNotification> = []

  private record(run: StoredRun, kind: string, fence: number, owner: string | null, detail: unknown, at: number): void {
    const seq = this.nextEventId++
    this.events.push({ seq, runId: run.id, event: { kind, fence, owner, detail, at: new Date(at) } })
  }

  private find(runId: string): StoredRun | undefined {
    const id = canonicalId(runId)
    return id === undefined ? undefined : this.runs.get(id)
  }

  // --- enqueue.ts --------------------------------------------------------------------------------

  /** `payloads` are the requests' payloads as JSON text, in order. */
  enqueue(requests: ReadonlyArray<EnqueueRequest>, payloads: ReadonlyArray<string>, now: number): Array<Enqueued> {
    const woken = new Set<string>()
    const out = requests.map((request, i): Enqueued => {
      // Every request draws an id up front, used or not (the sequence in the statement).
      const id = String(this.nextRunId++)
      const key = request.idempotencyKey ?? null
      const existing = key === null ? undefined : this.keys.get(key)
      if (existing !== undefined) return { id: existing, created: false }
      if (key !== null) this.keys.set(key, id)
      if (request.unique !== undefined) {
        const holder = this.holdUnique(request, payloads[i]!, id, now)
        if (holder !== id) return { id: holder, created: false }
      }
      const queue = request.queue ?? "default"
      this.runs.set(id, {
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
          : this.governingScope(request.kind, queue),
        keySlot: null,
        rateScope: this.rateGoverning(request.kind, queue),
        traceParent: request.traceParent ?? null,
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
    for (const queue of woken) this.outbox.push({ _tag: "RunsAvailable", queue })
    const keys = [...new Set(requests.flatMap((r) => r.concurrencyKey === undefined || r.concurrencyKey === null ? [] : [r.concurrencyKey]))]
    if (keys.length > 0) {
      this.admit({ kinds: requests.map((r) => r.kind), queues: requests.map((r) => r.queue ?? "default"), keys }, now)
    }
    return out
  }

  /**
   * The run holding `request`'s unique window, after `id` took it if it was free: the window's
   * holder keeps it while it is in the window's states (every state, deleted or not, when it has
   * none) and its period has not passed.
   */
  private holdUnique(request: EnqueueRequest, payload: string, id: string, now: number): string {
    const window = request.unique!
    const of = window.key !== undefined ? `key:${window.key}` : `payload:${canonicalJson(parse(payload))}`
    const slot = `${request.kind}\u0000${of}`
    const hold = this.uniqueHolds.get(slot)
    if (hold !== undefined) {
      const run = this.runs.get(hold.runId)
      const inStates = hold.states === undefined || (run !== undefined && hold.states.has(run.state))
      if (inStates && (hold.until === undefined || now < hold.until)) return hold.runId
    }
    const states = uniqueStates(window)
    this.uniqueHolds.set(slot, {
      runId: id,
      states: states === undefined ? undefined : new Set(states),
      until: window.periodMs === undefined ? undefined : now + window.periodMs
    })
    return id
  }

  /** Moves the end of every unique window that has a period to `at` (tests: the twin of an UPDATE on `unique_holds.held_until`). */
  setUniqueHoldEnds(at: number): void {
    for (const hold of this.uniqueHolds.values()) if (hold.until !== undefined) hold.until = at
  }

  // --- admit.ts and migration 0013's row rules ---------------------------------------------------

  /** Slots given back by this statement's rows, handed on at its end (`key_slot_hand_off`). */
  private handOffs: Array<Released> = []

  /**
   * A run's state change with the row rules of `key_slot_rules`: a run stops holding its slot
   * when it leaves pending and running (or goes back from running to pending), and a keyed run
   * that becomes pending is governed by the limit declared now, and waits. The slot given back is
   * returned; the row trigger hands it on at the statement's end, except a completion's, which
   * its own statement hands on (`handOffSet`).
   */
  private enter(run: StoredRun, to: RunState): Released | undefined {
    const from = run.state
    const rules = (run.keySlot !== null && to !== "running" && !(from === "pending" && to === "pending")) ||
      (run.concurrencyKey !== null && to === "pending" && from !== "pending")
    let released: Released | undefined
    if (rules) {
      if (run.keySlot !== null) released = { run, scope: run.keyScope!, slot: run.keySlot }
      run.keySlot = null
      if (to === "pending" && run.concurrencyKey !== null) run.keyScope = this.governingScope(run.kind, run.queue)
    }
    run.state = to
    if (released !== undefined && to !== "completed") this.handOffs.push(released)
    return released
  }

  /** The end of a statement: the row trigger's hand-offs, in the order the rows were written. */
  endStatement(now: number): void {
    const handOffs = this.handOffs
    this.handOffs = []
    for (const released of handOffs) this.handOffOne(released, now)
  }

  private keyName(run: StoredRun, scope: KeyLimits.KeyLimitScope): string {
    return scope === "kind" ? run.kind : run.queue
  }

  /** The runs holding a slot of a key (`heldSlots`). */
  private holders(scope: KeyLimits.KeyLimitScope, name: string, key: string): Array<StoredRun> {
    return [...this.runs.values()].filter((o) =>
      o.keySlot !== null && o.keyScope === scope && this.keyName(o, scope) === name && o.concurrencyKey === key
    )
  }

  /** A key's waiting due runs in claim order (`runs_waiting_kind`, `runs_waiting_queue`), paused queues' left out. */
  private waiting(scope: KeyLimits.KeyLimitScope, name: string, key: string, now: number): Array<StoredRun> {
    return [...this.runs.values()]
      .filter((o) =>
        o.state === "pending" && o.keyScope === scope && o.keySlot === null && this.keyName(o, scope) === name &&
        o.concurrencyKey === key && o.runAt <= now && !this.paused.has(o.queue)
      )
      .sort(inClaimOrder)
  }

  private perKey(scope: KeyLimits.KeyLimitScope, name: string): number | undefined {
    return this.keyLimitsByScope.get(`${scope}\u0000${name}`)?.perKey
  }

  /** `key_slot_hand_off`: one slot given back goes to its key's next waiting due run. */
  private handOffOne({ run, scope, slot }: Released, now: number): void {
    const name = this.keyName(run, scope)
    const per = this.perKey(scope, name)
    if (per === undefined || slot >= per) return
    if (this.holders(scope, name, run.concurrencyKey!).some((o) => o.keySlot! >= per)) return
    const successor = this.waiting(scope, name, run.concurrencyKey!, now)[0]
    if (successor === undefined) return
    successor.keySlot = slot
    this.outbox.push({ _tag: "RunsAvailable", queue: successor.queue })
  }

  /**
   * `handOff`: the slots a completion statement gave back, handed on set-based: each key's freed
   * slots below its limit, in order, to its first waiting due runs in claim order; none to a key
   * that held a slot above its limit when the statement began (`above`).
   */
  private handOffSet(
    released: ReadonlyArray<Released>,
    above: ReadonlySet<string>,
    now: number,
    next?: ClaimNext
  ): Map<string, ClaimedRun> {
    const successors = new Map<string, ClaimedRun>()
    const byKey = new Map<string, { scope: KeyLimits.KeyLimitScope; name: string; key: string; slots: Array<number>; after: Array<string> }>()
    for (const { run, scope, slot } of released) {
      const name = this.keyName(run, scope)
      const per = this.perKey(scope, name)
      if (per === undefined || slot >= per) continue
      const id = `${scope}\u0000${name}\u0000${run.concurrencyKey}`
      if (above.has(id)) continue
      const group = byKey.get(id) ?? { scope, name, key: run.concurrencyKey!, slots: [], after: [] }
      group.slots.push(slot)
      group.after.push(run.id)
      byKey.set(id, group)
    }
    for (const { after, key, name, scope, slots } of byKey.values()) {
      const order = slots.map((slot, i) => ({ slot, after: after[i]! })).sort((a, b) => a.slot - b.slot)
      this.waiting(scope, name, key, now).slice(0, order.length).forEach((run, i) => {
        run.keySlot = order[i]!.slot
        // Claimed at once for the completion's owner when it asked, and the run is its to take.
        // A run a rate limit governs is given its slot, not started: only the rated claim starts it.
        if (
          next !== undefined && run.rateScope === null && next.kinds.includes(run.kind) && next.queues.includes(run.queue) &&
          !this.paused.has(run.queue)
        ) {
          successors.set(order[i]!.after, this.claimOne(run, next.owner, Duration.toMillis(next.ttl), now))
        } else {
          this.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
        }
      })
    }
    return successors
  }

  /** The keys holding a slot at or above their limit now (a lowered limit): `handOffSet`'s `above`. */
  private keysAboveLimit(): Set<string> {
    const above = new Set<string>()
    for (const o of this.runs.values()) {
      if (o.keySlot === null || o.keyScope === null) continue
      const name = this.keyName(o, o.keyScope)
      const per = this.perKey(o.keyScope, name)
      if (per !== undefined && o.keySlot >= per) above.add(`${o.keyScope}\u0000${name}\u0000${o.concurrencyKey}`)
    }
    return above
  }

  /** A keyed run that a declared limit governs (its kind's or its queue's). */
  private isGoverned(run: StoredRun): boolean {
    return run.concurrencyKey !== null && this.governingScope(run.kind, run.queue) !== null
  }

  /**
   * `timeOutGoverned`: governed suspensions of the claim's (unpaused) queues and kinds whose
   * deadline passed become pending with their signal timed out, and wait in their keys' lines.
   */
  private timeOutGoverned(request: ClaimRequest, now: number): void {
    const due = [...this.runs.values()]
      .filter((r) =>
        r.state === "suspended" && r.suspendDeadline !== null && r.suspendDeadline <= now && this.isGoverned(r) &&
        request.queues.includes(r.queue) && !this.paused.has(r.queue) && request.kinds.includes(r.kind)
      )
      .sort((a, b) => a.suspendDeadline! - b.suspendDeadline! || Number(a.id) - Number(b.id))
      .slice(0, KeyLimits.scanPastLimit)
    for (const run of due) {
      this.enter(run, "pending")
      run.signals = JSON.stringify({ ...(parse(run.signals) as object), [run.signalName!]: { _tag: "TimedOut" } })
      run.signalName = null
      run.signalToken = null
      run.suspendDeadline = null
      run.updatedAt = now
      this.record(run, "signal_timed_out", run.fence, null, { attempt: run.attempt }, now)
    }
  }

  /**
   * `admit`: each key of the named kinds' and queues' limits (or only the named keys) gives its
   * free slots (below its limit, less as many as runs hold above it) to its waiting due runs in
   * claim order. (Postgres reads at most `KeyLimits.scanPastLimit` keys of a limit per sweep; a
   * model never has that many.)
   */
  admit(
    scope:
      & ({ readonly kinds: ReadonlyArray<string>; readonly queues: ReadonlyArray<string> } | { readonly every: true })
      & { readonly keys?: ReadonlyArray<string> },
    now: number
  ): void {
    const woken = new Set<string>()
    for (const limit of this.keyLimitsByScope.values()) {
      if (!("every" in scope) && !(limit.scope === "kind" ? scope.kinds : scope.queues).includes(limit.name)) continue
      const keys = scope.keys ?? [
        ...new Set(
          [...this.runs.values()]
            .filter((o) => o.state === "pending" && o.keyScope === limit.scope && o.keySlot === null && this.keyName(o, limit.scope) === limit.name)
            .map((o) => o.concurrencyKey!)
        )
      ]
      for (const key of new Set(keys)) {
        // The unheld numbers below the limit, no more than the room every held slot leaves.
        const held = this.holders(limit.scope, limit.name, key).map((o) => o.keySlot!)
        const free: Array<number> = []
        for (let slot = 0; slot < limit.perKey && free.length < limit.perKey - held.length; slot++) {
          if (!held.includes(slot)) free.push(slot)
        }
        this.waiting(limit.scope, limit.name, key, now).slice(0, free.length).forEach((run, i) => {
          run.keySlot = free[i]!
          woken.add(run.queue)
        })
      }
    }
    for (const queue of woken) this.outbox.push({ _tag: "RunsAvailable", queue })
  }

  // --- claim.ts ----------------------------------------------------------------------------------

  /**
   * Expired leases by expiry, then passed suspension deadlines by deadline, then due runs by
   * priority DESC, run_at, id; each class capped at `limit`, the classes taken in that order up to
   * `limit`. Every claim raises the fence by exactly 1; an expired lease on its last attempt fails
   * the run instead. Due-only claims skip the first two classes.
   */
  claim(request: ClaimRequest, ttlMs: number, now: number): Array<ClaimedRun> {
    // Runs a rate limit governs are started first (rate.ts › claimRated), then the routine claim.
    const rated = this.claimRated(request, ttlMs, now)
    const routine = this.claimRoutine({ ...request, limit: request.limit - rated.length }, ttlMs, now)
    return [...rated, ...routine]
  }

  private claimRoutine(request: ClaimRequest, ttlMs: number, now: number): Array<ClaimedRun> {
    const { limit, owner } = request
    if (limit <= 0 || request.kinds.length === 0) return []
    const sweep = request.dueOnly !== true
    // A sweep first moves governed suspensions that timed out into their keys' lines, then admits
    // keyed runs left waiting with room for them (each its own statement).
    if (sweep) {
      this.timeOutGoverned(request, now)
      this.admit({ kinds: request.kinds, queues: request.queues }, now)
    }
    const all = [...this.runs.values()].filter((r) =>
      request.queues.includes(r.queue) && !this.paused.has(r.queue) && request.kinds.includes(r.kind)
    )
    const byId = (a: StoredRun, b: StoredRun) => Number(a.id) - Number(b.id)
    const expired = sweep
      ? all.filter((r) => r.state === "running" && r.leaseExpiresAt! <= now)
        .sort((a, b) => a.leaseExpiresAt! - b.leaseExpiresAt! || byId(a, b)).slice(0, limit)
      : []
    // Suspensions that timed out, but the governed ones: those joined their keys' lines above.
    const timedOut = sweep
      ? all.filter((r) =>
        r.state === "suspended" && r.suspendDeadline !== null && r.suspendDeadline <= now && !this.isGoverned(r)
      ).sort((a, b) => a.suspendDeadline! - b.suspendDeadline! || byId(a, b)).slice(0, limit)
      : []
    // Due runs: unkeyed ones and admitted ones (a governed run without a slot waits). A due-only
    // claim without a key limit starts each queue at its claim position (ClaimPosition).
    const keyed = request.kinds.some((kind) => this.keyLimitsByScope.has(`kind\u0000${kind}`)) ||
      request.queues.some((queue) => this.keyLimitsByScope.has(`queue\u0000${queue}`))
    const positions = sweep || keyed ? new Map<string, ClaimPosition.ClaimPosition>() : this.positions.of(request.queues, request.kinds)
    const dueInQueue = (queue: string) =>
      all.filter((r) =>
        r.queue === queue && r.state === "pending" && (r.keyScope === null || r.keySlot !== null) && r.rateScope === null &&
        r.runAt <= now &&
        ClaimPosition.reaches(positions.get(queue), { priority: r.priority, runAtMs: r.runAt })
      ).sort(inClaimOrder).slice(0, limit).map((run) => ({ run }))
    const due = [...new Set(request.queues)].flatMap(dueInQueue).sort((a, b) => inClaimOrder(a.run, b.run)).slice(0, limit)
    const placed = due.map(({ run }) => ({ queue: run.queue, priority: run.priority, runAtMs: run.runAt, id: run.id }))
    // A claim takes no key slot: a reclaimed run keeps the one it holds, an admitted due run the
    // one it was given.
    const picked = [
      ...expired.map((run) => ({ run, origin: 0 })),
      ...timedOut.map((run) => ({ run, origin: 1 })),
      ...due.map(({ run }) => ({ run, origin: 2 }))
    ].slice(0, limit)
    // Positions move by what was claimed (`claimDue`), and a sweep that took a run behind one
    // rewinds it (`claimAll`).
    const pickedDue = new Set(picked.filter((p) => p.origin === 2).map((p) => p.run.id))
    const tookDue = placed.filter((p) => pickedDue.has(p.id))
    if (sweep) this.positions.rewind(request.kinds, tookDue)
    else if (!keyed) this.positions.advance(request.kinds, tookDue)
    const claimed: Array<ClaimedRun> = []
    for (const { origin, run } of picked) {
      const dueAt = origin === 0 ? run.leaseExpiresAt! : origin === 1 ? run.suspendDeadline! : run.runAt
      run.fence += 1
      run.updatedAt = now
      if (origin === 0 && run.attempt >= run.maxAttempts) {
        this.enter(run, "failed")
        run.leaseOwner = null
        run.leaseExpiresAt = null
        run.finishedAt = now
        run.error = JSON.stringify({ message: "lease expired on the last attempt", permanent: true })
        this.record(run, "failed", run.fence, owner, { attempt: run.attempt }, now)
      } else {
        if (origin === 1) run.signals = JSON.stringify({ ...(parse(run.signals) as object), [run.signalName!]: { _tag: "TimedOut" } })
        this.enter(run, "running")
        run.attempt += 1
        run.leaseOwner = owner
        run.leaseExpiresAt = now + ttlMs
        run.finishedAt = null
        const kind = origin === 0 ? "reclaimed" : origin === 1 ? "signal_timed_out" : "claimed"
        this.record(run, kind, run.fence, owner, { attempt: run.attempt }, now)
        claimed.push(claimedView(run, origin === 0 ? "expired" : origin === 1 ? "timed-out" : "due", Math.max(0, now - dueAt)))
      }
      run.signalName = null
      run.signalToken = null
      run.suspendDeadline = null
    }
    return claimed
  }

  /** A due run claimed for `owner` outside a claim statement (a completion's hand-off, `handOff`). */
  private claimOne(run: StoredRun, owner: string, ttlMs: number, now: number): ClaimedRun {
    run.fence += 1
    run.updatedAt = now
    this.enter(run, "running")
    run.attempt += 1
    run.leaseOwner = owner
    run.leaseExpiresAt = now + ttlMs
    run.finishedAt = null
    this.record(run, "claimed", run.fence, owner, { attempt: run.attempt }, now)
    return claimedView(run, "due", Math.max(0, now - run.runAt))
  }

  // --- renew.ts ----------------------------------------------------------------------------------

  renew(owner: string, leases: ReadonlyArray<LeaseKey>, ttlMs: number, now: number): Array<LeaseKey> {
    const renewed: Array<LeaseKey> = []
    for (const lease of leases) {
      const run = this.find(lease.runId)
      if (run !== undefined && run.fence === lease.fence && run.state === "running" && run.leaseOwner === owner) {
        run.leaseExpiresAt = now + ttlMs
        renewed.push({ runId: run.id, fence: run.fence })
      }
    }
    return renewed
  }

  // --- guarded.ts --------------------------------------------------------------------------------

  /** The row a guarded write matches: id + fence + running, or nothing. */
  holder(lease: LeaseKey): StoredRun | undefined {
    const run = this.find(lease.runId)
    return run !== undefined && run.fence === lease.fence && run.state === "running" ? run : undefined
  }

  /** Why a guarded write matched nothing; a real fence mismatch is recorded in the run's history. */
  diagnose(lease: LeaseKey, operation: string, now: number): StaleWrite {
    const run = this.find(lease.runId)
    if (run === undefined) return new RunNotFound({ runId: canonicalId(lease.runId) ?? lease.runId })
    if (run.fence !== lease.fence) {
      this.record(run, "stale_write_rejected", lease.fence, null, { operation, storedFence: run.fence, state: run.state }, now)
      return new FenceRejected({ runId: run.id, presentedFence: lease.fence, storedFence: run.fence, operation })
    }
    return new LeaseNotHeld({ runId: run.id, fence: lease.fence, state: run.state, operation })
  }

  private guarded<A>(lease: LeaseKey, operation: string, now: number, write: (run: StoredRun) => A): Outcome<A, StaleWrite> {
    const run = this.holder(lease)
    if (run === undefined) return err(this.diagnose(lease, operation, now))
    run.updatedAt = now
    return ok(write(run))
  }

  private letGo(run: StoredRun): void {
    run.leaseOwner = null
    run.leaseExpiresAt = null
  }

  /** The completion of one matched run. (Postgres reads this history line off the completed run.) */
  complete(run: StoredRun, result: string, now: number): Released | undefined {
    const released = this.enter(run, "completed")
    run.result = result
    run.finishedAt = now
    run.updatedAt = now
    this.letGo(run)
    this.record(run, "completed", run.fence, null, null, now)
    return released
  }

  /** A completion in the caller's transaction (`transaction`): its slot is handed on at once. */
  completeInTransaction(run: StoredRun, result: string, now: number): void {
    const above = this.keysAboveLimit()
    const released = this.complete(run, result, now)
    if (released !== undefined) this.handOffSet([released], above, now)
  }

  completeBatch(items: ReadonlyArray<CompleteItem>, now: number, next?: ClaimNext): Array<FinalizeOutcome> {
    // The statement decides every item first; the ones it missed are diagnosed afterwards.
    const matched = items.map((item) => this.holder(item))
    const above = this.keysAboveLimit()
    const released: Array<Released> = []
    items.forEach((item, i) => {
      if (matched[i] === undefined) return
      const slot = this.complete(matched[i], item.result ?? "null", now)
      // The items said to be unkeyed have no slot read, so none handed on (`handOff`).
      if (slot !== undefined && item.keyed !== false) released.push(slot)
    })
    const successors = this.handOffSet(released, above, now, next)
    return items.map((item, i): FinalizeOutcome => {
      if (matched[i] !== undefined) {
        // A successor goes to the first item naming the run whose slot it took.
        const first = matched.findIndex((run) => run?.id === matched[i]!.id) === i
        const successor = first ? successors.get(matched[i].id) : undefined
        return successor === undefined
          ? { _tag: "Finalized", runId: item.runId, fence: item.fence }
          : { _tag: "Finalized", runId: item.runId, fence: item.fence, next: successor }
      }
      const run = this.find(item.runId)
      // Completed under this very fence: the holder's own completion sent again, acknowledged.
      if (run !== undefined && run.fence === item.fence && run.state === "completed") {
        return { _tag: "Finalized", runId: item.runId, fence: item.fence }
      }
      this.diagnose(item, "complete", now)
      return run === undefined
        ? { _tag: "Rejected", runId: item.runId, fence: item.fence, storedFence: item.fence, state: "missing" }
        : { _tag: "Rejected", runId: item.runId, fence: item.fence, storedFence: run.fence, state: run.state }
    })
  }

  fail(request: FailRequest, error: string, now: number): Outcome<FailOutcome, StaleWrite> {
    return this.guarded(request, "fail", now, (run): FailOutcome => {
      this.letGo(run)
      run.error = error
      const retrying = request.retryDelayMs !== undefined && run.attempt < run.maxAttempts
      if (retrying) {
        this.enter(run, "pending")
        run.runAt = now + request.retryDelayMs!
        run.finishedAt = null
      } else {
        this.enter(run, "failed")
        run.finishedAt = now
      }
      this.record(run, retrying ? "retry_scheduled" : "failed", run.fence, null, {
        error: parse(error),
        runAt: new Date(run.runAt).toISOString()
      }, now)
      return retrying ? { _tag: "RetryScheduled", delayMs: request.retryDelayMs! } : { _tag: "Failed" }
    })
  }

  release(lease: LeaseKey, now: number) {
    return this.guarded(lease, "release", now, (run) => {
      this.letGo(run)
      this.enter(run, "pending")
      run.runAt = now
      run.attempt = Math.max(run.attempt - 1, 0)
      this.record(run, "released", run.fence, null, null, now)
      this.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
    })
  }

  /** As `release`, but due `delayMs` from now (`Run.snooze`): the attempt is given back too. */
  snooze(request: SnoozeRequest, now: number) {
    return this.guarded(request, "snooze", now, (run) => {
      this.letGo(run)
      this.enter(run, "pending")
      run.runAt = now + request.delayMs
      run.attempt = Math.max(run.attempt - 1, 0)
      this.record(run, "snoozed", run.fence, null, { runAt: new Date(run.runAt).toISOString() }, now)
      if (request.delayMs === 0) this.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
    })
  }

  checkpoint(lease: LeaseKey, value: string, now: number) {
    return this.guarded(lease, "checkpoint", now, (run) => {
      run.checkpoint = value
    })
  }

  suspend(request: SuspendRequest, timeoutMs: number | null, now: number): Outcome<SuspendOutcome, StaleWrite | SignalTokenInUse> {
    const run = this.holder(request)
    if (run === undefined) return err(this.diagnose(request, "suspend", now))
    // Delivered while the run was still running: nothing to wait for, nothing written.
    const delivered = (parse(run.signals) as Record<string, SignalOutcome>)[request.signal]
    if (delivered !== undefined) return ok({ _tag: "AlreadySignalled", outcome: delivered })
    // The token names exactly one waiting run (a unique index in Postgres): nothing is written.
    for (const other of this.runs.values()) {
      if (other.signalToken === request.token) return err(new SignalTokenInUse({ runId: run.id, token: request.token }))
    }
    this.letGo(run)
    this.enter(run, "suspended")
    run.attempt = Math.max(run.attempt - 1, 0)
    run.signalName = request.signal
    run.signalToken = request.token
    run.suspendDeadline = timeoutMs === null ? null : now + timeoutMs
    run.updatedAt = now
    const deadline = run.suspendDeadline === null ? null : new Date(run.suspendDeadline).toISOString()
    this.record(run, "suspended", run.fence, null, { signal: request.signal, deadline }, now)
    return ok({ _tag: "Suspended" })
  }

  /** Callback expiries by run and signal, fixed on first request. */
  private readonly callbacks = new Map<string, number>()
  /** Delivery ids seen (replayed webhooks). */
  private readonly deliveries = new Set<string>()

  callbackExpiry(lease: LeaseKey, signal: string, expiresInMs: number, now: number): Outcome<Date, StaleWrite> {
    return this.guarded(lease, "callback", now, (run) => {
      const key = `${run.id}:${signal}`
      const fixed = this.callbacks.get(key) ?? now + expiresInMs
      this.callbacks.set(key, fixed)
      return new Date(fixed)
    })
  }

  deliverSignal(request: DeliverSignalRequest, payload: string, now: number): Outcome<SignalDelivery, RunNotFound> {
    const run = this.find(request.runId)
    if (run === undefined) return err(new RunNotFound({ runId: request.runId }))
    const runId = run.id
    const delivered = (parse(run.signals) as Record<string, SignalOutcome>)[request.signal]
    if (request.deliveryId !== undefined && this.deliveries.has(request.deliveryId)) return ok({ _tag: "Replayed", runId })
    if (delivered !== undefined) {
      if (delivered._tag === "TimedOut") return ok({ _tag: "Gone", runId, reason: "timed-out" })
      return ok({ _tag: sameJson(delivered.payload, parse(payload)) ? "Duplicate" : "Conflict", runId })
    }
    if (terminalStates.includes(run.state)) {
      return ok({ _tag: "Gone", runId, reason: "finished" })
    }
    if (request.deliveryId !== undefined) this.deliveries.add(request.deliveryId)
    if (run.state === "suspended" && run.signalName === request.signal) {
      this.resume(run, payload, now)
      return ok({ _tag: "Resumed", runId })
    }
    run.signals = JSON.stringify({ ...(parse(run.signals) as object), [request.signal]: { _tag: "Signalled", payload: parse(payload) } })
    run.updatedAt = now
    this.record(run, "signal_recorded", run.fence, null, { signal: request.signal, payload: parse(payload) }, now)
    return ok({ _tag: "Recorded", runId })
  }

  // --- workflow.ts -------------------------------------------------------------------------------

  /** The run enqueued under this idempotency key, if any (an execution's run). */
  byIdempotencyKey(key: string): StoredRun | undefined {
    const id = this.keys.get(key)
    return id === undefined ? undefined : this.runs.get(id)
  }

  /** Leaves a signal for a running run's holder, whose next suspension on it then returns at once. */
  leaveSignal(run: StoredRun, signal: string, payload: string, now: number): void {
    run.signals = JSON.stringify({ ...(parse(run.signals) as object), [signal]: { _tag: "Signalled", payload: parse(payload) } })
    run.updatedAt = now
  }

  /** Takes a signal left for the holder, under its fence. */
  takeSignal(lease: LeaseKey, signal: string, operation: string, now: number): Outcome<void, StaleWrite> {
    return this.guarded(lease, operation, now, (run) => {
      const { [signal]: _taken, ...rest } = parse(run.signals) as Record<string, unknown>
      run.signals = JSON.stringify(rest)
    })
  }

  // --- admin.ts ----------------------------------------------------------------------------------

  private resume(run: StoredRun, payload: string, now: number): string {
    this.enter(run, "pending")
    run.runAt = now
    run.signals = JSON.stringify({ ...(parse(run.signals) as object), [run.signalName!]: { _tag: "Signalled", payload: parse(payload) } })
    run.signalName = null
    run.signalToken = null
    run.suspendDeadline = null
    run.updatedAt = now
    this.record(run, "resumed", run.fence, null, { payload: parse(payload) }, now)
    this.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
    // Under a key limit it waits in its key's line, and is admitted at once if there is room.
    if (run.concurrencyKey !== null) this.admit({ kinds: [run.kind], queues: [run.queue], keys: [run.concurrencyKey] }, now)
    return run.id
  }

  resumeById(runId: string, payload: string, now: number): Outcome<string, RunNotFound | InvalidTransition> {
    const run = this.find(runId)
    if (run === undefined) return err(new RunNotFound({ runId }))
    if (run.state !== "suspended") return err(new InvalidTransition({ runId: run.id, state: run.state, operation: "resume" }))
    return ok(this.resume(run, payload, now))
  }

  resumeByToken(token: string, payload: string, now: number): Outcome<string, SignalTokenNotFound> {
    for (const run of this.runs.values()) {
      if (run.signalToken === token && run.state === "suspended") return ok(this.resume(run, payload, now))
    }
    return err(new SignalTokenNotFound({ token }))
  }

  private admin(
    runId: string,
    operation: string,
    from: ReadonlyArray<RunState>,
    now: number,
    write: (run: StoredRun) => void
  ): Outcome<void, RunNotFound | InvalidTransition> {
    const run = this.find(runId)
    if (run === undefined) return err(new RunNotFound({ runId }))
    if (!from.includes(run.state)) return err(new InvalidTransition({ runId: run.id, state: run.state, operation }))
    run.fence += 1
    run.updatedAt = now
    write(run)
    return ok(undefined)
  }

  leases(now: number): Array<LiveLease> {
    return [...this.runs.values()]
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
  many(filter: RunFilter, operation: "cancel" | "retry", now: number): Array<string> {
    const ids = [...this.runs.values()].filter((r) => Read.matches(r, filter)).map((r) => r.id).sort((a, b) => Number(a) - Number(b))
    this.retried = []
    const done = ids.filter((id) => (operation === "cancel" ? this.cancel(id, now) : this.retry(id, now)).ok)
    const retried = this.retried
    this.retried = undefined
    if (retried.length > 0) {
      this.admit({
        kinds: retried.map((r) => r.kind),
        queues: retried.map((r) => r.queue),
        keys: retried.map((r) => r.concurrencyKey!)
      }, now)
    }
    return done
  }

  /** The keyed runs a many-run retry put back to pending, admitted once it is done. */
  private retried: Array<StoredRun> | undefined = undefined

  cancel(runId: string, now: number) {
    return this.admin(runId, "cancel", ["pending", "running", "suspended"], now, (run) => {
      this.enter(run, "cancelled")
      this.letGo(run)
      run.signalName = null
      run.signalToken = null
      run.suspendDeadline = null
      run.finishedAt = now
      this.record(run, "cancelled", run.fence, null, null, now)
      this.outbox.push({ _tag: "RunCancelled", runId: run.id })
    })
  }

  retry(runId: string, now: number) {
    return this.admin(runId, "retry", ["failed", "cancelled"], now, (run) => {
      this.enter(run, "pending")
      run.attempt = 0
      run.runAt = now
      run.result = null
      run.error = null
      run.finishedAt = null
      this.record(run, "retried", run.fence, null, null, now)
      this.outbox.push({ _tag: "RunsAvailable", queue: run.queue })
      // Under a key limit it waits in its key's line, and is admitted at once if there is room
      // (after the whole statement, for many runs: `retryWhere`).
      if (run.concurrencyKey !== null) {
        if (this.retried !== undefined) this.retried.push(run)
        else this.admit({ kinds: [run.kind], queues: [run.queue], keys: [run.concurrencyKey] }, now)
      }
    })
  }

  // --- read.ts (see Read.ts) -----------------------------------------------------------------------

  get(runId: string): Outcome<RunRecord, RunNotFound> {
    const run = this.find(runId)
    return run === undefined ? err(new RunNotFound({ runId })) : ok(Read.toRecord(run))
  }

  list(filter: ListFilter): Array<RunRecord> {
    return Read.list(this.runs.values(), filter)
  }

  /** The run's history in the order it happened. */
  history(runId: string): Outcome<Array<RunEvent>, RunNotFound> {
    const run = this.find(runId)
    if (run === undefined) return err(new RunNotFound({ runId }))
    return ok(this.events.filter((e) => e.runId === run.id).map((e): RunEvent => ({ id: String(e.seq), runId: run.id, ...e.event })))
  }

  stats(now: number): Stats {
    return Read.stats(this.runs.values(), this.events, now)
  }

  sample(now: number): LiveSample {
    return Read.sample(this.runs.values(), now)
  }

  // --- queues.ts --------------------------------------------------------------------------------

  /** Paused queues and when each was paused. */
  private readonly paused = new Map<string, number>()

  /** `pause`: its admitted keyed runs give their slots back, which go to their keys' runs elsewhere. */
  pauseQueue(queue: string, now: number): boolean {
    if (this.paused.has(queue)) return false
    this.paused.set(queue, now)
    const keys: Array<string> = []
    for (const run of this.runs.values()) {
      if (run.queue !== queue || run.state !== "pending" || run.keySlot === null) continue
      run.keySlot = null
      keys.push(run.concurrencyKey!)
    }
    if (keys.length > 0) {
      this.admit({ every: true, keys }, now)
    }
    return true
  }

  resumeQueue(queue: string): boolean {
    if (!this.paused.delete(queue)) return false
    this.outbox.push({ _tag: "RunsAvailable", queue })
    return true
  }

  pausedQueues(): Array<PausedQueue> {
    return [...this.paused].sort(([a], [b]) => Read.order(a, b)).map(([queue, since]) => ({ queue, since: new Date(since) }))
  }

  // --- rate.ts ----------------------------------------------------------------------------------

  private readonly rateLimitsByScope = new Map<string, RateLimits.CheckedRateLimit>()
  /** Starts of governed runs, oldest first (`rate_starts`). */
  private rateStarts: Array<{ readonly scope: string; readonly name: string; readonly key: string; readonly at: number }> = []

  private rateGoverning(kind: string, queue: string): RateLimits.RateLimitScope | null {
    return this.rateLimitsByScope.has(`kind\u0000${kind}`) ? "kind" : this.rateLimitsByScope.has(`queue\u0000${queue}`) ? "queue" : null
  }

  private startsSince(scope: string, name: string, key: string | undefined, since: number): number {
    return this.rateStarts.filter((t) => t.scope === scope && t.name === name && (key === undefined || t.key === key) && t.at > since).length
  }

  /**
   * `claimRated`: the windows with room of the first due governed runs in claim order (at most
   * `limit` of them), each window's room (its limit less its starts within the interval), that many of its
   * runs, all of them cut to `limit` in claim order; each start recorded.
   */
  private claimRated(request: ClaimRequest, ttlMs: number, now: number): Array<ClaimedRun> {
    this.rateWake = undefined
    if (request.limit <= 0 || request.kinds.length === 0 || this.rateLimitsByScope.size === 0) return []
    const due = [...this.runs.values()].filter((r) =>
      r.state === "pending" && r.rateScope !== null && (r.keyScope === null || r.keySlot !== null) && r.runAt <= now &&
      request.queues.includes(r.queue) && !this.paused.has(r.queue) && request.kinds.includes(r.kind)
    ).sort(inClaimOrder).slice(0, KeyLimits.scanPastLimit)
    const windows = new Map<string, { limit: RateLimits.CheckedRateLimit; key: string; runs: Array<StoredRun> }>()
    for (const run of due) {
      const name = run.rateScope === "kind" ? run.kind : run.queue
      const limit = this.rateLimitsByScope.get(`${run.rateScope}\u0000${name}`)
      if (limit === undefined) continue
      const key = RateLimits.windowKey(limit.perKey, run.concurrencyKey)
      const id = `${limit.scope}\u0000${name}\u0000${key}`
      // A full window takes no place among the claim's: the windows with room behind it start.
      const window = windows.get(id) ??
        (windows.size < request.limit && this.startsSince(limit.scope, limit.name, key, now - limit.intervalMs) < limit.limit
          ? { limit, key, runs: [] }
          : undefined)
      if (window === undefined) continue
      window.runs.push(run)
      windows.set(id, window)
    }
    const picked: Array<{ run: StoredRun; limit: RateLimits.CheckedRateLimit; key: string }> = []
    for (const { key, limit, runs } of windows.values()) {
      const room = limit.limit - this.startsSince(limit.scope, limit.name, key, now - limit.intervalMs)
      for (const run of runs.slice(0, Math.max(0, room))) picked.push({ run, limit, key })
    }
    picked.sort((a, b) => inClaimOrder(a.run, b.run))
    const claimed: Array<ClaimedRun> = []
    for (const { key, limit, run } of picked.slice(0, request.limit)) {
      claimed.push(this.claimOne(run, request.owner, ttlMs, now))
      this.rateStarts.push({ scope: limit.scope, name: limit.name, key, at: now })
    }
    // Starts older than their window's interval count no more.
    this.rateStarts = this.rateStarts.filter((t) => {
      const limit = this.rateLimitsByScope.get(`${t.scope}\u0000${t.name}`)
      return limit !== undefined && t.at > now - limit.intervalMs
    })
    this.rateWake = RateWake.earliest(due.filter((run) => run.state === "pending").flatMap((run) => {
      const limit = this.rateLimitsByScope.get(`${run.rateScope}\u0000${run.rateScope === "kind" ? run.kind : run.queue}`)
      if (limit === undefined) return []
      const key = RateLimits.windowKey(limit.perKey, run.concurrencyKey)
      const starts = this.rateStarts.filter((t) => t.scope === limit.scope && t.name === limit.name && t.key === key).map((t) => t.at)
      return [{ queue: run.queue, limit: limit.limit, intervalMs: limit.intervalMs, starts }]
    }))
    return claimed
  }

  /** When the last claim's held-back governed runs may start (`RateWake`), for the store to wake their workers. */
  rateWake: RateWake.Wake | undefined = undefined

  /** Moves the starts of one limit, or of every limit, to `at` (tests: the memory twin of an UPDATE on `rate_starts.started_at`). */
  setRateStartTimes(at: number, limit?: { readonly scope: string; readonly name: string }): void {
    this.rateStarts = this.rateStarts.map((t) => limit === undefined || (t.scope === limit.scope && t.name === limit.name) ? { ...t, at } : t)
  }

  private rerate(kinds: ReadonlyArray<string>, queues: ReadonlyArray<string>): void {
    for (const run of this.runs.values()) {
      if (!(run.state === "pending" || run.state === "running" || run.state === "suspended")) continue
      if (kinds.includes(run.kind) || queues.includes(run.queue)) run.rateScope = this.rateGoverning(run.kind, run.queue)
    }
  }

  setRateLimits(limits: ReadonlyArray<RateLimits.CheckedRateLimit>): void {
    for (const limit of limits) this.rateLimitsByScope.set(`${limit.scope}\u0000${limit.name}`, limit)
    this.rerate(limits.filter((l) => l.scope === "kind").map((l) => l.name), limits.filter((l) => l.scope === "queue").map((l) => l.name))
  }

  removeRateLimit(scope: RateLimits.RateLimitScope, name: string): boolean {
    if (!this.rateLimitsByScope.delete(`${scope}\u0000${name}`)) return false
    this.rateStarts = this.rateStarts.filter((t) => !(t.scope === scope && t.name === name))
    this.rerate(scope === "kind" ? [name] : [], scope === "queue" ? [name] : [])
    return true
  }

  rateLimits(now: number): Array<RateLimits.RateLimitInfo> {
    return [...this.rateLimitsByScope.values()]
      .sort((a, b) => Read.order(a.scope, b.scope) || Read.order(a.name, b.name))
      .map((limit) => ({
        ...limit,
        startedInWindow: this.startsSince(limit.scope, limit.name, undefined, now - limit.intervalMs),
        due: [...this.runs.values()].filter((r) =>
          r.state === "pending" && r.rateScope === limit.scope && (limit.scope === "kind" ? r.kind : r.queue) === limit.name &&
          r.runAt <= now && (r.keyScope === null || r.keySlot !== null)
        ).length
      }))
  }

  // --- keys.ts ----------------------------------------------------------------------------------

  /** Declared per-key limits by scope and name. */
  private readonly keyLimitsByScope = new Map<string, KeyLimits.KeyLimit>()
  /** Where due-only claims stand in each queue (ClaimPosition), as `PgRunStore` keeps them. */
  private readonly positions = new ClaimPosition.Positions()

  setKeyLimits(limits: ReadonlyArray<KeyLimits.KeyLimit>, now: number): void {
    // The last of a batch stands for its scope and name; it changed if it differs from the stored one.
    const last = new Map(limits.map((limit) => [`${limit.scope}\u0000${limit.name}`, limit]))
    const changed = [...last].filter(([id, limit]) => this.keyLimitsByScope.get(id)?.perKey !== limit.perKey).map(([, limit]) => limit)
    for (const [id, limit] of last) this.keyLimitsByScope.set(id, limit)
    this.regovern(changed, now)
  }

  removeKeyLimit(scope: KeyLimits.KeyLimitScope, name: string, now: number): boolean {
    const removed = this.keyLimitsByScope.delete(`${scope}\u0000${name}`)
    if (removed) this.regovern([{ scope, name }], now)
    return removed
  }

  /**
   * `regovern`: the pending keyed runs of the changed kinds and queues are governed by the limits
   * as they are now and give back the slots they were admitted with; then the changed kinds' and
   * every queue limit's keys are admitted again.
   */
  private regovern(changed: ReadonlyArray<{ readonly scope: KeyLimits.KeyLimitScope; readonly name: string }>, now: number): void {
    if (changed.length === 0) return
    const kinds = changed.filter((c) => c.scope === "kind").map((c) => c.name)
    const queues = changed.filter((c) => c.scope === "queue").map((c) => c.name)
    for (const run of this.runs.values()) {
      if (run.state !== "pending" || run.concurrencyKey === null || !(kinds.includes(run.kind) || queues.includes(run.queue))) continue
      const scope = this.governingScope(run.kind, run.queue)
      if (scope !== run.keyScope || run.keySlot !== null) {
        run.keyScope = scope
        run.keySlot = null
      }
    }
    this.admit({ every: true }, now)
  }

  /** The scope of the limit governing runs of `kind` in `queue`: the kind's, else the queue's, else none. */
  private governingScope(kind: string, queue: string): KeyLimits.KeyLimitScope | null {
    return this.keyLimitsByScope.has(`kind\u0000${kind}`) ? "kind" : this.keyLimitsByScope.has(`queue\u0000${queue}`) ? "queue" : null
  }

  keyLimits(now: number): Array<KeyLimits.KeyLimitInfo> {
    return [...this.keyLimitsByScope.values()]
      .sort((a, b) => Read.order(a.scope, b.scope) || Read.order(a.name, b.name))
      .map((limit) => {
        const inScope = (r: StoredRun) => r.concurrencyKey !== null && (limit.scope === "queue" ? r.queue : r.kind) === limit.name
        const keys = new Set<string>()
        let keyedDue = 0
        for (const r of this.runs.values()) {
          if (!inScope(r)) continue
          if (r.state === "running") keys.add(r.concurrencyKey!)
          if (r.state === "pending" && r.runAt <= now) keyedDue += 1
        }
        return { ...limit, keysRunning: keys.size, keyedDue }
      })
  }

  // --- schedules.ts -----------------------------------------------------------------------------

  private readonly schedulesByName = new Map<string, { schedule: Schedules.CheckedSchedule; paused: boolean; nextTick: number; lastTick: number | null }>()

  registerSchedules(checked: ReadonlyArray<Schedules.CheckedSchedule>, now: number): Array<Schedules.ScheduleRegistered> {
    const outcomes = checked.map((schedule): Schedules.ScheduleRegistered => {
      const stored = this.schedulesByName.get(schedule.name)
      const { nextTick, outcome } = Schedules.registration(
        stored === undefined ? undefined : { schedule: stored.schedule, nextTick: new Date(stored.nextTick) },
        schedule,
        new Date(now)
      )
      if (outcome !== "unchanged") {
        this.schedulesByName.set(schedule.name, {
          schedule,
          paused: stored?.paused ?? false,
          nextTick: nextTick.getTime(),
          lastTick: stored?.lastTick ?? null
        })
      }
      return { name: schedule.name, outcome }
    })
    if (outcomes.some((o) => o.outcome !== "unchanged")) this.outbox.push({ _tag: "SchedulesChanged" })
    return outcomes
  }

  tickSchedules(now: number): Schedules.TickOutcome {
    const fired: Array<Schedules.FiredTick> = []
    for (const entry of [...this.schedulesByName.values()].sort((a, b) => a.nextTick - b.nextTick)) {
      if (entry.paused || entry.nextTick > now) continue
      const plan = Schedules.planIfPossible(entry.schedule, new Date(entry.nextTick), new Date(now))
      if (plan === undefined) continue
      for (const { backfilled, tick } of plan.fire) {
        const request = Schedules.tickRequest(entry.schedule, tick, backfilled)
        // The payload is a checked JSON object with the tick added: its text is plain JSON.
        const [enqueued] = this.enqueue([request], [JSON.stringify(request.payload)], now)
        fired.push({ schedule: entry.schedule.name, tick, runId: enqueued!.id, backfilled, created: enqueued!.created })
      }
      entry.lastTick = plan.lastTick.getTime()
      entry.nextTick = plan.nextTick.getTime()
    }
    const next = [...this.schedulesByName.values()].filter((e) => !e.paused).map((e) => e.nextTick)
    return { fired, nextInMs: next.length === 0 ? null : Math.min(...next) - now }
  }

  schedules(): Array<Schedules.ScheduleInfo> {
    return [...this.schedulesByName.values()]
      .sort((a, b) => Read.order(a.schedule.name, b.schedule.name))
      .map((e) => ({ ...e.schedule, paused: e.paused, nextTick: new Date(e.nextTick), lastTick: e.lastTick === null ? null : new Date(e.lastTick) }))
  }

  setSchedulePaused(name: string, paused: boolean, now: number): Outcome<boolean, ScheduleNotFound> {
    const entry = this.schedulesByName.get(name)
    if (entry === undefined) return err(new ScheduleNotFound({ name }))
    if (entry.paused === paused) return ok(false)
    entry.paused = paused
    // Ticks that came due while paused were never due: the next one is the first after now.
    if (!paused) {
      entry.nextTick = Schedules.nextTickAfter(entry.schedule, new Date(now)).getTime()
      this.outbox.push({ _tag: "SchedulesChanged" })
    }
    return ok(true)
  }

  /** Sets a schedule's next tick (tests: the memory twin of an UPDATE on `schedules.next_tick`). */
  setNextTick(name: string, at: number): void {
    const entry = this.schedulesByName.get(name)
    if (entry !== undefined) entry.nextTick = at
  }

  /** Moves a time column of a run (tests: the memory twin of an UPDATE on the database's column). */
  setTime(runId: string, column: TimeColumn, at: number): void {
    const run = this.find(runId)
    if (run === undefined) return
    if (column === "runAt") run.runAt = at
    else if (column === "leaseExpiresAt" && run.leaseExpiresAt !== null) run.leaseExpiresAt = at
    else if (column === "suspendDeadline" && run.suspendDeadline !== null) run.suspendDeadline = at
  }
}
