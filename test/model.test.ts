/**
 * Model-based property test of the run state machine: random command sequences run against the
 * Postgres store and against the pure model in `support/RunModel.ts`, comparing every result
 * (claimed runs with fences and attempts, renewals, guarded writes and the tags and fences of their
 * rejections, admin transitions) and the full state and history of every run after each step.
 *
 * Lease time is moved through the database (columns set to fixed past instants), never slept.
 * Claim order: the model follows the claim statement's ORDER BY exactly (expired leases by
 * lease_expires_at, then timed-out suspensions by suspend_deadline, then pending by priority DESC,
 * run_at, id, across the queues the worker serves; runs live in two queues) and the test generates
 * distinct past instants, so which runs a claim takes is determined; RETURNING has no order, so each
 * claim is compared as a set (sorted by id). The model is never resynced from the store.
 *
 * One schema for the whole file; each sequence starts from TRUNCATE … RESTART IDENTITY, so run ids
 * are 1, 2, 3, … in both. `MODEL_RUNS` sets the number of sequences (500 by default); a failure
 * prints fast-check's seed and path, which `MODEL_SEED` and `MODEL_PATH` replay.
 */
import { describe, expect, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { type LeaseKey, RunStore } from "@leasehold/core"
import { PgRunStore } from "@leasehold/sql"
import { Context, Duration, Effect, Layer, Redacted, Result } from "effect"
import { SqlClient } from "effect/sql"
import fc from "fast-check"
import { databaseUrl, freshSchema } from "./support/db.js"
import { type EnqueueSpec, type Outcome, RunModel, type RunSnapshot, type StoreError } from "./support/RunModel.js"

interface Real {
  readonly store: RunStore["Service"]
  readonly sql: SqlClient.SqlClient
  readonly schema: string
}

const ttl = Duration.minutes(10)
const retryLater = 3_600_000
const suspendTimeout = Duration.hours(1)
const kinds = ["job"]
const unknownRunId = "999999"

// --- running the store and reading it back -------------------------------------------------------

const known = new Set(["FenceRejected", "LeaseNotHeld", "RunNotFound", "InvalidTransition"])

/** A typed store failure as plain data; anything else (SqlError, a defect) fails the test. */
const asStoreError = (error: any): StoreError => {
  if (!known.has(error?._tag)) throw new Error(`unexpected store failure: ${error?._tag}: ${error?.message}`, { cause: error })
  switch (error._tag) {
    case "FenceRejected":
      return { _tag: error._tag, runId: error.runId, presentedFence: error.presentedFence, storedFence: error.storedFence, operation: error.operation }
    case "LeaseNotHeld":
      return { _tag: error._tag, runId: error.runId, fence: error.fence, state: error.state, operation: error.operation }
    case "InvalidTransition":
      return { _tag: error._tag, runId: error.runId, state: error.state, operation: error.operation }
    default:
      return { _tag: "RunNotFound", runId: error.runId }
  }
}

const outcome = async <A, E>(effect: Effect.Effect<A, E>): Promise<Outcome<A>> => {
  const result = await Effect.runPromise(Effect.result(effect))
  return Result.isSuccess(result) ? { ok: result.success } : { error: asStoreError(result.failure) }
}

const must = <A, E>(effect: Effect.Effect<A, E>): Promise<A> => Effect.runPromise(effect)

interface Row {
  readonly id: string
  readonly state: RunSnapshot["state"]
  readonly fence: bigint
  readonly attempt: number
  readonly max_attempts: number
  readonly lease_owner: string | null
  readonly lease: "live" | "expired" | null
  readonly signal_name: string | null
  readonly signal_token: string | null
  readonly deadline: "future" | "past" | null
  readonly due: boolean | null
  readonly checkpoint: unknown
  readonly result: unknown
  readonly error: unknown
  readonly finished: boolean
  readonly signals: RunSnapshot["signals"] | null
  readonly events: string | null
}

/** Every run with its history, with times reduced to how they compare with now(). */
const readState = (real: Real): Promise<Array<RunSnapshot>> =>
  must(real.sql.unsafe<Row>(`
    SELECT r.id::text AS id, r.state, r.fence, r.attempt, r.max_attempts, r.lease_owner,
      CASE WHEN r.lease_expires_at IS NULL THEN NULL WHEN r.lease_expires_at <= now() THEN 'expired' ELSE 'live' END AS lease,
      r.signal_name, r.signal_token,
      CASE WHEN r.suspend_deadline IS NULL THEN NULL WHEN r.suspend_deadline <= now() THEN 'past' ELSE 'future' END AS deadline,
      CASE WHEN r.state = 'pending' THEN r.run_at <= now() END AS due,
      r.checkpoint, r.result, r.error, r.finished_at IS NOT NULL AS finished, r.signals,
      (SELECT string_agg(e.kind || '@' || e.fence, ' ' ORDER BY e.at, e.seq NULLS LAST) FROM "${real.schema}".run_history e
        WHERE e.run_id = r.id) AS events
    FROM "${real.schema}".runs r ORDER BY r.id`)).then((rows) =>
    rows.map((row): RunSnapshot => ({
      id: row.id,
      state: row.state,
      fence: Number(row.fence),
      attempt: row.attempt,
      maxAttempts: row.max_attempts,
      owner: row.lease_owner,
      lease: row.lease,
      signalName: row.signal_name,
      signalToken: row.signal_token,
      deadline: row.deadline,
      due: row.due,
      checkpoint: row.checkpoint,
      result: row.result,
      error: row.error,
      finished: row.finished,
      signals: row.signals ?? {},
      events: row.events === null ? [] : row.events.split(" ")
    }))
  )

// --- comparing ---------------------------------------------------------------------------------

/** Compares one result; the message carries the resolved sequence so far, for the report. */
const same = (m: RunModel, what: string, actual: unknown, expected: unknown): void => {
  m.log.push(`${what} => ${JSON.stringify(expected)}`)
  expect(actual, `${what}\n-- resolved sequence (model's expectations):\n${m.log.join("\n")}\n`).toEqual(expected)
}

/** The fences last read from the database, per model (one model per sequence). */
const lastFences = new WeakMap<RunModel, Map<string, number>>()

/** After every step: every run's state, fence, attempt, owner, lease, signal and history agree. */
const sameState = async (m: RunModel, real: Real): Promise<void> => {
  const actual = await readState(real)
  const context = `state after: ${m.log.at(-1)}\n-- resolved sequence (model's expectations):\n${m.log.join("\n")}\n`
  // I1 checked on the database directly, whatever the model says: no step lowers a fence.
  const seen = lastFences.get(m) ?? new Map<string, number>()
  for (const run of actual) {
    expect(run.fence, `fence of run ${run.id} went down; ${context}`).toBeGreaterThanOrEqual(seen.get(run.id) ?? 0)
    seen.set(run.id, run.fence)
  }
  lastFences.set(m, seen)
  expect(actual, context).toEqual(m.snapshot())
}

// --- choosing what a command acts on -------------------------------------------------------------

/**
 * Which lease a write presents. Commands are generated before the model exists, so they carry a
 * pool and an index, resolved against the model when they run:
 * - current: a lease the store holds now (a running run's id + fence);
 * - stale: a lease granted once and superseded since (reclaimed, cancelled, retried);
 * - old: any lease ever granted (current, stale, or finished by its own holder: LeaseNotHeld);
 * - ahead: a fence one above the stored one; unknown: a run that does not exist.
 */
type LeasePool = "current" | "stale" | "old" | "ahead" | "unknown"
interface LeaseRef {
  readonly pool: LeasePool
  readonly index: number
}

const leaseRef = fc.record({
  pool: fc.oneof(
    { arbitrary: fc.constant<LeasePool>("current"), weight: 6 },
    { arbitrary: fc.constant<LeasePool>("stale"), weight: 3 },
    { arbitrary: fc.constant<LeasePool>("old"), weight: 2 },
    { arbitrary: fc.constant<LeasePool>("ahead"), weight: 1 },
    { arbitrary: fc.constant<LeasePool>("unknown"), weight: 1 }
  ),
  index: fc.nat(64)
})

const pick = <A>(items: ReadonlyArray<A>, index: number): A | undefined =>
  items.length === 0 ? undefined : items[index % items.length]

const resolveLease = (m: RunModel, ref: LeaseRef): LeaseKey => {
  const runs = m.runList()
  const unknown = { runId: unknownRunId, fence: 1 }
  const old = () => pick(m.granted, ref.index) ?? unknown
  switch (ref.pool) {
    case "current":
      return pick(runs.filter((r) => r.state === "running").map((r) => ({ runId: r.id, fence: r.fence })), ref.index) ?? old()
    case "stale":
      return pick(m.granted.filter((l) => m.runs.get(l.runId)!.fence > l.fence), ref.index) ?? old()
    case "old":
      return old()
    case "ahead": {
      const run = pick(runs, ref.index)
      return run === undefined ? unknown : { runId: run.id, fence: run.fence + 1 }
    }
    case "unknown":
      return unknown
  }
}

/** Which run an admin command names: one in a state the command applies to, any run, or none. */
interface RunRef {
  readonly pool: "fit" | "any" | "unknown"
  readonly index: number
}

const runRef = fc.record({
  pool: fc.constantFrom<RunRef["pool"]>("fit", "fit", "fit", "any", "any", "unknown"),
  index: fc.nat(64)
})

const resolveRun = (m: RunModel, ref: RunRef, fits: (state: string) => boolean = () => true): string =>
  ref.pool === "unknown"
    ? unknownRunId
    : (ref.pool === "fit" ? pick(m.runList().filter((r) => fits(r.state)), ref.index) : undefined)?.id ??
      pick(m.runList(), ref.index)?.id ?? unknownRunId

/** Skip commands that could only name an unknown run before anything exists (no wasted steps). */
const canName = (m: Readonly<RunModel>, ref: LeaseRef) => ref.pool === "unknown" || m.granted.length > 0

const show = (lease: LeaseKey) => `${lease.runId}@${lease.fence}`
const owner = (workers: number, worker: number) => `w${worker % workers}`

// --- commands ----------------------------------------------------------------------------------

type Cmd = fc.AsyncCommand<RunModel, Real>

/** Shared shape: resolve against the model, run both, compare the result, then the whole state. */
abstract class Step implements Cmd {
  check(m: Readonly<RunModel>): boolean {
    return m.runs.size > 0
  }
  abstract toString(): string
  protected abstract step(m: RunModel, real: Real): Promise<void>
  async run(m: RunModel, real: Real): Promise<void> {
    await this.step(m, real)
    await sameState(m, real)
  }
}

class Enqueue extends Step {
  constructor(readonly specs: ReadonlyArray<EnqueueSpec>) {
    super()
  }
  override check() {
    return true
  }
  toString() {
    return `enqueue(${JSON.stringify(this.specs)})`
  }
  async step(m: RunModel, real: Real) {
    const expected = m.enqueue(this.specs)
    const actual = await must(real.store.enqueue(this.specs.map((spec, i) => ({
      kind: "job",
      payload: { i },
      queue: spec.queue,
      priority: spec.priority,
      delayMs: spec.delayed ? retryLater : 0,
      maxAttempts: spec.maxAttempts,
      idempotencyKey: spec.key ?? undefined
    }))))
    same(m, this.toString(), actual, expected)
  }
}

class Claim extends Step {
  constructor(
    readonly workers: number,
    readonly worker: number,
    readonly limit: number,
    readonly queues: ReadonlyArray<string>,
    readonly dueOnly: boolean
  ) {
    super()
  }
  toString() {
    return `claim(${owner(this.workers, this.worker)}, limit ${this.limit}, queues ${this.queues.join("+")}${this.dueOnly ? ", due only" : ""})`
  }
  async step(m: RunModel, real: Real) {
    const who = owner(this.workers, this.worker)
    const queues = this.queues
    const expected = m.claim(who, this.limit, queues, this.dueOnly)
    const claimed = await must(real.store.claim({ owner: who, queues, kinds, limit: this.limit, ttl, dueOnly: this.dueOnly }))
    // RETURNING has no order: compared as a set (sorted by id); which runs are in it is exact.
    const actual = claimed
      .map((r) => ({ id: r.id, attempt: r.attempt, maxAttempts: r.maxAttempts, fence: r.fence, checkpoint: r.checkpoint, signals: r.signals }))
      .sort((a, b) => Number(a.id) - Number(b.id))
    same(m, this.toString(), actual, expected)
  }
}

class Heartbeat extends Step {
  constructor(readonly workers: number, readonly worker: number, readonly intruder: LeaseRef | null) {
    super()
  }
  override check(m: Readonly<RunModel>) {
    return m.heldBy(owner(this.workers, this.worker)).length > 0 || (this.intruder !== null && canName(m, this.intruder))
  }
  toString() {
    return `heartbeat(${owner(this.workers, this.worker)}${this.intruder === null ? "" : ` + ${JSON.stringify(this.intruder)}`})`
  }
  async step(m: RunModel, real: Real) {
    const who = owner(this.workers, this.worker)
    const leases = [...m.heldBy(who)]
    // Sometimes a lease the worker does not hold (another owner's, a stale one): never renewed for it.
    const extra = this.intruder === null ? undefined : resolveLease(m, this.intruder)
    if (extra !== undefined && !leases.some((l) => l.runId === extra.runId)) leases.push(extra)
    const expected = m.renew(who, leases)
    const renewed = await must(real.store.renew(who, leases, ttl))
    same(m, `renew(${who}, [${leases.map(show).join(", ")}])`, [...renewed].sort((a, b) => Number(a.runId) - Number(b.runId)), expected)
    // What a heartbeat does with the answer: a lease that did not come back is lost.
    m.held.set(who, expected)
  }
}

class Advance extends Step {
  constructor(readonly target: number | null) {
    super()
  }
  toString() {
    return `advance(${this.target === null ? "all" : `run #${this.target}`})`
  }
  async step(m: RunModel, real: Real) {
    const ids = this.target === null ? m.runList().map((r) => r.id) : [pick(m.runList(), this.target)!.id]
    const shifts = m.advance(ids)
    // Through the database: the columns move to fixed past instants, in the model's order.
    for (const shift of shifts) {
      await must(real.sql.unsafe(
        `UPDATE "${real.schema}".runs SET ${shift.column} = timestamptz '2000-01-01 00:00:00+00' + ${shift.stamp} * interval '1 second'
         WHERE id = ${Number(shift.runId)}`
      ))
    }
    m.log.push(`advance ${shifts.map((s) => `${s.runId}.${s.column}=past${s.stamp}`).join(", ") || "(nothing)"}`)
  }
}

class Complete extends Step {
  constructor(readonly refs: ReadonlyArray<LeaseRef>) {
    super()
  }
  override check(m: Readonly<RunModel>) {
    return this.refs.some((ref) => canName(m, ref))
  }
  toString() {
    return `completeBatch(${JSON.stringify(this.refs)})`
  }
  async step(m: RunModel, real: Real) {
    // One item per run: a batch never carries the same run twice.
    const items: Array<LeaseKey & { result: unknown }> = []
    for (const ref of this.refs) {
      const lease = resolveLease(m, ref)
      if (!items.some((i) => i.runId === lease.runId)) items.push({ ...lease, result: { by: show(lease) } })
    }
    const expected = m.completeBatch(items)
    const actual = await must(real.store.completeBatch(items))
    same(m, `completeBatch([${items.map(show).join(", ")}])`, actual, expected)
    expected.forEach((o) => o._tag === "Finalized" && m.forget(o))
  }
}

/** A fenced transaction: an application row plus the completion, all or nothing (I7). */
class Transaction extends Step {
  constructor(readonly ref: LeaseRef) {
    super()
  }
  override check(m: Readonly<RunModel>) {
    return canName(m, this.ref)
  }
  toString() {
    return `completeInTransaction(${JSON.stringify(this.ref)})`
  }
  async step(m: RunModel, real: Real) {
    const lease = resolveLease(m, this.ref)
    const expected = m.completeInTransaction(lease, { tx: show(lease) })
    const write = real.sql.unsafe(
      `INSERT INTO "${real.schema}".app_rows (run_id, fence) VALUES (${Number(lease.runId)}, ${lease.fence})`
    )
    const actual = await outcome(real.store.completeInTransaction(lease, Effect.as(write, { tx: show(lease) }), (v) => v))
    same(m, `completeInTransaction(${show(lease)})`, "ok" in actual ? { ok: undefined } : actual, expected)
    if ("ok" in expected) m.forget(lease)
    const rows = await must(real.sql.unsafe<{ row: string }>(
      `SELECT run_id || '@' || fence AS row FROM "${real.schema}".app_rows ORDER BY id`
    ))
    same(m, "application rows", rows.map((r) => r.row), m.appRows)
  }
}

class Fail extends Step {
  constructor(readonly ref: LeaseRef, readonly retryDelayMs: number | undefined) {
    super()
  }
  override check(m: Readonly<RunModel>) {
    return canName(m, this.ref)
  }
  toString() {
    return `fail(${JSON.stringify(this.ref)}, retry ${this.retryDelayMs ?? "none"})`
  }
  async step(m: RunModel, real: Real) {
    const lease = resolveLease(m, this.ref)
    const error = { message: `boom ${show(lease)}` }
    const expected = m.fail(lease, error, this.retryDelayMs)
    const actual = await outcome(real.store.fail({ ...lease, error, retryDelayMs: this.retryDelayMs }))
    same(m, `fail(${show(lease)}, retry ${this.retryDelayMs ?? "none"})`, actual, expected)
    if ("ok" in expected) m.forget(lease)
  }
}

class Release extends Step {
  constructor(readonly ref: LeaseRef) {
    super()
  }
  override check(m: Readonly<RunModel>) {
    return canName(m, this.ref)
  }
  toString() {
    return `release(${JSON.stringify(this.ref)})`
  }
  async step(m: RunModel, real: Real) {
    const lease = resolveLease(m, this.ref)
    const expected = m.release(lease)
    const actual = await outcome(real.store.release(lease))
    same(m, `release(${show(lease)})`, actual, expected)
    if ("ok" in expected) m.forget(lease)
  }
}

class Checkpoint extends Step {
  constructor(readonly ref: LeaseRef) {
    super()
  }
  override check(m: Readonly<RunModel>) {
    return canName(m, this.ref)
  }
  toString() {
    return `checkpoint(${JSON.stringify(this.ref)})`
  }
  async step(m: RunModel, real: Real) {
    const lease = resolveLease(m, this.ref)
    const value = { at: show(lease), step: m.log.length }
    const expected = m.checkpoint(lease, value)
    const actual = await outcome(real.store.checkpoint(lease, value))
    same(m, `checkpoint(${show(lease)})`, actual, expected)
  }
}

class Suspend extends Step {
  constructor(readonly ref: LeaseRef, readonly signal: string, readonly withTimeout: boolean) {
    super()
  }
  override check(m: Readonly<RunModel>) {
    return canName(m, this.ref)
  }
  toString() {
    return `suspend(${JSON.stringify(this.ref)}, ${this.signal}, ${this.withTimeout ? "timeout" : "no timeout"})`
  }
  async step(m: RunModel, real: Real) {
    const lease = resolveLease(m, this.ref)
    // Unique per claim, so two suspended runs never share a token (the column is UNIQUE).
    const token = `tok-${lease.runId}-${lease.fence}`
    const expected = m.suspend(lease, this.signal, token, this.withTimeout)
    const actual = await outcome(real.store.suspend({
      ...lease,
      signal: this.signal,
      token,
      timeout: this.withTimeout ? suspendTimeout : undefined
    }))
    same(m, `suspend(${show(lease)}, ${this.signal}, ${token}, ${this.withTimeout ? "1 hour" : "no timeout"})`, actual, expected)
    if ("ok" in expected) m.forget(lease)
  }
}

/** id: any run by id; token: a suspended run's token; oldToken: any token ever issued. */
type ResumeBy = "id" | "token" | "oldToken" | "unknown"

class Resume extends Step {
  constructor(readonly by: ResumeBy, readonly index: number) {
    super()
  }
  override check(m: Readonly<RunModel>) {
    return this.by === "unknown" || (this.by === "id" ? m.runs.size > 0 : m.tokens.length > 0)
  }
  toString() {
    return `resume(by ${this.by} #${this.index})`
  }
  async step(m: RunModel, real: Real) {
    const suspended = m.runList().filter((r) => r.signalToken !== null).map((r) => r.signalToken!)
    const target = this.by === "id"
      ? resolveRun(m, { pool: "any", index: this.index })
      : this.by === "token"
      ? pick(suspended, this.index) ?? pick(m.tokens, this.index) ?? "tok-none"
      : this.by === "oldToken"
      ? pick(m.tokens, this.index) ?? "tok-none"
      : "tok-none"
    const payload = { approved: this.index % 2 === 0, n: this.index }
    const expected = m.resume(target, payload)
    const actual = await outcome(real.store.resume(target, payload))
    same(m, `resume(${target})`, actual, expected)
  }
}

class Cancel extends Step {
  constructor(readonly ref: RunRef) {
    super()
  }
  toString() {
    return `cancel(${JSON.stringify(this.ref)})`
  }
  async step(m: RunModel, real: Real) {
    const runId = resolveRun(m, this.ref, (state) => state === "pending" || state === "running" || state === "suspended")
    const expected = m.cancel(runId)
    const actual = await outcome(real.store.cancel(runId))
    same(m, `cancel(${runId})`, actual, expected)
  }
}

class Retry extends Step {
  constructor(readonly ref: RunRef) {
    super()
  }
  toString() {
    return `retry(${JSON.stringify(this.ref)})`
  }
  async step(m: RunModel, real: Real) {
    const runId = resolveRun(m, this.ref, (state) => state === "failed" || state === "cancelled")
    const expected = m.retry(runId)
    const actual = await outcome(real.store.retry(runId))
    same(m, `retry(${runId})`, actual, expected)
  }
}

// --- generation ---------------------------------------------------------------------------------

const commandsFor = (workers: number) =>
  fc.commands<RunModel, Real, false>([
    fc.oneof(
      {
        weight: 3,
        arbitrary: fc.array(
          fc.record({
            queue: fc.constantFrom("default", "default", "other"),
            priority: fc.integer({ min: 0, max: 2 }),
            delayed: fc.oneof({ arbitrary: fc.constant(false), weight: 4 }, { arbitrary: fc.constant(true), weight: 1 }),
            maxAttempts: fc.integer({ min: 1, max: 3 }),
            key: fc.option(fc.constantFrom("k1", "k2", "k3"), { freq: 2 })
          }),
          { minLength: 1, maxLength: 3 }
        ).map((specs): Cmd => new Enqueue(specs))
      },
      {
        weight: 5,
        // Workers serve one queue or both: claims must respect the queue filter and, across queues,
        // still take the overall first runs by priority DESC, run_at, id.
        arbitrary: fc.tuple(
          fc.nat(8),
          fc.integer({ min: 1, max: 3 }),
          fc.constantFrom(["default", "other"], ["default", "other"], ["default"], ["other"]),
          // One claim in four is due-only, as the worker sends between its sweeps.
          fc.constantFrom(false, false, false, true)
        ).map(([w, limit, queues, dueOnly]): Cmd => new Claim(workers, w, limit, queues, dueOnly))
      },
      {
        weight: 2,
        arbitrary: fc.tuple(fc.nat(8), fc.option(leaseRef, { freq: 3 })).map(([w, intruder]): Cmd => new Heartbeat(workers, w, intruder))
      },
      { weight: 4, arbitrary: fc.option(fc.nat(64), { freq: 3 }).map((target): Cmd => new Advance(target)) },
      { weight: 3, arbitrary: fc.array(leaseRef, { minLength: 1, maxLength: 3 }).map((refs): Cmd => new Complete(refs)) },
      {
        weight: 2,
        arbitrary: fc.tuple(leaseRef, fc.constantFrom<number | undefined>(undefined, 0, retryLater)).map(([ref, delay]): Cmd =>
          new Fail(ref, delay)
        )
      },
      { weight: 1, arbitrary: leaseRef.map((ref): Cmd => new Release(ref)) },
      { weight: 1, arbitrary: leaseRef.map((ref): Cmd => new Transaction(ref)) },
      { weight: 1, arbitrary: leaseRef.map((ref): Cmd => new Checkpoint(ref)) },
      {
        weight: 2,
        arbitrary: fc.tuple(leaseRef, fc.constantFrom("approval", "webhook"), fc.boolean()).map(([ref, signal, timeout]): Cmd =>
          new Suspend(ref, signal, timeout)
        )
      },
      {
        weight: 2,
        arbitrary: fc.tuple(fc.constantFrom<ResumeBy>("id", "token", "token", "token", "oldToken", "unknown"), fc.nat(64)).map(([by, i]): Cmd =>
          new Resume(by, i)
        )
      },
      { weight: 1, arbitrary: runRef.map((ref): Cmd => new Cancel(ref)) },
      { weight: 1, arbitrary: runRef.map((ref): Cmd => new Retry(ref)) }
    )
  ], { maxCommands: 50, size: "max" })

// --- the property -------------------------------------------------------------------------------

/** One store on one schema for every sequence; commits need not wait for the disk here. */
const storeOnce = Effect.gen(function*() {
  const schema = freshSchema("model")
  const context = yield* Layer.build(
    PgRunStore.layer({ schema }).pipe(Layer.provideMerge(PgClient.layer({
      url: Redacted.make(databaseUrl()),
      maxConnections: 2,
      startupParameters: { synchronous_commit: "off" }
    })))
  )
  const sql = Context.get(context, SqlClient.SqlClient)
  // The application's own table, written inside fenced transactions.
  yield* sql.unsafe(`CREATE TABLE "${schema}".app_rows (id bigint GENERATED ALWAYS AS IDENTITY, run_id bigint, fence bigint)`)
  return { schema, store: Context.get(context, RunStore), sql } satisfies Real
})

const numRuns = Number(process.env.MODEL_RUNS ?? 500)
const replay: Pick<fc.Parameters<unknown>, "seed" | "path"> = process.env.MODEL_SEED === undefined
  ? {}
  : { seed: Number(process.env.MODEL_SEED), ...(process.env.MODEL_PATH === undefined ? {} : { path: process.env.MODEL_PATH }) }

describe("run state machine: Postgres store vs reference model", () => {
  it.live("random command sequences agree on every result and on every run's state after each step", () =>
    Effect.gen(function*() {
      const real = yield* storeOnce
      const fresh = async () => {
        await must(real.sql.unsafe(`TRUNCATE "${real.schema}".runs, "${real.schema}".run_events, "${real.schema}".app_rows RESTART IDENTITY`))
        return { model: new RunModel(), real }
      }
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(
            fc.integer({ min: 2, max: 3 }).chain((workers) => commandsFor(workers)),
            (commands) => fc.asyncModelRun(fresh, commands)
          ),
          { numRuns, ...replay }
        )
      )
    }), 300_000)
})
