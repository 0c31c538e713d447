#!/usr/bin/env node
/**
 * `npm run schema`: writes packages/sql/schema.sql, the store's schema in one file, from a fresh
 * schema migrated on DATABASE_URL or, without it, on an embedded PostgreSQL started for the
 * purpose (as the tests do). The dump itself is test/support/schemaDump.ts, which
 * test/schema.test.ts shares; this file is JavaScript so it runs without a build of its own, and
 * loads that TypeScript file through Node's type stripping (Node 24, the project's own `node`).
 */
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, Migrations, StoreSchema } from "@leasehold/sql"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import { dump, schemaName } from "../test/support/schemaDump.ts"

const target = new URL("../packages/sql/schema.sql", import.meta.url)

const configured = process.env.DATABASE_URL
const server = configured !== undefined && configured !== "" ? undefined : await EmbeddedPostgres.startUnscoped()
try {
  const store = StoreSchema.make(schemaName())
  const text = await Effect.runPromise(
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* Migrations.run(store)
      const text = yield* dump(store.schema, store.channel)
      yield* sql.unsafe(`DROP SCHEMA "${store.schema}" CASCADE`)
      return text
    }).pipe(Effect.provide(Database.layerFromUrl(server?.url ?? configured, { maxConnections: 2 })))
  )
  fs.writeFileSync(target, text)
  console.log(`wrote packages/sql/schema.sql (${text.split("\n").length - 1} lines)`)
} finally {
  await server?.stop()
}
