/**
 * The admin API's event stream against a real server on an ephemeral port: every `/api/events`
 * subscriber shares the server's one LISTEN connection (counted in pg_stat_activity), and past the
 * cap a subscriber is answered 503 with `Retry-After`.
 */
import { assert, describe, it } from "@effect/vitest"
import { RunStore } from "@leasehold/core"
import { Callbacks, Handlers, Server } from "@leasehold/http"
import { Context, Effect, Layer, Redacted } from "effect"
import { HttpServer } from "effect/http"
import { callbacksOptions, request } from "./support/http.js"
import { type Stores, twoStores } from "./support/stores.js"
import { eventually } from "./support/workers.js"

const token = "admin-token-for-tests-0123456789"
const bearer = { authorization: `Bearer ${token}` }

const serve = (stores: Stores, maxEventStreams: number) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      Server.layer({ host: "127.0.0.1", port: 0, token: Redacted.make(token), maxEventStreams }).pipe(
        Layer.provide(
          Layer.mergeAll(Callbacks.layer(callbacksOptions({})), Handlers.layer([]), Layer.succeed(RunStore, stores.a))
        )
      )
    )
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag === "UnixPathAddress") throw new Error("expected a TCP address")
    return `http://127.0.0.1:${address.port}`
  })

/** An open event stream, read as text; aborted when the scope closes (or by `close`). */
const subscribe = (origin: string) =>
  Effect.gen(function*() {
    const controller = new AbortController()
    yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
    const response = yield* Effect.promise(() =>
      fetch(`${origin}/api/events`, { headers: bearer, signal: controller.signal })
    )
    assert.strictEqual(response.status, 200)
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader()
    const seen = { text: "" }
    const readUntil = (needle: string) =>
      Effect.promise(async () => {
        while (!seen.text.includes(needle)) {
          const { value, done } = await reader.read()
          if (done) throw new Error(`stream ended before ${needle}: ${seen.text}`)
          seen.text += value
        }
      })
    return { readUntil, seen, close: () => controller.abort() }
  })

/** Backends listening on this store's channel now. */
const listeners = (stores: Stores) =>
  Effect.map(
    stores.sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE query ILIKE 'LISTEN %' AND position(${`leasehold_${stores.schema}`} in query) > 0`,
    (rows) => rows[0]!.n
  )

describe("admin event stream", () => {
  it.live("N subscribers share one LISTEN connection; the one past the cap gets 503 with Retry-After; a closed stream gives its place back", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const cap = 6
      const origin = yield* serve(stores, cap)
      assert.strictEqual(yield* listeners(stores), 0, "no listener before the first subscriber")

      const streams = []
      for (let i = 0; i < cap; i++) {
        const stream = yield* subscribe(origin)
        yield* stream.readUntil("event: ready")
        streams.push(stream)
      }
      assert.strictEqual(yield* listeners(stores), 1, `one LISTEN backend for ${cap} subscribers`)

      const refused = yield* request(`${origin}/api/events`, { headers: bearer })
      assert.strictEqual(refused.status, 503)
      assert.strictEqual(refused.body.error, "too-many-streams")
      assert.match(refused.headers.get("retry-after") ?? "", /^\d+$/)

      // Every subscriber hears a notification through the shared connection.
      yield* stores.a.enqueue([{ kind: "k", payload: {}, queue: "live" }])
      for (const stream of streams) yield* stream.readUntil(`data: {"_tag":"RunsAvailable","queue":"live"}`)

      // A stream that ends gives its place back; the newcomer shares the same connection.
      streams[0]!.close()
      const newcomer = yield* eventually(
        "a place given back",
        Effect.promise(async () => {
          const controller = new AbortController()
          const response = await fetch(`${origin}/api/events`, { headers: bearer, signal: controller.signal })
          if (response.status === 200) return controller
          await response.text()
          return undefined
        })
      )
      yield* Effect.addFinalizer(() => Effect.sync(() => newcomer.abort()))
      assert.strictEqual(yield* listeners(stores), 1)
    }))

  it.live("a cap that is not a whole number of at least 1 is refused when the server is built", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const error = yield* Effect.flip(serve(stores, 0))
      assert.strictEqual((error as { _tag: string })._tag, "InvalidConfig")
      assert.match((error as { message: string }).message, /maxEventStreams/)
    }))
})
