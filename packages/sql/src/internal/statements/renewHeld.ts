/**
 * A worker's heartbeat as the store answers it: the leases this store claimed in the ledger are
 * renewed there by their claim references (one update per batch), the others (and those the
 * ledger no longer holds: moved to their rows meanwhile) in their rows, and what the rows miss may
 * still be in the ledger, claimed by another store of this owner. Answers the leases still held.
 */
import type { LeaseKey } from "@leasehold/core"
import { type Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import * as ledger from "./ledger.js"
import * as rows from "./renew.js"

export const renewHeld = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  owner: string,
  leases: ReadonlyArray<LeaseKey>,
  ttl: Duration.Duration,
  refs: ledger.LedgerRefs
) =>
  Effect.gen(function*() {
    const inLedger: Array<number> = []
    const claimed: Array<{ runId: string; ref: ledger.LedgerRef }> = []
    leases.forEach((lease, i) => {
      const ref = refs.get(lease)
      if (ref !== undefined) {
        inLedger.push(i)
        claimed.push({ runId: lease.runId, ref })
      }
    })
    const ledgerMissed = inLedger.length === 0
      ? []
      : (yield* ledger.renewClaimed(sql, s, owner, claimed, ttl)).map((m) => inLedger[m]!)
    const tried = new Set(inLedger)
    const inRows = [...leases.flatMap((_, i) => tried.has(i) ? [] : [i]), ...ledgerMissed]
    const renewedInRows = inRows.length === 0
      ? []
      : yield* rows.renew(sql, s, owner, inRows.map((i) => leases[i]!), ttl)
    const key = (i: number) => `${ledger.canonicalRunId(leases[i]!.runId)}:${leases[i]!.fence}`
    const held = new Set(renewedInRows.map((l) => `${l.runId}:${l.fence}`))
    const rowsMissed = inRows.filter((i) => !tried.has(i) && !held.has(key(i)))
    const lateMissed = new Set(
      rowsMissed.length === 0
        ? []
        : (yield* ledger.renew(sql, s, owner, rowsMissed.map((i) => leases[i]!), ttl, refs)).map((m) => rowsMissed[m]!)
    )
    // A run moves from the ledger to its row, never back: one moved between the row renewal and
    // the ledger's is on its row now, where a second look renews it. Only what neither holds is lost.
    const late = [...lateMissed]
    const renewedLate = late.length === 0 ? [] : yield* rows.renew(sql, s, owner, late.map((i) => leases[i]!), ttl)
    const heldLate = new Set(renewedLate.map((l) => `${l.runId}:${l.fence}`))
    const lost = new Set([
      ...ledgerMissed.filter((i) => !held.has(key(i))),
      ...late.filter((i) => !heldLate.has(key(i)))
    ])
    for (const i of lost) refs.delete(leases[i]!)
    return leases.flatMap((lease, i) =>
      lost.has(i) ? [] : [{ runId: ledger.canonicalRunId(lease.runId), fence: lease.fence }]
    )
  })
