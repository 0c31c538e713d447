/**
 * The schema, created and upgraded by effect/sql's Migrator inside the configured Postgres schema.
 * Each migration is a SQL file in this package's `migrations/` folder, `NNNN_name.sql`, applied in
 * the order of its number. The files name the store's schema as `{{schema}}` and its notification
 * channel as `{{channel}}`. A released file never changes: `test/migrations.test.ts` holds each
 * file's digest, so a change fails it; a new step is a new file.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Migrator, SqlClient } from "effect/sql"
import { readdirSync, readFileSync } from "node:fs"
import * as SqlScript from "./internal/SqlScript.js"
import type { StoreSchema } from "./StoreSchema.js"

/** Where the files are: beside `src/` and `dist/` in the package, so both find them. */
const folder = new URL("../migrations/", import.meta.url)

const fileName = /^(\d{4})_[a-z0-9_]+\.sql$/

/**
 * The migration files, by name without `.sql`, in order.
 *
 * @category migrations
 */
export const files = (): ReadonlyArray<{ readonly name: string; readonly text: string }> =>
  readdirSync(folder).filter((file) => fileName.test(file)).sort().map((file) => ({
    name: file.slice(0, -".sql".length),
    text: readFileSync(new URL(file, folder), "utf8")
  }))

/**
 * A migration's statements for one store: its placeholders filled (the schema and channel are
 * plain identifiers, `StoreSchema.validate`), cut where its statements end.
 *
 * @category migrations
 */
export const render = (text: string, store: StoreSchema): Array<string> =>
  SqlScript.statements(text.replaceAll("{{schema}}", store.schema).replaceAll("{{channel}}", store.channel))

const statements = (list: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    for (const text of list) yield* sql.unsafe(text)
  })

const migrateWith = Migrator.make({})

/**
 * Creates or upgrades the store in its schema, up to and including the migration named `upTo`
 * (all without it: an upgrade test builds an older store). Safe to run from several processes at
 * once: the schema creation is serialized by an advisory lock and the Migrator locks its own table.
 *
 * @category migrations
 */
export const run = Effect.fn("Migrations.run")(function*(store: StoreSchema, options: { readonly upTo?: string } = {}) {
  const sql = yield* SqlClient.SqlClient
  yield* sql.withTransaction(Effect.gen(function*() {
    yield* sql`SELECT pg_advisory_xact_lock(hashtext(${"leasehold:" + store.schema}))`
    yield* sql.unsafe(`CREATE SCHEMA IF NOT EXISTS "${store.schema}"`)
  }))
  const wanted = files().filter(({ name }) => options.upTo === undefined || name <= options.upTo)
  return yield* migrateWith({
    table: `${store.schema}.leasehold_migrations`,
    loader: Migrator.fromRecord(
      Object.fromEntries(wanted.map(({ name, text }) => [name, statements(render(text, store))]))
    )
  })
})
