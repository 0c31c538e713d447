/**
 * A handler: the code that runs a kind of run, with the schema its payload must match. The payload
 * is validated with Effect Schema at both boundaries: on enqueue and again on claim.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, type Schedule, Schema } from "effect"
import * as AttemptLogs from "./AttemptLogs.js"
import type { CurrentRun } from "./CurrentRun.js"
import { InvalidConfig, InvalidPayload, UnknownKind, UnstorableValue } from "./Errors.js"
import type { Fence } from "./Fence.js"
import * as AwaitSignal from "./internal/AwaitSignal.js"
import * as Backoff from "./internal/Backoff.js"
import * as Options from "./internal/Options.js"
import * as Json from "./Json.js"
import { maxDelayMs } from "./Limits.js"

/** Services every handler may use without providing them: the worker does. @category models */
export type HandlerServices = Fence | CurrentRun

/** @category models */
export interface Handler<P = any, A = any, E = any, R = any> {
  readonly kind: string
  readonly payload: Schema.Codec<P, unknown>
  readonly handle: (payload: P) => Effect.Effect<A, E, R>
  /**
   * The schema the result is encoded with before it is stored. Without one the result is stored
   * as `JSON.stringify` writes it. Either way a result that cannot be encoded fails its own run.
   */
  readonly result?: Schema.Codec<A, unknown> | undefined
  /** The schemas of the signals it awaits, by name: a delivered outcome must decode with its own. */
  readonly signals?: Readonly<Record<string, Schema.Codec<any, unknown>>> | undefined
  /** Attempts before the run is failed; the store default (5) when absent. */
  readonly maxAttempts?: number | undefined
  /**
   * This kind's retry policy, overriding the worker's `retry` backoff: after the n-th failed
   * attempt, the schedule's n-th delay (replayed from its start, each step given the attempt's
   * error) is how long until the retry is due, counted by the database (`run_at = now() + delay`).
   * Retries stop at whichever comes first: `maxAttempts`, or the end of the schedule (a
   * `Schedule.recurs(2)` allows two retries). A permanent failure (a payload that no longer
   * decodes, a result JSON cannot hold) is never retried.
   */
  readonly retry?: Schedule.Schedule<unknown, unknown> | undefined
  /**
   * Which attempts' Effect log lines are kept with the attempt in the store (`AttemptLogs`):
   * `"failed"` (default) a failed attempt's, written with its failure; `"always"` a completed
   * attempt's too (one more statement per completion batch that holds any); `"never"` none.
   */
  readonly keepLogs?: AttemptLogs.KeepLogs | undefined
  /**
   * How long one attempt may run, counted by the worker's monotonic clock from the handler's start;
   * an enqueue's `attemptTimeoutMs` overrides it. When it passes, the attempt's RunScope is
   * interrupted (its finalizers run) and the attempt fails with `AttemptTimedOut`, retried under
   * `retry` as any failure. Heartbeats do not extend it. None by default.
   */
  readonly attemptTimeout?: Duration.Input | undefined
}

/**
 * Defines a handler. `handle` may require `Fence`, `CurrentRun`, `RunStore` and the application's
 * SqlClient; the worker provides them. A `result` schema, as Effect's workflow activities declare
 * one, encodes what `handle` returns before it is stored.
 *
 * `signals` declares the schema of each signal it awaits: a delivery that does not decode with it
 * is refused (nothing written), and `handle`'s second argument awaits them typed, only by a
 * declared name, the outcome decoded (`signals.await("approval")`).
 *
 * @category constructors
 */
export const make = <P, I, A, E, R, RI = unknown, S extends AwaitSignal.SignalSchemas = {}>(definition: {
  readonly kind: string
  readonly payload: Schema.Codec<P, I>
  readonly handle: (payload: P, signals: AwaitSignal.Signals<S>) => Effect.Effect<A, E, R>
  readonly result?: Schema.Codec<A, RI> | undefined
  readonly signals?: S | undefined
  readonly maxAttempts?: number | undefined
  readonly retry?: Schedule.Schedule<unknown, unknown> | undefined
  readonly keepLogs?: AttemptLogs.KeepLogs | undefined
  readonly attemptTimeout?: Duration.Input | undefined
}): Handler<P, A, E, R> => {
  const signals = AwaitSignal.signals(definition.signals ?? ({} as S))
  return { ...definition, handle: (payload: P) => definition.handle(payload, signals) } as unknown as Handler<
    P,
    A,
    E,
    R
  >
}

/**
 * A handler's attempt timeout in milliseconds (`attemptTimeout`), or `undefined` without one; a
 * malformed or zero duration is `InvalidConfig` naming the kind, and the worker does not start.
 *
 * @category validation
 */
export const attemptTimeoutMillis = (handler: Handler): Effect.Effect<number | undefined, InvalidConfig> => {
  if (handler.attemptTimeout === undefined) return Effect.succeed(undefined)
  const option = `handlers.${handler.kind}.attemptTimeout`
  return Effect.flatMap(Options.duration(option, handler.attemptTimeout), (d) => {
    const ms = Duration.toMillis(d)
    return ms > 0 && ms <= maxDelayMs
      ? Effect.succeed(ms)
      : Effect.fail(new InvalidConfig({ option, issue: `${Duration.format(d)} is not a duration of more than 0` }))
  })
}

/** Handlers by kind. @category models */
export interface Registry {
  readonly kinds: ReadonlyArray<string>
  readonly get: (kind: string) => Handler | undefined
}

/**
 * Handlers by kind; two handlers of one kind, or a `keepLogs` that is not one of its values, are
 * an `InvalidConfig`.
 *
 * @category constructors
 */
export const registry = (handlers: ReadonlyArray<Handler>): Effect.Effect<Registry, InvalidConfig> => {
  const byKind = new Map<string, Handler>()
  for (const handler of handlers) {
    if (byKind.has(handler.kind)) {
      return Effect.fail(
        new InvalidConfig({ option: "handlers", issue: `two handlers share the kind "${handler.kind}"` })
      )
    }
    byKind.set(handler.kind, handler)
  }
  return Effect.as(
    Effect.forEach(handlers, (handler) => AttemptLogs.check(handler.kind, handler.keepLogs), { discard: true }),
    { kinds: [...byKind.keys()], get: (kind: string) => byKind.get(kind) }
  )
}

/** The handler for `kind`, or `UnknownKind`. @category accessors */
export const lookup = (registry: Registry, kind: string): Effect.Effect<Handler, UnknownKind> => {
  const handler = registry.get(kind)
  return handler === undefined ? Effect.fail(new UnknownKind({ kind, known: registry.kinds })) : Effect.succeed(handler)
}

const issueOf = (error: unknown): string =>
  (error instanceof Error ? error.message : String(error)).split("\n").join(" ")

/** Validates a payload as it arrives (from a caller, a CLI flag or the database). @category validation */
export const decodePayload = (handler: Handler, input: unknown): Effect.Effect<unknown, InvalidPayload> =>
  Schema.decodeUnknownEffect(handler.payload)(input).pipe(
    Effect.mapError((error) => new InvalidPayload({ kind: handler.kind, issue: issueOf(error) }))
  ) as Effect.Effect<unknown, InvalidPayload>

/**
 * A synchronous payload validator, compiled once per handler, for the worker's hot path (no
 * effect is built per run).
 *
 * @category validation
 */
export const payloadDecoder = (handler: Handler): (input: unknown) => Exit.Exit<unknown, InvalidPayload> => {
  const decode = Schema.decodeUnknownExit(handler.payload as Schema.Codec<unknown, unknown>)
  return (input) =>
    Exit.mapError(decode(input), (error) => new InvalidPayload({ kind: handler.kind, issue: issueOf(error) }))
}

/** Validates a typed payload and turns it into the JSON the store keeps. @category validation */
export const encodePayload = (handler: Handler, payload: unknown): Effect.Effect<unknown, InvalidPayload> =>
  Schema.encodeUnknownEffect(handler.payload)(payload).pipe(
    // The encoded form must also be JSON (a BigInt or a cycle that the schema let through is not).
    Effect.tap((encoded) => Exit.mapError(Json.encode(encoded, "payload"), (e) => e.issue)),
    Effect.mapError((error) => new InvalidPayload({ kind: handler.kind, issue: issueOf(error) }))
  ) as Effect.Effect<unknown, InvalidPayload>

/**
 * A result encoder compiled once: `schema` (if any), then JSON text. A value that does not encode
 * is `UnstorableValue`, naming the run and the reason. The worker runs it per run before a
 * completion joins a batch; `Run.transaction` runs it inside the transaction.
 *
 * @category validation
 */
export const encoderFor = <A>(
  schema: Schema.Codec<A, unknown> | undefined
): (runId: string, value: A) => Exit.Exit<string, UnstorableValue> => {
  if (schema === undefined) return (runId, value) => Json.encode(value ?? null, "result", runId)
  const encode = Schema.encodeUnknownExit(schema as Schema.Codec<unknown, unknown>)
  return (runId, value) => {
    const encoded = encode(value)
    return Exit.isSuccess(encoded)
      ? Json.encode(encoded.value ?? null, "result", runId)
      : Exit.fail(new UnstorableValue({ what: "result", runId, issue: issueOf(Cause.squash(encoded.cause)) }))
  }
}

/** The encoder of a handler's results (its `result` schema, if any). @category validation */
export const resultEncoder = (
  handler: Handler
): (runId: string, value: unknown) => Exit.Exit<string, UnstorableValue> => encoderFor(handler.result)

/**
 * Checks a signal's outcome payload against the schema the handler declares for that signal
 * (`signals`); a signal without one accepts any JSON.
 *
 * @category validation
 */
export const decodeSignal = (
  handler: Handler,
  signal: string,
  input: unknown
): Effect.Effect<unknown, InvalidPayload> => {
  const schema = handler.signals?.[signal]
  if (schema === undefined) return Effect.succeed(input)
  return Schema.decodeUnknownEffect(schema)(input).pipe(
    Effect.mapError((error) =>
      new InvalidPayload({ kind: `${handler.kind} (signal ${signal})`, issue: issueOf(error) })
    )
  ) as Effect.Effect<unknown, InvalidPayload>
}

/**
 * `decodeSignal` as a synchronous check, for a store to run while it holds the run (`Client.resume`).
 *
 * @category validation
 */
export const signalDecoder = (
  handler: Handler,
  signal: string
): (input: unknown) => Exit.Exit<void, InvalidPayload> => {
  const schema = handler.signals?.[signal]
  if (schema === undefined) return () => Exit.void
  const decode = Schema.decodeUnknownExit(schema)
  return (input) =>
    Exit.mapBoth(decode(input), {
      onFailure: (error) => new InvalidPayload({ kind: `${handler.kind} (signal ${signal})`, issue: issueOf(error) }),
      onSuccess: () => undefined
    })
}

/**
 * The delay, in milliseconds, before the retry after `attempt` failed attempts (1-based) under a
 * handler's own retry policy (`retry`), or `undefined` when the schedule has ended and the run
 * fails outright. What the worker computes when a run of this handler fails (`maxAttempts` is the
 * store's to apply); `undefined` too for a handler without a policy of its own (the worker's
 * backoff applies).
 *
 * @category rules
 */
export const retryDelay = (handler: Handler, attempt: number, error: unknown): Effect.Effect<number | undefined> =>
  handler.retry === undefined ? Effect.succeed(undefined) : Backoff.scheduleDelay(handler.retry, attempt, error)
