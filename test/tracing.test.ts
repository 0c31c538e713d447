/**
 * Run tracing, exported over OTLP/HTTP (JSON) to a real receiver inside the test: the consumer
 * span of a run's first attempt is a child of its enqueue span; a reclaimed run's attempt is a
 * new trace linked to it; a write the fence rejected is an event on the attempt's span naming both
 * fences. With tracing off, nothing is exported for a run.
 */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, RunStore, WorkerMetrics } from "@leasehold/core"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Deferred, Duration, Effect, Schema } from "effect"
import { FetchHttpClient } from "effect/http"
import { Otlp } from "effect/observability"
import { SqlClient } from "effect/sql"
import { databaseUrl } from "./support/db.js"
import { attribute, exported, type OtlpSpan, receiver } from "./support/otlp.js"
import { expireLease, readRun, type Stores, twoStores } from "./support/stores.js"
import { eventually, startWorker, takeOver } from "./support/workers.js"

// The handler's own span, to show it nests inside the attempt's.
const ok = Handler.make({
  kind: "ok",
  payload: Schema.Unknown,
  handle: () => Effect.withSpan(Effect.void, "handler.work")
})
const enqueue = <P>(stores: Stores, handler: Handler.Handler<P>, payload: P) =>
  Client.enqueue(handler, payload).pipe(Effect.provideService(RunStore, stores.a), Effect.map((e) => e.id))

describe("run tracing", () => {
  it.live("enqueue → attempt: child on the first claim, a linked new trace on a reclaim, the fence on every span, rejections as events", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const otlp = yield* receiver
      const proceed = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const failing = Handler.make({
        kind: "failing",
        payload: Schema.Unknown,
        handle: () =>
          Effect.andThen(
            Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(proceed)),
            Effect.fail(new Error("late"))
          )
      })
      const ids = yield* exported(
        otlp.url,
        Effect.gen(function*() {
          // Another worker claimed this one and lost it: this worker reclaims it under fence 2.
          const reclaimed = yield* enqueue(stores, ok, { n: 2 })
          assert.strictEqual(
            (yield* stores.b.claim({
              owner: "gone",
              queues: ["default"],
              kinds: ["ok"],
              limit: 1,
              ttl: Duration.minutes(1)
            }))[0]?.id,
            reclaimed
          )
          yield* expireLease(stores, reclaimed)
          const first = yield* enqueue(stores, ok, { n: 1 })
          yield* startWorker(stores.a, stores.sql, {
            handlers: [ok, failing],
            ttl: "60 seconds",
            heartbeat: "30 seconds",
            // The first claim sweeps (it takes the abandoned run); the next sweep is far off, so the
            // run stolen below is taken by the thief, not swept back by this worker.
            pollInterval: "20 seconds"
          })
          yield* eventually(
            "both completed",
            Effect.map(
              Effect.all([readRun(stores, first), readRun(stores, reclaimed)]),
              (runs) => runs.every((r) => r.state === "completed")
            )
          )
          // A run taken from this worker mid-attempt: its failure write is rejected by the fence.
          const stolen = yield* enqueue(stores, failing, null)
          yield* Deferred.await(started)
          yield* expireLease(stores, stolen)
          yield* stores.b.claim({
            owner: "thief",
            queues: ["default"],
            kinds: ["failing"],
            limit: 1,
            ttl: Duration.minutes(1)
          })
          yield* Deferred.succeed(proceed, undefined)
          yield* eventually(
            "the stale failure rejected",
            Effect.map(
              stores.sql.unsafe<{ n: number }>(
                `SELECT count(*)::int AS n FROM "${stores.schema}".run_events WHERE kind = 'stale_write_rejected'`
              ),
              (rows) => rows[0]!.n === 1
            )
          )
          return { first, reclaimed, stolen }
        })
      )
      yield* eventually(
        "the spans exported",
        Effect.sync(() => otlp.spans.filter((s) => s.name === "leasehold.run failing").length === 1),
        "10 seconds"
      )

      const producer = (runId: string) =>
        otlp.spans.find((s) => s.name === "leasehold.enqueue ok" && attribute(s, "leasehold.run_id") === runId)!
      const consumer = (runId: string) =>
        otlp.spans.find((s) => s.name.startsWith("leasehold.run ") && attribute(s, "leasehold.run_id") === runId)!

      const sent = producer(ids.first)
      const handled = consumer(ids.first)
      assert.strictEqual(sent.kind, 4, "producer")
      assert.strictEqual(handled.kind, 5, "consumer")
      assert.strictEqual(handled.traceId, sent.traceId)
      assert.strictEqual(handled.parentSpanId, sent.spanId)
      assert.deepInclude(
        Object.fromEntries(
          ["leasehold.fence", "leasehold.attempt", "leasehold.kind", "leasehold.via"].map((
            k
          ) => [k, attribute(handled, k)])
        ),
        { "leasehold.fence": 1, "leasehold.attempt": 1, "leasehold.kind": "ok", "leasehold.via": "due" }
      )

      const own = otlp.spans.filter((s) => s.name === "handler.work" && s.parentSpanId === handled.spanId)
      assert.strictEqual(own.length, 1, "the handler's own span is a child of its attempt's")
      assert.strictEqual(own[0]!.traceId, sent.traceId)

      const again = consumer(ids.reclaimed)
      const origin = producer(ids.reclaimed)
      assert.notStrictEqual(again.traceId, origin.traceId, "a later claim starts a new trace")
      assert.deepStrictEqual(again.links?.map((l) => [l.traceId, l.spanId]), [[origin.traceId, origin.spanId]])
      assert.strictEqual(attribute(again, "leasehold.fence"), 2)
      assert.strictEqual(attribute(again, "leasehold.via"), "expired")

      const rejected = consumer(ids.stolen).events?.find((e) => e.name === "leasehold.fence_rejected")
      assert.isDefined(rejected)
      const fields = Object.fromEntries(
        rejected!.attributes.map((a) => [a.key, a.value.stringValue ?? Number(a.value.intValue)])
      )
      assert.deepStrictEqual(fields, {
        "leasehold.operation": "fail",
        "leasehold.presented_fence": 1,
        "leasehold.stored_fence": 2
      })
      assert.isTrue(otlp.spans.some((s) => s.name === "leasehold.claim"), "the runtime's statements have spans")
    }))

  it.live("with tracing off, a run stores no trace context and no run span is exported", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const otlp = yield* receiver
      const id = yield* Effect.scoped(Effect.gen(function*() {
        yield* startWorker(stores.a, stores.sql, { handlers: [ok], pollInterval: "50 millis" })
        const id = yield* enqueue(stores, ok, null)
        yield* eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed"))
        return id
      })).pipe(
        Effect.provide(
          Otlp.layerJson({
            baseUrl: otlp.url,
            resource: { serviceName: "leasehold-test" },
            tracerExportInterval: "100 millis"
          })
        ),
        Effect.provide(FetchHttpClient.layer)
      )
      const rows = yield* stores.sql.unsafe<{ trace_parent: string | null }>(
        `SELECT trace_parent FROM "${stores.schema}".runs WHERE id = ${Number(id)}`
      )
      assert.strictEqual(rows[0]!.trace_parent, null)
      assert.isFalse(otlp.spans.some((s) => s.name.startsWith("leasehold.")), "no run or runtime span")
    }))

  it.live("an idle worker exports no trace for its empty polls; a claim that took a run is one span; database spans name the real database and host", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const otlp = yield* receiver
      // The test's own reads are not traced: only the worker's and the enqueue's spans are exported.
      const quietly = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.withTracerEnabled(effect, false)
      const id = yield* exported(
        otlp.url,
        Effect.gen(function*() {
          const events = yield* startWorker(stores.a, stores.sql, { handlers: [ok], pollInterval: "50 millis" })
          // About 30 polls, every one of them a sweep that finds nothing.
          yield* quietly(eventually(
            "30 empty polls",
            Effect.sync(() =>
              events.filter((e) => e._tag === "ClaimBatch").length >= 30
                ? true
                : undefined
            )
          ))
          const id = yield* enqueue(stores, ok, null)
          yield* quietly(eventually("completed", Effect.map(readRun(stores, id), (r) => r.state === "completed")))
          return id
        })
      )
      yield* eventually(
        "the run's span exported",
        Effect.sync(() => otlp.spans.some((s) => s.name === "leasehold.run ok")),
        "10 seconds"
      )
      const claims = otlp.spans.filter((s) => s.name === "leasehold.claim")
      assert.deepStrictEqual(claims.map((s) => [s.parentSpanId ?? null, attribute(s, "leasehold.batch_size")]), [[
        null,
        1
      ]], "one claim span: the one that took the run")
      const roots = otlp.spans.filter((s) => s.parentSpanId === undefined || s.parentSpanId === "")
      assert.deepStrictEqual(
        roots.filter((s) => attribute(s, "db.system.name") !== undefined).map((s) => s.name),
        [],
        "no statement of the worker's polls is a trace of its own"
      )
      const target = new URL(databaseUrl())
      const statements = otlp.spans.filter((s) => attribute(s, "db.system.name") === "postgresql")
      assert.isAbove(statements.length, 0, "the enqueue's statements have spans")
      for (const span of statements) {
        assert.strictEqual(attribute(span, "db.namespace"), decodeURIComponent(target.pathname.slice(1)))
        assert.strictEqual(attribute(span, "server.address"), target.hostname)
        assert.strictEqual(attribute(span, "server.port"), Number(target.port || 5432))
      }
      assert.isDefined(otlp.spans.find((s) => s.name === "leasehold.run ok" && attribute(s, "leasehold.run_id") === id))
    }))

  it.live("a sample rate traces that share of runs, decided per run, and a caller's own traceparent is stored as given", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const otlp = yield* receiver
      const mine = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
      const ids = yield* exported(
        otlp.url,
        Effect.gen(function*() {
          yield* startWorker(stores.a, stores.sql, { handlers: [ok], pollInterval: "50 millis", traceSampleRate: 0.5 })
          const ids: Array<string> = []
          for (let i = 0; i < 40; i++) ids.push(yield* enqueue(stores, ok, { i }))
          const own = yield* Client.enqueue(ok, null, { traceParent: mine }).pipe(
            Effect.provideService(RunStore, stores.a)
          )
          yield* eventually(
            "all completed",
            Effect.map(
              stores.sql.unsafe<{ n: number }>(
                `SELECT count(*)::int AS n FROM "${stores.schema}".runs_now WHERE state = 'completed'`
              ),
              (rows) => rows[0]!.n === 41
            )
          )
          return { ids, own: own.id }
        })
      )
      const stored = yield* stores.sql.unsafe<{ trace_parent: string }>(
        `SELECT trace_parent FROM "${stores.schema}".runs WHERE id = ${Number(ids.own)}`
      )
      assert.strictEqual(stored[0]!.trace_parent, mine)
      yield* eventually(
        "exported",
        Effect.sync(() => otlp.spans.filter((s) => s.name === "leasehold.enqueue ok").length === 41),
        "10 seconds"
      )
      const traced = new Set(
        otlp.spans.filter((s) => s.name === "leasehold.run ok").map((s) => attribute(s, "leasehold.run_id"))
      )
      assert.isAbove(traced.size, 5, "about half of the runs are traced")
      assert.isBelow(traced.size, 36)
    }))

  it.live("across processes: a run whose worker was killed is reclaimed by another process, in a new trace linked to the enqueue span, under fence 2", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* stores.sql.unsafe(WorkerProcess.createEffectsTable(`"${stores.schema}".effects`))
      const otlp = yield* receiver
      const env = {
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        OTEL_SERVICE_NAME: "leasehold-worker",
        OTEL_BSP_SCHEDULE_DELAY: "100"
      }
      // The instrumented worker's "long-step" works until told to finish.
      const longStep = Handler.make({ kind: "long-step", payload: Schema.Struct({}), handle: () => Effect.void })
      const runId = yield* exported(otlp.url, enqueue(stores, longStep, {}))
      const worker = (owner: string) =>
        Effect.acquireRelease(
          Effect.promise(async () => {
            const process = await WorkerProcess.start({ owner, databaseUrl: databaseUrl(), schema: stores.schema, env })
            await process.waitFor("started", (r) => r.type === "started")
            return process
          }),
          (process) => Effect.promise(() => process.kill())
        )
      const claimedBy = (process: WorkerProcess.WorkerProcess, fence: number) =>
        Effect.promise(() =>
          process.waitFor(
            `claimed under fence ${fence}`,
            (r) => r.type === "event" && r._tag === "Claimed" && r.runId === runId && r.fence === fence,
            20_000
          )
        )

      const a = yield* worker("worker-a")
      yield* claimedBy(a, 1)
      yield* Effect.promise(() => a.kill()) // SIGKILL: its span is never exported
      const b = yield* worker("worker-b")
      yield* claimedBy(b, 2)
      b.send({ cmd: "finish", runId })
      yield* eventually("completed", Effect.map(readRun(stores, runId), (r) => r.state === "completed"), "20 seconds")
      yield* Effect.promise(() => b.stop()) // a graceful stop flushes its exporter

      const attempt = yield* eventually(
        "the reclaiming attempt's span",
        Effect.sync(() =>
          otlp.spans.find((s) => s.name === "leasehold.run long-step" && attribute(s, "leasehold.run_id") === runId)
        ),
        "10 seconds"
      )
      const sent = otlp.spans.find((s) =>
        s.name === "leasehold.enqueue long-step" && attribute(s, "leasehold.run_id") === runId
      )!
      assert.isDefined(sent)
      assert.deepInclude(
        Object.fromEntries(
          ["leasehold.fence", "leasehold.owner", "leasehold.via"].map((k) => [k, attribute(attempt, k)])
        ),
        { "leasehold.fence": 2, "leasehold.owner": "worker-b", "leasehold.via": "expired" }
      )
      assert.notStrictEqual(attempt.traceId, sent.traceId)
      assert.deepStrictEqual(attempt.links?.map((l) => [l.traceId, l.spanId]), [[sent.traceId, sent.spanId]])
    }))
  it.live("background work exports no trace: the metrics sampler makes none, and database spans come only inside a traced run or an enqueue", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const otlp = yield* receiver
      const quietly = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.withTracerEnabled(effect, false)
      // Each run reads the database itself: its statement's span belongs to its run, traced or not.
      const reads = Handler.make({
        kind: "reads",
        payload: Schema.Unknown,
        handle: () =>
          Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            yield* sql.unsafe("SELECT 1")
          })
      })
      yield* exported(
        otlp.url,
        Effect.gen(function*() {
          yield* Effect.forkScoped(WorkerMetrics.sampler(stores.a, "50 millis"))
          const events = yield* startWorker(stores.a, stores.sql, {
            handlers: [reads],
            metrics: true,
            heartbeat: "200 millis",
            pollInterval: "50 millis",
            traceSampleRate: 0.5
          })
          for (let i = 0; i < 20; i++) yield* enqueue(stores, reads, { i })
          yield* quietly(eventually(
            "all completed",
            Effect.map(
              stores.sql.unsafe<{ n: number }>(
                `SELECT count(*)::int AS n FROM "${stores.schema}".runs_now WHERE state = 'completed'`
              ),
              (rows) => rows[0]!.n === 20
            )
          ))
          // A few more samples and heartbeats with nothing to do.
          const beats = events.length
          yield* quietly(eventually("later events", Effect.sync(() => events.length > beats + 5)))
        })
      )
      yield* eventually(
        "exported",
        Effect.sync(() => otlp.spans.filter((s) => s.name === "leasehold.enqueue reads").length === 20),
        "10 seconds"
      )
      const byId = new Map(otlp.spans.map((s) => [s.spanId, s]))
      const rootOf = (span: OtlpSpan): OtlpSpan => {
        const parent = span.parentSpanId === undefined || span.parentSpanId === ""
          ? undefined
          : byId.get(span.parentSpanId)
        return parent === undefined ? span : rootOf(parent)
      }
      const roots = new Set(
        otlp.spans.filter((s) => attribute(s, "db.system.name") !== undefined).map((s) => rootOf(s).name)
      )
      assert.deepStrictEqual(
        [...roots].filter((name) => !/^(leasehold\.(run|enqueue) reads|Client\.enqueue)$/.test(name)),
        [],
        "every database span is in a run's or an enqueue's trace"
      )
      const traced = new Set(
        otlp.spans.filter((s) => s.name === "leasehold.run reads").map((s) => attribute(s, "leasehold.run_id"))
      )
      const selects = otlp.spans.filter((s) => attribute(s, "db.query.text") === "SELECT 1")
      assert.isAbove(traced.size, 0)
      assert.isBelow(traced.size, 20)
      assert.strictEqual(selects.length, traced.size, "a handler's statement is traced when its run is, and only then")
      assert.deepStrictEqual(
        otlp.spans.filter((s) => /stats|sample/i.test(s.name)).map((s) => s.name),
        [],
        "the sampler makes no span"
      )
    }))

  it.live("an abandoned attempt's span ends with an error status naming why: a lease superseded under the handler", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const otlp = yield* receiver
      const started = yield* Deferred.make<void>()
      const stuck = Handler.make({
        kind: "stuck",
        payload: Schema.Unknown,
        handle: () => Effect.andThen(Deferred.succeed(started, undefined), Effect.never)
      })
      const id = yield* exported(
        otlp.url,
        Effect.gen(function*() {
          const events = yield* startWorker(stores.a, stores.sql, {
            handlers: [stuck],
            ttl: "60 seconds",
            heartbeat: "200 millis",
            pollInterval: "20 seconds"
          })
          const id = yield* enqueue(stores, stuck, null)
          yield* Deferred.await(started)
          // The holder heartbeats every 200 ms: expire and reclaim until the reclaim wins the race.
          yield* takeOver(stores.b, expireLease(stores, id), { owner: "thief", kind: "stuck" })
          yield* eventually(
            "abandoned",
            Effect.sync(() =>
              events.some((e) => e._tag === "RunSettled" && e.runId === id && e.outcome === "abandoned")
            )
          )
          return id
        })
      )
      const span = yield* eventually(
        "the attempt's span",
        Effect.sync(() =>
          otlp.spans.find((s) => s.name === "leasehold.run stuck" && attribute(s, "leasehold.run_id") === id)
        ),
        "10 seconds"
      )
      assert.strictEqual(span.status?.code, 2, "error")
      assert.include(span.status?.message ?? "", "superseded")
    }))
})
