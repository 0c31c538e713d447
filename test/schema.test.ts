/**
 * packages/sql/schema.sql is the store's schema in one file: the dump of a freshly migrated store
 * (test/support/schemaDump.ts). This test migrates a fresh schema, dumps it and compares: a new
 * migration without a regenerated file fails here, with the command that regenerates it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Database, Migrations, StoreSchema } from "@leasehold/sql"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import { databaseUrl } from "./support/db.js"
import { dump, firstDifferences, schemaName } from "./support/schemaDump.js"

const committed = new URL("../packages/sql/schema.sql", import.meta.url)

describe("the schema in one file", () => {
  it.live("packages/sql/schema.sql is the dump of a freshly migrated store", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const store = StoreSchema.make(schemaName())
      yield* Migrations.run(store)
      const actual = yield* dump(store.schema, store.channel)
      yield* sql.unsafe(`DROP SCHEMA "${store.schema}" CASCADE`)
      const expected = fs.readFileSync(committed, "utf8")
      if (actual !== expected) {
        assert.fail(`packages/sql/schema.sql is stale: run npm run schema\n${firstDifferences(expected, actual)}`)
      }
    }).pipe(Effect.provide(Layer.fresh(Database.layerFromUrl(databaseUrl(), { maxConnections: 2 })))))

  it("the dump names the store only through its placeholders", () => {
    const text = fs.readFileSync(committed, "utf8")
    assert.notMatch(text, /schema_dump_/, "the dump's schema name is replaced by {{schema}}")
    assert.include(text, `"{{schema}}".runs`)
  })
})
