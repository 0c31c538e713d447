/**
 * The engine's behaviours as `effect/workflow` defines them, written against that API alone and
 * run on LeaseholdWorkflows over real PostgreSQL (issue 28 item 2, issue 30): racing activities,
 * durable clocks, two deferreds, nested workflows, SuspendOnFailure and resume, catchCause,
 * defects, compensation, interrupt, executing an id twice; and (issue 30) waking a run that is
 * still running, finalizers across replays, and what an engine shutdown does. Each test has an
 * engine of its own (a fresh schema) and a `Notes` list its workflows write to.
 */
import { assert, describe, it } from "@effect/vitest"
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Cause, Context, Effect, Exit, Fiber, Layer, Option, Result, Schema, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { Activity, DurableClock, DurableDeferred, Workflow } from "effect/workflow"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import { databaseUrl, freshSchema } from "./support/db.js"
import { eventually as eventuallyLive } from "./support/workers.js"
import { EngineSchema, leaseholdEngine } from "./support/workflowEngine.js"

/** What the workflows did, in order. */
class Notes extends Context.Service<Notes, Array<string>>()("test/Notes") {}
const note = (line: string): Effect.Effect<void, never, Notes> =>
  Effect.gen(function*() {
    const lines = yield* Notes
    lines.push(line)
  })
const notes: Effect.Effect<Array<string>, never, Notes> = Effect.gen(function*() {
  return [...(yield* Notes)]
})

/** The workflow layers over an engine of their own. */
const onEngine = <ROut, E>(workflows: Layer.Layer<ROut, E, any>) =>
  workflows.pipe(
    Layer.provideMerge(Layer.sync(Notes, () => [])),
    Layer.provideMerge(leaseholdEngine())
  )

const eventually = <A, R>(what: string, check: Effect.Effect<A | undefined | false, any, R>, timeout?: string) =>
  Effect.flatMap(
    Effect.context<R>(),
    (context) => eventuallyLive(what, Effect.provideContext(check, context), timeout as any)
  )

const runOf = (workflow: Workflow.Any, executionId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* EngineSchema
    const [row] = yield* sql<{ id: string; state: string; fence: string; suspend_deadline: Date | null }>`
      SELECT id::text AS id, state, fence::text AS fence, suspend_deadline FROM ${sql(schema)}.runs_now
      WHERE idempotency_key = ${LeaseholdWorkflows.executionKey(workflow._tag, executionId)}`
    return row === undefined ? undefined : { ...row, fence: Number(row.fence) }
  })

const untilState = (workflow: Workflow.Any, executionId: string, state: string, timeout?: string) =>
  eventually(
    `${workflow._tag} ${state}`,
    Effect.map(runOf(workflow, executionId), (run) => run?.state === state && run),
    timeout
  )

/** The activities the journal recorded for an execution, with the fence of each. */
const recorded = (workflow: Workflow.Any, executionId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* EngineSchema
    const rows = yield* sql<{ activity: string; fence: string; exit: any }>`
      SELECT activity, fence::text AS fence, exit FROM ${sql(schema)}.workflow_activities
      WHERE execution = ${LeaseholdWorkflows.executionKey(workflow._tag, executionId)} ORDER BY recorded_at, activity`
    return rows.map((row) => ({ activity: row.activity, fence: Number(row.fence), exit: row.exit }))
  })

const tokenOf = (deferred: DurableDeferred.DurableDeferred<any, any>, workflow: Workflow.Any, executionId: string) =>
  DurableDeferred.tokenFromExecutionId(deferred, { workflow, executionId })

// --- Racing activities: the fastest carrier wins, the others are stopped and never recorded.

const Quote = Workflow.make("Quote", {
  payload: { parcel: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ parcel }) => parcel
})

const carrier = (name: string, millis: number) =>
  Activity.make({
    name,
    success: Schema.String,
    execute: Effect.sleep(millis).pipe(
      Effect.andThen(note(`quoted:${name}`)),
      Effect.as(name),
      Effect.onInterrupt(() => note(`stopped:${name}`))
    )
  })

const QuoteLayer = Quote.toLayer(() =>
  Activity.raceAll("cheapest carrier", [carrier("ferry", 1500), carrier("truck", 700), carrier("drone", 50)])
)

// --- Durable clocks raced inside activities: the run suspends until the earlier deadline.

const Relay = Workflow.make("Relay", {
  payload: { id: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ id }) => id
})

const leg = (name: string, millis: number) =>
  Activity.make({
    name,
    success: Schema.String,
    execute: DurableClock.sleep({ name, duration: millis, inMemoryThreshold: 0 }).pipe(
      Effect.andThen(note(`arrived:${name}`)),
      Effect.as(name)
    )
  })

const RelayLayer = Relay.toLayer(() => Activity.raceAll("first leg", [leg("by road", 60_000), leg("by rail", 800)]))

// --- Two deferreds raced: whoever answers first decides; a later answer changes nothing.

const ManagerSays = DurableDeferred.make("manager says", { success: Schema.String })
const DirectorSays = DurableDeferred.make("director says", { success: Schema.String })

const Escalation = Workflow.make("Escalation", {
  payload: { ticket: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ ticket }) => ticket
})

const EscalationLayer = Escalation.toLayer(() =>
  DurableDeferred.raceAll({
    name: "first answer",
    success: Schema.String,
    error: Schema.Never,
    effects: [
      Effect.map(DurableDeferred.await(ManagerSays), (answer) => `manager: ${answer}`),
      Effect.map(DurableDeferred.await(DirectorSays), (answer) => `director: ${answer}`)
    ]
  })
)

// --- Nested workflows: a move waits for its boxes to be packed by a child workflow.

const Sealed = DurableDeferred.make("sealed", { success: Schema.String })
const Pack = Workflow.make("Pack", {
  payload: { box: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ box }) => box
})
const Move = Workflow.make("Move", {
  payload: { box: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ box }) => box
})

const PackLayer = Pack.toLayer(Effect.fnUntraced(function*({ box }) {
  const by = yield* DurableDeferred.await(Sealed)
  yield* note(`packed:${box}`)
  return `${box} sealed by ${by}`
}))
const MoveLayer = Move.toLayer(Effect.fnUntraced(function*({ box }) {
  const packed = yield* Pack.execute({ box })
  yield* note(`moved:${box}`)
  return `moved (${packed})`
}))

// --- SuspendOnFailure, then resume once the cause is fixed.

class Feed extends Context.Service<Feed, { online: boolean; attempts: number }>()("test/Feed") {}

const Import = Workflow.make("Import", {
  payload: { feed: Schema.String },
  success: Schema.Number,
  idempotencyKey: ({ feed }) => feed
})
  .annotate(Workflow.SuspendOnFailure, true)

const ImportLayer = Import.toLayer(Effect.fnUntraced(function*() {
  const feed = yield* Feed
  const instance = yield* WorkflowInstance
  yield* Effect.addFinalizer(() =>
    instance.suspended
      ? note(`import suspended: ${instance.failed ? Cause.pretty(instance.cause!) : "no failure"}`)
      : Effect.void
  )
  return yield* Activity.make({
    name: "fetch feed",
    success: Schema.Number,
    execute: Effect.suspend(() => {
      feed.attempts++
      return feed.online ? Effect.succeed(128) : Effect.die("feed offline")
    })
  })
})).pipe(Layer.provideMerge(Layer.sync(Feed, () => ({ online: false, attempts: 0 }))))

// --- catchCause around an activity that dies: the fallback runs, both results are recorded.

const Lookup = Workflow.make("Lookup", {
  payload: { key: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ key }) => key
})

const LookupLayer = Lookup.toLayer(() =>
  Activity.make({ name: "primary", success: Schema.String, execute: Effect.die("primary down") }).pipe(
    Effect.catchCause((cause) =>
      Activity.make({
        name: "fallback",
        success: Schema.String,
        execute: Effect.as(
          note(`fallback after ${Cause.hasDies(cause) ? "a defect" : "something else"}`),
          "from replica"
        )
      })
    )
  )
)

// --- Defects cross the journal: an Error with a value JSON cannot hold keeps its message.

const Parse = Workflow.make("Parse", { payload: { row: Schema.Number }, idempotencyKey: ({ row }) => String(row) })

const ParseLayer = Parse.toLayer(({ row }) =>
  Activity.make({
    name: "parse row",
    execute: Effect.suspend(() => {
      const error = new Error(`ledger row ${row} unreadable`)
      Object.defineProperty(error, "offset", { enumerable: true, value: 9007199254740993n })
      return Effect.die(error)
    })
  })
)

// --- Compensation: a failed payment undoes the bookings, last first; an interrupt does too.

class CardDeclined extends Schema.TaggedError<CardDeclined>()("CardDeclined", { card: Schema.String }) {}

const Confirmed = DurableDeferred.make("confirmed")
const Holiday = Workflow.make("Holiday", {
  payload: { trip: Schema.String, card: Schema.String },
  error: CardDeclined,
  idempotencyKey: ({ trip }) => trip
})

const booking = (what: string) =>
  Activity.make({
    name: `book ${what}`,
    success: Schema.String,
    execute: Effect.as(note(`booked ${what}`), `${what}-1`)
  }).pipe(
    Holiday.withCompensation((reference) => note(`cancelled ${reference}`))
  )

const HolidayLayer = Holiday.toLayer(Effect.fnUntraced(function*({ card }) {
  yield* booking("flight")
  yield* booking("hotel")
  if (card === "declined") {
    return yield* Activity.make({ name: "pay", error: CardDeclined, execute: Effect.fail(new CardDeclined({ card })) })
  }
  yield* DurableDeferred.await(Confirmed)
  yield* note("paid")
}))

// --- Executing an id twice: one run, one activity, one result.

const Invoice = Workflow.make("Invoice", {
  payload: { number: Schema.Number },
  success: Schema.String,
  idempotencyKey: ({ number }) => String(number)
})
class Receipt extends Workflow.make("Receipt", {
  payload: { number: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ number }) => String(number)
}) {}

const InvoiceLayer = Invoice.toLayer(({ number }) =>
  Activity.make({
    name: "issue",
    success: Schema.String,
    execute: Effect.as(note(`issued ${number}`), `INV-${number}`)
  })
)
const ReceiptLayer = Receipt.toLayer(({ number }) => Effect.succeed(number * 2))

// --- Issue 30: a wait that ends while its run is still running wakes the run where it stands.

const Verdict = DurableDeferred.make("verdict", { success: Schema.String })
const Aux = DurableDeferred.make("verdict, recorded", { success: Schema.String })
const SecondVerdict = DurableDeferred.make("second verdict", { success: Schema.String })
const SelfMade = DurableDeferred.make("self-made", { success: Schema.String })

const deliberate = (name: string) =>
  Activity.make({
    name,
    success: Schema.String,
    execute: Effect.sleep("20 seconds").pipe(Effect.andThen(note(`${name} finished`)), Effect.as(name))
  })

/** Each shape of a race in which a wait ends while another branch is still running. */
const Standoff = Workflow.make("Standoff", {
  payload: { shape: Schema.Literals(["deferred", "clock", "into", "prepared", "two waits", "self", "in activity"]) },
  success: Schema.String,
  idempotencyKey: ({ shape }) => shape
})

const StandoffLayer = Standoff.toLayer(Effect.fnUntraced(function*({ shape }) {
  yield* note(`replay:${shape}`)
  const race = (effects: readonly [Effect.Effect<string, never, any>, Effect.Effect<string, never, any>]) =>
    DurableDeferred.raceAll({ name: shape, success: Schema.String, error: Schema.Never, effects })
  switch (shape) {
    case "deferred":
      return yield* race([DurableDeferred.await(Verdict), deliberate("deliberate")])
    case "clock":
      return yield* race([
        DurableClock.sleep({ name: "deadline", duration: "1500 millis", inMemoryThreshold: 0 }).pipe(
          Effect.as("deadline")
        ),
        deliberate("deliberate")
      ])
    case "into":
      return yield* race([
        DurableDeferred.into(DurableDeferred.await(Verdict), Aux).pipe(Effect.map((verdict) => `${verdict}!`)),
        deliberate("deliberate")
      ])
    case "prepared":
      return yield* race([
        Effect.gen(function*() {
          const brief = yield* Activity.make({
            name: "prepare",
            success: Schema.String,
            execute: Effect.as(note("prepared"), "brief")
          })
          const verdict = yield* DurableDeferred.await(Verdict)
          return `${brief}:${verdict}`
        }),
        deliberate("deliberate")
      ])
    case "two waits":
      return yield* race([
        Effect.gen(function*() {
          const first = yield* DurableDeferred.await(Verdict)
          const second = yield* DurableDeferred.await(SecondVerdict)
          return `${first}+${second}`
        }),
        Effect.never
      ])
    case "self":
      // One branch completes the deferred the other waits on, then never ends.
      return yield* race([
        Effect.map(DurableDeferred.await(SelfMade), (made) => `waited for ${made}`),
        DurableDeferred.into(
          Activity.make({
            name: "make",
            success: Schema.String,
            execute: Effect.as(Effect.sleep("300 millis"), "a part")
          }),
          SelfMade
        ).pipe(Effect.andThen(Effect.never))
      ])
    case "in activity":
      // A clock awaited inside an activity is the activity's: it does not wake the race.
      return yield* Activity.raceAll("in activity", [
        Activity.make({
          name: "clocked",
          success: Schema.String,
          execute: DurableClock.sleep({ name: "inner", duration: "500 millis", inMemoryThreshold: 0 }).pipe(
            Effect.as("clocked")
          )
        }),
        Activity.make({
          name: "steady",
          success: Schema.String,
          execute: Effect.as(Effect.sleep("2500 millis"), "steady")
        })
      ])
  }
}))

// --- Issue 30: workflow finalizers registered by replays that suspended run when it completes.

const FirstStamp = DurableDeferred.make("first stamp")
const SecondStamp = DurableDeferred.make("second stamp")
const Passport = Workflow.make("Passport", {
  payload: { holder: Schema.String },
  idempotencyKey: ({ holder }) => holder
})

const PassportLayer = Passport.toLayer(Effect.fnUntraced(function*() {
  const replay = (yield* notes).filter((line) => line.startsWith("replay")).length + 1
  yield* note(`replay ${replay}`)
  yield* Workflow.addFinalizer((exit) => note(`closed ${replay} (${Exit.isSuccess(exit) ? "success" : "failure"})`))
  yield* Activity.make({ name: "apply", execute: note("applied") }).pipe(
    Passport.withCompensation(() => note("withdrawn"))
  )
  yield* DurableDeferred.await(FirstStamp)
  yield* DurableDeferred.await(SecondStamp)
}))

// --- Issue 30: an engine shut down mid-run releases the run to the next holder; no compensation runs.

const Voyage = Workflow.make("Voyage", {
  payload: { ship: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ ship }) => ship
})

const VoyageLayer = Voyage.toLayer(Effect.fnUntraced(function*() {
  yield* Activity.make({ name: "berth", success: Schema.String, execute: Effect.as(note("berthed"), "berth-9") }).pipe(
    Voyage.withCompensation((berth) => note(`released ${berth}`))
  )
  yield* Workflow.addFinalizer(() => note("voyage closed"))
  const fence = yield* LeaseholdWorkflows.currentFence
  yield* Activity.make({
    name: "sail",
    execute: Effect.andThen(note(`sailing under fence ${fence.fence}`), Effect.sleep("1500 millis"))
  })
  return "arrived"
}))

describe("the workflow engine against effect/workflow", () => {
  it.live("activities race: the first to finish wins, the losers are interrupted and not recorded, and a second execute runs nothing", () =>
    Effect.gen(function*() {
      const result = yield* Quote.execute({ parcel: "p-1" })
      assert.strictEqual(result, "drone")
      assert.sameMembers(yield* notes, ["quoted:drone", "stopped:truck", "stopped:ferry"])
      const executionId = yield* Quote.executionId({ parcel: "p-1" })
      assert.deepStrictEqual((yield* recorded(Quote, executionId)).map((r) => r.activity), ["drone"])
      assert.strictEqual(yield* Quote.execute({ parcel: "p-1" }), "drone")
      assert.strictEqual((yield* notes).length, 3)
    }).pipe(Effect.provide(onEngine(QuoteLayer))))

  it.live("durable clocks raced inside activities suspend the run until the earlier deadline; the later one never fires", () =>
    Effect.gen(function*() {
      const executionId = yield* Relay.execute({ id: "r-1" }, { discard: true })
      const suspended = yield* untilState(Relay, executionId, "suspended")
      // Released with the earlier clock's deadline, by the database's clock.
      assert.isNotNull(suspended.suspend_deadline)
      assert.deepStrictEqual(yield* notes, [])
      assert.strictEqual(yield* Relay.execute({ id: "r-1" }), "by rail")
      const run = (yield* runOf(Relay, executionId))!
      assert.deepInclude(run, { state: "completed", fence: 2 })
      assert.deepStrictEqual(yield* notes, ["arrived:by rail"])
      assert.deepStrictEqual((yield* recorded(Relay, executionId)).map((r) => [r.activity, r.fence]), [["by rail", 2]])
    }).pipe(Effect.provide(onEngine(RelayLayer))))

  it.live("two deferreds raced: the run suspends on both, the first answer resumes it and decides, a later answer changes nothing", () =>
    Effect.gen(function*() {
      const executionId = yield* Escalation.execute({ ticket: "t-1" }, { discard: true })
      yield* untilState(Escalation, executionId, "suspended")
      const polled = yield* Escalation.poll(executionId)
      assert.isTrue(Option.isSome(polled) && polled.value._tag === "Suspended")
      yield* DurableDeferred.succeed(DirectorSays, {
        token: tokenOf(DirectorSays, Escalation, executionId),
        value: "approved"
      })
      assert.strictEqual(yield* Escalation.execute({ ticket: "t-1" }), "director: approved")
      yield* DurableDeferred.succeed(ManagerSays, {
        token: tokenOf(ManagerSays, Escalation, executionId),
        value: "refused"
      })
      yield* Escalation.resume(executionId)
      yield* Effect.sleep("300 millis")
      assert.strictEqual(yield* Escalation.execute({ ticket: "t-1" }), "director: approved")
    }).pipe(Effect.provide(onEngine(EscalationLayer))))

  it.live("nested workflows: the parent suspends while its child waits; the child's completion resumes the parent with its result", () =>
    Effect.gen(function*() {
      const parentId = yield* Move.execute({ box: "books" }, { discard: true })
      const childId = yield* Pack.executionId({ box: "books" })
      yield* untilState(Pack, childId, "suspended")
      yield* untilState(Move, parentId, "suspended")
      assert.deepStrictEqual(yield* notes, [])
      yield* DurableDeferred.succeed(Sealed, { token: tokenOf(Sealed, Pack, childId), value: "ana" })
      assert.strictEqual(yield* Move.execute({ box: "books" }), "moved (books sealed by ana)")
      assert.deepStrictEqual(yield* notes, ["packed:books", "moved:books"])
      assert.strictEqual((yield* runOf(Pack, childId))!.state, "completed")
    }).pipe(Effect.provide(onEngine(Layer.mergeAll(MoveLayer, PackLayer)))))

  it.live("SuspendOnFailure suspends the run with the failure's cause; resume after the fix replays it to completion, the failed attempt unrecorded", () =>
    Effect.gen(function*() {
      const feed = yield* Feed
      const executionId = yield* Import.execute({ feed: "prices" }, { discard: true })
      yield* untilState(Import, executionId, "suspended")
      const [line] = yield* notes
      assert.include(line, "import suspended")
      assert.include(line, "feed offline")
      // A failure suspension waits for a resume, not a clock.
      assert.isNull((yield* runOf(Import, executionId))!.suspend_deadline)
      assert.deepStrictEqual(yield* recorded(Import, executionId), [])
      feed.online = true
      yield* Import.resume(executionId)
      assert.strictEqual(yield* Import.execute({ feed: "prices" }), 128)
      assert.strictEqual(feed.attempts, 2)
      assert.deepStrictEqual((yield* recorded(Import, executionId)).map((r) => r.activity), ["fetch feed"])
    }).pipe(Effect.provide(onEngine(ImportLayer))))

  it.live("catchCause: an activity's defect is recorded as its result and caught by the workflow, whose fallback activity runs once", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* Lookup.execute({ key: "k-1" }), "from replica")
      assert.deepStrictEqual(yield* notes, ["fallback after a defect"])
      const executionId = yield* Lookup.executionId({ key: "k-1" })
      const rows = yield* recorded(Lookup, executionId)
      assert.deepStrictEqual(rows.map((r) => r.activity), ["primary", "fallback"])
      assert.include(JSON.stringify(rows.find((r) => r.activity === "primary")!.exit), "primary down")
    }).pipe(Effect.provide(onEngine(LookupLayer))))

  it.live("a defect crosses the journal: the caller gets an Error with its message, though it held a value JSON cannot encode", () =>
    Effect.gen(function*() {
      const exit = yield* Parse.execute({ row: 7 }).pipe(Effect.exit)
      assert.isTrue(Exit.isFailure(exit))
      const defect = Cause.findDefect((exit as Exit.Failure<any, any>).cause)
      assert.isTrue(Result.isSuccess(defect))
      const error = (defect as Result.Success<unknown, unknown>).success
      assert.instanceOf(error, Error)
      assert.strictEqual((error as Error).message, "ledger row 7 unreadable")
      // And polling reads the same outcome back from the store.
      const polled = yield* Parse.poll(yield* Parse.executionId({ row: 7 }))
      assert.isTrue(Option.isSome(polled) && polled.value._tag === "Complete" && Exit.isFailure(polled.value.exit))
    }).pipe(Effect.provide(onEngine(ParseLayer))))

  it.live("compensation: a workflow that fails undoes its completed steps, last first, and fails with its typed error", () =>
    Effect.gen(function*() {
      const error = yield* Holiday.execute({ trip: "rome", card: "declined" }).pipe(Effect.flip)
      assert.instanceOf(error, CardDeclined)
      assert.deepStrictEqual(yield* notes, ["booked flight", "booked hotel", "cancelled hotel-1", "cancelled flight-1"])
    }).pipe(Effect.provide(onEngine(HolidayLayer))))

  it.live("interrupt: a suspended workflow is replayed under a higher fence, its compensations run, and it reads as interrupted", () =>
    Effect.gen(function*() {
      const executionId = yield* Holiday.execute({ trip: "oslo", card: "ok" }, { discard: true })
      yield* untilState(Holiday, executionId, "suspended")
      const waiting = Holiday.execute({ trip: "oslo", card: "ok" }).pipe(Effect.exit, Effect.forkChild)
      const caller = yield* waiting
      yield* Holiday.interrupt(executionId)
      const exit = yield* Fiber.join(caller)
      assert.isTrue(Exit.isFailure(exit) && Exit.hasInterrupts(exit))
      assert.deepStrictEqual(yield* notes, ["booked flight", "booked hotel", "cancelled hotel-1", "cancelled flight-1"])
      const run = (yield* runOf(Holiday, executionId))!
      assert.deepInclude(run, { state: "completed", fence: 2 })
      // The bookings replayed from the journal: booked once each, under fence 1.
      assert.deepStrictEqual((yield* recorded(Holiday, executionId)).map((r) => [r.activity, r.fence]), [[
        "book flight",
        1
      ], ["book hotel", 1]])
    }).pipe(Effect.provide(onEngine(HolidayLayer))))

  it.live("resume of a workflow whose deferred is not done replays it and it suspends again, nothing re-run", () =>
    Effect.gen(function*() {
      const executionId = yield* Holiday.execute({ trip: "lima", card: "ok" }, { discard: true })
      yield* untilState(Holiday, executionId, "suspended")
      yield* Holiday.resume(executionId)
      yield* eventually(
        "replayed under fence 2 and suspended again",
        Effect.map(runOf(Holiday, executionId), (run) => run?.state === "suspended" && run.fence === 2)
      )
      assert.deepStrictEqual(yield* notes, ["booked flight", "booked hotel"])
      yield* DurableDeferred.done(Confirmed, { token: tokenOf(Confirmed, Holiday, executionId), exit: Exit.void })
      yield* Holiday.execute({ trip: "lima", card: "ok" })
      assert.deepStrictEqual(yield* notes, ["booked flight", "booked hotel", "paid"])
    }).pipe(Effect.provide(onEngine(HolidayLayer))))

  it.live("executing an id twice, even at once, is one run and one activity; discard returns the id; a class workflow runs too", () =>
    Effect.gen(function*() {
      const [a, b] = yield* Effect.all([Invoice.execute({ number: 5 }), Invoice.execute({ number: 5 })], {
        concurrency: 2
      })
      assert.strictEqual(a, "INV-5")
      assert.strictEqual(b, "INV-5")
      assert.deepStrictEqual(yield* notes, ["issued 5"])
      const executionId = yield* Invoice.executionId({ number: 5 })
      assert.strictEqual(yield* Invoice.execute({ number: 5 }, { discard: true }), executionId)
      const sql = yield* SqlClient.SqlClient
      const schema = yield* EngineSchema
      const [count] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${
        sql(schema)
      }.runs WHERE kind = 'workflow/Invoice'`
      assert.strictEqual(count!.n, 1)
      const polled = yield* Invoice.poll(executionId)
      assert.isTrue(Option.isSome(polled) && polled.value._tag === "Complete" && Exit.isSuccess(polled.value.exit))
      assert.isTrue(Option.isNone(yield* Invoice.poll("never-started")))
      assert.strictEqual(Receipt._tag, "Receipt")
      assert.strictEqual(yield* Receipt.execute({ number: 21 }), 42)
    }).pipe(Effect.provide(onEngine(Layer.mergeAll(InvoiceLayer, ReceiptLayer)))))
  /** Starts `shape`, waits until its run has been running for 500 ms, and returns its id. */
  const running = (shape: typeof Standoff.payloadSchema.Type["shape"]) =>
    Effect.gen(function*() {
      const executionId = yield* Standoff.execute({ shape }, { discard: true })
      yield* untilState(Standoff, executionId, "running")
      yield* Effect.sleep("500 millis")
      return executionId
    })

  /** Every run of `Standoff` in these tests: claimed once and completed under that fence. */
  const heldThroughout = (executionId: string) =>
    Effect.gen(function*() {
      const run = (yield* runOf(Standoff, executionId))!
      assert.deepInclude(run, { state: "completed", fence: 1 })
    })

  it.live("a deferred completed while its run is running interrupts the replay and replays it under the same fence: the deferred wins the race", () =>
    Effect.gen(function*() {
      const executionId = yield* running("deferred")
      yield* DurableDeferred.succeed(Verdict, { token: tokenOf(Verdict, Standoff, executionId), value: "guilty" })
      const started = Date.now()
      assert.strictEqual(yield* Standoff.execute({ shape: "deferred" }), "guilty")
      // Well before the other branch could have finished (20 s).
      assert.isBelow(Date.now() - started, 10_000)
      yield* heldThroughout(executionId)
      assert.deepStrictEqual(yield* notes, ["replay:deferred", "replay:deferred"])
      assert.deepStrictEqual(yield* recorded(Standoff, executionId), [])
    }).pipe(Effect.provide(onEngine(StandoffLayer))))

  it.live("a durable clock's deadline reached while its run is running wakes it: the clock wins the race", () =>
    Effect.gen(function*() {
      const executionId = yield* Standoff.execute({ shape: "clock" }, { discard: true })
      assert.strictEqual(yield* Standoff.execute({ shape: "clock" }), "deadline")
      yield* heldThroughout(executionId)
      assert.deepStrictEqual(yield* notes, ["replay:clock", "replay:clock"])
    }).pipe(Effect.provide(onEngine(StandoffLayer))))

  it.live("a woken branch wrapped in DurableDeferred.into keeps its transformations, and the into-deferred records its outcome", () =>
    Effect.gen(function*() {
      const executionId = yield* running("into")
      yield* DurableDeferred.succeed(Verdict, { token: tokenOf(Verdict, Standoff, executionId), value: "upheld" })
      assert.strictEqual(yield* Standoff.execute({ shape: "into" }), "upheld!")
      yield* heldThroughout(executionId)
      const sql = yield* SqlClient.SqlClient
      const schema = yield* EngineSchema
      const rows = yield* sql<{ exit: unknown }>`SELECT exit FROM ${
        sql(schema)
      }.workflow_deferreds WHERE name = ${Aux.name}`
      assert.include(JSON.stringify(rows[0]!.exit), "upheld")
    }).pipe(Effect.provide(onEngine(StandoffLayer))))

  it.live("a branch that ran an activity before its wait is woken, and the activity is replayed from the journal, not run again", () =>
    Effect.gen(function*() {
      const executionId = yield* running("prepared")
      yield* DurableDeferred.succeed(Verdict, { token: tokenOf(Verdict, Standoff, executionId), value: "heard" })
      assert.strictEqual(yield* Standoff.execute({ shape: "prepared" }), "brief:heard")
      yield* heldThroughout(executionId)
      assert.deepStrictEqual(yield* notes, ["replay:prepared", "prepared", "replay:prepared"])
      assert.deepStrictEqual((yield* recorded(Standoff, executionId)).map((r) => [r.activity, r.fence]), [[
        "prepare",
        1
      ]])
    }).pipe(Effect.provide(onEngine(StandoffLayer))))

  it.live("a branch waiting on two deferreds in turn beside a branch that never ends is woken once per completion", () =>
    Effect.gen(function*() {
      const executionId = yield* running("two waits")
      yield* DurableDeferred.succeed(Verdict, { token: tokenOf(Verdict, Standoff, executionId), value: "one" })
      yield* eventually("woken by the first", Effect.map(notes, (lines) => lines.length === 2))
      yield* Effect.sleep("300 millis")
      assert.strictEqual((yield* runOf(Standoff, executionId))!.state, "running")
      yield* DurableDeferred.succeed(SecondVerdict, {
        token: tokenOf(SecondVerdict, Standoff, executionId),
        value: "two"
      })
      assert.strictEqual(yield* Standoff.execute({ shape: "two waits" }), "one+two")
      yield* heldThroughout(executionId)
      assert.deepStrictEqual(yield* notes, ["replay:two waits", "replay:two waits", "replay:two waits"])
    }).pipe(Effect.provide(onEngine(StandoffLayer))))

  it.live("a run that completes, through DurableDeferred.into, the deferred another of its branches waits on completes", () =>
    Effect.gen(function*() {
      const executionId = yield* Standoff.execute({ shape: "self" }, { discard: true })
      assert.strictEqual(yield* Standoff.execute({ shape: "self" }), "waited for a part")
      yield* heldThroughout(executionId)
      assert.deepStrictEqual((yield* recorded(Standoff, executionId)).map((r) => r.activity), ["make"])
    }).pipe(Effect.provide(onEngine(StandoffLayer))))

  it.live("a clock awaited inside an activity body does not wake the race: the workflow's own waits do", () =>
    Effect.gen(function*() {
      const executionId = yield* Standoff.execute({ shape: "in activity" }, { discard: true })
      assert.strictEqual(yield* Standoff.execute({ shape: "in activity" }), "steady")
      yield* heldThroughout(executionId)
      assert.deepStrictEqual(yield* notes, ["replay:in activity"])
    }).pipe(Effect.provide(onEngine(StandoffLayer))))
  it.live("workflow finalizers of replays that suspended run when the workflow completes, last first; compensations do not", () =>
    Effect.gen(function*() {
      const executionId = yield* Passport.execute({ holder: "kim" }, { discard: true })
      yield* untilState(Passport, executionId, "suspended")
      yield* DurableDeferred.done(FirstStamp, { token: tokenOf(FirstStamp, Passport, executionId), exit: Exit.void })
      yield* eventually(
        "suspended again on the second stamp",
        Effect.map(runOf(Passport, executionId), (run) => run?.state === "suspended" && run.fence === 2)
      )
      // Nothing closed while the execution goes on.
      assert.deepStrictEqual(yield* notes, ["replay 1", "applied", "replay 2"])
      yield* DurableDeferred.done(SecondStamp, { token: tokenOf(SecondStamp, Passport, executionId), exit: Exit.void })
      yield* Passport.execute({ holder: "kim" })
      assert.deepStrictEqual(yield* notes, [
        "replay 1",
        "applied",
        "replay 2",
        "replay 3",
        "closed 3 (success)",
        "closed 2 (success)",
        "closed 1 (success)"
      ])
    }).pipe(Effect.provide(onEngine(PassportLayer))))
  it.live("an engine shut down while it runs an execution releases the run: no compensation or workflow finalizer runs, and the next engine finishes it", () =>
    Effect.gen(function*() {
      const schema = freshSchema("wfstop")
      const lines: Array<string> = []
      const engineOn = () =>
        VoyageLayer.pipe(
          Layer.provideMerge(Layer.succeed(Notes, lines)),
          Layer.provideMerge(leaseholdEngine({ schema }))
        )
      const first = yield* Scope.make()
      const context = yield* Layer.buildWithScope(engineOn(), first)
      const executionId = yield* Voyage.execute({ ship: "argo" }, { discard: true }).pipe(
        Effect.provideContext(context)
      )
      yield* eventuallyLive("sailing", Effect.sync(() => lines.includes("sailing under fence 1")))
      yield* Scope.close(first, Exit.void)
      assert.deepStrictEqual(lines, ["berthed", "sailing under fence 1"])

      const result = yield* Voyage.execute({ ship: "argo" }).pipe(Effect.provide(engineOn()))
      assert.strictEqual(result, "arrived")
      // The berth was taken once, never released; the voyage sailed again under the next fence.
      assert.deepStrictEqual(lines, ["berthed", "sailing under fence 1", "sailing under fence 2", "voyage closed"])
      const sql = yield* SqlClient.SqlClient
      const [run] = yield* sql<{ state: string; fence: string }>`
        SELECT state, fence::text AS fence FROM ${sql(schema)}.runs_now WHERE idempotency_key = ${
        LeaseholdWorkflows.executionKey(Voyage._tag, executionId)
      }`
      assert.deepStrictEqual(run, { state: "completed", fence: "2" })
    }).pipe(Effect.provide(leaseholdEngine())))
  it.live("a client-only engine executes, signals and resumes without ever claiming a run; a serving engine runs it", () =>
    Effect.gen(function*() {
      const schema = freshSchema("wfclient")
      const lines: Array<string> = []
      const client = HolidayLayer.pipe(
        Layer.provideMerge(Layer.succeed(Notes, lines)),
        Layer.provideMerge(LeaseholdWorkflows.layerClient()),
        Layer.provideMerge(PgRunStore.layer({ schema })),
        Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 3 }))
      )
      const executionId = yield* Effect.gen(function*() {
        const executionId = yield* Holiday.execute({ trip: "kyiv", card: "ok" }, { discard: true })
        yield* DurableDeferred.done(Confirmed, { token: tokenOf(Confirmed, Holiday, executionId), exit: Exit.void })
        yield* Holiday.resume(executionId)
        yield* Effect.sleep("1500 millis")
        return executionId
      }).pipe(Effect.provide(client))
      const sql = yield* SqlClient.SqlClient
      const key = LeaseholdWorkflows.executionKey(Holiday._tag, executionId)
      const [run] = yield* sql<{ id: string; state: string; fence: string; lease_owner: string | null }>`
        SELECT id::text AS id, state, fence::text AS fence, lease_owner FROM ${
        sql(schema)
      }.runs_now WHERE idempotency_key = ${key}`
      assert.deepStrictEqual(run, { id: run!.id, state: "pending", fence: "0", lease_owner: null })
      const claims = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${
        sql(schema)
      }.run_history WHERE run_id = ${run!.id}::bigint AND kind = 'claimed'`
      assert.strictEqual(claims[0]!.n, 0)
      assert.deepStrictEqual(lines, [])

      yield* Holiday.execute({ trip: "kyiv", card: "ok" }).pipe(
        Effect.provide(
          HolidayLayer.pipe(
            Layer.provideMerge(Layer.succeed(Notes, lines)),
            Layer.provideMerge(leaseholdEngine({ schema }))
          )
        )
      )
      assert.deepStrictEqual(lines, ["booked flight", "booked hotel", "paid"])
    }).pipe(Effect.provide(Database.layerFromUrl(databaseUrl(), { maxConnections: 2 }))))
})
