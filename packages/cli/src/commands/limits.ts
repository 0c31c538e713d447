/**
 * `leasehold limits`, `limits set` and `limits remove`: the per-key concurrency limits queues and
 * kinds declare (`KeyLimits`). A limit applies from the next claim; running runs keep running.
 */
import { KeyLimits, RunStore } from "@leasehold/core"
import { Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, jsonFlag, UsageError } from "../Flags.js"
import * as Output from "../Output.js"
import { keyLimitsTable } from "./stats.js"

const scopeFlags = {
  queue: Flag.String("queue").pipe(Flag.optional, Flag.withDescription("the queue whose runs the limit counts")),
  kind: Flag.String("kind").pipe(Flag.optional, Flag.withDescription("the kind whose runs the limit counts"))
}

/** Exactly one of --queue and --kind. */
const scopeOf = (flags: { readonly queue: Option.Option<string>; readonly kind: Option.Option<string> }) =>
  Option.isSome(flags.queue) === Option.isSome(flags.kind)
    ? Effect.fail(new UsageError({ message: "name exactly one of --queue and --kind" }))
    : Effect.succeed(
      Option.isSome(flags.queue)
        ? { scope: "queue" as const, name: flags.queue.value }
        : { scope: "kind" as const, name: Option.getOrThrow(flags.kind) }
    )

const list = Command.make("list", { ...connectionFlags, json: jsonFlag }, (flags) =>
  Effect.gen(function*() {
    const limits = yield* Connection.withStore(flags, RunStore.use((s) => s.keyLimits), { migrate: false })
    if (flags.json) return yield* Output.json(limits)
    if (limits.length === 0) return yield* Output.line("no per-key limits declared")
    yield* Output.lines(keyLimitsTable(limits))
  })).pipe(Command.withDescription("Per-key limits, with the keys running and keyed runs due under each"))

const set = Command.make("set", {
  ...connectionFlags,
  ...scopeFlags,
  perKey: Flag.Int("per-key").pipe(Flag.withDescription("at most this many running runs per concurrency key")),
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const scope = yield* scopeOf(flags)
    // Checked before anything connects: a bad limit writes nothing.
    const limit = yield* KeyLimits.check({ ...scope, perKey: flags.perKey })
    yield* Connection.withStore(flags, RunStore.use((s) => s.setKeyLimits([limit])), { migrate: false })
    if (flags.json) return yield* Output.json(limit)
    yield* Output.line(`at most ${limit.perKey} running per key in ${limit.scope} "${limit.name}"`)
  })).pipe(Command.withDescription("Declare (or replace) the per-key limit of a queue or a kind"))

const remove = Command.make("remove", { ...connectionFlags, ...scopeFlags, json: jsonFlag }, (flags) =>
  Effect.gen(function*() {
    const scope = yield* scopeOf(flags)
    const removed = yield* Connection.withStore(flags, RunStore.use((s) => s.removeKeyLimit(scope.scope, scope.name)), { migrate: false })
    if (flags.json) return yield* Output.json({ ...scope, removed })
    yield* Output.line(removed ? `removed the per-key limit of ${scope.scope} "${scope.name}"` : `${scope.scope} "${scope.name}" had no per-key limit`)
  })).pipe(Command.withDescription("Remove the per-key limit of a queue or a kind"))

export const limits = Command.make("limits").pipe(
  Command.withDescription("Per-key concurrency limits: list, set, remove"),
  Command.withSubcommands([list, set, remove])
)
