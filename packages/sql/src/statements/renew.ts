/**
 * Heartbeat renewal: one statement per worker per interval, whatever the number of leases. Each
 * lease is matched on id + fence + running (and owner); the statement returns exactly the leases
 * still held, so anything missing was superseded, cancelled or finished elsewhere. The running
 * guard carries `COLLATE "C"` so the leases are found by primary key, never by scanning the
 * `runs_leases` partial index once per lease (see `guarded.ts`).
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
    const rows = yield* sql<{ id: string; fence: bigint }>`
      UPDATE ${s.runs(sql)} r
      SET lease_expires_at = now() + ${Duration.toMillis(ttl)}::float8 * interval '1 millisecond'
      FROM unnest(${leases.map((l) => l.runId)}::bigint[], ${leases.map((l) => l.fence)}::bigint[]) AS h(id, fence)
      WHERE r.id = h.id AND r.fence = h.fence AND r.state = 'running' COLLATE "C" AND r.lease_owner = ${owner}
      RETURNING r.id::text AS id, r.fence`
    return rows.map((r): LeaseKey => ({ runId: r.id, fence: num(r.fence) }))
  })
