/**
 * Heartbeat renewal: one statement per worker per interval, whatever the number of leases. Each
 * lease is matched on id + fence + running (and owner); the statement returns exactly the leases
 * still held, so anything missing was superseded, cancelled or finished elsewhere. The leases are
 * found by primary key, whatever the statistics say (see byPrimaryKey in `guarded.ts`).
 */
import type { LeaseKey } from "@leasehold/core"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../StoreSchema.js"
import { num } from "./rows.js"

export const renew = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  owner: string,
  leases: ReadonlyArray<LeaseKey>,
  ttl: Duration.Duration
) =>
  Effect.gen(function*() {
    if (leases.length === 0) return [] as ReadonlyArray<LeaseKey>
    const ids = leases.map((l) => l.runId)
    // By primary key only, guards as join conditions (byPrimaryKey in guarded.ts).
    const rows = yield* sql<{ id: string; fence: bigint }>`
      WITH held AS MATERIALIZED (
        SELECT h.*, 'running'::text AS state, ${owner}::text AS owner
        FROM unnest(${ids}::bigint[], ${leases.map((l) => l.fence)}::bigint[]) AS h(id, fence)
      )
      UPDATE ${s.runs(sql)} r
      SET lease_expires_at = now() + ${Duration.toMillis(ttl)}::float8 * interval '1 millisecond'
      FROM held h
      WHERE r.id = ANY(${ids}::bigint[]) AND r.id = h.id AND r.fence = h.fence AND r.state = h.state
        AND r.lease_owner = h.owner
      RETURNING r.id::text AS id, r.fence`
    return rows.map((r): LeaseKey => ({ runId: r.id, fence: num(r.fence) }))
  })
