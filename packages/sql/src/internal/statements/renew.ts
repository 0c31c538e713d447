/**
 * Heartbeat renewal: one statement per worker per interval, whatever the number of leases. Each
 * lease is matched on id + fence + running (and owner); a lease the statement could not renew was
 * superseded, cancelled or finished elsewhere, and is left out of the answer. The leases are found
 * by primary key, whatever the statistics say (docs/adr/0001). No index names the expiry, so each
 * renewal is a HOT update (docs/adr/0012).
 */
import type { LeaseKey } from "@leasehold/core"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"

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
    // By primary key only, guards as join conditions (byPrimaryKey in guarded.ts). The statement
    // answers with the leases it did not renew (none, normally): 10,000 renewed leases are not
    // sent back and decoded every round.
    const lost = yield* sql<{ ord: string }>`
      WITH held AS MATERIALIZED (
        SELECT h.*, 'running'::text AS state, ${owner}::text AS owner
        FROM unnest(${ids}::bigint[], ${
      leases.map((l) => String(l.fence))
    }::bigint[]) WITH ORDINALITY AS h(id, fence, ord)
      ), renewed AS (
        UPDATE ${s.runs(sql)} r
        SET lease_expires_at = now() + ${Duration.toMillis(ttl)}::float8 * interval '1 millisecond'
        FROM held h
        WHERE r.id = ANY(${ids}::bigint[]) AND r.id = h.id AND r.fence = h.fence AND r.state = h.state
          AND r.lease_owner = h.owner
        RETURNING r.id, r.fence
      )
      -- By run and fence, not position: a lease listed twice is renewed once and held twice.
      SELECT h.ord::text AS ord FROM held h WHERE NOT EXISTS (SELECT 1 FROM renewed n WHERE n.id = h.id AND n.fence = h.fence)`
    const missing = new Set(lost.map((r) => Number(r.ord) - 1))
    // Ids as Postgres prints them, whatever form the caller used ("007" is run 7).
    return leases.filter((_, i) => !missing.has(i)).map((l): LeaseKey => ({
      runId: String(BigInt(l.runId)),
      fence: l.fence
    }))
  })
