/** Test access to the run's PostgreSQL: a fresh schema per store, over a real server. */
import { Database, PgRunStore } from "@leasehold/sql"
import { Layer } from "effect"
import { inject } from "vitest"

export const databaseUrl = (): string => inject("databaseUrl")

export const freshSchema = (prefix = "t"): string => `${prefix}_${Math.random().toString(36).slice(2, 10)}`

/** A store in a new schema, with the PgClient it uses (for direct SQL in assertions). */
export const layerStore = (schema: string = freshSchema(), maxConnections = 10) =>
  PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections })))
