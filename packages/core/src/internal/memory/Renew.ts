/**
 * Heartbeat renewal (`packages/sql/src/internal/statements/renew.ts`): each lease is matched on its
 * id, fence, state running and owner; the answer is the leases renewed.
 *
 * @internal
 */
import type { LeaseKey } from "../../RunRecord.js"
import type { State } from "./State.js"

export const renew = (
  state: State,
  owner: string,
  leases: ReadonlyArray<LeaseKey>,
  ttlMs: number,
  now: number
): Array<LeaseKey> => {
  const renewed: Array<LeaseKey> = []
  for (const lease of leases) {
    const run = state.find(lease.runId)
    if (run !== undefined && run.fence === lease.fence && run.state === "running" && run.leaseOwner === owner) {
      run.leaseExpiresAt = now + ttlMs
      renewed.push({ runId: run.id, fence: run.fence })
    }
  }
  return renewed
}
