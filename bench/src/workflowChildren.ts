/**
 * What a parent of N quick child workflows costs (issue 42 item 1): P parent executions, each
 * executing N children that return at once, one child after another (`sequential`) or all at once
 * (`parallel`). Each parent is executed and awaited by `execute`; the wall time of all P and the
 * replays of the parents are reported. One serving engine (concurrency 20) in this process, against
 * the PostgreSQL at DATABASE_URL. Not a test and not part of `npm run bench`:
 *
 *   npm run build && DATABASE_URL=postgres://... node bench/dist/workflowChildren.js [parents] [children]
 */
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Duration, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Workflow } from "effect/workflow"

const parents = Number(process.argv[2] ?? 20)
const children = Number(process.argv[3] ?? 10)
const url = process.env.DATABASE_URL
if (url === undefined) throw new Error("set DATABASE_URL")
const serve = { concurrency: 20, ttl: "30 seconds", pollInterval: "50 millis", shutdownGrace: "0 millis" } as const

let replays = 0
const Child = Workflow.make("BenchChild", {
  payload: { parent: Schema.Number, index: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ index, parent }) => `${parent}/${index}`
})
const ChildLayer = Child.toLayer(({ index }) => Effect.succeed(index))
const Parent = Workflow.make("BenchParent", {
  payload: { i: Schema.Number, parallel: Schema.Boolean },
  success: Schema.Number,
  idempotencyKey: ({ i }) => String(i)
})
const ParentLayer = Parent.toLayer(({ i, parallel }) =>
  Effect.sync(() => replays++).pipe(
    Effect.andThen(Effect.forEach(
      Array.from({ length: children }, (_, index) => index),
      (index) => Child.execute({ parent: i, index }),
      { concurrency: parallel ? "unbounded" : 1 }
    )),
    Effect.map((results) => results.length)
  )
)

const layerFor = (schema: string) =>
  Layer.mergeAll(ParentLayer, ChildLayer).pipe(
    Layer.provideMerge(LeaseholdWorkflows.layerServe(serve)),
    Layer.provideMerge(PgRunStore.layer({ schema })),
    Layer.provideMerge(Database.layerFromUrl(url, { maxConnections: 20 }))
  )

const measure = (name: string, parallel: boolean) =>
  Effect.gen(function*() {
    const schema = `wfchildren_${Math.random().toString(36).slice(2, 8)}`
    replays = 0
    const ms = yield* Effect.scoped(Effect.flatMap(Layer.build(layerFor(schema)), (context) =>
      Effect.map(
        Effect.timed(
          Effect.forEach(
            Array.from({ length: parents }, (_, i) => i),
            (i) => Parent.execute({ i, parallel }),
            { concurrency: "unbounded", discard: true }
          ).pipe(Effect.provideContext(context))
        ),
        ([duration]) => Duration.toMillis(duration)
      )))
    console.log(
      `${name.padEnd(10)} ${parents} parents x ${children} children: ${(ms / 1000).toFixed(2)} s, ${
        (replays / parents).toFixed(2)
      } replays per parent`
    )
    yield* Effect.scoped(Effect.flatMap(Layer.build(Database.layerFromUrl(url, { maxConnections: 1 })), (context) =>
      Context.get(context, SqlClient.SqlClient).unsafe(`DROP SCHEMA "${schema}" CASCADE`)))
  })

Effect.runPromise(Effect.gen(function*() {
  yield* measure("sequential", false)
  yield* measure("parallel", true)
}) as Effect.Effect<void, unknown>).catch((error) => {
  console.error(error)
  process.exitCode = 1
})
