/**
 * The store's schema in one file: a normalized dump of a freshly migrated store, read from the
 * catalogs (pg_dump is not usable: the embedded server ships none, and Debian's refuses a newer
 * server). Shared by test/schema.test.ts (which compares it with packages/sql/schema.sql) and
 * scripts/schema.mjs (`npm run schema`, which writes that file). Only package imports here: the
 * script loads this file with Node's type stripping, which does not map `.js` to `.ts`.
 *
 * The output is the same on PostgreSQL 15 and 18: it uses only functions whose output is stable
 * across those versions, and leaves out what only newer servers record (PG 18's NOT NULL rows in
 * pg_constraint: NOT NULL is printed from the column, as every version records it).
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

const header = `-- The Leasehold store's schema, as a freshly migrated store has it: every table, index,
-- sequence, function, trigger and view, in that order, each kind sorted by name. Read it to learn
-- the schema; change it through a new migration in packages/sql/migrations/.
--
-- Generated from the catalogs by test/support/schemaDump.ts; do not edit. After adding a
-- migration, regenerate it with: npm run schema (test/schema.test.ts fails while it is stale).
-- Partitioned tables show their key, not their partitions (history_ranges lists those; each
-- has its parent's columns, indexes and triggers, fillfactor 100).
-- Not replayable: objects are in reading order, not dependency order. {{schema}} and
-- {{channel}} stand for the store's schema and notification channel, as in the migrations.
`

type Row = Record<string, unknown>

/** Named columns only: the client may transform names, so every alias is one lower-case word. */
const tablesQuery = `
  SELECT c.oid::int AS oid, c.relname AS name, c.relpersistence AS persistence,
         coalesce(array_to_string(c.reloptions, ', '), '') AS options,
         coalesce(obj_description(c.oid, 'pg_class'), '') AS comment,
         CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) ELSE '' END AS partition
  FROM pg_class c
  WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  ORDER BY c.relname`

const columnsQuery = `
  SELECT a.attrelid::int AS rel, a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type,
         a.attnotnull AS notnull, a.attidentity AS identity, a.attgenerated AS generated,
         coalesce(pg_get_expr(d.adbin, d.adrelid), '') AS expr,
         CASE WHEN a.attcollation <> t.typcollation THEN coalesce(quote_ident(co.collname), '') ELSE '' END AS collation,
         coalesce(col_description(a.attrelid, a.attnum), '') AS comment
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  LEFT JOIN pg_collation co ON co.oid = a.attcollation
  WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  ORDER BY c.relname, a.attnum`

// contype 'n' (NOT NULL, recorded here from PG 18 on) is left out: the column prints it.
const constraintsQuery = `
  SELECT con.conrelid::int AS rel, con.conname AS name, pg_get_constraintdef(con.oid, true) AS def
  FROM pg_constraint con
  JOIN pg_class c ON c.oid = con.conrelid
  WHERE c.relnamespace = $1::regnamespace AND con.contype IN ('p', 'u', 'c', 'f', 'x')
  ORDER BY c.relname, array_position(ARRAY['p', 'u', 'x', 'c', 'f'], con.contype::text), con.conname`

// Indexes a constraint made are printed with the constraint.
const indexesQuery = `
  SELECT pg_get_indexdef(i.indexrelid) AS def
  FROM pg_index i
  JOIN pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_class tc ON tc.oid = i.indrelid
  WHERE ic.relnamespace = $1::regnamespace AND NOT tc.relispartition
    AND NOT EXISTS (SELECT 1 FROM pg_constraint con WHERE con.conindid = i.indexrelid AND con.conrelid = i.indrelid)
  ORDER BY tc.relname, ic.relname`

const sequencesQuery = `
  SELECT c.relname AS name, format_type(s.seqtypid, NULL) AS type, s.seqincrement::text AS increment,
         s.seqmin::text AS min, s.seqmax::text AS max, s.seqstart::text AS start, s.seqcache::text AS cache,
         s.seqcycle AS cycle,
         coalesce((SELECT quote_ident(tc.relname) || '.' || quote_ident(a.attname)
                   FROM pg_depend dep
                   JOIN pg_class tc ON tc.oid = dep.refobjid
                   JOIN pg_attribute a ON a.attrelid = dep.refobjid AND a.attnum = dep.refobjsubid
                   WHERE dep.classid = 'pg_class'::regclass AND dep.objid = c.oid AND dep.deptype IN ('a', 'i')
                     AND dep.refclassid = 'pg_class'::regclass), '') AS owner
  FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
  WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'S'
  ORDER BY c.relname`

// Plain functions and procedures (pg_get_functiondef refuses aggregates, and there are none).
const functionsQuery = `
  SELECT pg_get_functiondef(p.oid) AS def, p.oid::regprocedure::text AS signature,
         coalesce(obj_description(p.oid, 'pg_proc'), '') AS comment
  FROM pg_proc p
  WHERE p.pronamespace = $1::regnamespace AND p.prokind IN ('f', 'p')
  ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`

const triggersQuery = `
  SELECT pg_get_triggerdef(t.oid, true) AS def
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal AND NOT c.relispartition
  ORDER BY c.relname, t.tgname`

const viewsQuery = `
  SELECT c.relname AS name, c.relkind AS kind, pg_get_viewdef(c.oid, true) AS def,
         coalesce(obj_description(c.oid, 'pg_class'), '') AS comment
  FROM pg_class c
  WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('v', 'm')
  ORDER BY c.relname`

const literal = (text: string) => `'${text.replaceAll("'", "''")}'`
const ident = (name: string) => (/^[a-z_][a-z0-9_]*$/.test(name) ? name : `"${name.replaceAll("\"", "\"\"")}"`)

const section = (title: string, blocks: ReadonlyArray<string>) =>
  blocks.length === 0 ? "" : `\n-- ${"=".repeat(70)}\n-- ${title}\n-- ${"=".repeat(70)}\n\n${blocks.join("\n\n")}\n`

const column = (c: Row): string => {
  let text = `  ${ident(String(c.name))} ${c.type}`
  if (c.collation !== "") text += ` COLLATE ${c.collation}`
  if (c.generated === "s") text += ` GENERATED ALWAYS AS (${c.expr}) STORED`
  else if (c.expr !== "") text += ` DEFAULT ${c.expr}`
  if (c.identity === "a") text += " GENERATED ALWAYS AS IDENTITY"
  if (c.identity === "d") text += " GENERATED BY DEFAULT AS IDENTITY"
  if (c.notnull === true) text += " NOT NULL"
  return text
}

/** Every statement of a SQL text ends with exactly one semicolon and no trailing blanks. */
const statement = (text: string) => `${text.trimEnd().replace(/;$/, "")};`

/**
 * The dump of the store in `schema` (channel `channel`), with both names replaced by their
 * placeholders. Read in one transaction with only pg_catalog on the search path, so every name
 * of the store prints qualified (and so becomes `{{schema}}`), whatever the connection's path.
 */
export const dump = (schema: string, channel: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const read = (query: string) => sql.unsafe<Row>(query, [schema])
    const catalog = yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql.unsafe("SET LOCAL search_path TO pg_catalog")
      return {
        tables: yield* read(tablesQuery),
        columns: yield* read(columnsQuery),
        constraints: yield* read(constraintsQuery),
        indexes: yield* read(indexesQuery),
        sequences: yield* read(sequencesQuery),
        functions: yield* read(functionsQuery),
        triggers: yield* read(triggersQuery),
        views: yield* read(viewsQuery)
      }
    }))
    const qualified = (name: string) => `${schema}.${ident(name)}`

    const tables = catalog.tables.map((t) => {
      const lines = [
        ...catalog.columns.filter((c) => c.rel === t.oid).map(column),
        ...catalog.constraints.filter((c) => c.rel === t.oid).map((c) =>
          `  CONSTRAINT ${ident(String(c.name))} ${c.def}`
        )
      ]
      const unlogged = t.persistence === "u" ? "UNLOGGED " : ""
      const options = (t.partition === "" ? "" : ` PARTITION BY ${t.partition}`)
        + (t.options === "" ? "" : ` WITH (${t.options})`)
      const comments = [
        ...(t.comment === ""
          ? []
          : [`COMMENT ON TABLE ${qualified(String(t.name))} IS ${literal(String(t.comment))};`]),
        ...catalog.columns.filter((c) => c.rel === t.oid && c.comment !== "").map((c) =>
          `COMMENT ON COLUMN ${qualified(String(t.name))}.${ident(String(c.name))} IS ${literal(String(c.comment))};`
        )
      ]
      return [`CREATE ${unlogged}TABLE ${qualified(String(t.name))} (\n${lines.join(",\n")}\n)${options};`, ...comments]
        .join("\n")
    })

    const sequences = catalog.sequences.map((s) =>
      [
        `CREATE SEQUENCE ${
          qualified(String(s.name))
        } AS ${s.type} INCREMENT BY ${s.increment} MINVALUE ${s.min} MAXVALUE ${s.max}`,
        `  START WITH ${s.start} CACHE ${s.cache}${s.cycle === true ? " CYCLE" : " NO CYCLE"}`,
        s.owner === "" ? "" : `  OWNED BY ${schema}.${s.owner}`
      ].filter((line) => line !== "").join("\n") + ";"
    )

    const functions = catalog.functions.map((f) =>
      [
        statement(String(f.def)),
        ...(f.comment === "" ? [] : [`COMMENT ON FUNCTION ${f.signature} IS ${literal(String(f.comment))};`])
      ]
        .join("\n")
    )

    const views = catalog.views.map((v) =>
      [
        `CREATE ${v.kind === "m" ? "MATERIALIZED " : ""}VIEW ${qualified(String(v.name))} AS\n${
          statement(String(v.def))
        }`,
        ...(v.comment === "" ? [] : [`COMMENT ON VIEW ${qualified(String(v.name))} IS ${literal(String(v.comment))};`])
      ].join("\n")
    )

    const text = header +
      section("Tables: columns, defaults and constraints", tables) +
      section(
        "Indexes (other than those of primary key, unique and exclusion constraints)",
        catalog.indexes.map((i) => statement(String(i.def)))
      ) +
      section("Sequences", sequences) +
      section("Functions", functions) +
      section("Triggers", catalog.triggers.map((t) => statement(String(t.def)))) +
      section("Views", views)
    return normalize(text, schema, channel)
  })

/**
 * The names become placeholders: the channel first (it contains the schema's name), then the
 * schema, quoted or not, as `"{{schema}}"` (how the migrations write it). Trailing blanks go:
 * function bodies keep their source's, which a reviewer's editor would strip.
 */
export const normalize = (text: string, schema: string, channel: string): string =>
  text
    .replaceAll(channel, "{{channel}}")
    .replace(new RegExp(`"?\\b${schema}\\b"?`, "g"), "\"{{schema}}\"")
    .split("\n").map((line) => line.trimEnd()).join("\n")
    .replace(/\n*$/, "\n")

/** The first lines where two dumps differ, for a failure message: the committed ones, then the generated ones. */
export const firstDifferences = (committed: string, generated: string, count = 6): string => {
  const a = committed.split("\n")
  const b = generated.split("\n")
  let at = 0
  while (at < a.length && at < b.length && a[at] === b[at]) at++
  return [
    `first difference at line ${at + 1} (- committed, + generated):`,
    ...a.slice(at, at + count).map((line) => `- ${line}`),
    ...b.slice(at, at + count).map((line) => `+ ${line}`)
  ].join("\n")
}

/** A schema name for the dump: random, so its text cannot be mistaken for anything else. */
export const schemaName = (): string => `schema_dump_${Math.random().toString(36).slice(2, 10)}`
