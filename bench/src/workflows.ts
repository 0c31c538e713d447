/**
 * What a durable Effect workflow costs on Leasehold, against a plain run doing the same steps:
 * - `plain`: N runs whose handler does three no-op steps;
 * - `workflow`: N executions of a workflow of three no-op activities (each result recorded under
 *   the run's fence);
 * - `deferred`: N executions that each suspend on a deferred, are resumed by its completion and
 *   finish (one suspension and one re-claim each).
 * The runs are started first (the workflows by `execute` with `discard`, 20 at a time: one enqueue
 * each), then drained by one worker (concurrency 50) in this process, against the PostgreSQL at
 * DATABASE_URL (POOL: its connections, default 20). Not a test and not part of `npm run bench`:
 *
 *   npm run build && DATABASE_URL=postgres://... node bench/dist/workflows.js [executions]
 */
import { Handler, RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Duration, Effect, Exit, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Activity, DurableDeferred, Workflow } from "effect/workflow"

const total = Number(process.argv[2] ?? 2_000)
const url = process.env.DATABASE_URL
if (url === undefined) throw new Error("set DATABASE_URL")
const worker = { concurrency: 50, ttl: "30 seconds", pollInterval: "50 millis" } as const
const starts = 20

const step = (name: string) => Activity.make({ name, execute: Effect.void })
const Steps = Workflow.make("BenchSteps", { payload: { i: Schema.Number }, idempotencyKey: ({ i }) => String(i) })
const StepsLayer = Steps.toLayer(() => Effect.all([step("a"), step("b"), step("c")], { discard: true }))
const Gate = DurableDeferred.make("gate")
const Waits = Workflow.make("BenchWaits", { payload: { i: Schema.Number }, idempotencyKey: ({ i }) => String(i) })
const WaitsLayer = Waits.toLayer(() => Effect.andThen(step("a"), DurableDeferred.await(Gate)))
const plain = Handler.make({
  kind: "bench-plain",
  payload: Schema.Struct({ i: Schema.Number }),
  handle: () => Effect.all([Effect.void, Effect.void, Effect.void])
})

const layerFor = (schema: string) =>
  Layer.mergeAll(StepsLayer, WaitsLayer).pipe(
    Layer.provideMerge(LeaseholdWorkflows.layer({ schema })),
    Layer.provideMerge(PgRunStore.layer({ schema })),
    Layer.provideMerge(Database.layerFromUrl(url, { maxConnections: Number(process.env.POOL ?? 20) }))
  )

const countIn = (schema: string, kind: string, state: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".runs WHERE kind = $1 AND state = $2`, [
        kind,
        state
      ]),
      (rows) => rows[0]!.n
    ))
const until = (schema: string, kind: string, state: string) =>
  Effect.gen(function*() {
    while ((yield* countIn(schema, kind, state)) < total) yield* Effect.sleep("20 millis")
  })
const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.timed(effect), ([duration]) => Duration.toMillis(duration))

/** Starts the N runs with no worker running, then drains them with one: both times reported. */
const measure = (
  name: string,
  start: Effect.Effect<unknown, unknown, any>,
  drain: (schema: string) => Effect.Effect<unknown, unknown, any>
) =>
  Effect.gen(function*() {
    const schema = `wfbench_${Math.random().toString(36).slice(2, 8)}`
    const [startMs, drainMs] = yield* Effect.scoped(Effect.flatMap(Layer.build(layerFor(schema)), (context) =>
      Effect.gen(function*() {
        const startMs = yield* timed(start.pipe(Effect.provideContext(context)))
        const drainMs = yield* timed(Effect.gen(function*() {
          yield* LeaseholdWorkflows.worker({ ...worker, handlers: [plain] }).pipe(
            Effect.provideContext(context),
            Effect.forkScoped
          )
          yield* drain(schema).pipe(Effect.provideContext(context))
        }))
        return [startMs, drainMs] as const
      })))
    const rate = (ms: number) =>
      Math.round(total / (ms / 1000))
    console.log(
      `${name.padEnd(9)} ${total}: started in ${(startMs / 1000).toFixed(2)} s (${rate(startMs)}/s), drained in ${
        (drainMs / 1000).toFixed(2)
      } s (${rate(drainMs)}/s)`
    )
    yield* Effect.scoped(Effect.flatMap(Layer.build(Database.layerFromUrl(url, { maxConnections: 1 })), (context) =>
      Context.get(context, SqlClient.SqlClient).unsafe(`DROP SCHEMA "${schema}" CASCADE`)))
  })

const indices = Array.from({ length: total }, (_, i) => i)
const gateTokens = Effect.map(
  Effect.forEach(indices, (i) => Waits.executionId({ i })),
  (ids) => ids.map((executionId) => DurableDeferred.tokenFromExecutionId(Gate, { workflow: Waits, executionId }))
)

Effect.runPromise(Effect.gen(function*() {
  console.log(`one worker, concurrency ${worker.concurrency}; workflows started ${starts} at a time`)
  yield* measure(
    "plain",
    Effect.flatMap(RunStore, (store) => store.enqueue(indices.map((i) => ({ kind: "bench-plain", payload: { i } })))),
    (schema) => until(schema, "bench-plain", "completed")
  )
  yield* measure(
    "workflow",
    Effect.forEach(indices, (i) => Steps.execute({ i }, { discard: true }), { concurrency: starts, discard: true }),
    (schema) => until(schema, "workflow/BenchSteps", "completed")
  )
  // Drained: each suspends on its deferred, is resumed by its completion, and finishes.
  yield* measure(
    "deferred",
    Effect.forEach(indices, (i) => Waits.execute({ i }, { discard: true }), { concurrency: starts, discard: true }),
    (schema) =>
      Effect.gen(function*() {
        yield* until(schema, "workflow/BenchWaits", "suspended")
        yield* Effect.forEach(yield* gateTokens, (token) => DurableDeferred.done(Gate, { token, exit: Exit.void }), {
          concurrency: starts,
          discard: true
        })
        yield* until(schema, "workflow/BenchWaits", "completed")
      })
  )
}) as Effect.Effect<void, unknown>).catch((error) => {
  console.error(error)
  process.exitCode = 1
})
