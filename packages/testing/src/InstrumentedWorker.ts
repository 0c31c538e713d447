/**
 * A Leasehold worker as a separate OS process, for the multi-process tests, the fault harness and
 * the demo. It reaches PostgreSQL through the URL it is given (the test's proxy) and reports, as
 * one JSON line per event on stdout, everything it does: claims with fences, heartbeats sent and
 * confirmed, RunScope interruptions, handler work ticks, and every write it attempts with its
 * outcome.
 *
 * Commands arrive as JSON lines on stdin:
 *   {"cmd":"finish","runId":"1"}              the handler holding run 1 writes its effect row and completes
 *   {"cmd":"stale-write","runId":"1","fence":1}  a fenced effect transaction under the given fence
 *
 * Handlers: step kinds work (a reported tick every 100 ms) for `payload.workMs` or until told to
 * finish; approval kinds wait for a signal. Both then write their effect row in the fenced
 * transaction that completes the run.
 */
import { CurrentRun, Fence, Handler, Run, RunStore, Worker, WorkerEvents } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Deferred, Effect, Layer, Queue, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as readline from "node:readline"
import * as Otlp from "./internal/Otlp.js"

/** Passed as JSON in LEASEHOLD_WORKER_CONFIG. */
export interface Config {
  readonly url: string
  readonly schema: string
  /** Qualified name of the effects table, e.g. `"demo".effects`. */
  readonly effects: string
  readonly owner: string
  readonly ttl: string
  readonly heartbeat: string
  readonly pollInterval: string
  readonly concurrency: number
  /** Pool size towards PostgreSQL. Default 4. */
  readonly maxConnections?: number
  /** Base of the retry backoff. Default "50 millis". */
  readonly retryBase?: string
}

const config: Config = JSON.parse(process.env.LEASEHOLD_WORKER_CONFIG ?? "{}")
const owner = config.owner

const report = (event: Record<string, unknown>) =>
  Effect.sync(() => {
    process.stdout.write(JSON.stringify({ owner, mono: performance.now(), wall: Date.now(), ...event }) + "\n")
  })

const errorReport = (error: any) =>
  error?._tag === "FenceRejected"
    ? {
      tag: error._tag,
      presentedFence: error.presentedFence,
      storedFence: error.storedFence,
      operation: error.operation
    }
    : { tag: error?._tag ?? "Error", message: String(error?.message ?? error) }

/** The side effect: an effect row written in the same fenced transaction that completes the run. */
const writeEffect = Effect.gen(function*() {
  const fence = yield* Fence
  const sql = yield* SqlClient.SqlClient
  yield* report({ type: "write-attempt", op: "effect", runId: fence.runId, fence: fence.fence })
  const result = yield* Run.transaction(
    sql`INSERT INTO ${sql.literal(config.effects)} (run_id, fence, owner)
        VALUES (${fence.runId}::bigint, ${fence.fence}, ${owner})`
  ).pipe(Effect.result)
  if (result._tag === "Success") {
    yield* report({ type: "write-result", op: "effect", runId: fence.runId, fence: fence.fence, outcome: "committed" })
  } else {
    yield* report({
      type: "write-result",
      op: "effect",
      runId: fence.runId,
      fence: fence.fence,
      outcome: "rejected",
      error: errorReport(result.failure)
    })
    return yield* Effect.fail(result.failure)
  }
})

const finishers = new Map<string, Deferred.Deferred<void>>()

/**
 * For the fault suite: short work, optionally a checkpoint halfway, optionally failing its first
 * `failAttempts` attempts (so it is retried, or fails for good once attempts run out).
 */
const chaosStep = Handler.make({
  kind: "chaos-step",
  payload: Schema.Struct({
    workMs: Schema.Number,
    checkpoint: Schema.optional(Schema.Boolean),
    failAttempts: Schema.optional(Schema.Number)
  }),
  handle: ({ checkpoint, failAttempts, workMs }) =>
    Effect.gen(function*() {
      const fence = yield* Fence
      const run = yield* CurrentRun
      yield* Effect.sleep(workMs / 2)
      if (checkpoint === true) {
        yield* Run.checkpoint({ half: true, fence: fence.fence }).pipe(
          Effect.tapError((error) =>
            report({
              type: "write-result",
              op: "checkpoint",
              runId: fence.runId,
              fence: fence.fence,
              outcome: "rejected",
              error: errorReport(error)
            })
          )
        )
      }
      yield* Effect.sleep(workMs / 2)
      if (run.attempt <= (failAttempts ?? 0)) {
        yield* report({ type: "fail", runId: fence.runId, fence: fence.fence, attempt: run.attempt })
        return yield* Effect.fail(new Error(`attempt ${run.attempt} fails on purpose`))
      }
      yield* writeEffect
    })
})

const stepKinds = ["long-step", "process-order", "reconcile-accounts"]
const approvalKinds = ["approval", "approve-refund"]

/** Works (a tick every 100 ms, reported) for `workMs` or until told to finish, then writes its effect row. */
const step = (kind: string) =>
  Handler.make({
    kind,
    payload: Schema.Struct({ workMs: Schema.optional(Schema.Number) }),
    handle: ({ workMs }) =>
      Effect.gen(function*() {
        const fence = yield* Fence
        const finish = yield* Deferred.make<void>()
        finishers.set(fence.runId, finish)
        let n = 0
        const tick = Effect.forever(Effect.andThen(
          Effect.suspend(() => report({ type: "work", runId: fence.runId, fence: fence.fence, n: ++n })),
          Effect.sleep("100 millis")
        ))
        const done = workMs === undefined
          ? Deferred.await(finish)
          : Effect.raceFirst(Deferred.await(finish), Effect.sleep(workMs))
        yield* Effect.raceFirst(tick, done)
        yield* writeEffect
      }).pipe(
        Effect.onInterrupt(() =>
          Effect.flatMap(Fence, (fence) =>
            report({ type: "handler-interrupted", runId: fence.runId, fence: fence.fence }))
        )
      )
  })

/** Waits for a person's approval, then writes its effect row. */
const approval = (kind: string) =>
  Handler.make({
    kind,
    payload: Schema.Unknown,
    handle: () =>
      Effect.gen(function*() {
        const fence = yield* Fence
        yield* report({ type: "work", runId: fence.runId, fence: fence.fence, n: 0 })
        const outcome = yield* Run.awaitSignal("approval")
        yield* report({ type: "signal", runId: fence.runId, fence: fence.fence, outcome })
        yield* writeEffect
      })
  })

type Command = { readonly cmd: "finish"; readonly runId: string } | {
  readonly cmd: "stale-write"
  readonly runId: string
  readonly fence: number
}

const main = Effect.gen(function*() {
  const context = yield* Effect.context<RunStore | SqlClient.SqlClient>()
  const commands = yield* Queue.unbounded<Command>()
  readline.createInterface({ input: process.stdin }).on("line", (line) => {
    if (line.trim() !== "") Queue.offerUnsafe(commands, JSON.parse(line) as Command)
  })
  yield* Effect.forkScoped(Effect.forever(Effect.gen(function*() {
    const command = yield* Queue.take(commands)
    if (command.cmd === "finish") {
      const finish = finishers.get(command.runId)
      yield* report({ type: "command", cmd: "finish", runId: command.runId, held: finish !== undefined })
      if (finish !== undefined) yield* Deferred.succeed(finish, undefined)
    } else {
      // A write under an explicit (possibly stale) fence, exactly as the handler would make it.
      const stub = { kind: "long-step", queue: "default", attempt: 0, maxAttempts: 1, checkpoint: null, signals: {} }
      yield* writeEffect.pipe(
        Effect.provideService(Fence, { runId: command.runId, fence: command.fence, owner }),
        Effect.provideService(CurrentRun, stub),
        Effect.provideContext(context),
        Effect.ignore
      )
    }
  })))
  yield* report({ type: "started", pid: process.pid })
  return yield* Worker.run({
    owner,
    handlers: [...stepKinds.map(step), ...approvalKinds.map(approval), chaosStep],
    retry: { base: (config.retryBase ?? "50 millis") as any, max: "2 seconds" },
    concurrency: config.concurrency,
    ttl: config.ttl as any,
    heartbeat: config.heartbeat as any,
    pollInterval: config.pollInterval as any,
    shutdownGrace: "1 second",
    finalizeTimeout: "20 seconds"
  }).pipe(
    Effect.provideService(WorkerEvents.WorkerEvents, { emit: (event) => report({ type: "event", ...event }) })
  )
})

const layer = PgRunStore.layer({ schema: config.schema, migrate: false }).pipe(
  Layer.provideMerge(
    Database.layerFromUrl(config.url, { maxConnections: config.maxConnections ?? 4, applicationName: owner })
  )
)

const fiber = Effect.runFork(
  Effect.scoped(main).pipe(
    Effect.provide(layer),
    // Traces and metrics exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    Effect.provide(Otlp.layer),
    Effect.catchCause((cause) => report({ type: "crashed", cause: String(cause) }))
  )
)
// SIGTERM/SIGINT interrupt the worker, which shuts down gracefully; then the process exits.
fiber.addObserver(() => process.exit(0))
const stop = () => fiber.interruptUnsafe()
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
