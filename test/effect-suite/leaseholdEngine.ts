/**
 * The one thing the Effect suites here change: the engine layer. Where Effect's tests provide
 * `WorkflowEngine.layerMemory` (or the cluster engine), these provide Leasehold's engine over a
 * fresh schema of the test PostgreSQL, serving the registered workflows with a worker of its own.
 */
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Effect, Layer } from "effect"
import { databaseUrl, freshSchema } from "../support/db.js"

export const serve = { ttl: "2 seconds", heartbeat: "300 millis", pollInterval: "50 millis", shutdownGrace: "300 millis" } as const

/** The schema of the store a test's engine runs on. */
export class EngineSchema extends Context.Service<EngineSchema, string>()("test/EngineSchema") {}

/** Built anew (a new schema) each time a test provides it. */
export const leaseholdEngine = Layer.unwrap(Effect.sync(() => {
  const schema = freshSchema("effect")
  return LeaseholdWorkflows.layer({ schema, serve }).pipe(
    Layer.provideMerge(PgRunStore.layer({ schema })),
    Layer.provideMerge(Layer.succeed(EngineSchema, schema)),
    Layer.provideMerge(Database.clientLayer(databaseUrl(), { maxConnections: 6 }))
  )
}))
