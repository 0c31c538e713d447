/**
 * A handler: the code that runs a kind of run, with the schema its payload must match. The payload
 * is validated with Effect Schema at both boundaries: on enqueue and again on claim.
 *
 * @since 0.1.0
 */
import { Effect, Exit, Schema } from "effect"
import type { CurrentRun } from "./CurrentRun.js"
import { InvalidPayload, UnknownKind } from "./Errors.js"
import type { Fence } from "./Fence.js"

/** Services every handler may use without providing them: the worker does. @category models */
export type HandlerServices = Fence | CurrentRun

/** @category models */
export interface Handler<P = any, A = any, E = any, R = any> {
  readonly kind: string
  readonly payload: Schema.Codec<P, unknown>
  readonly handle: (payload: P) => Effect.Effect<A, E, R>
  /** Attempts before the run is failed; the store default (5) when absent. */
  readonly maxAttempts?: number | undefined
}

/**
 * Defines a handler. `handle` may require `Fence`, `CurrentRun`, `RunStore` and the application's
 * SqlClient; the worker provides them.
 *
 * @category constructors
 */
export const make = <P, I, A, E, R>(definition: {
  readonly kind: string
  readonly payload: Schema.Codec<P, I>
  readonly handle: (payload: P) => Effect.Effect<A, E, R>
  readonly maxAttempts?: number | undefined
}): Handler<P, A, E, R> => definition as unknown as Handler<P, A, E, R>

/** Handlers by kind. @category models */
export interface Registry {
  readonly kinds: ReadonlyArray<string>
  readonly get: (kind: string) => Handler | undefined
}

/** @category constructors */
export const registry = (handlers: ReadonlyArray<Handler>): Registry => {
  const byKind = new Map(handlers.map((h) => [h.kind, h] as const))
  if (byKind.size !== handlers.length) throw new Error("two handlers share a kind")
  return { kinds: [...byKind.keys()], get: (kind) => byKind.get(kind) }
}

/** The handler for `kind`, or `UnknownKind`. @category accessors */
export const lookup = (registry: Registry, kind: string): Effect.Effect<Handler, UnknownKind> => {
  const handler = registry.get(kind)
  return handler === undefined ? Effect.fail(new UnknownKind({ kind, known: registry.kinds })) : Effect.succeed(handler)
}

const issueOf = (error: Schema.SchemaError): string => error.message.split("\n").join(" ")

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
  return (input) => Exit.mapError(decode(input), (error) => new InvalidPayload({ kind: handler.kind, issue: issueOf(error) }))
}

/** Validates a typed payload and turns it into the JSON the store keeps. @category validation */
export const encodePayload = (handler: Handler, payload: unknown): Effect.Effect<unknown, InvalidPayload> =>
  Schema.encodeUnknownEffect(handler.payload)(payload).pipe(
    Effect.mapError((error) => new InvalidPayload({ kind: handler.kind, issue: issueOf(error) }))
  ) as Effect.Effect<unknown, InvalidPayload>
