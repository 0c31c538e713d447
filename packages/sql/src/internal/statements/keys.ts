/**
 * Per-key concurrency limits (`KeyLimits`): one row per queue or kind that declares one. The
 * store reads them by primary key where it governs or admits a keyed run (`admit.ts`, migration
 * 0013's triggers, `claim.ts` › `governed`).
 */
import { KeyLimits } from "@leasehold/core"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { admitOnApplicationPool, admitted } from "./admit.js"
import { num } from "./rows.js"
import { openLedgerRuns } from "./sample.js"
import { governing } from "./slots.js"

/** Checks every limit, then upserts them all in one statement: one invalid limit writes nothing. */
export const set = (sql: SqlClient.SqlClient, s: StoreSchema, limits: ReadonlyArray<KeyLimits.KeyLimit>) =>
  Effect.gen(function*() {
    const checked: Array<KeyLimits.KeyLimit> = []
    for (const limit of limits) checked.push(yield* KeyLimits.check(limit))
    if (checked.length === 0) return
    yield* sql.withTransaction(Effect.gen(function*() {
      const changed = yield* sql<{ scope: KeyLimits.KeyLimitScope; name: string }>`
        INSERT INTO ${s.keyLimits(sql)} (scope, name, per_key)
        SELECT DISTINCT ON (scope, name) scope, name, per_key
        FROM unnest(${checked.map((l) => l.scope)}::text[], ${checked.map((l) => l.name)}::text[], ${
        checked.map((l) => l.perKey)
      }::int[])
          WITH ORDINALITY AS t(scope, name, per_key, ord)
        ORDER BY scope, name, ord DESC
        ON CONFLICT (scope, name) DO UPDATE SET per_key = excluded.per_key, updated_at = now()
        WHERE ${s.keyLimits(sql)}.per_key <> excluded.per_key
        RETURNING scope, name`
      yield* regovern(sql, s, changed)
    }))
  })

export const remove = (sql: SqlClient.SqlClient, s: StoreSchema, scope: KeyLimits.KeyLimitScope, name: string) =>
  sql.withTransaction(Effect.gen(function*() {
    const removed = yield* sql<{ scope: KeyLimits.KeyLimitScope; name: string }>`
      DELETE FROM ${s.keyLimits(sql)} WHERE scope = ${scope} AND name = ${name} RETURNING scope, name`
    yield* regovern(sql, s, removed)
    return removed.length > 0
  }))

/**
 * After limits changed: the pending keyed runs of the changed kinds and queues are governed by the
 * limits as they are now (their kind's, else their queue's), and give back the slots they were
 * admitted with (a pending run has not started: nothing runs over a limit for it); then their
 * keys' free slots are handed out again under the new limits, counting the running runs' slots.
 */
const regovern = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  changed: ReadonlyArray<{ scope: KeyLimits.KeyLimitScope; name: string }>
) =>
  Effect.gen(function*() {
    if (changed.length === 0) return
    const kinds = changed.filter((c) => c.scope === "kind").map((c) => c.name)
    const queues = changed.filter((c) => c.scope === "queue").map((c) => c.name)
    const limit = governing(s, "o.queue", "o.kind")
    // The ledger's pending keyed runs of those kinds and queues (waiting, or ready) move to their
    // rows first (ledger.ts › hold, slots and all), where the update below governs them again.
    yield* sql`SELECT ${sql.literal(`"${s.schema}".hold`)}(ARRAY(
        SELECT w.id FROM ${
      sql.literal(`"${s.schema}".waiting`)
    } w WHERE w.kind = ANY(${kinds}::text[]) OR w.queue = ANY(${queues}::text[])
        UNION ALL
        SELECT y.id FROM ${s.ready(sql)} y JOIN ${s.runs(sql)} r ON r.id = y.id
        WHERE y.ledger AND r.concurrency_key IS NOT NULL AND (y.kind = ANY(${kinds}::text[]) OR y.queue = ANY(${queues}::text[]))
      ), NULL)`
    yield* sql`
      UPDATE ${s.runs(sql)} r SET key_scope = g.scope, key_slot = NULL
      FROM (
        SELECT o.id, o.key_scope, o.key_slot, CASE WHEN ${sql.literal(limit.perKey)} IS NOT NULL THEN ${
      sql.literal(limit.scope)
    } END AS scope
        FROM ${s.runs(sql)} o ${sql.literal(limit.joins)}
        WHERE o.state = 'pending' AND o.concurrency_key IS NOT NULL
          AND (o.kind = ANY(${kinds}::text[]) OR o.queue = ANY(${queues}::text[]))
      ) g
      WHERE r.id = g.id AND r.state = 'pending' AND (g.scope IS DISTINCT FROM g.key_scope OR g.key_slot IS NOT NULL)`
    // Every limit's keys, not only the changed ones': a queue's change can take slots from runs
    // their kind's limit governs (their scope changed), which its own admission gives back.
    yield* admitted(admitOnApplicationPool(sql, s, { every: true }))
  })

/** The declared limits with, in each scope, the keys running now and the keyed runs that are due. */
export const list = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  Effect.map(
    sql<{ scope: KeyLimits.KeyLimitScope; name: string; per_key: number; keys_running: bigint; keyed_due: bigint }>`
      SELECT l.scope, l.name, l.per_key,
        (SELECT count(DISTINCT k.key) FROM (
          SELECT r.concurrency_key AS key FROM ${s.runs(sql)} r
          WHERE r.state = 'running' AND r.concurrency_key IS NOT NULL
            AND (CASE l.scope WHEN 'queue' THEN r.queue ELSE r.kind END) = l.name
          UNION ALL
          -- Keyed runs running in the ledger: open in an unsettled batch (sample.ts › openLedgerRuns).
          SELECT r.concurrency_key FROM ${openLedgerRuns(sql, s)} o JOIN ${s.runs(sql)} r ON r.id = o.id
          WHERE r.concurrency_key IS NOT NULL AND (CASE l.scope WHEN 'queue' THEN r.queue ELSE r.kind END) = l.name
        ) k) AS keys_running,
        (SELECT count(*) FROM ${s.runs(sql)} r
          WHERE r.state = 'pending' AND r.run_at <= now() AND r.concurrency_key IS NOT NULL
            AND (CASE l.scope WHEN 'queue' THEN r.queue ELSE r.kind END) = l.name)
          + (SELECT count(*) FROM ${s.ready(sql)} y JOIN ${s.runs(sql)} r ON r.id = y.id
            WHERE y.ledger AND y.run_at <= now() AND r.concurrency_key IS NOT NULL
              AND (CASE l.scope WHEN 'queue' THEN y.queue ELSE y.kind END) = l.name)
          + (SELECT count(*) FROM ${sql.literal(`"${s.schema}".waiting`)} w
            WHERE w.run_at <= now() AND (CASE l.scope WHEN 'queue' THEN w.queue ELSE w.kind END) = l.name) AS keyed_due
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
