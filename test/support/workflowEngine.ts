/**
 * Leasehold's workflow engine as one layer, for tests that are written against `effect/workflow`
 * alone: a fresh schema of the test PostgreSQL, the store, and the engine serving the registered
 * workflows with a worker of its own (short leases, fast polls). The store's layer gives the journal
 * too, in the same schema. `EngineSchema` names the schema so
 * a test can read the runs and the journal.
 */
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Context, Effect, Layer } from "effect"
import { databaseUrl, freshSchema } from "./db.js"

export const serve = {
  ttl: "2 seconds",
  heartbeat: "300 millis",
  pollInterval: "50 millis",
  shutdownGrace: "300 millis"
} as const

/** The schema of the store a test's engine runs on. */
export class EngineSchema extends Context.Service<EngineSchema, string>()("test/EngineSchema") {}

/** Built anew (a new schema, unless one is given) each time a test provides it. */
export const leaseholdEngine = (
  options: { readonly url?: string; readonly prefix?: string; readonly schema?: string } = {}
) =>
  Layer.unwrap(Effect.sync(() => {
    const schema = options.schema ?? freshSchema(options.prefix ?? "wfe")
    return LeaseholdWorkflows.layer({ serve }).pipe(
      Layer.provideMerge(PgRunStore.layer({ schema })),
      Layer.provideMerge(Layer.succeed(EngineSchema, schema)),
      Layer.provideMerge(Database.layerFromUrl(options.url ?? databaseUrl(), { maxConnections: 6 }))
    )
  }))
