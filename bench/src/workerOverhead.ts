/**
 * The worker's own cost per run, without a database: `Worker.run` against an in-memory RunStore
 * that answers every claim at once and acknowledges every completion batch. What it reports (CPU
 * µs per run in this process) is what the Leasehold runtime adds on top of its SQL; the drain
 * measure shows both together. Not a test and not part of `npm run bench`:
 *
 *   npm run build && node bench/dist/workerOverhead.js [runs] [--metrics] [--traces] [--log-lines=N] [--keep-logs=failed|always|never]
 *
 * `--log-lines=N`: each handler logs N lines (`Effect.logInfo`, one annotation) to one application
 * logger that drops them, so what `--keep-logs` changes (the handler's `keepLogs`; default
 * "failed": captured, dropped at the completion) is the attempt logs' capture alone.
 */
import { Handler, RunStore, Worker } from "@leasehold/core"
import type { ClaimedRun, FinalizeOutcome } from "@leasehold/core"
import { Deferred, Duration, Effect, Fiber, Logger, Schema, Stream } from "effect"

const total = Number(process.argv[2] ?? 200_000)

const memoryStore = (onAllDone: () => void): RunStore["Service"] => {
  let next = 0
  let completed = 0
  const notImplemented = () => Effect.die(new Error("not used by this measure"))
  return {
    enqueue: notImplemented,
    claim: (request) =>
      Effect.sync(() => {
        const runs: Array<ClaimedRun> = []
        while (runs.length < request.limit && next < total) {
          const id = String(++next)
          runs.push({
            id,
            queue: "default",
            kind: "noop",
            payload: { i: next },
            attempt: 1,
            maxAttempts: 5,
            fence: 1,
            checkpoint: null,
            signals: {},
            concurrencyKey: null,
            via: "due",
            waitMs: 0,
            traceParent: null,
            attemptTimeoutMs: null,
            deadlineInMs: null
          })
        }
        return runs
      }),
    renew: (_owner, leases) => Effect.succeed(leases),
    completeBatch: (items) =>
      Effect.sync(() => {
        completed += items.length
        if (completed >= total) onAllDone()
        return items.map((i): FinalizeOutcome => ({ _tag: "Finalized", runId: i.runId, fence: i.fence }))
      }),
    fail: notImplemented,
    release: notImplemented,
    snooze: notImplemented,
    setRateLimits: notImplemented,
    removeRateLimit: notImplemented,
    rateLimits: Effect.succeed([]),
    checkpoint: notImplemented,
    suspend: notImplemented,
    completeInTransaction: notImplemented,
    keepAttemptLog: notImplemented,
    attemptLogs: notImplemented,
    resumeById: notImplemented,
    deliverSignal: notImplemented,
    leases: Effect.die(new Error("not used by this measure")),
    cancelMany: notImplemented,
    retryMany: notImplemented,
    countDeletable: notImplemented,
    deleteRuns: notImplemented,
    maintainHistory: () => Effect.succeed([]),
    historyStatus: Effect.die(new Error("not used by this measure")),
    recordAction: notImplemented,
    actions: notImplemented,
    callbackExpiry: notImplemented,
    resumeByToken: notImplemented,
    cancel: notImplemented,
    retry: notImplemented,
    get: notImplemented,
    list: notImplemented,
    history: notImplemented,
    stats: Effect.die(new Error("not used by this measure")),
    sample: Effect.die(new Error("not used by this measure")),
    pauseQueue: notImplemented,
    resumeQueue: notImplemented,
    pausedQueues: Effect.die(new Error("not used by this measure")),
    setKeyLimits: notImplemented,
    removeKeyLimit: notImplemented,
    keyLimits: Effect.die(new Error("not used by this measure")),
    registerSchedules: notImplemented,
    tickSchedules: Effect.succeed({ fired: [], nextInMs: null }),
    schedules: Effect.die(new Error("not used by this measure")),
    pauseSchedule: notImplemented,
    resumeSchedule: notImplemented,
    // The worker announces itself at each heartbeat: nothing to store here.
    announceWorker: () => Effect.void,
    retireWorker: () => Effect.succeed(true),
    workers: Effect.die(new Error("not used by this measure")),
    goneWorkers: Effect.die(new Error("not used by this measure")),
    throughput: () => Effect.die(new Error("not used by this measure")),
    keyUsage: () => Effect.die(new Error("not used by this measure")),
    notifications: Stream.never
  }
}

// `--metrics`, `--traces`: the worker's telemetry on (spans go to Effect's default tracer, not
// exported: this measures what recording costs the runtime).
const flags = new Set(process.argv.slice(2).filter((arg) => arg === "--metrics" || arg === "--traces"))
const option = (name: string): string | undefined =>
  process.argv.find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3)
const logLines = Number(option("log-lines") ?? 0)
const keepLogs = (option("keep-logs") ?? "failed") as "failed" | "always" | "never"

const main = Effect.gen(function*() {
  const done = yield* Deferred.make<void>()
  const store = memoryStore(() => Deferred.doneUnsafe(done, Effect.void))
  let executed = 0
  const handler = Handler.make({
    kind: "noop",
    payload: Schema.Struct({ i: Schema.Number }),
    keepLogs,
    handle: ({ i }) =>
      logLines === 0
        ? Effect.sync(() => void executed++)
        : Effect.andThen(
          Effect.annotateLogs(
            Effect.forEach(Array.from({ length: logLines }, (_, n) => n), (n) =>
              Effect.logInfo(`step ${n} of run ${i}`), {
              discard: true
            }),
            { order: "o-1" }
          ),
          Effect.sync(() =>
            void executed++
          )
        )
  })
  const cpuBefore = process.cpuUsage()
  const started = performance.now()
  const fiber = yield* Effect.forkDetach(
    Worker.run({
      handlers: [handler],
      concurrency: 2000,
      maxCompletionBatch: 500,
      ttl: "30 seconds",
      pollInterval: "1 second",
      metrics: flags.has("--metrics"),
      traces: flags.has("--traces")
    }).pipe(
      Effect.provideService(RunStore, store),
      Effect.provide(Logger.layer([Logger.make(() => {})]))
    )
  )
  yield* Deferred.await(done)
  const wallMs = performance.now() - started
  const cpu = process.cpuUsage(cpuBefore)
  yield* Fiber.interrupt(fiber)
  const cpuUs = cpu.user + cpu.system
  const telemetry = ([...flags].map((f) => f.slice(2)).join(" and ") || "no telemetry") +
    (logLines === 0 ? "" : `, ${logLines} log lines per run, keepLogs ${keepLogs}`)
  console.log(
    `${executed} runs in ${wallMs.toFixed(0)} ms: ${(cpuUs / executed).toFixed(2)} µs CPU per run, ${
      (executed / (wallMs / 1000)).toFixed(0)
    } runs/s (one process, no database, ${telemetry})`
  )
}).pipe(Effect.timeout(Duration.minutes(5)))

Effect.runPromise(main).catch((error) => {
  console.error(error)
  process.exit(1)
})
