/**
 * Per-key concurrency limits (`KeyLimits`): one row per queue or kind that declares one. The
 * claim reads them by primary key for each keyed run it looks at (`claim.ts` › `governingLimit`).
 */
import { KeyLimits } from "@leasehold/core"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../StoreSchema.js"
import { num } from "./rows.js"

/** Checks every limit, then upserts them all in one statement: one invalid limit writes nothing. */
export const set = (sql: SqlClient.SqlClient, s: StoreSchema, limits: ReadonlyArray<KeyLimits.KeyLimit>) =>
  Effect.gen(function*() {
    const checked: Array<KeyLimits.KeyLimit> = []
    for (const limit of limits) checked.push(yield* KeyLimits.check(limit))
    if (checked.length === 0) return
    yield* sql`
      INSERT INTO ${s.keyLimits(sql)} (scope, name, per_key)
      SELECT DISTINCT ON (scope, name) scope, name, per_key
      FROM unnest(${checked.map((l) => l.scope)}::text[], ${checked.map((l) => l.name)}::text[], ${checked.map((l) => l.perKey)}::int[])
        WITH ORDINALITY AS t(scope, name, per_key, ord)
      ORDER BY scope, name, ord DESC
      ON CONFLICT (scope, name) DO UPDATE SET per_key = excluded.per_key, updated_at = now()
      WHERE ${s.keyLimits(sql)}.per_key <> excluded.per_key`
  })

export const remove = (sql: SqlClient.SqlClient, s: StoreSchema, scope: KeyLimits.KeyLimitScope, name: string) =>
  Effect.map(
    sql`DELETE FROM ${s.keyLimits(sql)} WHERE scope = ${scope} AND name = ${name} RETURNING name`,
    (rows) => rows.length > 0
  )

/** The declared limits with, in each scope, the keys running now and the keyed runs that are due. */
export const list = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  Effect.map(
    sql<{ scope: KeyLimits.KeyLimitScope; name: string; per_key: number; keys_running: bigint; keyed_due: bigint }>`
      SELECT l.scope, l.name, l.per_key,
        (SELECT count(DISTINCT r.concurrency_key) FROM ${s.runs(sql)} r
          WHERE r.state = 'running' AND r.concurrency_key IS NOT NULL
            AND (CASE l.scope WHEN 'queue' THEN r.queue ELSE r.kind END) = l.name) AS keys_running,
        (SELECT count(*) FROM ${s.runs(sql)} r
          WHERE r.state = 'pending' AND r.run_at <= now() AND r.concurrency_key IS NOT NULL
            AND (CASE l.scope WHEN 'queue' THEN r.queue ELSE r.kind END) = l.name) AS keyed_due
      FROM ${s.keyLimits(sql)} l
      ORDER BY l.scope COLLATE "C", l.name COLLATE "C"`,
    (rows) =>
      rows.map((r): KeyLimits.KeyLimitInfo => ({
        scope: r.scope,
        name: r.name,
        perKey: r.per_key,
        keysRunning: num(r.keys_running),
        keyedDue: num(r.keyed_due)
      }))
  )
