/**
 * The worker's metrics, scraped as Prometheus text from a real HTTP endpoint after a known
 * workload, agree with what the database recorded: completions, failures, reclaims and writes the
 * fence rejected. With metrics off nothing is recorded.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, RunStore, Telemetry, WorkerMetrics } from "@leasehold/core"
import { Context, Deferred, Duration, Effect, Layer, Schema } from "effect"
import { FetchHttpClient, HttpRouter, HttpServer } from "effect/http"
import { OtlpMetrics, OtlpSerialization, PrometheusMetrics } from "effect/observability"
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
      const labels = Object.fromEntries(
        [...(match[3] ?? "").matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!])
      )
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

interface OtlpPoint {
  readonly attributes: ReadonlyArray<{ key: string; value: { stringValue?: string } }>
  readonly asDouble?: number
  readonly asInt?: number | string
}
interface OtlpMetric {
  readonly name: string
  readonly unit: string
  readonly gauge?: { readonly dataPoints: ReadonlyArray<OtlpPoint> }
}

/** An OTLP/HTTP receiver on an ephemeral port, keeping every export posted to /v1/metrics (the latest last). */
const metricsReceiver = Effect.acquireRelease(
  Effect.promise(() =>
    new Promise<{ url: string; exports: Array<ReadonlyArray<OtlpMetric>>; close: () => void }>((resolve) => {
      const exports: Array<ReadonlyArray<OtlpMetric>> = []
      const server = createServer((req, res) => {
        let body = ""
        req.on("data", (chunk) => void (body += String(chunk)))
        req.on("end", () => {
          if (req.url === "/v1/metrics") {
            const payload = JSON.parse(body) as {
              resourceMetrics: Array<{ scopeMetrics: Array<{ metrics: Array<OtlpMetric> }> }>
            }
            exports.push(payload.resourceMetrics.flatMap((r) => r.scopeMetrics.flatMap((s) => s.metrics)))
          }
          res.writeHead(200, { "content-type": "application/json" }).end("{}")
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address() as { port: number }
        resolve({ url: `http://127.0.0.1:${address.port}/v1/metrics`, exports, close: () => server.close() })
      })
    })
  ),
  (r) => Effect.sync(r.close)
)

/** A gauge point's value for these labels in one export, or undefined when it has no such series. */
const gaugeValue = (metrics: ReadonlyArray<OtlpMetric>, name: string, labels: Record<string, string>) => {
  const point = metrics.find((m) => m.name === name)?.gauge?.dataPoints.find((p) =>
    Object.entries(labels).every(([k, v]) => p.attributes.some((a) => a.key === k && a.value.stringValue === v))
  )
  return point === undefined ? undefined : Number(point.asDouble ?? point.asInt)
}

const ok = Handler.make({ kind: "ok", payload: Schema.Unknown, handle: () => Effect.void })
const boom = Handler.make({
  kind: "boom",
  payload: Schema.Unknown,
  maxAttempts: 1,
  handle: () => Effect.fail(new Error("boom"))
})

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
      assert.strictEqual(
        (yield* stores.b.claim({
          owner: "gone",
          queues: ["default"],
          kinds: ["ok"],
          limit: 1,
          ttl: Duration.minutes(1)
        })).length,
        1
      )
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
        (yield* stores.b.claim({
          owner: "thief",
          queues: ["default"],
          kinds: ["slow"],
          limit: 1,
          ttl: Duration.minutes(1)
        })).map((r) => r.fence),
        [2]
      )
      yield* Deferred.succeed(proceed, undefined)

      yield* eventually(
        "the stale completion rejected",
        Effect.map(count(stores, "run_events WHERE kind = 'stale_write_rejected'"), (n) => n === 1)
      )
      yield* eventually(
        "every other run ended",
        Effect.map(count(stores, "runs_now WHERE state IN ('pending', 'running')"), (n) => n === 1)
      )
      const metric = yield* eventually(
        "the settlements recorded",
        Effect.map(scrape(url), (m) => m("leasehold_runs_settled_total") === 9 && m)
      )

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
      assert.strictEqual(
        (yield* scrape(url))("leasehold_runs_enqueued_total", { queue: "counted" }),
        after("leasehold_runs_enqueued_total", { queue: "counted" })
      )
      const stats = yield* stores.a.stats
      assert.deepStrictEqual(stats.dueByQueue.map((q) => [q.queue, q.due]), [["counted", 4]])
    }))

  it.live("a sampled gauge with nothing behind it reads 0: a queue's running and pending runs once they ended, on /metrics", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const url = yield* metricsEndpoint
      // A queue of this test's own: the registry is the process's.
      const queue = `stale-${stores.schema}`
      yield* Effect.forkScoped(WorkerMetrics.sampler(stores.a, "50 millis"))
      yield* stores.a.enqueue([0, 1, 2].map(() => ({ kind: "k", payload: {}, queue })))
      const held = yield* stores.b.claim({
        owner: "w",
        queues: [queue],
        kinds: ["k"],
        limit: 2,
        ttl: Duration.minutes(5)
      })
      const gauge = (state: string) =>
        Effect.map(scrape(url), (metric) => metric("leasehold_queue_runs", { queue, state }))
      yield* eventually(
        "2 running and 1 pending sampled",
        Effect.map(Effect.all([gauge("running"), gauge("pending")]), ([r, p]) => r === 2 && p === 1)
      )
      yield* stores.a.completeBatch(held.map((r) => ({ runId: r.id, fence: r.fence, result: null })))
      const [rest] = yield* stores.b.claim({
        owner: "w",
        queues: [queue],
        kinds: ["k"],
        limit: 1,
        ttl: Duration.minutes(5)
      })
      yield* stores.a.completeBatch([{ runId: rest!.id, fence: rest!.fence, result: null }])
      yield* eventually(
        "nothing running or pending sampled",
        Effect.map(Effect.all([gauge("running"), gauge("pending")]), ([r, p]) => r === 0 && p === 0)
      )
      assert.strictEqual(yield* Effect.map(scrape(url), (metric) => metric("leasehold_queue_due_runs", { queue })), 0)
    }))

  it.live("over OTLP: a sampled gauge with nothing behind it reads 0, and metrics named *_seconds carry unit s", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const otlp = yield* metricsReceiver
      const queue = `otlp-${stores.schema}`
      const latest = (name: string, labels: Record<string, string>) =>
        gaugeValue(otlp.exports.at(-1) ?? [], name, labels)
      yield* Effect.gen(function*() {
        yield* Effect.forkScoped(WorkerMetrics.sampler(stores.a, "50 millis"))
        yield* startWorker(stores.a, stores.sql, {
          handlers: [ok],
          metrics: true,
          pollInterval: "50 millis",
          queues: [queue]
        })
        // A run of a kind the worker does not handle, held by another owner.
        yield* stores.a.enqueue([{ kind: "k", payload: {}, queue }])
        const [held] = yield* stores.b.claim({
          owner: "w",
          queues: [queue],
          kinds: ["k"],
          limit: 1,
          ttl: Duration.minutes(5)
        })
        yield* eventually(
          "1 running exported",
          Effect.sync(() => latest("leasehold_queue_runs", { queue, state: "running" }) === 1)
        )
        yield* stores.a.completeBatch([{ runId: held!.id, fence: held!.fence, result: null }])
        // And a run of the worker's own, for its duration histograms.
        const { id } = yield* Client.enqueue(ok, null, { queue }).pipe(Effect.provideService(RunStore, stores.a))
        yield* eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed"))
        yield* eventually(
          "0 running exported",
          Effect.sync(() => latest("leasehold_queue_runs", { queue, state: "running" }) === 0)
        )
        // The run's duration is recorded as it settles: waited for in an export, not raced with the scope's end.
        yield* eventually(
          "the run's duration exported",
          Effect.sync(() => otlp.exports.flat().some((m) => m.name === "leasehold_run_duration_seconds"))
        )
      }).pipe(
        Effect.scoped,
        Effect.provide(
          OtlpMetrics.layer({
            url: otlp.url,
            resource: { serviceName: "leasehold-test" },
            exportInterval: "100 millis"
          })
        ),
        Effect.provide(OtlpSerialization.layerJson),
        Effect.provide(FetchHttpClient.layer)
      )
      // Every export: the worker's own series end with its scope.
      const exported = otlp.exports.flat()
      const timed = exported.filter((m) => m.name.endsWith("_seconds"))
      assert.includeMembers([...new Set(timed.map((m) => m.name))], [
        "leasehold_run_duration_seconds",
        "leasehold_run_wait_seconds",
        "leasehold_oldest_due_seconds"
      ])
      for (const metric of timed) assert.strictEqual(metric.unit, "s", metric.name)
      assert.strictEqual(exported.find((m) => m.name === "leasehold_runs_claimed_total")?.unit, "1")
    }))

  it("the Grafana dashboard (docs/grafana/leasehold.json) queries only metrics the worker records", () => {
    const dashboard = JSON.parse(
      fs.readFileSync(new URL("../docs/grafana/leasehold.json", import.meta.url), "utf8")
    ) as {
      panels: Array<{ targets: Array<{ expr: string }> }>
    }
    const defined = new Set(Object.values(WorkerMetrics.metrics).map((metric) => metric.id))
    const queried = new Set(
      dashboard.panels.flatMap((panel) =>
        panel.targets.flatMap((target) => target.expr.match(/leasehold_[a-z_]+/g) ?? [])
      )
        .map((name) => name.replace(/_(bucket|sum|count)$/, ""))
    )
    assert.isAtLeast(queried.size, 10)
    for (const name of queried) assert.isTrue(defined.has(name), `${name} is not a worker metric`)
  })
})
