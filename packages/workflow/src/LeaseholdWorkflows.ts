/**
 * A `WorkflowEngine` (Effect's `effect/workflow`) whose executions are Leasehold runs
 * (docs/adr/0015-workflow-engine.md):
 * - an execution is a run of kind `workflow/<name>`, idempotent by its execution id, claimed,
 *   heartbeated and fenced like any other run, by the same `Worker.run`;
 * - an activity's result is recorded under the holder's fence; later replays read it back, and a
 *   superseded holder's result is refused (`FenceRejected`), never stored;
 * - a workflow that waits (a deferred, a durable clock, a child workflow) suspends its run: no
 *   lease, no heartbeat, no worker slot. Completing the deferred, the clock's deadline by the
 *   database's clock, or the child's completion resumes it under a higher fence, and it replays.
 *
 * @since 0.1.0
 */
import {
  CurrentRun,
  Fence,
  FenceRejected,
  Handler,
  InvalidConfig,
  InvalidPayload,
  leaseKey,
  LeaseNotHeld,
  Run,
  RunNotFound,
  RunStore,
  StoreError,
  Telemetry,
  terminalStates,
  Worker,
  WorkerEvents,
  WorkflowJournal
} from "@leasehold/core"
import { Cause, Context, Duration, Effect, Exit, Fiber, FiberHandle, Latch, Layer, Option, Schema, Scope } from "effect"
import { ClusterSchema } from "effect/cluster"
import { SqlClient } from "effect/sql"
import { Activity, DurableDeferred, Workflow, WorkflowEngine } from "effect/workflow"

/** How often `execute` and `awaitComplete` read an unsettled execution in its first second. */
const settlePollMs = 10

/** The yields a worker's restart waits for, so one burst of registrations restarts it once. */
const registrationBurst = 8

/** The run kind of a workflow's executions. @category naming */
export const kindOf = (workflowName: string): string => `workflow/${workflowName}`

/** The key naming an execution: its run's idempotency key, and its journal's key. @category naming */
export const executionKey = (workflowName: string, executionId: string): string =>
  `workflow/${workflowName}/${executionId}`

/** The deferred an `interrupt` completes (the name Effect's cluster engine uses). @category naming */
export const InterruptSignal = DurableDeferred.make("Workflow/InterruptSignal")

/**
 * The fence of the run executing the current workflow. Workflow layers are built before any run
 * exists, so activities reach the fence through this rather than by requiring `Fence`; outside a
 * Leasehold run it is a defect.
 *
 * @category accessors
 */
export const currentFence: Effect.Effect<Fence["Service"]> = Effect.flatMap(
  Effect.serviceOption(Fence),
  Option.match({
    onNone: () => Effect.die(new Error("no Fence: this workflow code is not running inside a Leasehold run")),
    onSome: Effect.succeed
  })
)

/** @category models */
export interface LeaseholdWorkflowsOptions {
  /** The queue executions are enqueued on. Default `default`. */
  readonly queue?: string | undefined
  /**
   * @deprecated The journal now comes from context, in the store's schema (`PgRunStore.layer`
   * provides it): this option is ignored.
   */
  readonly schema?: string | undefined
  /** Attempts an execution may crash through (suspensions do not count). Default the store's (5). */
  readonly maxAttempts?: number | undefined
  /**
   * Serve the registered workflows from this layer: a `Worker.run` with these options, started in
   * the layer's scope and restarted with the new set of handlers each time a workflow registers
   * (registration happens as the workflow layers build, before any work; a burst of registrations
   * restarts it once, and the first registration waits for the first worker). `execute` waits, up to `readyTimeout`, until that worker listens and has
   * answered its first claim, so an execution started as soon as the layers are built is claimed
   * at once rather than after the worker's start. Without it, run `LeaseholdWorkflows.worker`
   * yourself.
   */
  readonly serve?: Omit<Worker.WorkerOptions<never>, "handlers"> | undefined
  /**
   * How often a running replay with a wait still open (a branch of a race parked on a deferred or
   * a durable clock while another branch runs) asks the journal whether that wait is over; when it
   * is, the replay is stopped where it stands and replayed under the same fence. Default 100 ms.
   */
  readonly wakePollInterval?: Duration.Input | undefined
  /** How long `execute` waits for the serving worker to be ready (see `serve`). Default 5 s. */
  readonly readyTimeout?: Duration.Input | undefined
}

/** The registered workflows, as handlers for `Worker.run`. @category services */
export class WorkflowHandlers extends Context.Service<WorkflowHandlers, {
  /** One handler per workflow registered so far (registration happens as layers build). */
  readonly handlers: () => ReadonlyArray<Handler.Handler<any, any, any, Handler.HandlerServices | RunStore>>
  readonly queue: string
}>()("@leasehold/workflow/WorkflowHandlers") {}

// The run's payload: the workflow's payload as JSON, and the parent execution a child wakes.
const ExecutionPayload = Schema.Struct({
  executionId: Schema.String,
  payload: Schema.Unknown,
  parent: Schema.optional(Schema.String)
})
type ExecutionPayload = typeof ExecutionPayload.Type

// Exits whose values are already encoded (activities, deferreds) as JSON.
const EncodedExit = Schema.toCodecJson(
  Schema.Exit(
    Schema.Union([Schema.Undefined, Schema.Any]),
    Schema.Union([Schema.Undefined, Schema.Any]),
    Schema.Defect()
  )
)
const encodeExit = Schema.encodeSync(EncodedExit) as (exit: Exit.Exit<unknown, unknown>) => unknown
const decodeExit = Schema.decodeUnknownSync(EncodedExit) as (json: unknown) => Exit.Exit<unknown, unknown>

/** A workflow's codecs, made once per workflow (making a schema's JSON codec is not cheap). */
interface Codecs {
  readonly payload: Schema.Codec<unknown, unknown>
  readonly result: Schema.Codec<Workflow.Result<unknown, unknown>, unknown>
}
const codecsByWorkflow = new WeakMap<Workflow.Any, Codecs>()
const codecsOf = (workflow: Workflow.Any): Codecs => {
  let codecs = codecsByWorkflow.get(workflow)
  if (codecs === undefined) {
    const { errorSchema, payloadSchema, successSchema } = workflow as Workflow.AnyWithProps
    codecs = {
      payload: Schema.toCodecJson(payloadSchema) as unknown as Schema.Codec<unknown, unknown>,
      result: Schema.toCodecJson(
        Workflow.Result({ success: successSchema, error: errorSchema })
      ) as unknown as Schema.Codec<
        Workflow.Result<unknown, unknown>,
        unknown
      >
    }
    codecsByWorkflow.set(workflow, codecs)
  }
  return codecs
}

const suspended: Workflow.Result<unknown, unknown> = new Workflow.Suspended({})

/** A fault of the store or the lease inside a replay: the run's, never the workflow's outcome. */
type RunFault = FenceRejected | LeaseNotHeld | RunNotFound | StoreError
const isRunFault = (u: unknown): u is RunFault =>
  u instanceof FenceRejected || u instanceof LeaseNotHeld || u instanceof RunNotFound || u instanceof StoreError
const runFaultOf = (cause: Cause.Cause<unknown>): RunFault | undefined => {
  for (const reason of cause.reasons) {
    if (reason._tag === "Die" && isRunFault(reason.defect)) return reason.defect
    if (reason._tag === "Fail" && isRunFault(reason.error)) return reason.error
  }
  return undefined
}
/**
 * The replay a handler is running: the workflow's instance, the fiber running its body, and the
 * fault (store, lease) that ended it, if one did. Provided to the workflow's body, activities
 * included.
 */
class Replay extends Context.Service<Replay, {
  readonly instance: WorkflowEngine.WorkflowInstance["Service"]
  fault: RunFault | undefined
  body: Fiber.Fiber<unknown, unknown> | undefined
  /** Deferreds this replay read as done: an await of them is not parked. */
  readonly readDone: Set<string>
  /**
   * Deferreds the workflow's own code (not an activity's) read as not done in this replay, parked
   * on them still or not (a race's losing branch): their completion wakes the replay, as in
   * Effect's cluster engine.
   */
  readonly readPending: Set<string>
  /**
   * Deferreds whose read is in flight: awaited already (Effect registers an await before its
   * read), not yet known done or pending. One done before the replay began reads as done, so it
   * must not wake the replay meanwhile.
   */
  readonly reading: Set<string>
  /** Whether the watcher stopped this replay because a wait it was parked on ended. */
  woken: boolean
}>()("@leasehold/workflow/Replay") {}

// A store or lease fault inside a replay belongs to the run, never to the workflow: the replay is
// abandoned (so `withCompensation` and `Workflow.addFinalizer` callbacks do not run, as in Effect's
// cluster engine when a runner loses an entity), its body's fiber is interrupted from outside
// (which no workflow code can catch, whichever fiber met the fault: the body's, an activity's or
// a race branch's), and the handler fails with the fault (`runExecution`). Every engine
// operation of an abandoned replay ends the same way (`unlessAbandoned`). Outside a replay a
// fault is a defect.
const abandonWith = (fault: RunFault): Effect.Effect<never> =>
  Effect.flatMap(Effect.serviceOption(Replay), (found) => {
    if (Option.isNone(found)) return Effect.die(fault)
    const replay = found.value
    replay.fault ??= fault
    replay.instance.abandoned = true
    return Effect.withFiber<never>((current) => {
      const body = replay.body
      if (body === current) {
        return Effect.interruptible(Effect.callback<never>(() => current.interruptUnsafe(current.id)))
      }
      if (body !== undefined && body.pollUnsafe() === undefined) body.interruptUnsafe(current.id)
      // Off the body's fiber (an activity's own, a race branch, a finalizer run as the body
      // ended): this effect ends as an interruption; the handler still reads the fault.
      return Effect.failCause(Cause.interrupt(current.id))
    })
  })
const orFault = <A, R>(effect: Effect.Effect<A, RunFault, R>): Effect.Effect<A, never, R> =>
  Effect.catch(effect, abandonWith)
/** Ends an engine operation of a replay already abandoned by a fault, before it does anything. */
const unlessAbandoned: Effect.Effect<void> = Effect.flatMap(
  Effect.serviceOption(Replay),
  (replay) => Option.isSome(replay) && replay.value.fault !== undefined ? abandonWith(replay.value.fault) : Effect.void
)

type Registered = {
  readonly workflow: Workflow.Any
  readonly execute: (
    payload: object,
    executionId: string
  ) => Effect.Effect<unknown, unknown, WorkflowEngine.WorkflowInstance | WorkflowEngine.WorkflowEngine>
}

/**
 * Builds the engine over the `RunStore` and the `WorkflowJournal` in context (`PgRunStore.layer`
 * and `MemoryRunStore.layer` each provide both). @category constructors
 */
export const make = Effect.fnUntraced(function*(options: LeaseholdWorkflowsOptions = {}) {
  const store = yield* RunStore
  const journal = yield* WorkflowJournal.WorkflowJournal
  const readyTimeout = Duration.fromInputUnsafe(options.readyTimeout ?? "5 seconds")
  const queue = options.queue ?? "default"
  const registered = new Map<string, Registered>()
  const served = yield* FiberHandle.make<never, unknown>()
  // Opened when the worker serving every workflow registered so far is ready (`serveWith`). A
  // worker replaced before it was ready hands its latch to the next one: whoever waits on it is
  // let go by the worker that does become ready.
  let serving: Latch.Latch | undefined
  let notYetReady: Latch.Latch | undefined
  let servedOnce = false
  const untilServing = Effect.suspend(() =>
    serving === undefined ? Effect.void : Effect.asVoid(Effect.timeoutOption(serving.await, readyTimeout))
  )

  /** The execution's outcome as its run reads: none while it has not finished or suspended. */
  const resultOf = (workflow: Workflow.Any, run: WorkflowJournal.ExecutionRun) =>
    Effect.gen(function*() {
      const { state, result, error } = run
      switch (state) {
        case "completed":
          return Option.some(
            yield* Effect.orDie(
              Schema.decodeUnknownEffect(codecsOf(workflow).result)(result) as Effect.Effect<
                Workflow.Result<unknown, unknown>,
                Schema.SchemaError
              >
            )
          )
        case "failed":
          return Option.some(new Workflow.Complete({ exit: Exit.die(error) }) as Workflow.Result<unknown, unknown>)
        case "cancelled":
          return Option.some(new Workflow.Complete({ exit: Exit.interrupt() }) as Workflow.Result<unknown, unknown>)
        case "suspended":
          return Option.some(suspended)
        default:
          return Option.none<Workflow.Result<unknown, unknown>>()
      }
    })

  /** The execution's outcome as the store has it: none while it has not finished or suspended. */
  const currentResult = (workflow: Workflow.Any, key: string) =>
    Effect.flatMap(
      orFault(journal.execution(key)),
      Option.match({ onNone: () => Effect.succeedNone, onSome: (run) => resultOf(workflow, run) })
    )

  // Opened, and replaced, each time this process's worker has stored a run's settlement: a caller
  // waiting on an execution looks again at once rather than at its next poll (and needs no clock
  // to pass, under `TestClock`). Runs settled by other processes are found by polling.
  let settledHere = Latch.makeUnsafe()
  const announceSettled = () => {
    const settled = settledHere
    settledHere = Latch.makeUnsafe()
    settled.openUnsafe()
  }
  // As Effect's engines do, shutting the engine down interrupts the callers still waiting on it.
  let shutDown = false
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      shutDown = true
      announceSettled()
      serving?.openUnsafe()
    })
  )

  // Most executions settle within a second of being asked for: look often then, so a caller sees
  // the result as soon as it is stored, and back off for the long ones.
  const untilSettled = <A>(check: Effect.Effect<Option.Option<A>>) =>
    Effect.gen(function*() {
      let waitedMs = 0
      let delayMs = settlePollMs
      while (true) {
        // Taken before the look, so a settlement stored during it is not missed.
        const woken = settledHere
        if (shutDown) return yield* Effect.interrupt
        const settled = yield* check
        if (Option.isSome(settled)) return settled.value
        yield* Effect.timeoutOption(woken.await, Duration.millis(delayMs))
        if (shutDown) return yield* Effect.interrupt
        waitedMs += delayMs
        if (waitedMs >= 1_000) delayMs = Math.min(delayMs * 2, 500)
      }
    })

  // Parents of this process waiting for a child that no worker has claimed yet: each holds a slot
  // of its worker for its child, so a parent that would wait too finds none free.
  let childSlotsReserved = 0

  /**
   * A child's first result, as Effect's cluster engine waits for it: the parent holds its slot
   * while the child's first run goes (and its replays need not wait on the child's completion).
   * It waits only when its worker has a slot free for the child beyond those other parents wait
   * for, and only for the child's first run: a child not yet claimed with no slot free, or
   * pending again after a run (a retry, a wake), reads as suspended, and its completion wakes the
   * parent, which replays. A child claimed before its parent looks again counts twice meanwhile
   * (in flight, and held for): parents may then suspend when they need not, never wait on each
   * other (ADR 0027).
   */
  const firstResultOfChild = (workflow: Workflow.Any, key: string) =>
    Effect.gen(function*() {
      const slots = yield* Effect.serviceOption(Worker.Slots)
      let reserved = false
      const unreserve = Effect.sync(() => {
        if (reserved) childSlotsReserved--
        reserved = false
      })
      const look = Effect.gen(function*() {
        const found = yield* orFault(journal.execution(key))
        if (Option.isNone(found)) return Option.some(suspended)
        const run = found.value
        const settled = yield* resultOf(workflow, run)
        if (Option.isSome(settled)) return settled
        if (run.state === "running") {
          yield* unreserve
          return Option.none()
        }
        // Pending again after a run (a retry's delay, a wake): its completion wakes the parent.
        if (run.fence > 0) return Option.some(suspended)
        if (reserved) return Option.none()
        if (Option.isNone(slots) || slots.value.free() - childSlotsReserved <= 0) return Option.some(suspended)
        reserved = true
        childSlotsReserved++
        return Option.none()
      })
      return yield* untilSettled(look).pipe(Effect.ensuring(unreserve))
    })

  // The execution's trace is its caller's: its first attempt is a child of the span that executed
  // it (a parent's replay, for a child), as `Client.enqueue` does for any run.
  const callerTraceParent = Effect.gen(function*() {
    if (!(yield* Telemetry.TraceRuns)) return undefined
    const span = yield* Effect.option(Effect.currentSpan)
    return Option.isSome(span) ? Telemetry.traceParentOf(span.value) : undefined
  })

  /**
   * An execution's later attempts (after a suspension, a retry or a reclaim) are new traces (each
   * linked to the enqueue span, as for any run): their replay is recorded in the execution's trace
   * too, as a child of the span that executed it, linked to the attempt's span.
   */
  const inExecutionTrace = <A, E, R>(workflowName: string, executionId: string, replay: Effect.Effect<A, E, R>) =>
    Effect.gen(function*() {
      const current = yield* CurrentRun
      const enqueued = Telemetry.spanOf(current.traceParent)
      if (enqueued === undefined || !(yield* Telemetry.TraceRuns)) return yield* replay
      const attempt = yield* Effect.option(Effect.currentSpan)
      const sameTrace = Option.isSome(attempt) && attempt.value.traceId === enqueued.traceId
      return yield* Effect.withSpan(replay, `leasehold.workflow ${workflowName}`, {
        attributes: { "leasehold.workflow": workflowName, "leasehold.execution_id": executionId },
        ...(sameTrace || Option.isNone(attempt)
          ? {}
          : { parent: enqueued, links: [{ span: attempt.value, attributes: { "leasehold.link": "attempt" } }] })
      })
    })

  /**
   * A deferred completed from outside its execution (a person's approval, a callback) is recorded
   * in the execution's trace, linked to the completer's span.
   */
  const completionInExecutionTrace = <A, E, R>(key: string, deferredName: string, complete: Effect.Effect<A, E, R>) =>
    Effect.gen(function*() {
      if (!(yield* Telemetry.TraceRuns)) return yield* complete
      const run = yield* Effect.orElseSucceed(journal.execution(key), () => Option.none())
      const enqueued = Option.isSome(run) ? Telemetry.spanOf(run.value.traceParent) : undefined
      if (enqueued === undefined) return yield* complete
      const caller = yield* Effect.option(Effect.currentSpan)
      return yield* Effect.withSpan(complete, `leasehold.workflow.deferred ${deferredName}`, {
        parent: enqueued,
        attributes: { "leasehold.execution": key, "leasehold.deferred": deferredName },
        ...(Option.isSome(caller)
          ? { links: [{ span: caller.value, attributes: { "leasehold.link": "completer" } }] }
          : {})
      })
    })

  const interruptPending = (key: string) =>
    Effect.map(orFault(journal.deferredResult(key, InterruptSignal.name)), Option.isSome)

  const engine: WorkflowEngine.WorkflowEngine["Service"] = WorkflowEngine.makeUnsafe({
    register: (workflow, execute) =>
      Effect.gen(function*() {
        registered.set(workflow._tag, { workflow, execute })
        if (options.serve === undefined) return
        // Restarted with every workflow registered so far; the previous worker shuts down first. The
        // start yields first, so the registrations of layers building together restart it once.
        const context = yield* Effect.context<never>()
        const ready = notYetReady ?? Latch.makeUnsafe()
        notYetReady = ready
        serving = ready
        const start = Effect.andThen(
          Effect.repeat(Effect.yieldNow, { times: registrationBurst }),
          serveWith(options.serve, ready)
        )
        yield* FiberHandle.run(served, start.pipe(Effect.provideContext(context)))
        // The first worker's start (its connections, its first plans) is paid here, as the layers
        // build, rather than by the first execution; later restarts are warm and are not waited for.
        if (!servedOnce) {
          servedOnce = true
          yield* untilServing
        }
      }),

    execute: Effect.fnUntraced(function*(workflow, request) {
      const key = executionKey(workflow._tag, request.executionId)
      const payload = yield* Effect.orDie(
        Schema.encodeUnknownEffect(codecsOf(workflow).payload)(request.payload) as Effect.Effect<
          unknown,
          Schema.SchemaError
        >
      )
      const parent = request.parent !== undefined && request.detached !== true
        ? executionKey(request.parent.workflow._tag, request.parent.executionId)
        : undefined
      yield* Effect.orDie(store.enqueue([{
        kind: kindOf(workflow._tag),
        queue,
        idempotencyKey: key,
        maxAttempts: options.maxAttempts,
        traceParent: yield* callerTraceParent,
        payload: { executionId: request.executionId, payload, ...(parent === undefined ? {} : { parent }) }
      }]))
      // Claimed once this process's worker listens, not after its start (bounded: a store that
      // cannot be reached delays the caller, never blocks it).
      yield* untilServing
      if (shutDown) return yield* Effect.interrupt
      if (request.discard) return undefined as any
      if (request.parent !== undefined) return (yield* firstResultOfChild(workflow, key)) as any
      return (yield* untilSettled(currentResult(workflow, key))) as any
    }),

    awaitComplete: (workflow, executionId) =>
      untilSettled(Effect.map(
        currentResult(workflow, executionKey(workflow._tag, executionId)),
        Option.filter((result) => result._tag === "Complete")
      )).pipe(Effect.asVoid),

    poll: (workflow, executionId) => currentResult(workflow, executionKey(workflow._tag, executionId)),

    interrupt: (workflow, executionId) =>
      Effect.gen(function*() {
        const key = executionKey(workflow._tag, executionId)
        const run = yield* orFault(journal.execution(key))
        if (Option.isNone(run) || terminalStates.includes(run.value.state)) return
        yield* orFault(journal.deferredDone(key, InterruptSignal.name, encodeExit(Exit.void)))
      }),

    interruptUnsafe: (workflow, executionId) =>
      Effect.gen(function*() {
        const run = yield* orFault(journal.execution(executionKey(workflow._tag, executionId)))
        if (Option.isNone(run)) return
        // Cancelling advances the fence: a holder's writes from now on are refused.
        yield* store.cancel(run.value.runId).pipe(Effect.catchTag("InvalidTransition", () => Effect.void), Effect.orDie)
        // A parent waiting on this child replays and reads it as interrupted.
        const record = yield* Effect.orDie(store.get(run.value.runId))
        const parent = (record.payload as { parent?: unknown } | null)?.parent
        if (typeof parent === "string") {
          yield* Effect.orDie(journal.wake(parent, `child ${executionKey(workflow._tag, executionId)} cancelled`))
        }
      }),

    resume: (workflow, executionId) =>
      Effect.asVoid(orFault(journal.wake(executionKey(workflow._tag, executionId), "resume"))),

    activityExecute: Effect.fnUntraced(function*(activity, attempt) {
      yield* unlessAbandoned
      const instance = yield* WorkflowEngine.WorkflowInstance
      const key = executionKey(instance.workflow._tag, instance.executionId)
      const { interruptPending: interrupting, stored } = yield* orFault(
        journal.activityStart(key, activity.name, attempt)
      )
      if (Option.isSome(stored)) return new Workflow.Complete({ exit: decodeExit(stored.value) })
      // A pending interrupt replays only to rebuild compensations: no new activity starts.
      if (!instance.interrupted && interrupting) return new Workflow.Suspended({})
      const fence = yield* Effect.serviceOption(Fence)
      if (Option.isNone(fence)) {
        return yield* Effect.die(new Error(`activity ${activity.name} ran outside a Leasehold run: no Fence`))
      }
      const lease = leaseKey(fence.value)
      const activityInstance = WorkflowEngine.WorkflowInstance.initial(instance.workflow, instance.executionId)
      activityInstance.interrupted = instance.interrupted
      const transactional = Context.get(activity.annotations, ClusterSchema.WithTransaction)
      const sql = transactional ? yield* SqlClient.SqlClient : undefined
      // One transaction holds the activity's writes and its result only on one client.
      if (sql !== undefined && sql !== journal.sqlClient) {
        return yield* Effect.die(
          new Error(
            `activity ${activity.name} is WithTransaction, but its SqlClient is not the one the workflow journal writes through`
          )
        )
      }
      const runAndRecord = Effect.gen(function*() {
        const result = yield* activity.executeEncoded.pipe(
          // Its own writes in a savepoint: a failing activity's writes roll back, its failure is recorded.
          (body) => sql === undefined ? body : sql.withTransaction(body),
          Workflow.intoResult,
          Effect.provideService(WorkflowEngine.WorkflowInstance, activityInstance),
          Effect.provideService(Activity.CurrentAttempt, attempt)
        )
        // Only completed results are kept: a suspended activity runs again on the next replay.
        if (result._tag === "Suspended") return result
        // A fault met inside the activity (a clock or deferred it awaits) is the run's, not its result.
        const fault = Exit.isFailure(result.exit) ? runFaultOf(result.exit.cause) : undefined
        if (fault !== undefined) return yield* abandonWith(fault)
        // Nor is a result reached after the replay was abandoned (a fault in another branch).
        yield* unlessAbandoned
        const recorded = yield* journal.recordActivity(lease, key, activity.name, attempt, encodeExit(result.exit))
        return new Workflow.Complete({ exit: decodeExit(recorded) }) as Workflow.Result<unknown, unknown>
      })
      // An activity annotated `WithTransaction` commits its own SQL writes and its result together.
      return yield* orFault(sql === undefined ? runAndRecord : journal.transaction(runAndRecord))
    }),

    deferredResult: Effect.fnUntraced(function*(deferred) {
      yield* unlessAbandoned
      const instance = yield* WorkflowEngine.WorkflowInstance
      const reading = yield* Effect.serviceOption(Replay)
      if (Option.isSome(reading)) reading.value.reading.add(deferred.name)
      const found = yield* orFault(
        journal.deferredResult(executionKey(instance.workflow._tag, instance.executionId), deferred.name)
      )
      const replay = yield* Effect.serviceOption(Replay)
      if (Option.isSome(replay)) replay.value.reading.delete(deferred.name)
      if (Option.isNone(found)) {
        // The workflow's own waits share the replay's map of awaits; an activity's have their own.
        if (Option.isSome(replay) && instance.awaitedDeferreds === replay.value.instance.awaitedDeferreds) {
          replay.value.readPending.add(deferred.name)
        }
        return Option.none()
      }
      if (Option.isSome(replay)) replay.value.readDone.add(deferred.name)
      return Option.some(found.value === "clockDue" ? Exit.void : decodeExit(found.value.exit))
    }),

    deferredDone: (request) =>
      Effect.gen(function*() {
        yield* unlessAbandoned
        // As Effect's engines record: a run completing its own deferred (`DurableDeferred.into`).
        const instance = yield* Effect.serviceOption(WorkflowEngine.WorkflowInstance)
        const own = Option.isSome(instance) && instance.value.executionId === request.executionId &&
          instance.value.workflow._tag === request.workflowName
        if (own && request.deferredName !== InterruptSignal.name) {
          instance.value.completedDeferreds.add(request.deferredName)
        }
        const key = executionKey(request.workflowName, request.executionId)
        const done = orFault(journal.deferredDone(key, request.deferredName, encodeExit(request.exit)))
        yield* own ? done : completionInExecutionTrace(key, request.deferredName, done)
      }),

    scheduleClock: (workflow, request) =>
      Effect.andThen(
        unlessAbandoned,
        orFault(journal.scheduleClock(
          executionKey(workflow._tag, request.executionId),
          request.clock.deferred.name,
          Duration.toMillis(request.clock.duration)
        ))
      )
  })

  /**
   * The scopes of an execution's replays that suspended in this process, kept open (as Effect's
   * engines keep them) so their `Workflow.addFinalizer` callbacks run, last first, when the
   * workflow completes here. A replay that completes closes its own scope with the outcome; the
   * earlier ones then close with `Exit.void`, so their compensations are skipped. When the run
   * leaves this process otherwise (a fault, a lost lease, a shutdown) they are released as
   * abandoned, without their workflow finalizers: the next holder replays.
   */
  const retained = new Map<
    string,
    { readonly scope: Scope.Closeable; readonly instances: Set<WorkflowEngine.WorkflowInstance["Service"]> }
  >()
  const retainedOf = (key: string) => {
    let found = retained.get(key)
    if (found === undefined) {
      found = { scope: Scope.makeUnsafe(), instances: new Set() }
      retained.set(key, found)
    }
    return found
  }
  const release = (key: string, abandoned: boolean) =>
    Effect.suspend(() => {
      const found = retained.get(key)
      if (found === undefined) return Effect.void
      retained.delete(key)
      if (abandoned) { for (const instance of found.instances) instance.abandoned = true }
      return Scope.close(found.scope, Exit.void)
    })
  yield* Effect.addFinalizer(() => Effect.forEach([...retained.keys()], (key) => release(key, true), { discard: true }))

  /**
   * One replay after another until the workflow completes or its run suspends. Replays that
   * suspended keep their scopes while the run is suspended (`retained`).
   */
  const runExecution = (entry: Registered, input: ExecutionPayload) => {
    let suspending = false
    const key = executionKey(entry.workflow._tag, input.executionId)
    return replayUntilSettled(entry, input, (value) => suspending = value).pipe(
      Effect.onExit((exit) =>
        Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) && suspending
          ? Effect.void
          : release(key, Exit.isFailure(exit))
      )
    )
  }

  const replayUntilSettled = (entry: Registered, input: ExecutionPayload, suspending: (value: boolean) => void) =>
    Effect.gen(function*() {
      const { workflow } = entry
      const fence = yield* Fence
      const key = executionKey(workflow._tag, input.executionId)
      const payload = yield* Schema.decodeUnknownEffect(codecsOf(workflow).payload)(input.payload).pipe(
        Effect.mapError((error) => new InvalidPayload({ kind: kindOf(workflow._tag), issue: String(error) }))
      )
      while (true) {
        // Clocks due before the replay starts read as fired during it (`nextClock` skips them).
        const startedAt = yield* journal.now
        const kept = retainedOf(key)
        const instance = WorkflowEngine.WorkflowInstance.initial(workflow, input.executionId, {
          scope: Scope.forkUnsafe(kept.scope)
        })
        kept.instances.add(instance)
        const replay = Replay.of({
          instance,
          fault: undefined,
          body: undefined,
          readDone: new Set(),
          readPending: new Set(),
          reading: new Set(),
          woken: false
        })
        const watcher = yield* Effect.forkChild(wakeWhenDone(replay, key))
        const outcome = yield* entry.execute(payload as object, input.executionId).pipe(
          Effect.onExit((exit) => applyInterrupt(replay, key, exit)),
          // Stopped from outside (lease lost, shutdown): the replay is abandoned, not failed, so its
          // compensations do not run; the next holder replays.
          Effect.onInterrupt(() =>
            Effect.sync(() => {
              if (!instance.suspended && !instance.interrupted) instance.abandoned = true
            })
          ),
          // The fiber `intoResult` runs the body on: a fault met anywhere interrupts it.
          (body) =>
            Effect.withFiber((fiber) => {
              replay.body = fiber
              return body
            }),
          Workflow.intoResult,
          Effect.provideService(WorkflowEngine.WorkflowInstance, instance),
          Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
          Effect.provideService(Replay, replay),
          Effect.exit,
          Effect.ensuring(Fiber.interrupt(watcher))
        )
        const fault = replay.fault ?? (Exit.isFailure(outcome)
          ? runFaultOf(outcome.cause)
          : outcome.value._tag === "Complete" && Exit.isFailure(outcome.value.exit)
          ? runFaultOf(outcome.value.exit.cause)
          : undefined)
        if (fault !== undefined) return yield* Effect.fail(fault)
        const result = yield* outcome
        if (result._tag === "Complete") {
          // The finalizers of the replays that suspended, under this holder's fence.
          yield* release(key, false)
          return yield* finish(entry, input, result)
        }
        // Stopped because a wait it was parked on ended: replay at once. (The wake signal a
        // completer left for a running run is taken; a clock leaves none.)
        if (replay.woken) {
          yield* journal.consumeWake(leaseKey(fence))
          continue
        }
        // Suspended: this replay's scope stays open with the earlier ones (`retained`).
        const clock = result.failed === true ? Option.none<number>() : yield* journal.nextClock(key, startedAt)
        if (Option.isSome(clock) && clock.value <= 0) continue
        suspending(true)
        yield* Run.awaitSignal(WorkflowJournal.wakeSignal(fence.fence), {
          timeout: Option.isSome(clock) ? Duration.millis(Math.ceil(clock.value)) : undefined
        })
        suspending(false)
        // Woken while it was still running: take the wake and replay at once.
        yield* journal.consumeWake(leaseKey(fence))
      }
    })

  const wakePollInterval = Duration.fromInputUnsafe(options.wakePollInterval ?? "100 millis")

  /**
   * Wakes a replay that is still running when a wait it is parked on ends (a deferred completed by
   * anyone, a durable clock's deadline by the database's clock), as Effect's engines preempt a run
   * through `instance.awaitedDeferreds`: the replay is stopped as a suspension, where it stands,
   * and the handler replays under the same fence (the completion's wake, or the clock, returns its
   * suspension at once). Waits inside activities are their own instances' and do not count.
   * Nothing recorded runs again; an activity stopped before its result was recorded runs again.
   */
  const wakeWhenDone = (replay: Replay["Service"], key: string) =>
    Effect.gen(function*() {
      const { instance } = replay
      while (true) {
        yield* Effect.sleep(wakePollInterval)
        const body = replay.body
        if (
          body === undefined || instance.suspended || instance.interrupted || instance.abandoned ||
          replay.fault !== undefined
        ) continue
        // Awaited now, or read as pending earlier (less those this replay completed itself: a
        // race's own outcome), and not read as done since.
        const parked = [
          ...new Set([
            ...instance.awaitedDeferreds.keys(),
            ...[...replay.readPending].filter((name) => !instance.completedDeferreds.has(name))
          ])
        ].filter((name) => !replay.readDone.has(name) && !replay.reading.has(name))
        if (parked.length === 0) continue
        // A journal read that fails leaves the replay alone: the next tick asks again.
        const found = yield* journal.doneAmong(key, parked).pipe(Effect.orElseSucceed(() => []))
        // Asked again after the answer: the replay may have read one as done meanwhile.
        const done = found.filter((name) => !replay.readDone.has(name) && !replay.reading.has(name))
        if (done.length === 0 || instance.suspended || instance.abandoned || body.pollUnsafe() !== undefined) continue
        replay.woken = true
        instance.suspended = true
        yield* Effect.withFiber((self) => Effect.sync(() => body.interruptUnsafe(self.id)))
        return
      }
    })

  /** The run's result, and the wake of a waiting parent in the transaction that completes it. */
  const finish = (entry: Registered, input: ExecutionPayload, result: Workflow.Result<unknown, unknown>) =>
    Effect.gen(function*() {
      const encoded = yield* Effect.orDie(Schema.encodeUnknownEffect(codecsOf(entry.workflow).result)(result))
      if (input.parent === undefined) return encoded
      // The parent cannot replay before the child's result is there to read.
      const key = executionKey(entry.workflow._tag, input.executionId)
      return yield* Run.transaction(Effect.as(journal.wake(input.parent, `child ${key}`), encoded))
    })

  /**
   * An execution that cannot go on ends with a defect as its outcome rather than as a failed run,
   * so a parent waiting on it is woken: a payload its schema refuses, or a store fault on its
   * last attempt. A stale holder's fault ends nothing: the run is someone else's.
   */
  const settle = (entry: Registered, input: ExecutionPayload) => <E extends { readonly _tag: string }>(error: E) =>
    Effect.gen(function*() {
      const run = yield* CurrentRun
      const final = error._tag === "InvalidPayload" || (error._tag === "StoreError" && run.attempt >= run.maxAttempts)
      if (!final) return yield* Effect.fail(error)
      return yield* finish(entry, input, new Workflow.Complete({ exit: Exit.die(error) })).pipe(
        Effect.catch(() => Effect.fail(error))
      )
    })

  // As Effect's engines do: an interrupt takes effect when the run would suspend; the replay is
  // interrupted so the workflow's scope closes with the interruption and its compensations run.
  // A replay abandoned by a fault or stopped from outside is not one that would suspend.
  const applyInterrupt = (replay: Replay["Service"], key: string, exit: Exit.Exit<unknown, unknown>) => {
    const { instance } = replay
    if (instance.abandoned || replay.fault !== undefined) return Effect.void
    const suspendOnFailure = Context.get(instance.workflow.annotations, Workflow.SuspendOnFailure)
    if (!instance.suspended && !(suspendOnFailure && Exit.isFailure(exit))) return Effect.void
    return Effect.flatMap(interruptPending(key), (pending) => {
      if (!pending) return Effect.void
      instance.suspended = false
      instance.interrupted = true
      return Effect.withFiber<void>((fiber) => Effect.interruptible(Fiber.interrupt(fiber)))
    })
  }

  const handlers = WorkflowHandlers.of({
    queue,
    handlers: () =>
      [...registered.values()].map((entry) =>
        Handler.make({
          kind: kindOf(entry.workflow._tag),
          payload: ExecutionPayload,
          handle: (input: ExecutionPayload) =>
            inExecutionTrace(entry.workflow._tag, input.executionId, runExecution(entry, input)).pipe(
              Effect.catch(settle(entry, input))
            ),
          maxAttempts: options.maxAttempts
        })
      )
  })

  // Ready once it listens (what is enqueued from then on is announced to it) and its first claim
  // is answered (its connection and plans are warm); a worker that cannot listen (a pooler without
  // a listen URL) is ready at its second claim, a poll interval after its first.
  const serveWith = (serve: Omit<Worker.WorkerOptions<never>, "handlers">, ready: Latch.Latch) =>
    Effect.gen(function*() {
      const outer = yield* WorkerEvents.WorkerEvents
      let listened = false
      let claims = 0
      const sink: WorkerEvents.Sink = {
        emit: (event) => {
          if (event._tag === "Listening") listened = true
          if (event._tag === "ClaimBatch" && (listened || ++claims > 1)) {
            ready.openUnsafe()
            if (notYetReady === ready) notYetReady = undefined
          }
          if (event._tag === "RunSettled") announceSettled()
          return outer.emit(event)
        }
      }
      return yield* worker(serve).pipe(
        Effect.provideService(WorkflowHandlers, handlers),
        Effect.provideService(WorkerEvents.WorkerEvents, sink)
      )
    }) as Effect.Effect<never, unknown>

  return Context.make(WorkflowEngine.WorkflowEngine, engine).pipe(Context.add(WorkflowHandlers, handlers))
})

/**
 * The `WorkflowEngine` and the handlers of the workflows registered with it. Needs the `RunStore`
 * and the `WorkflowJournal` (`PgRunStore.layer` over `Database.layerFromUrl` or `Database.layer` gives both, in one schema;
 * `MemoryRunStore.layer` gives both in memory).
 *
 * @category layers
 */
export const layer = (options: LeaseholdWorkflowsOptions = {}) => Layer.effectContext(make(options))

/**
 * The engine for a process that only starts, polls, signals, resumes or interrupts executions (an
 * API, a script, the CLI): it never claims a run, so nothing it does leaves a run held by a
 * process that is about to exit. Executions run where a worker serves them (`layerServe`, or
 * `worker` beside other handlers).
 *
 * @category layers
 */
export const layerClient = (options: Omit<LeaseholdWorkflowsOptions, "serve"> = {}) =>
  layer({ ...options, serve: undefined })

/**
 * The engine that also serves the registered workflows: a `Worker.run` with `serve`'s options
 * in the layer's scope, restarted as each workflow registers. For worker processes.
 *
 * @category layers
 */
export const layerServe = (
  serve: Omit<Worker.WorkerOptions<never>, "handlers">,
  options: Omit<LeaseholdWorkflowsOptions, "serve"> = {}
) => layer({ ...options, serve })

/**
 * `Worker.run` serving the registered workflows beside `options.handlers`.
 *
 * @category workers
 */
export const worker = <R = never>(
  options: Omit<Worker.WorkerOptions<R>, "handlers"> & { readonly handlers?: Worker.WorkerOptions<R>["handlers"] }
): Effect.Effect<never, InvalidConfig, WorkflowHandlers | RunStore | Exclude<R, Handler.HandlerServices>> =>
  Effect.gen(function*() {
    const registry = yield* WorkflowHandlers
    const handlers: ReadonlyArray<Handler.Handler<any, any, any, R | Handler.HandlerServices | RunStore>> = [
      ...registry.handlers(),
      ...(options.handlers ?? [])
    ]
    return yield* Worker.run({ ...options, queues: options.queues ?? [registry.queue], handlers })
  })
