/**
 * A small isolation tester, the way PostgreSQL's own `isolationtester` works (it ships in no Debian
 * package here): sessions, each on a connection of its own, and every interleaving of their
 * statements. A session runs a real store operation; a statement transformer stops it before each
 * statement it sends (and before each COMMIT), and the scheduler lets one session at a time take its next step. A
 * session whose statement waits for a lock (seen in `pg_locks`, `granted = false`) is blocked: the
 * others go on, and it continues on its own once the lock is granted, as the isolation tester's
 * blocked steps do.
 *
 * Schedules are enumerated depth first: each run records, at every step, which sessions could
 * have gone next, and each alternative not taken is run later from a replay of the same prefix.
 * So every order of the sessions' statements that PostgreSQL's locks allow is run once.
 */
import { PgClient } from "@effect/sql-pg"
import { Cause, Deferred, Effect, Exit, Fiber, Redacted, Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { type SqlClient, Statement } from "effect/sql"

/** One session's work: a store operation run on the session's own connection. */
export interface Operation<Ctx> {
  readonly name: string
  /** Whether its start is not a step of its own (nothing before its first statement reads shared state). */
  readonly startsAtOnce?: boolean
  readonly run: (sql: SqlClient.SqlClient, ctx: Ctx) => Effect.Effect<unknown, unknown>
}

/** How one schedule went: the session chosen at each step and each session's exit. */
export interface Outcome {
  readonly taken: ReadonlyArray<number>
  readonly exits: ReadonlyArray<Exit.Exit<unknown, unknown>>
  /** Steps at which a session's statement waited for another's lock. */
  readonly blocked: number
}

type Status =
  | { readonly _tag: "Starting" }
  | { readonly _tag: "AtGate"; readonly go: Deferred.Deferred<void> }
  | { readonly _tag: "Running" }
  | { readonly _tag: "Done"; readonly exit: Exit.Exit<unknown, unknown> }

class Session {
  status: Status = { _tag: "Starting" }
  constructor(readonly sql: SqlClient.SqlClient, readonly pid: number) {}
}

/** A client of one connection, its backend's pid known (its locks are looked up by it). */
export const sessionClient = (url: string, name: string, settings: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const sql = yield* PgClient.make({
      url: Redacted.make(url),
      startupParameters: settings,
      maxConnections: 1,
      minConnections: 1,
      applicationName: name,
      // One backend for the whole test: its pid names it in pg_locks.
      idleTimeout: "1 hour",
      connectionTTL: "1 hour"
    }).pipe(Effect.provide(Reactivity.layer))
    const [row] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
    return new Session(sql, row!.pid)
  })

/** Stops the session until the scheduler lets it go. */
const pause = (session: Session) =>
  Effect.gen(function*() {
    const go = yield* Deferred.make<void>()
    session.status = { _tag: "AtGate", go }
    yield* Deferred.await(go)
    session.status = { _tag: "Running" }
  })

/** Stops each statement of the session before it is sent, until the scheduler lets it go. */
const gate = (session: Session): Statement.Transformer => (self) => Effect.as(pause(session), self)

/**
 * The session's client, its transactions stopped once more before they commit: the COMMIT is a
 * step of its own, as in the isolation tester (the driver sends it without a statement to gate).
 */
const committingAsAStep = (session: Session): SqlClient.SqlClient =>
  new Proxy(session.sql, {
    get(target, property, receiver) {
      if (property !== "withTransaction") return Reflect.get(target, property, receiver)
      return <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        target.withTransaction(Effect.tap(effect, () => pause(session)))
    }
  })

/** The sessions' backends waiting for a lock now. */
const waiting = (monitor: SqlClient.SqlClient, sessions: ReadonlyArray<Session>) =>
  Effect.map(
    monitor<{ pid: number }>`SELECT DISTINCT pid FROM pg_locks WHERE NOT granted AND pid = ANY(${
      sessions.map((s) => s.pid)
    }::int[])`,
    (rows) => new Set(rows.map((r) => r.pid))
  )

/**
 * Waits until no session is on its way: each is stopped at its gate, done, or waiting for a lock
 * (twice in a row, a few milliseconds apart: a lock granted meanwhile shows as progress).
 * Answers the sessions waiting for a lock.
 */
const settle = (monitor: SqlClient.SqlClient, sessions: ReadonlyArray<Session>) =>
  Effect.gen(function*() {
    let stableFor = 0
    for (let i = 0; i < 5_000; i++) {
      const moving = sessions.filter((s) => s.status._tag === "Running" || s.status._tag === "Starting")
      if (moving.length === 0) return 0
      const blocked = yield* waiting(monitor, moving)
      if (moving.every((s) => blocked.has(s.pid))) {
        if (++stableFor >= 2) return blocked.size
      } else stableFor = 0
      yield* Effect.sleep("1 millis")
    }
    return yield* Effect.die(new Error("a session neither stopped nor waited for a lock within 5,000 looks"))
  })

/**
 * Runs the operations as concurrent sessions in the order `prefix` gives (the index of the session
 * that sends its next statement, at each step), then in session order for the steps after it.
 * Answers the choices taken and, at each step, the sessions that could have gone.
 */
export const runSchedule = <Ctx>(
  monitor: SqlClient.SqlClient,
  sessions: ReadonlyArray<Session>,
  operations: ReadonlyArray<Operation<Ctx>>,
  ctx: Ctx,
  prefix: ReadonlyArray<number>
) =>
  Effect.scoped(Effect.gen(function*() {
    const scope = yield* Scope.Scope
    const used = sessions.slice(0, operations.length)
    used.forEach((s) => s.status = { _tag: "Starting" })
    const fibers = yield* Effect.forEach(operations, (op, i) =>
      Effect.forkIn(
        // Its start is a step too: what the operation does before its first statement (read the
        // worker's claim references, say) happens in the schedule's order.
        Effect.andThen(
          op.startsAtOnce === true ? Effect.void : pause(used[i]!),
          Effect.suspend(() => op.run(committingAsAStep(used[i]!), ctx))
        ).pipe(
          Effect.provideService(Statement.CurrentTransformer, gate(used[i]!)),
          Effect.exit,
          Effect.tap((exit) => Effect.sync(() => used[i]!.status = { _tag: "Done", exit }))
        ),
        scope
      ))
    const taken: Array<number> = []
    const choices: Array<ReadonlyArray<number>> = []
    let blocked = yield* settle(monitor, used)
    let steps = 0
    let diverged = false
    for (;;) {
      const enabled = used.flatMap((s, i) => s.status._tag === "AtGate" ? [i] : [])
      if (enabled.length === 0) {
        if (used.every((s) => s.status._tag === "Done")) break
        // Only blocked sessions left: PostgreSQL's deadlock detector ends one of them.
        blocked += yield* settle(monitor, used)
        if (++steps > 1_000) return yield* Effect.die(new Error("sessions blocked for good"))
        yield* Effect.sleep("20 millis")
        continue
      }
      const wanted = prefix[taken.length]
      // A replayed step whose session cannot go (the replay went another way): told, not hidden.
      if (wanted !== undefined && !enabled.includes(wanted)) diverged = true
      const pick = wanted !== undefined && enabled.includes(wanted) ? wanted : enabled[0]!
      choices.push(enabled)
      taken.push(pick)
      const status = used[pick]!.status
      if (status._tag === "AtGate") yield* Deferred.succeed(status.go, undefined)
      blocked += yield* settle(monitor, used).pipe(
        Effect.timeoutOrElse({
          duration: "30 seconds",
          orElse: () =>
            Effect.die(new Error(`no session settled within 30 s: ${used.map((s) => s.status._tag).join(", ")}`))
        })
      )
    }
    // Each fiber answers its operation's exit (Effect.exit above): that exit, not the fiber's own.
    const exits = yield* Effect.forEach(fibers, (f) => Fiber.join(f))
    return { outcome: { taken, exits, blocked } satisfies Outcome, choices, diverged }
  }))

/**
 * Every schedule of the operations, depth first: `setup` makes a fresh state for each and answers
 * what the operations need; `check` asserts the invariants after each. Answers the schedules run.
 */
export const everySchedule = <Ctx>(options: {
  readonly monitor: SqlClient.SqlClient
  readonly sessions: ReadonlyArray<Session>
  readonly operations: ReadonlyArray<Operation<Ctx>>
  readonly setup: Effect.Effect<Ctx, unknown>
  readonly check: (ctx: Ctx, outcome: Outcome) => Effect.Effect<void, unknown>
  /** A bound on the schedules run (the exploration stops there). */
  readonly limit?: number
}) =>
  Effect.gen(function*() {
    const pending: Array<ReadonlyArray<number>> = [[]]
    let runs = 0
    let blockedRuns = 0
    let divergedRuns = 0
    while (pending.length > 0 && runs < (options.limit ?? 10_000)) {
      const prefix = pending.pop()!
      // A replay that went another way (a lock granted while the scheduler looked, on a loaded
      // machine) is run again, up to five times; every run's invariants are checked all the same.
      let attempt = 0
      let ctx = yield* options.setup
      let run = yield* runSchedule(options.monitor, options.sessions, options.operations, ctx, prefix)
      while (run.diverged && ++attempt < 5) {
        yield* options.check(ctx, run.outcome).pipe(
          Effect.catchCause((cause) =>
            Effect.fail(
              new ScheduleFailed({
                schedule: describe(options.operations, run.outcome.taken),
                error: Cause.squash(cause)
              })
            )
          )
        )
        ctx = yield* options.setup
        run = yield* runSchedule(options.monitor, options.sessions, options.operations, ctx, prefix)
      }
      const { choices, diverged, outcome } = run
      runs++
      if (diverged) divergedRuns++
      if (outcome.blocked > 0) blockedRuns++
      // An assertion throws (a defect): it is told with the schedule that broke it.
      yield* options.check(ctx, outcome).pipe(
        Effect.catchCause((cause) =>
          Effect.fail(
            new ScheduleFailed({ schedule: describe(options.operations, outcome.taken), error: Cause.squash(cause) })
          )
        )
      )
      // The alternatives at each step past the replayed prefix, each a schedule of its own.
      for (let depth = choices.length - 1; depth >= prefix.length; depth--) {
        for (const alternative of choices[depth]!) {
          if (alternative !== outcome.taken[depth]) pending.push([...outcome.taken.slice(0, depth), alternative])
        }
      }
    }
    return { schedules: runs, withLockWaits: blockedRuns, diverged: divergedRuns, exhausted: pending.length === 0 }
  })

/** A schedule as the isolation tester prints a permutation: the session of each statement. */
export const describe = <Ctx>(operations: ReadonlyArray<Operation<Ctx>>, taken: ReadonlyArray<number>) =>
  taken.map((i) => operations[i]!.name).join(" ")

/** An invariant that did not hold after a schedule, with the schedule that broke it. */
export class ScheduleFailed extends Error {
  constructor(readonly detail: { readonly schedule: string; readonly error: unknown }) {
    super(
      `after the schedule [${detail.schedule}]: ${
        detail.error instanceof Error ? detail.error.message : String(detail.error)
      }`
    )
  }
}
