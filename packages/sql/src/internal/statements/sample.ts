/**
 * The runs that have not ended, from the partial indexes that hold them only (`RunStore.sample`):
 * its cost follows the live runs, never the ended ones a store keeps without bound.
 */
import type { LiveSample, LiveState } from "@leasehold/core"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { num } from "./rows.js"

/**
 * The runs open in the ledger now, as a FROM item (batch, owner, expires_at, id, fence, attempt):
 * the unsettled batches' runs, less those closed and those completed.
 */
export const openLedgerRuns = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql`(
    SELECT c.batch, c.owner, c.expires_at, u.id, u.fence, u.attempt
    FROM ${s.claimBatches(sql)} c
      -- Each open batch's completions read once, by its index (never a scan of all completions).
      CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(x), '{}') AS done FROM ${s.completionBatches(sql)} d, unnest(d.ids) AS x
        WHERE d.claim_batch = c.batch
      ) k,
      unnest(c.ids, c.fences, c.attempts) AS u(id, fence, attempt)
    WHERE c.settled_at IS NULL AND u.id <> ALL (c.closed) AND u.id <> ALL (k.done)
  )`

/** Live runs by queue and state; each branch's WHERE repeats its partial index's predicate. */
export const liveRuns = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql<{ queue: string; state: LiveState; count: bigint; due: bigint; oldest: number | null; live: bigint }>`
      SELECT queue, state, sum(count) AS count, sum(due) AS due, max(oldest) AS oldest, sum(live) AS live FROM (
        -- ready: pending runs a claim may take (no key limit governs them, or they hold a slot)
        SELECT queue, 'pending' AS state, count(*) AS count,
          count(*) FILTER (WHERE run_at <= now()) AS due,
          extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8 AS oldest, 0 AS live
        FROM ${s.ready(sql)} GROUP BY queue
        UNION ALL
        -- runs_waiting_kind and runs_waiting_queue: pending runs waiting for their key's slot
        SELECT queue, 'pending', count(*), 0, NULL, 0
        FROM ${s.runs(sql)} WHERE state = 'pending' AND key_scope = 'kind' AND key_slot IS NULL GROUP BY queue
        UNION ALL
        SELECT queue, 'pending', count(*), 0, NULL, 0
        FROM ${s.runs(sql)} WHERE state = 'pending' AND key_scope = 'queue' AND key_slot IS NULL GROUP BY queue
        UNION ALL
        -- waiting: keyed runs of the ledger waiting for their key's slot (migration 0025)
        SELECT queue, 'pending', count(*), 0, NULL, 0 FROM ${s.waiting(sql)} GROUP BY queue
        UNION ALL
        -- runs_running
        SELECT queue, 'running', count(*), 0, NULL, count(*) FILTER (WHERE lease_expires_at > now())
        FROM ${s.runs(sql)} WHERE state = 'running' GROUP BY queue
        UNION ALL
        -- claim_batches_open: runs running in the ledger (open in an unsettled batch)
        SELECT r.queue, 'running', count(*), 0, NULL, count(*) FILTER (WHERE o.expires_at > now())
        FROM ${openLedgerRuns(sql, s)} o JOIN ${s.runs(sql)} r ON r.id = o.id GROUP BY r.queue
        UNION ALL
        -- runs_listed (state, id) for the states few runs are in, or runs_signal_token: every
        -- suspended run holds a token, and only a suspended run does
        SELECT queue, 'suspended', count(*), 0, NULL, 0
        FROM ${s.runs(sql)} WHERE signal_token IS NOT NULL AND state = 'suspended' GROUP BY queue
      ) live
      GROUP BY queue, state ORDER BY queue COLLATE "C", state`

export const sample = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql.withTransaction(Effect.gen(function*() {
    // Each branch can be read from its partial index alone; the planner is told not to read the
    // table instead (for this transaction only, so it holds through a transaction pooler too).
    yield* sql`SET LOCAL enable_seqscan = off`
    const rows = yield* liveRuns(sql, s)
    return {
      byStateAndQueue: rows.map((r) => ({ queue: r.queue, state: r.state, count: num(r.count) })),
      dueByQueue: rows.filter((r) => r.state === "pending" && num(r.due) > 0)
        .map((r) => ({ queue: r.queue, due: num(r.due), oldestDueSeconds: Number(r.oldest) })),
      liveLeases: rows.reduce((sum, r) => sum + num(r.live), 0)
    } satisfies LiveSample
  }))
