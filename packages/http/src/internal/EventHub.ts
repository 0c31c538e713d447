/**
 * One LISTEN connection per server, shared by every `/api/events` subscriber: the store's
 * notifications are read by one fiber, started by the first subscriber and kept until the server
 * stops, and published to every subscriber. A cap bounds the subscribers (each holds a socket
 * and a buffer, never a database connection).
 */
import type { RunStore, StoreNotification } from "@leasehold/core"
import { Duration, Effect, PubSub, Schedule, type Scope, Stream } from "effect"

/** @category models */
export interface EventHub {
  /**
   * A subscriber's stream of notifications, beginning with `Subscribed` once the shared LISTEN is
   * acknowledged; `undefined` when the hub holds `maxSubscribers` already. The place is taken at
   * once and given back when the stream ends.
   */
  readonly subscribe: (store: RunStore["Service"]) => Stream.Stream<StoreNotification> | undefined
  /** Subscribers now. */
  readonly subscribers: () => number
}

// A subscriber that does not keep up loses its oldest events, not the server its memory: the
// console refreshes on any of them, so a newer one stands for the ones it replaces.
const bufferPerSubscriber = 256

// Reconnecting after the listening connection fails: quickly at first, then every 5 seconds.
const reconnect = Schedule.exponential("100 millis").pipe(
  Schedule.modifyDelay(({ duration }) => Effect.succeed(Duration.min(duration, Duration.seconds(5))))
)

/** A hub whose listener, once started, lives as long as `Scope`. */
export const make = (maxSubscribers: number): Effect.Effect<EventHub, never, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const pubsub = yield* PubSub.sliding<StoreNotification>(bufferPerSubscriber)
    yield* Effect.addFinalizer(() => PubSub.shutdown(pubsub))
    let subscribers = 0
    let started = false
    // Whether the shared LISTEN is acknowledged now: a subscriber arriving later gets its own
    // `Subscribed` at once, as it would from a connection of its own.
    let listening = false

    const listen = (store: RunStore["Service"]) =>
      store.notifications.pipe(
        Stream.runForEach((note) =>
          Effect.andThen(
            Effect.sync(() => {
              if (note._tag === "Subscribed") listening = true
            }),
            PubSub.publish(pubsub, note)
          )
        ),
        Effect.ensuring(Effect.sync(() => {
          listening = false
        })),
        Effect.tapError((error) => Effect.logWarning("event stream: listening failed; reconnecting", error)),
        Effect.retry(reconnect),
        Effect.ignore
      )

    const stream = (store: RunStore["Service"]): Stream.Stream<StoreNotification> =>
      Stream.unwrap(Effect.gen(function*() {
        if (!started) {
          started = true
          yield* Effect.forkIn(listen(store), scope)
        }
        const subscription = yield* PubSub.subscribe(pubsub)
        const greeting = listening ? Stream.succeed<StoreNotification>({ _tag: "Subscribed" }) : Stream.empty
        return Stream.concat(greeting, Stream.fromSubscription(subscription))
      }))

    return {
      subscribe: (store) => {
        if (subscribers >= maxSubscribers) return undefined
        subscribers++
        let released = false
        return stream(store).pipe(
          Stream.ensuring(Effect.sync(() => {
            if (released) return
            released = true
            subscribers--
          }))
        )
      },
      subscribers: () => subscribers
    } satisfies EventHub
  })
