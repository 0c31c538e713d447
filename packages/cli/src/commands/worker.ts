/**
 * `leasehold worker`: runs a worker with the handlers a tasks module exports, until SIGINT or
 * SIGTERM, then shuts down gracefully.
 */
import { Worker, WorkerEvents } from "@leasehold/core"
import { type Duration, Effect, Logger, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, UsageError } from "../Flags.js"
import * as Observability from "../Observability.js"
import * as Tasks from "../Tasks.js"

/** Events the text mode leaves out. */
const quiet = (event: WorkerEvents.WorkerEvent): boolean =>
  event._tag === "HeartbeatSent" || event._tag === "HeartbeatConfirmed" ||
  (event._tag === "ClaimBatch" && event.count === 0)

const messageText = (message: unknown): string =>
  (Array.isArray(message) ? message : [message]).map((part) => typeof part === "string" ? part : JSON.stringify(part))
    .join(" ")

/**
 * The worker's log lines (start, stop, each failed attempt) beside its events on stdout: in the
 * text mode as `LEVEL message`, in `--json` as one JSON object per line like the events, so the
 * output stays one JSON document per line. Other loggers (OTLP's) are kept.
 */
const lineLogger = (json: boolean) =>
  Logger.make<unknown, void>(({ date, logLevel, message }) => {
    const text = messageText(message)
    process.stdout.write(
      json
        ? JSON.stringify({ at: date.getTime(), _tag: "Log", level: logLevel, message: text }) + "\n"
        : `${logLevel.toUpperCase()} ${text}\n`
    )
  })

const withLineLogger = (json: boolean) =>
  Effect.updateService(
    Logger.CurrentLoggers,
    (loggers) => new Set([...[...loggers].filter((logger) => logger !== Logger.defaultLogger), lineLogger(json)])
  )

export const worker = Command.make("worker", {
  ...connectionFlags,
  tasks: Tasks.tasksFlag,
  queue: Flag.String("queue").pipe(
    Flag.withDefault("default"),
    Flag.withDescription("queues to serve, comma-separated")
  ),
  concurrency: Flag.Int("concurrency").pipe(Flag.withDefault(10)),
  ttl: Flag.String("ttl").pipe(Flag.withDefault("30 seconds"), Flag.withDescription("lease TTL, e.g. \"30 seconds\"")),
  heartbeat: Flag.String("heartbeat").pipe(Flag.optional, Flag.withDescription("renewal interval (default TTL/3)")),
  completedRuns: Flag.Literals("completed-runs", ["keep", "delete"]).pipe(
    Flag.withDefault("keep"),
    Flag.withDescription("keep completed runs (result and history), or delete them as they complete")
  ),
  json: Flag.Boolean("json").pipe(Flag.withDefault(false), Flag.withDescription("print worker events as JSON lines")),
  metricsPort: Flag.Int("metrics-port").pipe(
    Flag.optional,
    Flag.withDescription("serve the worker's metrics for Prometheus at /metrics on this port (0: any free port)")
  ),
  metricsHost: Flag.String("metrics-host").pipe(
    Flag.withDefault("127.0.0.1"),
    Flag.withDescription("address of the metrics endpoint")
  )
}, (flags) =>
  Effect.gen(function*() {
    const handlers = yield* Tasks.fromFlag(flags.tasks)
    const options = {
      handlers,
      queues: flags.queue.split(",").map((q) => q.trim()).filter((q) => q.length > 0),
      concurrency: flags.concurrency,
      // Checked below as durations: a malformed one is an InvalidConfig, a usage error.
      ttl: flags.ttl as Duration.Input,
      heartbeat: Option.getOrUndefined(flags.heartbeat) as Duration.Input | undefined,
      // Recorded for the metrics endpoint, or for OTLP export when an endpoint is configured.
      metrics: Option.isSome(flags.metricsPort) || Observability.enabled
    }
    // Checked before anything connects, so a bad option writes nothing (not even the schema).
    yield* Worker.resolveOptions(options)
    const emit = (event: WorkerEvents.WorkerEvent) =>
      Effect.sync(() => {
        if (flags.json) process.stdout.write(JSON.stringify({ at: Date.now(), ...event }) + "\n")
        // The text is for people: renewals, and claims that took nothing (every poll of an idle
        // worker), are left out; `--json` keeps every event.
        else if (!quiet(event)) {
          process.stdout.write(`${event._tag} ${JSON.stringify({ ...event, _tag: undefined, owner: undefined })}\n`)
        }
      })
    const metricsEndpoint = Effect.gen(function*() {
      if (Option.isNone(flags.metricsPort)) return
      // Loaded only for --metrics-port: the HTTP server would slow every other command's start.
      const MetricsServer = yield* Effect.promise(() => import("../MetricsServer.js"))
      const url = yield* MetricsServer.start(flags.metricsHost, flags.metricsPort.value)
      yield* Effect.sync(() => {
        process.stdout.write(
          flags.json
            ? JSON.stringify({ at: Date.now(), _tag: "MetricsServing", url }) + "\n"
            : `MetricsServing ${url}\n`
        )
      })
    })
    // Handlers that hand out callback URLs (`Callback.url`) get the signing service when its
    // secrets are set; @leasehold/http is loaded only then.
    const callbacks = (process.env.LEASEHOLD_CALLBACK_SECRETS ?? "") === "" ? undefined : yield* Effect.tryPromise({
      try: () => import("@leasehold/http"),
      catch: () =>
        new UsageError({
          message:
            "LEASEHOLD_CALLBACK_SECRETS is set: callback URLs need @leasehold/http, which is not installed: install its tarball beside @leasehold/cli (README, Using the packages)"
        })
    })
    const run = Worker.run(options).pipe(Effect.provideService(WorkerEvents.WorkerEvents, { emit }))
    yield* Connection.withStore(
      flags,
      Effect.andThen(
        metricsEndpoint,
        callbacks === undefined ? run : Effect.provide(run, callbacks.Callbacks.layerConfig())
      ),
      { completedRuns: flags.completedRuns }
    ).pipe(withLineLogger(flags.json))
  })).pipe(Command.withDescription("Run a worker until SIGINT/SIGTERM (graceful shutdown)"))
