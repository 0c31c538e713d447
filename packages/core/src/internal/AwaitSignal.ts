/**
 * What `Run.awaitSignal` does, apart so that `Handler.make` can hand a handler its signals, typed
 * by their schemas, without the handler module importing `Run` (which imports it).
 */
import { Duration, Effect, Schema } from "effect"
import { CurrentRun } from "../CurrentRun.js"
import { type InvalidConfig, InvalidPayload, type SignalTokenInUse, type StoreError } from "../Errors.js"
import { Fence, leaseKey } from "../Fence.js"
import * as Limits from "../Limits.js"
import type { SignalOutcome } from "../RunRecord.js"
import { RunStore, type StaleWrite } from "../RunStore.js"
import * as Options from "./Options.js"
import * as Settlement from "./Settlement.js"

/** @category models */
export interface AwaitSignalOptions {
  /** Resume with `TimedOut` when no signal arrives within this time (measured by the database). */
  readonly timeout?: Duration.Input | undefined
  /** The token a webhook or a person resumes the run with; a random one by default. */
  readonly token?: string | undefined
}

/** The schemas of a handler's signals, by name (`Handler.make`'s `signals`). */
export type SignalSchemas = Readonly<Record<string, Schema.Codec<any, any>>>

/** The outcome of a signal as stored: its payload as it was delivered (JSON). */
export const awaitRaw = (
  signal: string,
  options?: AwaitSignalOptions
): Effect.Effect<
  SignalOutcome,
  StaleWrite | SignalTokenInUse | InvalidConfig | StoreError,
  Fence | RunStore | CurrentRun
> =>
  Effect.gen(function*() {
    const run = yield* CurrentRun
    const seen = run.signals[signal]
    if (seen !== undefined) return seen
    const fence = yield* Fence
    const store = yield* RunStore
    yield* Limits.checkText("signal", signal, Limits.maxSignalBytes)
    const token = options?.token ?? crypto.randomUUID()
    yield* Limits.checkText("token", token, Limits.maxSignalTokenBytes)
    const timeout = options?.timeout === undefined ? undefined : yield* Options.duration("timeout", options.timeout)
    if (timeout !== undefined) yield* Limits.checkDelay("timeout", Duration.toMillis(timeout))
    const suspended = yield* store.suspend({ ...leaseKey(fence), signal, token, timeout })
    // Delivered while this attempt was still running (a callback that beat the suspension).
    if (suspended._tag === "AlreadySignalled") return suspended.outcome
    Settlement.report(run, "suspended")
    // The run no longer belongs to this handler: stop it here, as an interruption no handler
    // code can swallow by catching errors.
    return yield* Effect.interrupt
  }).pipe(Effect.withSpan("Run.awaitSignal", { attributes: { signal } }))

/**
 * The outcome decoded with the signal's schema. Every delivery path that knows the handler refuses
 * what does not decode, so a payload that fails here was written around them (straight to the
 * store, or under an older schema): `InvalidPayload`, naming the signal.
 */
export const awaitDecoded = <S extends SignalSchemas, K extends keyof S & string>(
  schemas: S,
  signal: K,
  options?: AwaitSignalOptions
): Effect.Effect<
  SignalOutcome<S[K]["Type"]>,
  StaleWrite | SignalTokenInUse | InvalidConfig | InvalidPayload | StoreError,
  Fence | RunStore | CurrentRun
> =>
  Effect.flatMap(awaitRaw(signal, options), (outcome) => {
    const schema = schemas[signal]
    if (outcome._tag === "TimedOut" || schema === undefined) return Effect.succeed(outcome)
    return Schema.decodeUnknownEffect(schema)(outcome.payload).pipe(
      Effect.map((payload): SignalOutcome<S[K]["Type"]> => ({ _tag: "Signalled", payload })),
      Effect.mapError((error) =>
        new InvalidPayload({ kind: `signal ${signal}`, issue: error.message.split("\n").join(" ") })
      )
    ) as Effect.Effect<SignalOutcome<S[K]["Type"]>, InvalidPayload>
  })

/**
 * A handler's signals, typed by the schemas it declares (`Handler.make`'s `signals`): the second
 * argument of its `handle`. Only a declared name is accepted, and the outcome is decoded.
 *
 * @category models
 */
export interface Signals<S extends SignalSchemas> {
  /** `Run.awaitSignal` for one of the declared signals, its outcome decoded with its schema. */
  readonly await: <K extends keyof S & string>(
    signal: K,
    options?: AwaitSignalOptions
  ) => Effect.Effect<
    SignalOutcome<S[K]["Type"]>,
    StaleWrite | SignalTokenInUse | InvalidConfig | InvalidPayload | StoreError,
    Fence | RunStore | CurrentRun
  >
}

/** The `Signals` of a declaration. */
export const signals = <S extends SignalSchemas>(schemas: S): Signals<S> => ({
  await: (signal, options) => awaitDecoded(schemas, signal, options)
})
