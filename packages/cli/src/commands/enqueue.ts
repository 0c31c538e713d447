/**
 * `leasehold enqueue <kind>`: enqueues one run. The kind must be one the tasks module handles and
 * the payload must match the kind's schema; both are checked before the database is touched, so
 * bad input writes nothing (not even the schema).
 */
import { checkEnqueueRequest, Client, Handler } from "@leasehold/core"
import { Duration, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, durationFlag, jsonFlag, payloadFlags, payloadOf } from "../Flags.js"
import * as Output from "../Output.js"
import * as Tasks from "../Tasks.js"

export const enqueue = Command.make("enqueue", {
  ...connectionFlags,
  ...payloadFlags,
  kind: Argument.String("kind").pipe(Argument.withDescription("the kind of run (a handler's kind)")),
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
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const input = yield* payloadOf(flags, {})
    const registry = yield* Handler.registry(yield* Tasks.fromFlag(flags.tasks))
    // Validate up front, so a bad kind or payload never opens a connection.
    yield* Handler.decodePayload(yield* Handler.lookup(registry, flags.kind), input)
    const options = {
      queue: flags.queue,
      priority: flags.priority,
      delayMs: Option.getOrUndefined(Option.map(flags.delay, Duration.toMillis)),
      maxAttempts: Option.getOrUndefined(flags.maxAttempts),
      idempotencyKey: Option.getOrUndefined(flags.idempotencyKey),
      concurrencyKey: Option.getOrUndefined(flags.concurrencyKey)
    }
    yield* checkEnqueueRequest({ kind: flags.kind, payload: input, ...options })
    const enqueued = yield* Connection.withStore(flags, Client.enqueueUnknown(registry, flags.kind, input, options))
    if (flags.json) return yield* Output.json({ id: enqueued.id, created: enqueued.created })
    yield* Output.line(
      enqueued.created
        ? `enqueued run ${enqueued.id} (${flags.kind} on queue ${flags.queue})`
        : `run ${enqueued.id} already exists for idempotency key "${options.idempotencyKey}" (not enqueued again)`
    )
  })).pipe(Command.withDescription("Enqueue a run; the payload is checked against its kind's schema first"))
