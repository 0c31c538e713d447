/**
 * The worker's metrics, scraped as Prometheus text from a real HTTP endpoint after a known
 * workload, agree with what the database recorded: completions, failures, reclaims and writes the
 * fence rejected. With metrics off nothing is recorded.
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, RunStore, Telemetry, WorkerMetrics } from "@leasehold/core"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Deferred, Duration, Effect, Layer, Schema } from "effect"
import { HttpRouter, HttpServer } from "effect/http"
import { PrometheusMetrics } from "effect/observability"
import * as fs from "node:fs"
import { createServer } from "node:http"
import { expireLease, readRun, type Stores, twoStores } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

/** A `/metrics` endpoint on an ephemeral port, in the test's scope; returns its URL. */
const metricsEndpoint = Effect.gen(function*() {
  const context = yield* Layer.build(
    HttpRouter.serve(PrometheusMetrics.layerHttp(), { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" }))
    )
  )
  return `${HttpServer.formatAddress(Context.get(context, HttpServer.HttpServer).address)}/metrics`
})

/** Parses Prometheus text: `name{labels} value` lines into a lookup by name and labels. */
const scrape = (url: string) =>
  Effect.promise(async () => {
    const text = await (await fetch(url)).text()
    const samples = text.split("\n").filter((line) => line !== "" && !line.startsWith("#")).map((line) => {
      const match = /^([a-z_]+)(\{(.*)\})? (.+)$/.exec(line)!
      const labels = Object.fromEntries([...(match[3] ?? "").matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]))
      return { name: match[1]!, labels, value: Number(match[4]) }
    })
    return (name: string, labels: Record<string, string> = {}) =>
      samples
        .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
        .reduce((sum, s) => sum + s.value, 0)
  })

const count = (stores: Stores, where: string) =>
  Effect.map(
    stores.sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${stores.schema}".${where}`),
    (rows) => rows[0]!.n
  )

const ok = Handler.make({ kind: "ok", payload: Schema.Unknown, handle: () => Effect.void })
const boom = Handler.make({ kind: "boom", payload: Schema.Unknown, maxAttempts: 1, handle: () => Effect.fail(new Error("boom")) })

describe("worker metrics", () => {
  it.live("with metrics off, a worker records nothing", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const url = yield* metricsEndpoint
      yield* startWorker(stores.a, stores.sql, { handlers: [ok], pollInterval: "50 millis" })
      const { id } = yield* Client.enqueue(ok, null).pipe(Effect.provideService(RunStore, stores.a))
      yield* eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed"))
      const metric = yield* scrape(url)
      assert.strictEqual(metric("leasehold_runs_claimed_total"), 0)
      assert.strictEqual(metric("leasehold_runs_settled_total"), 0)
      assert.strictEqual(metric("leasehold_claim_batch_size_count"), 0)
    }))

  it.live("a scrape after a known workload agrees with the database: completed, failed, reclaimed, rejected by the fence", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const url = yield* metricsEndpoint
      const proceed = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const slow = Handler.make({
        kind: "slow",
        payload: Schema.Unknown,
        handle: () => Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(proceed))
      })
      const enqueue = <P>(handler: Handler.Handler<P>, payload: P) =>
        Client.enqueue(handler, payload).pipe(Effect.provideService(RunStore, stores.a), Effect.map((e) => e.id))

      // A run another worker claimed and then lost (its lease expired): this worker reclaims it.
      const abandoned = yield* enqueue(ok, { abandoned: true })
      assert.strictEqual((yield* stores.b.claim({ owner: "gone", queues: ["default"], kinds: ["ok"], limit: 1, ttl: Duration.minutes(1) })).length, 1)
      yield* expireLease(stores, abandoned)

      yield* startWorker(stores.a, stores.sql, {
        handlers: [ok, boom, slow],
        metrics: true,
        ttl: "60 seconds",
        heartbeat: "30 seconds",
        // The first claim sweeps (it takes the abandoned run); the next sweep is far off, so the
        // run stolen below is taken by the thief, not swept back by this worker.
        pollInterval: "20 seconds"
      })
      for (let i = 0; i < 5; i++) yield* enqueue(ok, { i })
      for (let i = 0; i < 2; i++) yield* enqueue(boom, { i })
      // A run taken from this worker while its handler runs: its completion is rejected by the fence.
      const stolen = yield* enqueue(slow, null)
      yield* Deferred.await(started)
      yield* expireLease(stores, stolen)
      assert.deepStrictEqual(
        (yield* stores.b.claim({ owner: "thief", queues: ["default"], kinds: ["slow"], limit: 1, ttl: Duration.minutes(1) })).map((r) => r.fence),
        [2]
      )
      yield* Deferred.succeed(proceed, undefined)

      yield* eventually("the stale completion rejected", Effect.map(count(stores, "run_events WHERE kind = 'stale_write_rejected'"), (n) => n === 1))
      yield* eventually("every other run ended", Effect.map(count(stores, "runs_now WHERE state IN ('pending', 'running')"), (n) => n === 1))
      const metric = yield* eventually("the settlements recorded", Effect.map(scrape(url), (m) => m("leasehold_runs_settled_total") === 9 && m))

      const completed = yield* count(stores, "runs_now WHERE state = 'completed'")
      const failed = yield* count(stores, "runs_now WHERE state = 'failed'")
      // The thief's claim of the stolen run is a reclaim too, but not this worker's.
      const reclaims = yield* count(stores, "run_events WHERE kind = 'reclaimed' AND owner <> 'thief'")
      const rejections = yield* count(stores, "run_events WHERE kind = 'stale_write_rejected'")
      assert.deepStrictEqual([completed, failed, reclaims, rejections], [6, 2, 1, 1])
      assert.strictEqual(metric("leasehold_runs_settled_total", { outcome: "completed" }), completed)
      assert.strictEqual(metric("leasehold_runs_settled_total", { outcome: "failed" }), failed)
      assert.strictEqual(metric("leasehold_runs_claimed_total", { via: "expired" }), reclaims)
      assert.strictEqual(metric("leasehold_fence_rejections_total", { operation: "complete" }), rejections)
      assert.strictEqual(metric("leasehold_runs_claimed_total", { kind: "ok" }), 6)
      assert.strictEqual(metric("leasehold_runs_in_flight"), 0)
      assert.isAtLeast(metric("leasehold_claim_batch_size_count"), 1)
      assert.isAtLeast(metric("leasehold_completion_batch_size_sum"), completed)
    }))

  it.live("with metrics on, the client counts the runs it enqueued (not those an idempotency key found) and cancelled; sampled queue depths follow", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const url = yield* metricsEndpoint
      const before = yield* scrape(url)
      const counted = Effect.gen(function*() {
        for (let i = 0; i < 3; i++) yield* Client.enqueue(ok, { i }, { queue: "counted" })
        const again = yield* Client.enqueue(ok, null, { queue: "counted", idempotencyKey: "k" })
        yield* Client.enqueue(ok, null, { queue: "counted", idempotencyKey: "k" })
        yield* Client.cancel(again.id)
      }).pipe(Effect.provideService(RunStore, stores.a), Effect.provide(Telemetry.layer({ traces: false })))
      yield* counted
      const after = yield* scrape(url)
      const delta = (name: string, labels: Record<string, string>) => after(name, labels) - before(name, labels)
      assert.strictEqual(delta("leasehold_runs_enqueued_total", { queue: "counted", kind: "ok" }), 4)
      assert.strictEqual(delta("leasehold_runs_cancelled_total", {}), 1)
      // Without metrics on, nothing is counted.
      yield* Client.enqueue(ok, null, { queue: "counted" }).pipe(Effect.provideService(RunStore, stores.a))
      assert.strictEqual((yield* scrape(url))("leasehold_runs_enqueued_total", { queue: "counted" }), after("leasehold_runs_enqueued_total", { queue: "counted" }))
      const stats = yield* stores.a.stats
      assert.deepStrictEqual(stats.dueByQueue.map((q) => [q.queue, q.due]), [["counted", 4]])
    }))

  it("the Grafana dashboard (docs/grafana/leasehold.json) queries only metrics the worker records", () => {
    const dashboard = JSON.parse(fs.readFileSync(new URL("../docs/grafana/leasehold.json", import.meta.url), "utf8")) as {
      panels: Array<{ targets: Array<{ expr: string }> }>
    }
    const defined = new Set(Object.values(WorkerMetrics.metrics).map((metric) => metric.id))
    const queried = new Set(
      dashboard.panels.flatMap((panel) => panel.targets.flatMap((target) => target.expr.match(/leasehold_[a-z_]+/g) ?? []))
        .map((name) => name.replace(/_(bucket|sum|count)$/, ""))
    )
    assert.isAtLeast(queried.size, 10)
    for (const name of queried) assert.isTrue(defined.has(name), `${name} is not a worker metric`)
  })
})
