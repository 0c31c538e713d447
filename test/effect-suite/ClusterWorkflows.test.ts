/**
 * The workflows of Effect's own suite for its cluster engine
 * (packages/effect/test/cluster/ClusterWorkflowEngine.test.ts in Effect-TS/effect at
 * 1144032ced, effect 4.0.0-rc.111, MIT licence, Copyright (c) 2023 Effectful Technologies Inc), run
 * on Leasehold's engine. The workflow definitions and their layers below the tests are copied
 * unchanged: the email workflow, the races (in-memory activities, durable clocks, two deferreds),
 * nested workflows, SuspendOnFailure, catchCause and defect serialization. `TestWorkflowLayer` is
 * ours: those workflows over `leaseholdEngine` where Effect's composes all of its workflows over
 * the cluster engine. The tests are rewritten: the originals step a TestClock and count the cluster's
 * stored messages; these wait on real time (the 10 s durable clock included) and read the runs.
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Cause, Context, DateTime, Duration, Effect, Exit, Fiber, Layer, Option, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Activity, DurableClock, DurableDeferred, Workflow } from "effect/workflow"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import { eventually as eventuallyLive } from "../support/workers.js"
import { EngineSchema, leaseholdEngine } from "./leaseholdEngine.js"

/** Polls `check` on the real clock until it holds, with the test's services. */
const eventually = <A, R>(what: string, check: Effect.Effect<A | undefined | false, any, R>, timeout?: Duration.Input) =>
  Effect.flatMap(Effect.context<R>(), (context) => eventuallyLive(what, Effect.provideContext(check, context), timeout))

/** The run of an execution, read from the store's schema. */
const runOf = (workflow: Workflow.Any, executionId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* EngineSchema
    const rows = yield* sql<{ state: string; fence: string }>`
      SELECT state, fence::text AS fence FROM ${sql(schema)}.runs
      WHERE idempotency_key = ${LeaseholdWorkflows.executionKey(workflow._tag, executionId)}`
    return rows[0] === undefined ? undefined : { state: rows[0].state, fence: Number(rows[0].fence) }
  })

describe("Effect's cluster-engine workflows on Leasehold", () => {
  it.live("executes, resumes, deduplicates, and polls a suspended workflow", () =>
    Effect.gen(function*() {
      const flags = yield* Flags
      const fiber = yield* EmailWorkflow.execute({
        id: "test-email-1",
        to: "bob@example.com"
      }).pipe(Effect.forkChild({ startImmediately: true }))
      const executionId = yield* EmailWorkflow.executionId({ id: "test-email-1", to: "bob@example.com" })

      // Five attempts to send, a 10 s durable clock inside an activity, then the deferred: the
      // workflow is suspended once the await has run its `ensuring`.
      yield* eventually("suspended on the deferred", Effect.sync(() => flags.get("ensuring") === true), "30 seconds")
      // normal finalizer should run even after suspension
      expect(flags.get("finalizer")).toBeTruthy()
      // but not compensation
      expect(flags.get("compensation")).toBeFalsy()
      expect(flags.get("catchCause")).toBeFalsy()

      const token = yield* DurableDeferred.token(EmailTrigger).pipe(
        Effect.provideService(WorkflowInstance, WorkflowInstance.initial(EmailWorkflow, executionId))
      )
      yield* DurableDeferred.done(EmailTrigger, {
        token,
        exit: Exit.succeed("done")
      })
      expect(yield* Fiber.join(fiber)).toBeUndefined()
      expect(flags.get("catchCause")).toBeFalsy()

      // deduplication: the same execution, no second run
      yield* EmailWorkflow.execute({ id: "test-email-1", to: "bob@example.com" })
      const sql = yield* SqlClient.SqlClient
      const schema = yield* EngineSchema
      const runs = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(schema)}.runs WHERE kind = 'workflow/EmailWorkflow'`
      expect(runs[0]!.n).toEqual(1)
      expect(yield* EmailWorkflow.poll(executionId)).toEqual(Option.some(new Workflow.Complete({ exit: Exit.void })))
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("interrupts a suspended workflow and runs compensation", () =>
    Effect.gen(function*() {
      const fiber = yield* EmailWorkflow.execute({
        id: "test-email-2",
        to: "bob@example.com"
      }).pipe(Effect.forkChild)
      const executionId = yield* EmailWorkflow.executionId({ id: "test-email-2", to: "bob@example.com" })
      yield* eventually("suspended on the durable clock", Effect.map(runOf(EmailWorkflow, executionId), (run) => run?.state === "suspended"))
      yield* EmailWorkflow.interrupt(executionId)

      const exit = yield* Fiber.await(fiber)
      assert(Exit.hasInterrupts(exit))
      const flags = yield* Flags
      assert.isTrue(flags.get("compensation"))
      const polled = yield* EmailWorkflow.poll(executionId)
      assert(Option.isSome(polled) && polled.value._tag === "Complete" && Exit.isFailure(polled.value.exit))
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("Workflow.withCompensation runs compensation when the workflow fails", () =>
    Effect.gen(function*() {
      const error = yield* EmailWorkflow.execute({
        id: "test-email-3",
        to: "compensation"
      }).pipe(Effect.flip)
      expect(error).toBeInstanceOf(SendEmailError)
      const flags = yield* Flags
      assert.isTrue(flags.get("compensation"))
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("Activity.raceAll returns the first activity and interrupts losers", () =>
    Effect.gen(function*() {
      const flags = yield* Flags
      const result = yield* RaceWorkflow.execute({ id: "race-1" })
      expect(result).toEqual("Activity3")
      expect(flags.get("interrupt1")).toBeTruthy()
      expect(flags.get("interrupt2")).toBeTruthy()
      expect(flags.get("interrupt3")).toBeFalsy()
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("Activity.raceAll replays the first durable activity (three durable clocks raced)", () =>
    Effect.gen(function*() {
      const flags = yield* Flags
      const fiber = yield* DurableRaceWorkflow.execute({ id: "race-2" }).pipe(Effect.forkChild)
      const token = yield* eventually("the race is won and the gate awaited", Effect.sync(() => flags.get("durable-race-token")), "30 seconds")
      assert(typeof token === "string")
      yield* DurableDeferred.done(DurableRaceGate, {
        token: DurableDeferred.Token.make(token),
        exit: Exit.void
      })
      const result = yield* Fiber.join(fiber)
      expect(result).toEqual("Activity3")
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("DurableDeferred.raceAll suspends when every branch is pending and resumes with the winner", () =>
    Effect.gen(function*() {
      const executionId = yield* TwoGateWorkflow.executionId({ id: "two-gates" })
      const fiber = yield* TwoGateWorkflow.execute({ id: "two-gates" }).pipe(Effect.forkChild({ startImmediately: true }))
      yield* eventually("the race suspends with both gates pending", Effect.map(TwoGateWorkflow.poll(executionId), (p) => Option.isSome(p) && p.value._tag === "Suspended"))
      const token = DurableDeferred.tokenFromExecutionId(TwoGateB, { workflow: TwoGateWorkflow, executionId })
      yield* DurableDeferred.succeed(TwoGateB, { token, value: "signal-b" })
      expect(yield* Fiber.join(fiber)).toEqual("signal-b")
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("nested workflows: the child's completion resumes its suspended parent", () =>
    Effect.gen(function*() {
      const flags = yield* Flags
      const fiber = yield* ParentWorkflow.execute({ id: "123" }).pipe(Effect.forkChild)
      const token = yield* eventually("the child awaits its deferred", Effect.sync(() => flags.get("child-token")))
      yield* eventually("the parent suspends", Effect.sync(() => flags.get("parent-suspended") === true))
      assert.isUndefined(flags.get("parent-end"))
      assert.isUndefined(flags.get("child-end"))
      assert(typeof token === "string")
      yield* DurableDeferred.done(ChildDeferred, {
        token: DurableDeferred.Token.make(token),
        exit: Exit.void
      })
      yield* Fiber.join(fiber)
      assert.isTrue(flags.get("parent-end"))
      assert.isTrue(flags.get("child-end"))
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("SuspendOnFailure", () =>
    Effect.gen(function*() {
      const flags = yield* Flags
      yield* SuspendOnFailureWorkflow.execute({ id: "" }).pipe(Effect.forkChild({ startImmediately: true }))
      yield* eventually("the failed workflow suspends", Effect.sync(() => flags.get("suspended") === true))
      assert.include(flags.get("cause"), "boom")
      const executionId = yield* SuspendOnFailureWorkflow.executionId({ id: "" })
      expect((yield* runOf(SuspendOnFailureWorkflow, executionId))?.state).toEqual("suspended")
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("catchCause activity", () =>
    Effect.gen(function*() {
      const flags = yield* Flags
      yield* CatchWorkflow.execute({ id: "" })
      assert.isTrue(flags.get("catch"))
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)

  it.live("can serialize workflow defects", () =>
    Effect.gen(function*() {
      const exit = yield* ErrorDefectWorkflow.execute({
        id: "raw-error-defect"
      }).pipe(Effect.exit)

      assert(Exit.isFailure(exit))
      const defect = Cause.findDefect(exit.cause)
      assert(Result.isSuccess(defect))
      assert(defect.success instanceof Error)
      assert.strictEqual(defect.success.message, "Batch request error: Request timed out")
    }).pipe(Effect.provide(TestWorkflowLayer)), 60_000)
})

// ---- Below: copied unchanged from Effect's suite (see the header), but for TestWorkflowLayer. ----

class SendEmailError extends Schema.Error<SendEmailError>("SendEmailError")({
  _tag: Schema.tag("SendEmailError"),
  message: Schema.String
}) {}

const EmailWorkflow = Workflow.make("EmailWorkflow", {
  payload: {
    to: Schema.String,
    id: Schema.String
  },
  error: SendEmailError,
  idempotencyKey(payload) {
    return payload.id
  }
})

class Flags extends Context.Service<Flags>()("Flags", {
  make: Effect.sync(() => new Map<string, boolean | number | string>())
}) {
  static readonly layer = Layer.effect(Flags, this.make)
}

const EmailWorkflowLayer = EmailWorkflow.toLayer(Effect.fn(function*(payload) {
  const flags = yield* Flags

  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      flags.set("finalizer", true)
    })
  )

  yield* Activity.make({
    name: "SendEmail",
    error: SendEmailError,
    execute: Effect.gen(function*() {
      const attempt = yield* Activity.CurrentAttempt

      if (attempt !== 5) {
        return yield* new SendEmailError({
          message: `Failed to send email for ${payload.id} on attempt ${attempt}`
        })
      }
    })
  }).pipe(
    EmailWorkflow.withCompensation(Effect.fnUntraced(function*() {
      flags.set("compensation", true)
    })),
    Activity.retry({ times: 5 })
  )

  if (payload.to === "compensation") {
    return yield* new SendEmailError({ message: `Compensation triggered` })
  }

  const result = yield* Activity.make({
    name: "Sleep",
    success: Schema.DateTimeUtc,
    execute: Effect.gen(function*() {
      // suspended inside Activity
      yield* DurableClock.sleep({
        name: "Some sleep",
        duration: "10 seconds",
        inMemoryThreshold: Duration.zero
      })
      return yield* DateTime.now
    })
  })
  // test serialization from Activity
  assert(DateTime.isUtc(result))

  yield* DurableDeferred.token(EmailTrigger)
  // suspended outside Activity
  yield* DurableDeferred.await(EmailTrigger).pipe(
    Effect.catchCause(() => {
      flags.set("catchCause", true)
      return Effect.void
    }),
    Effect.ensuring(Effect.sync(() => {
      flags.set("ensuring", true)
    }))
  )
})).pipe(
  Layer.provideMerge(Flags.layer)
)

const EmailTrigger = DurableDeferred.make("EmailTrigger", {
  success: Schema.String
})

const RaceWorkflow = Workflow.make("RaceWorkflow", {
  payload: {
    id: Schema.String
  },
  success: Schema.String,
  idempotencyKey: ({ id }) => id
})

const RaceWorkflowLayer = RaceWorkflow.toLayer(Effect.fnUntraced(function*() {
  const flags = yield* Flags

  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      flags.set("finalizer", true)
    })
  )

  return yield* Activity.raceAll("race", [
    Activity.make({
      name: "Activity1",
      success: Schema.String,
      error: Schema.Never,
      execute: Effect.onInterrupt(Effect.delay(Effect.succeed("Activity1"), 1000), () =>
        Effect.sync(() => {
          flags.set("interrupt1", true)
        }))
    }),
    Activity.make({
      name: "Activity2",
      success: Schema.String,
      error: Schema.Never,
      execute: Effect.onInterrupt(Effect.delay(Effect.succeed("Activity2"), 500), () =>
        Effect.sync(() => {
          flags.set("interrupt2", true)
        }))
    }),
    Activity.make({
      name: "Activity3",
      success: Schema.String,
      error: Schema.Never,
      execute: Effect.onInterrupt(Effect.delay(Effect.succeed("Activity3"), 100), () =>
        Effect.sync(() => {
          flags.set("interrupt3", true)
        }))
    })
  ])
}))

const DurableRaceWorkflow = Workflow.make("DurableRaceWorkflow", {
  payload: {
    id: Schema.String
  },
  success: Schema.String,
  idempotencyKey: ({ id }) => id
})

const DurableRaceGate = DurableDeferred.make("DurableRaceGate")

const DurableRaceWorkflowLayer = DurableRaceWorkflow.toLayer(Effect.fnUntraced(function*() {
  const flags = yield* Flags

  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      flags.set("finalizer", true)
    })
  )

  const result = yield* Activity.raceAll("race", [
    Activity.make({
      name: "Activity1",
      success: Schema.String,
      error: Schema.Never,
      execute: DurableClock.sleep({
        name: "Activity1",
        duration: 50000,
        inMemoryThreshold: Duration.zero
      }).pipe(
        Effect.as("Activity1")
      )
    }),
    Activity.make({
      name: "Activity2",
      success: Schema.String,
      error: Schema.Never,
      execute: DurableClock.sleep({
        name: "Activity2",
        duration: 10000,
        inMemoryThreshold: Duration.zero
      }).pipe(
        Effect.as("Activity2")
      )
    }),
    Activity.make({
      name: "Activity3",
      success: Schema.String,
      error: Schema.Never,
      execute: DurableClock.sleep({
        name: "Activity3",
        duration: 1000,
        inMemoryThreshold: Duration.zero
      }).pipe(
        Effect.as("Activity3")
      )
    })
  ])
  flags.set("durable-race-token", yield* DurableDeferred.token(DurableRaceGate))
  yield* DurableDeferred.await(DurableRaceGate)
  return result
}))

const TwoGateWorkflow = Workflow.make("TwoGateWorkflow", {
  payload: { id: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ id }) => id
})

const TwoGateA = DurableDeferred.make("TwoGateA", {
  success: Schema.String
})

const TwoGateB = DurableDeferred.make("TwoGateB", {
  success: Schema.String
})

const TwoGateWorkflowLayer = TwoGateWorkflow.toLayer(() =>
  DurableDeferred.raceAll({
    name: "two-gates",
    success: Schema.String,
    error: Schema.Never,
    effects: [
      DurableDeferred.await(TwoGateA),
      DurableDeferred.await(TwoGateB)
    ]
  })
)

const ParentWorkflow = Workflow.make("ParentWorkflow", {
  payload: {
    id: Schema.String
  },
  idempotencyKey(payload) {
    return payload.id
  }
})

const ChildWorkflow = Workflow.make("ChildWorkflow", {
  payload: {
    id: Schema.String
  },
  idempotencyKey(payload) {
    return payload.id
  }
})

const ParentWorkflowLayer = ParentWorkflow.toLayer(Effect.fnUntraced(function*({ id }) {
  const flags = yield* Flags
  const instance = yield* WorkflowInstance
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      flags.set("parent-suspended", instance.suspended)
    })
  )
  yield* ChildWorkflow.execute({ id })
  flags.set("parent-end", true)
}))

const ChildDeferred = DurableDeferred.make("ChildDeferred")

const ChildWorkflowLayer = ChildWorkflow.toLayer(Effect.fnUntraced(function*() {
  const flags = yield* Flags
  flags.set("child-token", yield* DurableDeferred.token(ChildDeferred))
  yield* DurableDeferred.await(ChildDeferred)
  flags.set("child-end", true)
}))

const SuspendOnFailureWorkflow = Workflow.make("SuspendOnFailureWorkflow", {
  payload: {
    id: Schema.String
  },
  idempotencyKey(payload) {
    return payload.id
  }
}).annotate(Workflow.SuspendOnFailure, true)

const SuspendOnFailureWorkflowLayer = SuspendOnFailureWorkflow.toLayer(Effect.fnUntraced(function*() {
  const flags = yield* Flags
  const instance = yield* WorkflowInstance
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      flags.set("suspended", instance.suspended)
      flags.set("cause", Cause.pretty(instance.cause!))
    })
  )
  yield* Activity.make({
    name: "fail",
    execute: Effect.die("boom")
  })
}))

const CatchWorkflow = Workflow.make("CatchWorkflow", {
  payload: {
    id: Schema.String
  },
  idempotencyKey(payload) {
    return payload.id
  }
})

const CatchWorkflowLayer = CatchWorkflow.toLayer(Effect.fnUntraced(function*() {
  const flags = yield* Flags
  yield* Activity.make({
    name: "fail",
    execute: Effect.die("boom")
  }).pipe(
    Effect.catchCause((cause) =>
      Activity.make({
        name: "log",
        execute: Effect.suspend(() => {
          flags.set("catch", true)
          return Effect.log(cause)
        })
      })
    )
  )
}))

const ErrorDefectWorkflow = Workflow.make("ErrorDefectWorkflow", {
  payload: {
    id: Schema.String
  },
  idempotencyKey(payload) {
    return payload.id
  }
})

const ErrorDefectWorkflowLayer = ErrorDefectWorkflow.toLayer(Effect.fnUntraced(function*() {
  yield* Activity.make({
    name: "raw-error-defect",
    execute: Effect.die(makeBatchRequestError())
  })
}))

const makeBatchRequestError = () => {
  const error = new Error("Batch request error: Request timed out")
  Object.defineProperty(error, "nonJson", {
    enumerable: true,
    value: 1n
  })
  return error
}

// Not Effect's: its suite's `TestWorkflowLayer`, with the workflows above and Leasehold's engine.
const TestWorkflowLayer = EmailWorkflowLayer.pipe(
  Layer.merge(RaceWorkflowLayer),
  Layer.merge(DurableRaceWorkflowLayer),
  Layer.merge(TwoGateWorkflowLayer),
  Layer.merge(ParentWorkflowLayer),
  Layer.merge(ChildWorkflowLayer),
  Layer.merge(SuspendOnFailureWorkflowLayer),
  Layer.merge(CatchWorkflowLayer),
  Layer.merge(ErrorDefectWorkflowLayer),
  Layer.provideMerge(Flags.layer),
  Layer.provideMerge(leaseholdEngine)
)
