/**
 * A server that cannot listen: the HTTP stack's `ServeError` carries Node's socket error, which
 * has no message of its own worth showing. Said here as one line naming the address and the flag
 * that chose it (exit 1: the port is taken or refused, which is not a mistake in the command).
 *
 * @since 0.1.0
 */
import { Effect, Predicate, Schema } from "effect"

/** Listening on `host:port` failed. */
export class ListenFailed extends Schema.TaggedError<ListenFailed>()("ListenFailed", { message: Schema.String }) {}

const reason = (code: unknown, port: number): string =>
  code === "EADDRINUSE"
    ? `port ${port} is in use`
    : code === "EACCES"
    ? `port ${port} needs privileges this process does not have`
    : code === "EADDRNOTAVAIL"
    ? `the address is not one of this machine's`
    : `cannot listen on port ${port}`

/** Turns the `ServeError` of a server that failed to bind into `ListenFailed`. */
export const explain = (flag: string, host: string, port: number) =>
<A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, { readonly _tag: "ServeError" }> | ListenFailed, R> =>
  Effect.catchIf(
    effect,
    (error): error is Extract<E, { readonly _tag: "ServeError" }> => Predicate.isTagged(error, "ServeError"),
    (error) => {
      const cause = (error as { readonly cause?: unknown }).cause
      const code = Predicate.hasProperty(cause, "code") ? cause.code : undefined
      return Effect.fail(new ListenFailed({ message: `${reason(code, port)} on ${host} (${flag})` }))
    }
  ) as any
