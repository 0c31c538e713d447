/**
 * Metrics and traces, as the observability guide shows them: a worker that records its metrics
 * into Effect's registry, where `PrometheusMetrics` formats them, and traces one run in ten.
 *
 * Run it from the clone's root: `node examples/observability.ts`. It uses `DATABASE_URL`, or
 * starts an embedded PostgreSQL in a temporary folder, completes a few runs and prints the
 * Prometheus lines a scrape would get; it exits 0 once they count every completed run.
 */
import { Client, Handler, RunStore, Telemetry, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Layer, Schema } from "effect"
import { PrometheusMetrics } from "effect/observability"

const ping = Handler.make({
  kind: "ping",
  payload: Schema.Struct({ n: Schema.Number }),
  handle: ({ n }) => Effect.succeed({ pong: n })
})

// Metrics and traces are off unless asked for. Traces: every attempt of one run in ten, by run id.
const worker = Worker.run({ handlers: [ping], metrics: true, traces: true, traceSampleRate: 0.1 })

// The client's side: `Telemetry.layer()` turns on the enqueue span and the client's counters.
const ClientTelemetry = Telemetry.layer({ metrics: true, traces: true })

export const program = Effect.gen(function*() {
  const running = yield* Effect.forkChild(worker)
  const ids: Array<string> = []
  for (let n = 0; n < 5; n++) ids.push((yield* Client.enqueue(ping, { n }).pipe(Effect.provide(ClientTelemetry))).id)
  const store = yield* RunStore
  while (!(yield* Effect.forEach(ids, (id) => store.get(id))).every((run) => run.state === "completed")) {
    yield* Effect.sleep("100 millis")
  }
  yield* Effect.sleep("200 millis") // the settlements are counted as their batch answers
  // What `leasehold worker --metrics-port` serves at /metrics (PrometheusMetrics.layerHttp).
  const scrape = yield* PrometheusMetrics.format()
  yield* Fiber.interrupt(running)
  return scrape
}).pipe(Effect.timeout("30 seconds"))

if (import.meta.main) {
  const StoreLive = PgRunStore.layer({ schema: "leasehold" }).pipe(
    Layer.provideMerge(Database.layer({ fallback: EmbeddedPostgres.url() }))
  )
  Effect.runPromise(program.pipe(Effect.provide(StoreLive))).then((text) => {
    const lines = text.split("\n").filter((line) =>
      /^leasehold_(runs_claimed_total|runs_settled_total|runs_enqueued_total)\{/.test(line)
    )
    for (const line of lines) console.log(line)
    const completed = lines.find((line) =>
      line.startsWith("leasehold_runs_settled_total{") && line.includes(`outcome="completed"`)
    )
    if (completed === undefined || Number(completed.split(" ").pop()) < 5) process.exitCode = 1
  }, (error) => {
    console.error(`observability example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
