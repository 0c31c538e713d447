/**
 * `leasehold serve`: the callback route, the admin API and the console on one HTTP server, until
 * SIGINT or SIGTERM. The admin tokens (`LEASEHOLD_ADMIN_TOKEN`, `LEASEHOLD_ADMIN_TOKENS`) and the secrets
 * (`LEASEHOLD_CALLBACK_SECRETS`, `LEASEHOLD_WEBHOOK_SECRETS`) come from the environment only and
 * are never printed.
 */
import { InvalidConfig } from "@leasehold/core"
import { WorkflowJournal } from "@leasehold/sql"
import { Config, Effect, Layer, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, UsageError } from "../Flags.js"
import * as Listen from "../Listen.js"
import * as Tasks from "../Tasks.js"

export const serve = Command.make("serve", {
  ...connectionFlags,
  tasks: Tasks.tasksFlag,
  port: Flag.Int("port").pipe(Flag.withDefault(8080), Flag.withDescription("port to listen on (0: any free port)")),
  host: Flag.String("host").pipe(
    Flag.withDefault("127.0.0.1"),
    Flag.withDescription(
      "address to bind; other than loopback, LEASEHOLD_ADMIN_TOKEN or LEASEHOLD_ADMIN_TOKENS is required"
    )
  ),
  baseUrl: Flag.String("base-url").pipe(
    Flag.optional,
    Flag.withDescription("public URL callback links point at (default: $LEASEHOLD_CALLBACK_BASE_URL, else this server)")
  ),
  callbacksOnly: Flag.Boolean("callbacks-only").pipe(
    Flag.withDefault(false),
    Flag.withDescription("serve only POST /callbacks/...")
  ),
  maxEventStreams: Flag.Int("max-event-streams").pipe(
    Flag.withDefault(64),
    Flag.withDescription("open /api/events streams at once, sharing one LISTEN connection; one more is answered 503")
  ),
  readOnly: Flag.Boolean("read-only").pipe(
    Flag.withDefault(false),
    Flag.withDescription("refuse every state-changing admin request (403)")
  )
}, (flags) =>
  Effect.gen(function*() {
    if (!(flags.port >= 0 && flags.port <= 65535)) {
      return yield* new InvalidConfig({ option: "port", issue: `${flags.port} is not a port number` })
    }
    const handlers = yield* Tasks.fromFlag(flags.tasks)
    // Loaded here, not at the top: the HTTP stack would slow every other command's start.
    const [{ Callbacks, Credentials, Handlers, Server }, { HttpServer }] = yield* Effect.tryPromise({
      try: () => Promise.all([import("@leasehold/http"), import("effect/http")]),
      catch: () =>
        new UsageError({
          message:
            "leasehold serve needs @leasehold/http, which is not installed: install its tarball beside @leasehold/cli (npm pack -w packages/http in a Leasehold clone; README, Using the packages)"
        })
    })
    const token = yield* Effect.mapError(
      Config.option(Config.Redacted("LEASEHOLD_ADMIN_TOKEN")),
      () => new InvalidConfig({ option: "LEASEHOLD_ADMIN_TOKEN", issue: "is invalid in the environment" })
    )
    // Named credentials beside the single token (Credentials: name:scope:secret, comma-separated).
    const named = yield* Effect.mapError(
      Config.option(Config.String("LEASEHOLD_ADMIN_TOKENS")),
      () => new InvalidConfig({ option: "LEASEHOLD_ADMIN_TOKENS", issue: "is invalid in the environment" })
    )
    const credentials = yield* Credentials.parse(Option.getOrUndefined(named), Option.getOrUndefined(token))
    // A trace viewer's URL with {traceId} (Jaeger, Tempo, Honeycomb): the console links each run's trace there.
    const traceUrl = yield* Effect.mapError(
      Config.option(Config.String("LEASEHOLD_TRACE_URL")),
      () => new InvalidConfig({ option: "LEASEHOLD_TRACE_URL", issue: "is invalid in the environment" })
    )
    const host = flags.host
    const origin = (port: number) => `http://${host.includes(":") ? `[${host}]` : host}:${port}`
    const ownUrl = origin(flags.port)
    // Without callback secrets there is no callback route, but the admin API and the console need
    // none: they are served alone (a secret that is set but invalid still stops the start).
    const secrets = yield* Effect.orElseSucceed(Config.option(Config.String("LEASEHOLD_CALLBACK_SECRETS")), () =>
      Option.some("invalid"))
    const withCallbacks = flags.callbacksOnly || Option.getOrElse(secrets, () =>
          "") !== ""
    const callbacks = withCallbacks
      ? Callbacks.layerConfig({ baseUrl: Option.getOrElse(flags.baseUrl, () => ownUrl) })
      : Layer.empty
    yield* Connection.withStore(
      flags,
      Effect.gen(function*() {
        // Workflows' journals: their runs' pages name what they wait on, and Approve completes a
        // deferred meant for a person.
        const journal = yield* WorkflowJournal.make({ schema: flags.schema })
        const server = Server.layer({
          host,
          port: flags.port,
          credentials,
          readOnly: flags.readOnly,
          callbacksOnly: flags.callbacksOnly,
          callbacks: withCallbacks,
          maxEventStreams: flags.maxEventStreams,
          traceUrl: Option.getOrUndefined(traceUrl),
          workflows: {
            awaiting: journal.awaiting,
            journal: journal.journal,
            decide: (execution, deferred, value) =>
              journal.deferredDone(execution, deferred, WorkflowJournal.succeeded(value))
          }
        }).pipe(Layer.provide(Layer.mergeAll(callbacks, Handlers.layer(handlers))))
        return yield* Effect.gen(function*() {
          const address = (yield* HttpServer.HttpServer).address
          const where = address._tag === "UnixPathAddress" ? address.path : origin(address.port)
          const modes = `${flags.callbacksOnly ? " (callbacks only)" : ""}${flags.readOnly ? " (read-only)" : ""}${
            withCallbacks ? "" : " (no callback route: LEASEHOLD_CALLBACK_SECRETS is not set)"
          }`
          process.stdout.write(`leasehold: serving on ${where}${modes}\n`)
          return yield* Effect.never
        }).pipe(Effect.provide(server))
      }).pipe(Listen.explain("--port", host, flags.port)),
      { migrate: false }
    )
  })).pipe(Command.withDescription("Serve callbacks, the admin API and the console over HTTP until SIGINT/SIGTERM"))
