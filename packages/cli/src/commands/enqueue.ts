/**
 * `leasehold enqueue <kind>`: enqueues one run. The kind must be one the tasks module handles and
 * the payload must match the kind's schema; both are checked before the database is touched, so
 * bad input writes nothing (not even the schema). `leasehold enqueue --file runs.jsonl`: a batch,
 * one run a line, checked whole before one statement writes it.
 */
import { checkEnqueueRequest, Client, Handler, type RunState, type UniqueWindow } from "@leasehold/core"
import { Duration, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, durationFlag, jsonFlag, payloadFlags, payloadOf, UsageError } from "../Flags.js"
import * as Output from "../Output.js"
import * as Tasks from "../Tasks.js"
import { enqueueFile } from "./enqueueFile.js"

/** The unique window the flags ask for, if any (checked with the rest of the request). */
const uniqueOf = (flags: {
  readonly uniqueKey: Option.Option<string>
  readonly uniqueStates: Option.Option<string>
  readonly uniqueFor: Option.Option<Duration.Duration>
  readonly uniqueByPayload: boolean
}): UniqueWindow | undefined => {
  if (
    !flags.uniqueByPayload && Option.isNone(flags.uniqueKey) && Option.isNone(flags.uniqueStates) &&
    Option.isNone(flags.uniqueFor)
  ) {
    return undefined
  }
  return {
    key: Option.getOrUndefined(flags.uniqueKey),
    states: Option.getOrUndefined(
      Option.map(flags.uniqueStates, (list) => list.split(",").map((s) => s.trim()) as Array<RunState>)
    ),
    periodMs: Option.getOrUndefined(Option.map(flags.uniqueFor, Duration.toMillis))
  }
}

export const enqueue = Command.make("enqueue", {
  ...connectionFlags,
  ...payloadFlags,
  kind: Argument.String("kind").pipe(
    Argument.withDescription("the kind of run (a handler's kind); not with --file"),
    Argument.optional
  ),
  file: Flag.String("file").pipe(
    Flag.optional,
    Flag.withDescription(
      "a file of JSON lines, one run each ({\"kind\":..,\"payload\":..} and any of queue, priority, delayMs, " +
        "maxAttempts, idempotencyKey, concurrencyKey, unique): all are enqueued in one statement, or none"
    )
  ),
  tasks: Tasks.tasksFlag,
  queue: Flag.String("queue").pipe(Flag.withDefault("default"), Flag.withDescription("queue to enqueue on")),
  priority: Flag.Int("priority").pipe(Flag.withDefault(0), Flag.withDescription("higher runs first")),
  delay: durationFlag("delay").pipe(Flag.optional, Flag.withDescription("due after this long, e.g. \"5 seconds\"")),
  maxAttempts: Flag.Int("max-attempts").pipe(
    Flag.filter((n) => n >= 1, () => "a positive integer"),
    Flag.optional,
    Flag.withDescription("attempts before the run fails (default: the handler's, else 5)")
  ),
  idempotencyKey: Flag.String("idempotency-key").pipe(
    Flag.optional,
    Flag.withDescription("enqueueing the same key again yields the existing run")
  ),
  concurrencyKey: Flag.String("concurrency-key").pipe(
    Flag.optional,
    Flag.withDescription("the run's concurrency key: its queue's or kind's per-key limit applies (leasehold limits)")
  ),
  uniqueKey: Flag.String("unique-key").pipe(
    Flag.optional,
    Flag.withDescription(
      "unique by kind and this key: while a run holds it (see --unique-states, --unique-for), it is yielded instead"
    )
  ),
  uniqueStates: Flag.String("unique-states").pipe(
    Flag.optional,
    Flag.withDescription(
      "unique while the existing run is in these states, comma-separated (default: pending,running,suspended)"
    )
  ),
  uniqueFor: durationFlag("unique-for").pipe(
    Flag.optional,
    Flag.withDescription("unique for this long after the existing run was enqueued, e.g. \"1 hour\"")
  ),
  attemptTimeout: durationFlag("attempt-timeout").pipe(
    Flag.optional,
    Flag.withDescription(
      "each attempt is stopped after this long and retried, e.g. \"30 seconds\" (default: the handler's)"
    )
  ),
  deadline: durationFlag("deadline").pipe(
    Flag.optional,
    Flag.withDescription("the run fails for good this long after the enqueue, by the database's clock, e.g. \"1 hour\"")
  ),
  uniqueByPayload: Flag.Boolean("unique-by-payload").pipe(
    Flag.withDefault(false),
    Flag.withDescription("unique by kind and payload (without --unique-key)")
  ),
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    if (Option.isSome(flags.file)) return yield* enqueueFile(flags, flags.file.value)
    if (Option.isNone(flags.kind)) {
      return yield* new UsageError({ message: "enqueue takes a kind (or --file <runs.jsonl>)" })
    }
    const kind = flags.kind.value
    const input = yield* payloadOf(flags, {})
    const registry = yield* Handler.registry(yield* Tasks.fromFlag(flags.tasks))
    // Validate up front, so a bad kind or payload never opens a connection.
    yield* Handler.decodePayload(yield* Handler.lookup(registry, kind), input)
    const options = {
      queue: flags.queue,
      priority: flags.priority,
      delayMs: Option.getOrUndefined(Option.map(flags.delay, Duration.toMillis)),
      maxAttempts: Option.getOrUndefined(flags.maxAttempts),
      idempotencyKey: Option.getOrUndefined(flags.idempotencyKey),
      concurrencyKey: Option.getOrUndefined(flags.concurrencyKey),
      attemptTimeoutMs: Option.getOrUndefined(Option.map(flags.attemptTimeout, Duration.toMillis)),
      deadlineAfterMs: Option.getOrUndefined(Option.map(flags.deadline, Duration.toMillis)),
      unique: uniqueOf(flags)
    }
    yield* checkEnqueueRequest({ kind: kind, payload: input, ...options })
    const enqueued = yield* Connection.withStore(flags, Client.enqueueUnknown(registry, kind, input, options))
    if (flags.json) return yield* Output.json({ id: enqueued.id, created: enqueued.created })
    yield* Output.line(
      enqueued.created
        ? `enqueued run ${enqueued.id} (${kind} on queue ${flags.queue})`
        : options.unique !== undefined
        ? `run ${enqueued.id} already holds this unique window (not enqueued again)`
        : `run ${enqueued.id} already exists for idempotency key "${options.idempotencyKey}" (not enqueued again)`
    )
  })).pipe(Command.withDescription(
    "Enqueue a run (or, with --file, a batch of JSON lines, all or none); payloads are checked against their kinds' schemas first"
  ))
