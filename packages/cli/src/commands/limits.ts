/**
 * `leasehold limits`, `limits set` and `limits remove`: the per-key concurrency limits queues and
 * kinds declare (`KeyLimits`); `limits rate set` and `limits rate remove`: their rate limits
 * (`RateLimits`). A limit applies from the next claim; running runs keep running.
 */
import { KeyLimits, RateLimits, RunStore, type StoreError } from "@leasehold/core"
import { type Duration, Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import { recorded } from "../Audit.js"
import * as Connection from "../Connection.js"
import { actorFlag, actorOf, connectionFlags, jsonFlag, UsageError } from "../Flags.js"
import * as Output from "../Output.js"
import { keyLimitsTable, rateLimitsTable } from "./stats.js"

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
    const [limits, rates] = yield* Connection.withStore(
      flags,
      RunStore.use((s) => Effect.all([s.keyLimits, s.rateLimits])),
      { migrate: false }
    )
    if (flags.json) return yield* Output.json(rates.length === 0 ? limits : { keyLimits: limits, rateLimits: rates })
    yield* limits.length === 0 ? Output.line("no per-key limits declared") : Output.lines(keyLimitsTable(limits))
    if (rates.length > 0) {
      yield* Output.line()
      yield* Output.lines(rateLimitsTable(rates))
    }
  })).pipe(
    Command.withDescription(
      "Per-key limits, with the keys running and keyed runs due under each; rate limits, with their starts and due runs"
    )
  )

const set = Command.make("set", {
  ...connectionFlags,
  ...scopeFlags,
  perKey: Flag.Int("per-key").pipe(Flag.withDescription("at most this many running runs per concurrency key")),
  as: actorFlag,
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const scope = yield* scopeOf(flags)
    // Checked before anything connects: a bad limit writes nothing.
    const limit = yield* KeyLimits.check({ ...scope, perKey: flags.perKey })
    const actor = yield* actorOf(flags)
    yield* Connection.withStore(
      flags,
      recorded(
        actor,
        "key-limit.set",
        `${limit.scope}:${limit.name}`,
        RunStore.use((s) => s.setKeyLimits([limit])),
        () => ({
          perKey: limit.perKey
        })
      ),
      { migrate: false }
    )
    if (flags.json) return yield* Output.json(limit)
    yield* Output.line(`at most ${limit.perKey} running per key in ${limit.scope} "${limit.name}"`)
  })).pipe(Command.withDescription("Declare (or replace) the per-key limit of a queue or a kind"))

/**
 * `remove` for one kind of limit: removes the limit of a queue or a kind, recorded under `action`
 * as the operator's, and says whether there was one.
 */
const removeCommand = (
  action: string,
  limitName: string,
  removeLimit: (store: RunStore["Service"], scope: "kind" | "queue", name: string) => Effect.Effect<boolean, StoreError>
) =>
  Command.make(
    "remove",
    { ...connectionFlags, ...scopeFlags, as: actorFlag, json: jsonFlag },
    (flags) =>
      Effect.gen(function*() {
        const scope = yield* scopeOf(flags)
        const actor = yield* actorOf(flags)
        const removed = yield* Connection.withStore(
          flags,
          recorded(
            actor,
            action,
            `${scope.scope}:${scope.name}`,
            RunStore.use((s) => removeLimit(s, scope.scope, scope.name)),
            (removed) => ({ removed })
          ),
          { migrate: false }
        )
        if (flags.json) return yield* Output.json({ ...scope, removed })
        yield* Output.line(
          removed
            ? `removed the ${limitName} of ${scope.scope} "${scope.name}"`
            : `${scope.scope} "${scope.name}" had no ${limitName}`
        )
      })
  ).pipe(Command.withDescription(`Remove the ${limitName} of a queue or a kind`))

const remove = removeCommand("key-limit.remove", "per-key limit", (s, scope, name) => s.removeKeyLimit(scope, name))

const rateSet = Command.make("set", {
  ...connectionFlags,
  ...scopeFlags,
  limit: Flag.Int("limit").pipe(Flag.withDescription("at most this many runs started per interval")),
  interval: Flag.String("interval").pipe(
    Flag.withDescription("the interval, for example \"1 second\" (above 0, at most a day)")
  ),
  perKey: Flag.Boolean("per-key").pipe(
    Flag.withDefault(false),
    Flag.withDescription("one window per concurrency key instead of one for the whole queue or kind")
  ),
  as: actorFlag,
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const scope = yield* scopeOf(flags)
    // Checked before anything connects: a bad limit writes nothing.
    const limit = yield* RateLimits.check({
      ...scope,
      limit: flags.limit,
      interval: flags.interval as Duration.Input,
      perKey: flags.perKey
    })
    const actor = yield* actorOf(flags)
    yield* Connection.withStore(
      flags,
      recorded(
        actor,
        "rate-limit.set",
        `${limit.scope}:${limit.name}`,
        RunStore.use((s) => s.setRateLimits([{ ...limit, interval: limit.intervalMs }])),
        () => ({
          limit: limit.limit,
          intervalMs: limit.intervalMs,
          perKey: limit.perKey
        })
      ),
      { migrate: false }
    )
    if (flags.json) return yield* Output.json(limit)
    yield* Output.line(
      `at most ${limit.limit} started per ${flags.interval}${
        limit.perKey ? " per key" : ""
      } in ${limit.scope} "${limit.name}"`
    )
  })).pipe(
    Command.withDescription("Declare (or replace) the rate limit of a queue or a kind: runs started per interval")
  )

const rateRemove = removeCommand("rate-limit.remove", "rate limit", (s, scope, name) => s.removeRateLimit(scope, name))

const rate = Command.make("rate").pipe(
  Command.withDescription("Rate limits: runs started per interval, per queue or kind (or per key): set, remove"),
  Command.withSubcommands([rateSet, rateRemove])
)

export const limits = Command.make("limits").pipe(
  Command.withDescription("Per-key concurrency limits and rate limits: list, set, remove, rate set, rate remove"),
  Command.withSubcommands([list, set, remove, rate])
)
