/**
 * Claim: one atomic statement takes up to `limit` runs that are due (pending and `run_at` passed),
 * abandoned (running with an expired lease) or past a suspension deadline, skipping rows other
 * workers hold locked. Every claim raises the run's fence by exactly 1. Time is the database's
 * `now()` only.
 *
 * An abandoned run that has used all its attempts is failed here instead of claimed: expired
 * leases count as attempts, so a run that keeps killing its workers ends.
 */
import { type ClaimRequest, KeyLimits } from "@leasehold/core"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../StoreSchema.js"
import { type ClaimRow, toClaimed } from "./rows.js"

export const claim = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  request.dueOnly === true ? claimDue(sql, s, request) : claimAll(sql, s, request)

/**
 * The request's queues that are not paused (`queues.ts`): an init plan, evaluated once per
 * statement, so every branch still reaches its runs by index.
 */
const activeQueues = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  sql`ARRAY(SELECT u.name FROM unnest(${request.queues as Array<string>}::text[]) AS u(name)
    WHERE NOT EXISTS (SELECT 1 FROM ${s.pausedQueues(sql)} p WHERE p.queue = u.name))`

/**
 * How many runs of the row's concurrency key may be running once it starts, if it may start now
 * (`key_room`, migration 0010), else 0: NULL for a run without a key or whose queue and kind
 * declare no limit. `inDueOrder`: runs of the key ahead of the row in the due order count against
 * its room (a due run's first look); otherwise only the running ones (a suspension that timed out,
 * or a due run admitted already, read again for `admitted` under the key's lock this claim holds).
 */
const roomOf = (s: StoreSchema, row: string, inDueOrder: boolean) =>
  `CASE WHEN ${row}.concurrency_key IS NULL THEN NULL ELSE "${s.schema}".key_room(${row}.queue, ${row}.kind, ${row}.concurrency_key, ${
    inDueOrder ? `${row}.id` : "NULL"
  }) END`

/**
 * Keeps the rows of `source` (ordered by `order`) that their key admits: all of a run without a
 * limit, and at most `room` runs of each key, the first ones in claim order. A key's room is read
 * once per claim, so a claim must not take more of its runs than that at once.
 */
const admitted = (sql: SqlClient.SqlClient, source: string, order: string) =>
  sql.literal(`SELECT * FROM (
      SELECT a.*, row_number() OVER (PARTITION BY a.concurrency_key, a.room IS NULL ORDER BY ${order}) AS nth FROM ${source} a
    ) n WHERE n.room IS NULL OR n.nth <= n.room`)

/**
 * The due runs of a claim, locked, as `d` (id, priority, run_at, claimed_*, concurrency_key, room),
 * in claim order: the FROM clause both claims share.
 *
 * One index scan per queue with queue = q.name: runs_due (queue, priority DESC, run_at, id) then
 * yields rows already in claim order and stops at the limit. (With queue = ANY(...) Postgres reads
 * and sorts every due row on each claim: O(backlog) per claim.) Each queue contributes its first
 * unlocked rows up to the limit, so the overall first ones are among them.
 *
 * Runs their key holds back are passed over, not counted against the limit, so they do not block
 * the runs behind them; they are filtered before they are locked (a row lock writes WAL), and a
 * claim looks at no more than `KeyLimits.scanPastLimit` rows past its limit in each queue, so a
 * claim that cannot fill its limit does not read the whole backlog. The window is read without
 * locks and each of its rows is then locked by primary key, skipping rows other claims hold.
 */
const dueRows = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  sql`FROM unnest(${activeQueues(sql, s, request)}) AS q(name) CROSS JOIN LATERAL (
          SELECT l.*, ${sql.literal(roomOf(s, "l", false))} AS room FROM (
            SELECT r.id, r.queue, r.kind, r.priority, r.run_at, r.concurrency_key,
              r.claimed_by, r.claimed_at, r.claimed_fence, r.claimed_attempt
            FROM (
              SELECT id FROM ${s.runs(sql)}
              WHERE state = 'pending' AND run_at <= now() AND queue = q.name AND kind = ANY(${request.kinds as Array<string>}::text[])
              ORDER BY priority DESC, run_at, id
              LIMIT ${request.limit + KeyLimits.scanPastLimit}
            ) w CROSS JOIN LATERAL (
              SELECT * FROM ${s.runs(sql)} r
              WHERE r.id = w.id AND r.state = 'pending' AND r.run_at <= now()
                AND coalesce(${sql.literal(roomOf(s, "r", true))}, 1) > 0
              FOR UPDATE SKIP LOCKED
            ) r
            LIMIT ${request.limit}
          ) l
        ) d
        ORDER BY d.priority DESC, d.run_at, d.id LIMIT ${request.limit}`

/** Due, abandoned and timed-out runs, in that statement's order: expired leases first. */
const claimAll = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  Effect.gen(function*() {
    if (request.limit <= 0 || request.kinds.length === 0) return []
    const runs = s.runs(sql)
    const queues = activeQueues(sql, s, request)
    const kinds = request.kinds as Array<string>
    const limit = request.limit
    const ttlMs = Duration.toMillis(request.ttl)
    const rows = yield* sql<ClaimRow & { origin: number }>`
      WITH expired AS (
        -- A reclaimed run keeps the key slot it already holds: no admission.
        SELECT id, 0 AS origin, 0 AS priority, lease_expires_at AS due_at,
          claimed_by, claimed_at, claimed_fence, claimed_attempt, concurrency_key, NULL::integer AS room FROM ${runs}
        WHERE state = 'running' AND lease_expires_at <= now()
          AND queue = ANY(${queues}) AND kind = ANY(${kinds}::text[])
        ORDER BY lease_expires_at LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      ), timed_out AS (
        -- A suspension that times out starts running again: its key must admit it, as a due run's.
        SELECT * FROM (
          SELECT l.id, 1 AS origin, 0 AS priority, l.suspend_deadline AS due_at,
            l.claimed_by, l.claimed_at, l.claimed_fence, l.claimed_attempt, l.concurrency_key,
            ${sql.literal(roomOf(s, "l", false))} AS room
          FROM (
            SELECT * FROM ${runs}
            WHERE state = 'suspended' AND suspend_deadline <= now()
              AND queue = ANY(${queues}) AND kind = ANY(${kinds}::text[])
            ORDER BY suspend_deadline LIMIT ${limit + KeyLimits.scanPastLimit}
            FOR UPDATE SKIP LOCKED
          ) l
        ) c WHERE c.room IS NULL OR c.room > 0
        LIMIT ${limit}
      ), due AS (
        SELECT d.id, 2 AS origin, d.priority, d.run_at AS due_at,
          d.claimed_by, d.claimed_at, d.claimed_fence, d.claimed_attempt, d.concurrency_key, d.room
        ${dueRows(sql, s, request)}
      ), candidates AS (
        -- Each group's own order is carried into the cut, so which rows of the last group make
        -- the limit is stated, not left to how Postgres happens to concatenate the groups.
        SELECT * FROM (
          SELECT * FROM expired UNION ALL SELECT * FROM timed_out UNION ALL SELECT * FROM due
        ) c ORDER BY origin, priority DESC, due_at, id LIMIT ${limit}
      ), picked AS (
        ${admitted(sql, "candidates", "a.origin, a.priority DESC, a.due_at, a.id")}
      ), claimed AS (
        UPDATE ${runs} r SET
          fence = r.fence + 1,
          state = CASE WHEN p.origin = 0 AND r.attempt >= r.max_attempts THEN 'failed' ELSE 'running' END,
          attempt = CASE WHEN p.origin = 0 AND r.attempt >= r.max_attempts THEN r.attempt ELSE r.attempt + 1 END,
          lease_owner = CASE WHEN p.origin = 0 AND r.attempt >= r.max_attempts THEN NULL ELSE ${request.owner} END,
          lease_expires_at = CASE WHEN p.origin = 0 AND r.attempt >= r.max_attempts THEN NULL
            ELSE now() + ${ttlMs}::float8 * interval '1 millisecond' END,
          finished_at = CASE WHEN p.origin = 0 AND r.attempt >= r.max_attempts THEN now() ELSE NULL END,
          error = CASE WHEN p.origin = 0 AND r.attempt >= r.max_attempts
            THEN jsonb_build_object('message', 'lease expired on the last attempt', 'permanent', true) ELSE r.error END,
          signals = CASE WHEN p.origin = 1
            THEN r.signals || jsonb_build_object(r.signal_name, jsonb_build_object('_tag', 'TimedOut')) ELSE r.signals END,
          signal_name = NULL, signal_token = NULL, suspend_deadline = NULL,
          -- A routine claim is recorded on the row only (run_history reads it there); the others
          -- are exceptional and get a history row at once.
          claimed_by = CASE WHEN p.origin = 2 THEN ${request.owner} END,
          claimed_at = CASE WHEN p.origin = 2 THEN now() END,
          claimed_fence = CASE WHEN p.origin = 2 THEN r.fence + 1 END,
          claimed_attempt = CASE WHEN p.origin = 2 THEN r.attempt + 1 END,
          updated_at = now()
        -- The ids as an explicit restriction: picked rows are reached by primary key, not by a
        -- hash join over a scan of the whole table (which the planner prefers on small tables).
        FROM picked p WHERE r.id = ANY(ARRAY(SELECT id FROM picked)) AND r.id = p.id
        RETURNING r.id, r.queue, r.kind, r.payload, r.attempt, r.max_attempts, r.fence, r.checkpoint, r.signals, r.concurrency_key,
          r.state, p.origin, (extract(epoch FROM now() - p.due_at) * 1000)::float8 AS wait_ms, r.trace_parent
      ), history AS (
        -- The claim this one supersedes moves from the row into the history, with its own time.
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, owner, detail, at)
        SELECT id, claimed_fence, 'claimed', claimed_by, jsonb_build_object('attempt', claimed_attempt), claimed_at
        FROM picked WHERE claimed_at IS NOT NULL
        UNION ALL
        SELECT id, fence,
          CASE WHEN state = 'failed' THEN 'failed' WHEN origin = 0 THEN 'reclaimed' ELSE 'signal_timed_out' END,
          ${request.owner}, jsonb_build_object('attempt', attempt), now()
        FROM claimed WHERE origin <> 2
      )
      SELECT id::text AS id, queue, kind, payload, attempt, max_attempts, fence, checkpoint, signals, concurrency_key, state, origin, wait_ms,
        trace_parent
      FROM claimed`
    return rows.filter((row) => row.state === "running").map(toClaimed)
  })

/**
 * Due runs only: the claim a notification or a freed slot asks for. It leaves out the two sweeps
 * (expired leases, passed suspension deadlines), which the worker runs at most once per poll
 * interval, and with them the union and re-sort of three branches: the statement the drain sends
 * hundreds of times a second is one index scan and one update (docs/adr/0004).
 */
const claimDue = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  Effect.gen(function*() {
    if (request.limit <= 0 || request.kinds.length === 0) return []
    const runs = s.runs(sql)
    const rows = yield* sql<ClaimRow>`
      WITH candidates AS (
        SELECT d.id, d.priority, d.run_at, d.claimed_by, d.claimed_at, d.claimed_fence, d.claimed_attempt, d.concurrency_key, d.room
        ${dueRows(sql, s, request)}
      ), due AS (
        ${admitted(sql, "candidates", "a.priority DESC, a.run_at, a.id")}
      ), claimed AS (
        UPDATE ${runs} r SET
          fence = r.fence + 1, state = 'running', attempt = r.attempt + 1,
          lease_owner = ${request.owner},
          lease_expires_at = now() + ${Duration.toMillis(request.ttl)}::float8 * interval '1 millisecond',
          finished_at = NULL, signal_name = NULL, signal_token = NULL, suspend_deadline = NULL,
          claimed_by = ${request.owner}, claimed_at = now(), claimed_fence = r.fence + 1, claimed_attempt = r.attempt + 1,
          updated_at = now()
        -- By primary key (no join: the rows are locked and nothing else needs their old values).
        WHERE r.id = ANY(ARRAY(SELECT id FROM due))
        RETURNING r.id, r.queue, r.kind, r.payload, r.attempt, r.max_attempts, r.fence, r.checkpoint, r.signals, r.concurrency_key, r.state,
          (extract(epoch FROM now() - r.run_at) * 1000)::float8 AS wait_ms, r.trace_parent
      ), history AS (
        -- The claim this one supersedes (a retried or released run's) moves into the history.
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, owner, detail, at)
        SELECT id, claimed_fence, 'claimed', claimed_by, jsonb_build_object('attempt', claimed_attempt), claimed_at
        FROM due WHERE claimed_at IS NOT NULL
      )
      SELECT id::text AS id, queue, kind, payload, attempt, max_attempts, fence, checkpoint, signals, concurrency_key, state, wait_ms, trace_parent
      FROM claimed`
    return rows.map(toClaimed)
  })
