/**
 * `leasehold migrate`: creates the store in its schema, or upgrades it, and says which migrations
 * this call applied and which the schema now has. Safe to run twice or from several processes.
 */
import { Migrations, StoreSchema } from "@leasehold/sql"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { SqlClient } from "effect/sql"
import * as Connection from "../Connection.js"
import { connectionFlags, jsonFlag } from "../Flags.js"
import * as Output from "../Output.js"

const migrationName = (id: number, name: string) => `${String(id).padStart(4, "0")}_${name}`

export const migrate = Command.make("migrate", { ...connectionFlags, json: jsonFlag }, (flags) =>
  Connection.withClient(
    flags,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const applied = yield* Migrations.run(StoreSchema.make(flags.schema))
      const present = yield* sql<{ migration_id: number; name: string }>`
        SELECT migration_id, name FROM ${sql(`${flags.schema}.leasehold_migrations`)} ORDER BY migration_id`
      const appliedNames = applied.map(([id, name]) => migrationName(id, name))
      const presentNames = present.map((row) => migrationName(row.migration_id, row.name))
      if (flags.json) {
        return yield* Output.json({ schema: flags.schema, applied: appliedNames, migrations: presentNames })
      }
      yield* Output.line(
        appliedNames.length === 0
          ? `schema "${flags.schema}" is up to date (${presentNames.join(", ")})`
          : `schema "${flags.schema}": applied ${appliedNames.join(", ")}`
      )
    })
  )).pipe(Command.withDescription("Create or upgrade the store's schema"))
