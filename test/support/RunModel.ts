/**
 * A pure, in-memory reference model of the run state machine, written from the SQL in
 * `packages/sql/src/statements/` (claim, renew, guarded, admin, enqueue). `model.test.ts` runs the
 * same random command sequences against it and against the Postgres store and compares every
 * result and the state of every run after each step.
 *
 * Time. The store only ever compares timestamps with `now()` and orders by them, so the model keeps
 * abstract stamps that preserve exactly that:
 * - a statement's `now()` is `NOW + n`, `n` counting the model's statements (strictly increasing, as
 *   consecutive autocommit statements are);
 * - `now() + ttl/delay/timeout` is `FUTURE + n` (the test's TTLs, delays and timeouts are minutes or
 *   hours, a sequence takes milliseconds, so nothing comes due by itself);
 * - "advancing time" past a run moves its future stamps to fixed past instants, `1, 2, 3, …`; the test
 *   writes `2000-01-01 + k seconds` to the same columns, so the database orders them the same way.
 *
 * Claim order follows the SQL exactly: expired leases by `lease_expires_at`, then suspensions past
 * their deadline by `suspend_deadline`, then due pending runs by `priority DESC, run_at, id`, each
 * class capped at `limit`, and classes taken in that order up to `limit`. The test generates distinct
 * past stamps, so every ordering key is unique and the model's choice is the only correct one. (The
 * statement's final `ORDER BY origin LIMIT` leaves the order inside a class to the executor; Postgres
 * keeps each class's own order there, and the comparison would catch it if it stopped doing so.)
 *
 * Also modelled: idempotency keys (ids are drawn for every request, used or not) and fenced
 * transactions (`appRows`: the application's rows that committed with a completion).
 */
import type { LeaseKey, RunState, SignalOutcome } from "@leasehold/core"

const NOW = 1_000_000
const FUTURE = 1_000_000_000_000

/** One run as the model keeps it. Stamps are abstract (see the module comment). */
export interface ModelRun {
  readonly id: string
  readonly queue: string
  readonly priority: number
  readonly maxAttempts: number
  state: RunState
  fence: number
  attempt: number
  owner: string | null
  leaseExpiresAt: number | null
  runAt: number
  signalName: string | null
  signalToken: string | null
  suspendDeadline: number | null
  signals: Record<string, SignalOutcome>
  checkpoint: unknown
  result: unknown
  error: unknown
  finished: boolean
  /** History as `kind@fence`, in order. */
  readonly events: Array<string>
}

/** The typed failures of the store, as plain data. */
export type StoreError =
  | { readonly _tag: "FenceRejected"; readonly runId: string; readonly presentedFence: number; readonly storedFence: number; readonly operation: string }
  | { readonly _tag: "LeaseNotHeld"; readonly runId: string; readonly fence: number; readonly state: string; readonly operation: string }
  | { readonly _tag: "RunNotFound"; readonly runId: string }
  | { readonly _tag: "InvalidTransition"; readonly runId: string; readonly state: string; readonly operation: string }

export type Outcome<A> = { readonly ok: A } | { readonly error: StoreError }

/** What a claim hands back, reduced to what the state machine decides. */
export interface ClaimedShape {
  readonly id: string
  readonly attempt: number
  readonly maxAttempts: number
  readonly fence: number
  readonly checkpoint: unknown
  readonly signals: Record<string, SignalOutcome>
}

export type FinalizeShape =
  | { readonly _tag: "Finalized"; readonly runId: string; readonly fence: number }
  | { readonly _tag: "Rejected"; readonly runId: string; readonly fence: number; readonly storedFence: number; readonly state: string }

export type FailShape = { readonly _tag: "RetryScheduled"; readonly delayMs: number } | { readonly _tag: "Failed" }

/** The observable state of one run; the test derives the same from the database. */
export interface RunSnapshot {
  readonly id: string
  readonly state: RunState
  readonly fence: number
  readonly attempt: number
  readonly maxAttempts: number
  readonly owner: string | null
  readonly lease: "live" | "expired" | null
  readonly signalName: string | null
  readonly signalToken: string | null
  readonly deadline: "future" | "past" | null
  /** `run_at <= now()`, for pending runs only. */
  readonly due: boolean | null
  readonly checkpoint: unknown
  readonly result: unknown
  readonly error: unknown
  readonly finished: boolean
  readonly signals: Record<string, SignalOutcome>
  readonly events: ReadonlyArray<string>
}

/** A column the test must move into the past, to the instant `stamp` stands for. */
export interface TimeShift {
  readonly runId: string
  readonly column: "lease_expires_at" | "suspend_deadline" | "run_at"
  readonly stamp: number
}

export interface EnqueueSpec {
  readonly queue: string
  readonly priority: number
  readonly delayed: boolean
  readonly maxAttempts: number
  /** Idempotency key: a key already used (earlier, or earlier in the same batch) yields that run. */
  readonly key: string | null
}

const isRunId = (value: string): boolean => /^[0-9]{1,18}$/.test(value)
const byId = (a: { readonly id: string }, b: { readonly id: string }) => Number(a.id) - Number(b.id)
const sameLease = (a: LeaseKey, b: LeaseKey) => a.runId === b.runId && a.fence === b.fence

export class RunModel {
  /** Runs by id, in id order (ids are handed out 1, 2, 3, … as the identity restarts per sequence). */
  readonly runs = new Map<string, ModelRun>()
  /** Every lease ever granted by a claim, in grant order: the pool stale writers draw from. */
  readonly granted: Array<LeaseKey> = []
  /** Every signal token ever issued by a suspension. */
  readonly tokens: Array<string> = []
  /** What each worker believes it holds: added by claims, pruned by heartbeats and its own finishes. */
  readonly held = new Map<string, Array<LeaseKey>>()
  /** The application's rows committed by fenced transactions, as `runId@fence`. */
  readonly appRows: Array<string> = []
  /** The resolved steps so far, for failure reports. */
  readonly log: Array<string> = []
  private nextId = 1
  private readonly keys = new Map<string, string>()
  private statements = 0
  private pastStamps = 0

  /** One statement: its `now()`. */
  private tick(): number {
    return NOW + ++this.statements
  }

  private isPast(stamp: number): boolean {
    return stamp <= NOW + this.statements
  }

  runList(): Array<ModelRun> {
    return [...this.runs.values()]
  }

  heldBy(owner: string): Array<LeaseKey> {
    return this.held.get(owner) ?? []
  }

  /** The worker-side bookkeeping of a finished lease: nobody renews it any more. */
  forget(lease: LeaseKey): void {
    for (const [owner, leases] of this.held) this.held.set(owner, leases.filter((l) => !sameLease(l, lease)))
  }

  // --- enqueue.ts -------------------------------------------------------------------------------

  enqueue(specs: ReadonlyArray<EnqueueSpec>): Array<{ readonly id: string; readonly created: boolean }> {
    const now = this.tick()
    return specs.map((spec) => {
      // Every request draws an id from the sequence up front, used or not.
      const id = String(this.nextId++)
      const existing = spec.key === null ? undefined : this.keys.get(spec.key)
      if (existing !== undefined) return { id: existing, created: false }
      if (spec.key !== null) this.keys.set(spec.key, id)
      this.runs.set(id, {
        id,
        queue: spec.queue,
        priority: spec.priority,
        maxAttempts: spec.maxAttempts,
        state: "pending",
        fence: 0,
        attempt: 0,
        owner: null,
        leaseExpiresAt: null,
        runAt: spec.delayed ? FUTURE + now : now,
        signalName: null,
        signalToken: null,
        suspendDeadline: null,
        signals: {},
        checkpoint: null,
        result: null,
        error: null,
        finished: false,
        events: []
      })
      return { id, created: true }
    })
  }

  // --- claim.ts ---------------------------------------------------------------------------------

  /**
   * Claims up to `limit` from `queues`; returns the runs handed out (running ones), sorted by id.
   * `dueOnly` leaves expired leases and passed suspension deadlines where they are.
   */
  claim(owner: string, limit: number, queues: ReadonlyArray<string>, dueOnly = false): Array<ClaimedShape> {
    if (limit <= 0) return []
    this.tick()
    const all = this.runList().filter((r) => queues.includes(r.queue))
    const expired = dueOnly ? [] : all
      .filter((r) => r.state === "running" && this.isPast(r.leaseExpiresAt!))
      .sort((a, b) => a.leaseExpiresAt! - b.leaseExpiresAt! || byId(a, b))
      .slice(0, limit)
    const timedOut = dueOnly ? [] : all
      .filter((r) => r.state === "suspended" && r.suspendDeadline !== null && this.isPast(r.suspendDeadline))
      .sort((a, b) => a.suspendDeadline! - b.suspendDeadline! || byId(a, b))
      .slice(0, limit)
    const due = all
      .filter((r) => r.state === "pending" && this.isPast(r.runAt))
      .sort((a, b) => b.priority - a.priority || a.runAt - b.runAt || byId(a, b))
      .slice(0, limit)
    const picked = [
      ...expired.map((run) => ({ run, origin: 0 })),
      ...timedOut.map((run) => ({ run, origin: 1 })),
      ...due.map((run) => ({ run, origin: 2 }))
    ].slice(0, limit)
    const claimed: Array<ClaimedShape> = []
    for (const { origin, run } of picked) {
      run.fence += 1
      if (origin === 0 && run.attempt >= run.maxAttempts) {
        // Expired leases count as attempts: the last one ends the run instead of handing it out.
        run.state = "failed"
        run.owner = null
        run.leaseExpiresAt = null
        run.finished = true
        run.error = { message: "lease expired on the last attempt", permanent: true }
        run.events.push(`failed@${run.fence}`)
      } else {
        run.state = "running"
        run.attempt += 1
        run.owner = owner
        run.leaseExpiresAt = FUTURE + this.statements
        run.finished = false
        if (origin === 1) run.signals = { ...run.signals, [run.signalName!]: { _tag: "TimedOut" } }
        run.events.push(`${origin === 0 ? "reclaimed" : origin === 1 ? "signal_timed_out" : "claimed"}@${run.fence}`)
        const lease = { runId: run.id, fence: run.fence }
        this.granted.push(lease)
        this.held.set(owner, [...this.heldBy(owner), lease])
        claimed.push({
          id: run.id,
          attempt: run.attempt,
          maxAttempts: run.maxAttempts,
          fence: run.fence,
          checkpoint: run.checkpoint,
          signals: run.signals
        })
      }
      run.signalName = null
      run.signalToken = null
      run.suspendDeadline = null
    }
    return claimed.sort(byId)
  }

  // --- renew.ts ---------------------------------------------------------------------------------

  /** Renews the leases matched on id + fence + running + owner; returns them sorted by id. */
  renew(owner: string, leases: ReadonlyArray<LeaseKey>): Array<LeaseKey> {
    if (leases.length === 0) return []
    this.tick()
    const renewed: Array<LeaseKey> = []
    for (const lease of leases) {
      const run = this.runs.get(lease.runId)
      if (run !== undefined && run.fence === lease.fence && run.state === "running" && run.owner === owner) {
        run.leaseExpiresAt = FUTURE + this.statements
        renewed.push(lease)
      }
    }
    return renewed.sort((a, b) => Number(a.runId) - Number(b.runId))
  }

  // --- guarded.ts -------------------------------------------------------------------------------

  /** The write's row: matched on id + fence + running, or nothing. */
  private holder(lease: LeaseKey): ModelRun | undefined {
    const run = this.runs.get(lease.runId)
    return run !== undefined && run.fence === lease.fence && run.state === "running" ? run : undefined
  }

  /** `diagnose` + `toError`: why a guarded write matched nothing; a real fence mismatch is recorded. */
  private diagnose(lease: LeaseKey, operation: string): StoreError {
    const run = this.runs.get(lease.runId)
    if (run === undefined) return { _tag: "RunNotFound", runId: lease.runId }
    if (run.fence !== lease.fence) {
      run.events.push(`stale_write_rejected@${lease.fence}`)
      return { _tag: "FenceRejected", runId: lease.runId, presentedFence: lease.fence, storedFence: run.fence, operation }
    }
    return { _tag: "LeaseNotHeld", runId: lease.runId, fence: lease.fence, state: run.state, operation }
  }

  private guarded<A>(lease: LeaseKey, operation: string, write: (run: ModelRun, now: number) => A): Outcome<A> {
    const now = this.tick()
    const run = this.holder(lease)
    return run === undefined ? { error: this.diagnose(lease, operation) } : { ok: write(run, now) }
  }

  private letGo(run: ModelRun): void {
    run.owner = null
    run.leaseExpiresAt = null
  }

  /** One statement for the batch; items must name distinct runs (the test ensures it). */
  completeBatch(items: ReadonlyArray<LeaseKey & { readonly result: unknown }>): Array<FinalizeShape> {
    if (items.length === 0) return []
    this.tick()
    // The update decides every item first; the stale ones are diagnosed afterwards.
    const matched = items.map((item) => this.holder(item))
    items.forEach((item, i) => {
      const run = matched[i]
      if (run === undefined) return
      run.state = "completed"
      run.result = item.result
      run.finished = true
      this.letGo(run)
      run.events.push(`completed@${run.fence}`)
    })
    return items.map((item, i): FinalizeShape => {
      if (matched[i] !== undefined) return { _tag: "Finalized", runId: item.runId, fence: item.fence }
      const run = this.runs.get(item.runId)
      // Already completed under this fence: the holder's own completion again, acknowledged.
      if (run !== undefined && run.fence === item.fence && run.state === "completed") {
        return { _tag: "Finalized", runId: item.runId, fence: item.fence }
      }
      const error = this.diagnose(item, "complete")
      return error._tag === "RunNotFound"
        ? { _tag: "Rejected", runId: item.runId, fence: item.fence, storedFence: item.fence, state: "missing" }
        : { _tag: "Rejected", runId: item.runId, fence: item.fence, storedFence: run!.fence, state: run!.state }
    })
  }

  /**
   * `completeInTransaction`: the application's row and the completion commit together, or neither.
   * The checks run in `diagnose`'s order (missing, fence, state); a fence mismatch is recorded.
   */
  completeInTransaction(lease: LeaseKey, result: unknown): Outcome<void> {
    return this.guarded(lease, "transaction", (run) => {
      this.appRows.push(`${run.id}@${run.fence}`)
      run.state = "completed"
      run.result = result
      run.finished = true
      this.letGo(run)
      run.events.push(`completed@${run.fence}`)
    })
  }

  fail(lease: LeaseKey, error: unknown, retryDelayMs: number | undefined): Outcome<FailShape> {
    return this.guarded(lease, "fail", (run, now): FailShape => {
      this.letGo(run)
      run.error = error
      if (retryDelayMs !== undefined && run.attempt < run.maxAttempts) {
        run.state = "pending"
        run.runAt = retryDelayMs === 0 ? now : FUTURE + now
        run.finished = false
        run.events.push(`retry_scheduled@${run.fence}`)
        return { _tag: "RetryScheduled", delayMs: retryDelayMs }
      }
      run.state = "failed"
      run.finished = true
      run.events.push(`failed@${run.fence}`)
      return { _tag: "Failed" }
    })
  }

  /** Gives the run back at once and refunds the attempt. */
  release(lease: LeaseKey): Outcome<void> {
    return this.guarded(lease, "release", (run, now) => {
      this.letGo(run)
      run.state = "pending"
      run.runAt = now
      run.attempt = Math.max(run.attempt - 1, 0)
      run.events.push(`released@${run.fence}`)
    })
  }

  checkpoint(lease: LeaseKey, value: unknown): Outcome<void> {
    return this.guarded(lease, "checkpoint", (run) => {
      run.checkpoint = value
    })
  }

  /** Suspends: lease released outright, attempt refunded, optional deadline. */
  suspend(lease: LeaseKey, signal: string, token: string, withTimeout: boolean): Outcome<void> {
    return this.guarded(lease, "suspend", (run, now) => {
      this.letGo(run)
      run.state = "suspended"
      run.attempt = Math.max(run.attempt - 1, 0)
      run.signalName = signal
      run.signalToken = token
      run.suspendDeadline = withTimeout ? FUTURE + now : null
      run.events.push(`suspended@${run.fence}`)
      this.tokens.push(token)
    })
  }

  // --- admin.ts ---------------------------------------------------------------------------------

  /** `explain`: the reason an admin transition matched nothing. */
  private explain(idOrToken: string, operation: string): StoreError {
    const run = this.runList().find((r) => (isRunId(idOrToken) && r.id === String(Number(idOrToken))) || r.signalToken === idOrToken)
    return run === undefined
      ? { _tag: "RunNotFound", runId: idOrToken }
      : { _tag: "InvalidTransition", runId: run.id, state: run.state, operation }
  }

  resume(idOrToken: string, payload: unknown): Outcome<string> {
    const now = this.tick()
    const run = this.runList().find((r) =>
      ((isRunId(idOrToken) && r.id === String(Number(idOrToken))) || r.signalToken === idOrToken) && r.state === "suspended"
    )
    if (run === undefined) return { error: this.explain(idOrToken, "resume") }
    run.state = "pending"
    run.runAt = now
    run.signals = { ...run.signals, [run.signalName!]: { _tag: "Signalled", payload: payload ?? null } }
    run.signalName = null
    run.signalToken = null
    run.suspendDeadline = null
    run.events.push(`resumed@${run.fence}`)
    return { ok: run.id }
  }

  /** Cancels a run that has not ended; the fence rises so a holder's writes are rejected. */
  cancel(runId: string): Outcome<void> {
    if (!isRunId(runId)) return { error: { _tag: "RunNotFound", runId } }
    this.tick()
    const run = this.runs.get(String(Number(runId)))
    if (run === undefined || !(run.state === "pending" || run.state === "running" || run.state === "suspended")) {
      return { error: this.explain(runId, "cancel") }
    }
    run.state = "cancelled"
    run.fence += 1
    this.letGo(run)
    run.signalName = null
    run.signalToken = null
    run.suspendDeadline = null
    run.finished = true
    run.events.push(`cancelled@${run.fence}`)
    return { ok: undefined }
  }

  /** A failed or cancelled run back to pending with fresh attempts; the fence rises. */
  retry(runId: string): Outcome<void> {
    if (!isRunId(runId)) return { error: { _tag: "RunNotFound", runId } }
    const now = this.tick()
    const run = this.runs.get(String(Number(runId)))
    if (run === undefined || !(run.state === "failed" || run.state === "cancelled")) {
      return { error: this.explain(runId, "retry") }
    }
    run.state = "pending"
    run.fence += 1
    run.attempt = 0
    run.runAt = now
    run.result = null
    run.error = null
    run.finished = false
    run.events.push(`retried@${run.fence}`)
    return { ok: undefined }
  }

  // --- time -------------------------------------------------------------------------------------

  /**
   * Moves every future stamp of the given runs (lease expiry, suspension deadline, delayed run_at)
   * into the past, each to a fresh, later past instant, and says which columns the test must move.
   */
  advance(runIds: ReadonlyArray<string>): Array<TimeShift> {
    const shifts: Array<TimeShift> = []
    const shift = (runId: string, column: TimeShift["column"]) => {
      const stamp = ++this.pastStamps
      shifts.push({ runId, column, stamp })
      return stamp
    }
    for (const id of runIds) {
      const run = this.runs.get(id)
      if (run === undefined) continue
      if (run.state === "running" && !this.isPast(run.leaseExpiresAt!)) run.leaseExpiresAt = shift(id, "lease_expires_at")
      if (run.state === "suspended" && run.suspendDeadline !== null && !this.isPast(run.suspendDeadline)) {
        run.suspendDeadline = shift(id, "suspend_deadline")
      }
      if (run.state === "pending" && !this.isPast(run.runAt)) run.runAt = shift(id, "run_at")
    }
    return shifts
  }

  // --- observation ------------------------------------------------------------------------------

  snapshot(): Array<RunSnapshot> {
    return this.runList().map((run) => ({
      id: run.id,
      state: run.state,
      fence: run.fence,
      attempt: run.attempt,
      maxAttempts: run.maxAttempts,
      owner: run.owner,
      lease: run.leaseExpiresAt === null ? null : this.isPast(run.leaseExpiresAt) ? "expired" : "live",
      signalName: run.signalName,
      signalToken: run.signalToken,
      deadline: run.suspendDeadline === null ? null : this.isPast(run.suspendDeadline) ? "past" : "future",
      due: run.state === "pending" ? this.isPast(run.runAt) : null,
      checkpoint: run.checkpoint,
      result: run.result,
      error: run.error,
      finished: run.finished,
      signals: run.signals,
      events: [...run.events]
    }))
  }
}
