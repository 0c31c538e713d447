/**
 * The handlers the server knows (a `--tasks` module's): enqueue checks kinds and payloads against
 * them, and a callback's body is checked against the schema its handler declares for the signal.
 *
 * @since 0.1.0
 */
import { Handler, type InvalidConfig } from "@leasehold/core"
import { Context, Layer } from "effect"

/** @category services */
export class Handlers extends Context.Service<Handlers, Handler.Registry>()("@leasehold/http/Handlers") {}

/** Two handlers of one kind are an `InvalidConfig`. @category layers */
export const layer = (handlers: ReadonlyArray<Handler.Handler>): Layer.Layer<Handlers, InvalidConfig> =>
  Layer.effect(Handlers, Handler.registry(handlers))
