/**
 * A silent connection: the worker reaches PostgreSQL through a TCP proxy the test owns, and
 * `partition()` stops forwarding both ways while every socket stays open (a firewall DROP: no
 * reset, no answer). `Effect.timeout` around a query on such a connection answers only once the
 * interrupted query has finished interrupting, which the driver allows only when the peer answers
 * or it gives up on the connection (sql-pg: about 5 seconds later). The worker's bounds (the
 * finalize timeout on a final write, a batch's timeout, a renewal's local deadline) must hold
 * anyway: each scenario below asserts its outcome while the partition is still on, with a wait
 * (3 s) well under the driver's own give-up time and well over the bound (500 ms, 1 s TTL).
 *
 * Then the partition heals: what the worker sent into it is delivered late, under fence 1, after
 * another owner reclaimed the run (fence 2) from outside the partition. Nothing of it lands, and
 * the worker goes on working over the same proxy.
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, RunStore, type RunStore as RunStoreTag } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import * as TcpProxy from "@leasehold/testing/TcpProxy"
import { Context, Deferred, Duration, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { databaseUrl, freshSchema } from "./support/db.js"
import { type Event, eventually, startWorker } from "./support/workers.js"

type Store = RunStoreTag["Service"]

const settings = {
  ttl: "1 second",
  heartbeat: "200 millis",
  finalizeTimeout: "500 millis",
  pollInterval: "100 millis",
  shutdownGrace: "200 millis",
  concurrency: 1
} as const

/** Well under sql-pg's own give-up on an interrupted statement (5 s), well over every bound here. */
const WHILE_PARTITIONED = "3 seconds"

const viaProxy = (url: string, port: number): string => {
  const parsed = new URL(url)
  parsed.hostname = "127.0.0.1"
  parsed.port = String(port)
  return parsed.toString()
}

const storeAt = (url: string, schema: string) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layerFromUrl(url, { maxConnections: 4 })))
    )
    return { store: Context.get(context, RunStore), sql: Context.get(context, SqlClient.SqlClient) }
  })

/**
 * Scoped: a fresh schema, a proxy to the database, a store outside the partition (`direct`, the
 * "other worker" and the test's view) and the worker's store through the proxy.
 */
const setup = Effect.gen(function*() {
  const schema = freshSchema("silent")
  const target = new URL(databaseUrl())
  const proxy = yield* Effect.acquireRelease(
    Effect.promise(() => TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) })),
    (p) => Effect.promise(() => (p.heal(), p.close()))
  )
  const direct = yield* storeAt(databaseUrl(), schema)
  const proxied = yield* storeAt(viaProxy(databaseUrl(), proxy.port), schema)
  return { schema, proxy, direct: direct.store, proxied }
})
type Setup = Effect.Success<typeof setup>

/** Starts the worker over the proxy; at the end of the test the partition heals before it stops. */
const startProxiedWorker = (env: Setup, handlers: ReadonlyArray<Handler.Handler<any, any, any, never>>) =>
  Effect.gen(function*() {
    const events = yield* startWorker(env.proxied.store, env.proxied.sql, { ...settings, owner: "proxied", handlers })
    yield* Effect.addFinalizer(() => Effect.sync(() => env.proxy.heal()))
    return events
  })

const find = <T extends Event["_tag"]>(
  events: ReadonlyArray<Event>,
  tag: T,
  from: number,
  where: (e: Extract<Event, { _tag: T }>) => boolean
) =>
  events.slice(from).find((e): e is Extract<Event, { _tag: T }> =>
    e._tag === tag && where(e as Extract<Event, { _tag: T }>)
  )

const enqueue = <P>(store: Store, handler: Handler.Handler<P>, payload: P) =>
  Effect.map(Client.enqueue(handler, payload).pipe(Effect.provideService(RunStore, store)), (r) => r.id)

const claimedBy = (events: ReadonlyArray<Event>, runId: string) =>
  eventually("the worker claims the run", Effect.sync(() => find(events, "Claimed", 0, (e) => e.runId === runId)))

/** The lease was renewed at least once over the proxy: the path works before it is cut. */
const renewedOnce = (events: ReadonlyArray<Event>, runId: string) =>
  eventually(
    "a renewal confirmed",
    Effect.sync(() => find(events, "HeartbeatConfirmed", 0, (e) => e.renewed.some((l) => l.runId === runId)))
  )

/** Another owner, outside the partition, takes the run once its lease has expired: fence 2. */
const reclaimOutside = (env: Setup, kind: string, runId: string) =>
  eventually(
    "the run reclaimed outside the partition",
    Effect.map(
      env.direct.claim({ owner: "outside", queues: ["default"], kinds: [kind], limit: 1, ttl: Duration.minutes(1) }),
      (claimed) => claimed.find((r) => r.id === runId)
    ),
    "5 seconds"
  )

/**
 * After the heal: a new run completes through the proxy (which also means what was held in the
 * proxy has been delivered before it), the stale writes changed nothing, and the run finishes
 * under fence 2.
 */
const afterHeal = (env: Setup, events: Array<Event>, ok: Handler.Handler<null>, runId: string) =>
  Effect.gen(function*() {
    env.proxy.heal()
    const later = yield* enqueue(env.direct, ok, null)
    yield* eventually(
      "a later run completes through the healed proxy",
      Effect.sync(() => find(events, "RunSettled", 0, (e) => e.runId === later && e.outcome === "completed")),
      "20 seconds"
    )
    assert.strictEqual((yield* env.direct.get(later)).state, "completed")

    // What the worker sent under fence 1 into the partition was delivered late, and landed nowhere.
    const held = yield* env.direct.get(runId)
    assert.strictEqual(held.state, "running")
    assert.strictEqual(held.fence, 2)
    const [answer] = yield* env.direct.completeBatch([{ runId, fence: 2, result: JSON.stringify("outside") }])
    assert.strictEqual(answer!._tag, "Finalized")
    const record = yield* env.direct.get(runId)
    assert.strictEqual(record.state, "completed")
    assert.strictEqual(record.fence, 2)
    assert.deepStrictEqual(record.result, "outside")
    const history = yield* env.direct.history(runId)
    const underFence1 = history.filter((e) => e.fence === 1).map((e) => e.kind)
    assert.deepStrictEqual(
      underFence1.filter((k) => k !== "claimed" && k !== "stale_write_rejected"),
      [],
      "nothing written under fence 1"
    )
  })

const ok = Handler.make({ kind: "ok", payload: Schema.Null, handle: () => Effect.succeed({ ok: true }) })

/**
 * A run whose handler finishes (through `go`) only once the partition is on: its final write
 * (`operation`) goes into the silence and must be abandoned at its bound, freeing the slot while
 * the partition is still on. Then the run is reclaimed outside under fence 2, and the heal is checked.
 */
const finalWriteAbandoned = (
  env: Setup,
  go: Deferred.Deferred<void>,
  handler: Handler.Handler<null, unknown, unknown, never>,
  operation: "fail" | "complete"
) =>
  Effect.gen(function*() {
    const events = yield* startProxiedWorker(env, [handler, ok])
    const runId = yield* enqueue(env.direct, handler, null)
    assert.strictEqual((yield* claimedBy(events, runId)).fence, 1)
    yield* renewedOnce(events, runId)

    env.proxy.partition()
    const from = events.length
    yield* Deferred.succeed(go, undefined)
    // The slot must come back at the bound, not when the driver gives up on the connection.
    yield* eventually(
      `the ${operation} write abandoned, the run settled`,
      Effect.sync(() => find(events, "RunSettled", from, (e) => e.runId === runId && e.outcome === "abandoned")),
      WHILE_PARTITIONED
    )
    assert.isTrue(env.proxy.isPartitioned(), "settled while the partition is still on")
    const error = find(events, "StoreError", from, (e) => e.operation === operation)
    assert.match(error?.error ?? "", /TimeoutError|timed out/)

    assert.strictEqual((yield* reclaimOutside(env, handler.kind, runId)).fence, 2)
    assert.isTrue(env.proxy.isPartitioned())
    yield* afterHeal(env, events, ok, runId)
    return runId
  })

describe("a silent (partitioned) connection", () => {
  it.live("a failure's final write into the partition is abandoned within the finalize timeout, freeing its slot", () =>
    Effect.gen(function*() {
      const env = yield* setup
      const go = yield* Deferred.make<void>()
      const failing = Handler.make({
        kind: "failing",
        payload: Schema.Null,
        maxAttempts: 10,
        handle: () => Effect.andThen(Deferred.await(go), Effect.fail(new Error("boom")))
      })
      const runId = yield* finalWriteAbandoned(env, go, failing, "fail")
      const history = yield* env.direct.history(runId)
      assert.notInclude(history.map((e) => e.kind), "retry_scheduled")
      assert.notInclude(history.map((e) => e.kind), "failed")
    }))

  it.live("a renewal into the partition is abandoned at the local deadline and stops the RunScope", () =>
    Effect.gen(function*() {
      const env = yield* setup
      const interrupted = yield* Deferred.make<void>()
      const holding = Handler.make({
        kind: "holding",
        payload: Schema.Null,
        handle: () => Effect.never.pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined)))
      })
      const events = yield* startProxiedWorker(env, [holding, ok])
      const runId = yield* enqueue(env.direct, holding, null)
      assert.strictEqual((yield* claimedBy(events, runId)).fence, 1)
      yield* renewedOnce(events, runId)

      env.proxy.partition()
      const from = events.length
      // The renewal sent into the silence answers (fails) by the lease's local deadline, and the
      // run is stopped; then its release is abandoned at the finalize timeout.
      const failed = yield* eventually(
        "the renewal abandoned at the local deadline",
        Effect.sync(() => find(events, "HeartbeatFailed", from, (e) => e.leases.some((l) => l.runId === runId))),
        WHILE_PARTITIONED
      )
      assert.match(failed.error, /TimeoutError|timed out/)
      const lost = yield* eventually(
        "the lease lost locally",
        Effect.sync(() => find(events, "LeaseLost", from, (e) => e.runId === runId)),
        WHILE_PARTITIONED
      )
      assert.include(["renewal-failed", "deadline"], lost.reason)
      yield* eventually("the handler interrupted", Deferred.isDone(interrupted), WHILE_PARTITIONED)
      yield* eventually(
        "the release abandoned, the run settled",
        Effect.sync(() => find(events, "RunSettled", from, (e) => e.runId === runId && e.outcome === "abandoned")),
        WHILE_PARTITIONED
      )
      assert.isTrue(env.proxy.isPartitioned(), "all of it while the partition is still on")

      assert.strictEqual((yield* reclaimOutside(env, "holding", runId)).fence, 2)
      assert.isTrue(env.proxy.isPartitioned())
      yield* afterHeal(env, events, ok, runId)
    }))

  it.live("a batched completion into the partition answers with a timeout and frees its slot", () =>
    Effect.gen(function*() {
      const env = yield* setup
      const go = yield* Deferred.make<void>()
      const finishing = Handler.make({
        kind: "finishing",
        payload: Schema.Null,
        handle: () => Effect.as(Deferred.await(go), { done: true })
      })
      const runId = yield* finalWriteAbandoned(env, go, finishing, "complete")
      // The worker's own result, held in the partition under fence 1, was not stored.
      assert.deepStrictEqual((yield* env.direct.get(runId)).result, "outside")
    }))
})
