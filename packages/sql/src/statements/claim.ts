/**
 * Claim: one atomic statement takes up to `limit` runs that are due (pending and `run_at` passed),
 * abandoned (running with an expired lease) or past a suspension deadline, skipping rows other
 * workers hold locked. Every claim raises the run's fence by exactly 1, or, on the first claim
 * after a promotion, to the new timeline's floor (`fenceFloor`). Time is the database's `now()`
 * only.
 *
 * An abandoned run that has used all its attempts is failed here instead of claimed: expired
 * leases count as attempts, so a run that keeps killing its workers ends.
 */
import { ClaimPosition, type ClaimRequest, KeyLimits } from "@leasehold/core"
import { Duration, Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { StoreSchema } from "../StoreSchema.js"
import { type ClaimRow, toClaimed } from "./rows.js"
import { admit, admitted, slotCollision } from "./admit.js"
import { governing, heldSlots } from "./slots.js"

/**
 * The lowest fence a claim may grant on this server's timeline (`fence_floor()`, migration
 * `0012_fence_epoch`): read once per statement. After a promotion every claim jumps above what the
 * old primary granted, lost claims included (docs/adr/0016-failover-safe-fences.md).
 */
const fenceFloor = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql`fence_floor AS MATERIALIZED (SELECT ${sql.literal(`"${s.schema}".fence_floor()`)} AS floor)`

export const claim = (sql: SqlClient.SqlClient, s: StoreSchema, positions: ClaimPosition.Positions, request: ClaimRequest) =>
  (request.dueOnly === true ? claimDue(sql, s, positions, request) : claimAll(sql, s, positions, request)).pipe(
    // Another claim committed a slot of one of this claim's keys after this claim's snapshot was
    // taken: the unique index refused it, the statement wrote nothing, and the next attempt sees
    // the slot taken. Two claims each waiting on a slot the other is writing are a deadlock
    // Postgres breaks by failing one (after deadlock_timeout): retried alike. Claims that split a
    // key's runs take different slots (`slotted`); they still meet on runs of one key in
    // different queues or kinds, or when a run ahead was claimed between their snapshots.
    Effect.retry({ times: 10, while: slotCollision })
  )

/**
 * The request's queues that are not paused (`queues.ts`): an init plan, evaluated once per
 * statement, so every branch still reaches its runs by index.
 */
const activeQueues = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  sql`ARRAY(SELECT DISTINCT u.name FROM unnest(${request.queues as Array<string>}::text[]) AS u(name)
    WHERE NOT EXISTS (SELECT 1 FROM ${s.pausedQueues(sql)} p WHERE p.queue = u.name))`

/**
 * The key limit that governs a run (`k`: scope, per_key, running), for a row `row` of runs: its
 * kind's limit if the kind declares one, else its queue's; and how many slots of its key in that
 * scope are held now (by running runs: a run gives its slot back as it stops running, migration
 * 0010's trigger). No row for a run without a key or a limit. Read in the statement's snapshot: a
 * stale count can only make a claim try a slot that is taken, which the unique index refuses
 * (`slotted`). Only the slot indexes can answer these lookups, whatever the statistics say.
 */
const governingLimit = (sql: SqlClient.SqlClient, s: StoreSchema, row: string) => {
  const limit = governing(s, `${row}.queue`, `${row}.kind`)
  const key = { queue: `${row}.queue`, kind: `${row}.kind`, concurrencyKey: `${row}.concurrency_key` }
  return sql.literal(`LEFT JOIN LATERAL (
      SELECT l.scope, l.per_key, ${heldSlots(s, "l.scope", "count", key)} AS running
      FROM (
        SELECT ${limit.scope} AS scope, ${limit.perKey} AS per_key
        FROM (SELECT 1) AS one
        ${limit.joins}
        -- Only the outer row in this condition: a run without a key skips the lookups altogether.
        WHERE ${row}.concurrency_key IS NOT NULL
      ) l
      WHERE l.per_key IS NOT NULL
      -- Kept a subquery (not pulled up into the claim), so each of its values is computed once
      -- per row however often the claim refers to it.
      OFFSET 0
    ) k ON true`)
}

/**
 * The candidates of `source` (ordered by `order`) with the slot each takes, those that find none
 * left out (a run without a limit takes none). A key's slots are the numbers below its limit, less
 * as many as runs still hold above it (a lowered limit), so that however many claims take them at
 * once no more runs than the limit hold slots. A claim's runs of one key take the free slots from
 * the place its first run holds among the key's due runs: claims that split a key's runs between
 * them take different slots instead of colliding. The unique index on held slots (migration
 * 0010) refuses a slot another claim took since this one's snapshot.
 */
const slotted = (s: StoreSchema, source: string, order: string) =>
  `SELECT * FROM (
      SELECT n.*, CASE WHEN n.scope IS NULL THEN NULL ELSE (
        SELECT g.slot FROM (
          -- The key's held slots, read once (one probe of its slot index).
          SELECT ${heldSlots(s, "n.scope", "array", { queue: "n.queue", kind: "n.kind", concurrencyKey: "n.concurrency_key" })} AS held
        ) h CROSS JOIN LATERAL generate_series(0,
          n.per_key - 1 - (SELECT count(*) FROM unnest(h.held) AS above(slot) WHERE above.slot >= n.per_key)::integer) AS g(slot)
        WHERE g.slot <> ALL (h.held)
        ORDER BY g.slot OFFSET n.nth + n.first_place - 2 LIMIT 1) END AS slot
      FROM (
        SELECT a.*, row_number() OVER (key_runs ORDER BY ${order}) AS nth, min(a.place) OVER key_runs AS first_place
        FROM ${source} a
        WINDOW key_runs AS (PARTITION BY a.scope, CASE a.scope WHEN 'kind' THEN a.kind ELSE a.queue END, a.concurrency_key)
      ) n
      -- Kept apart from the filter below, so each row's slot is looked up once.
      OFFSET 0
    ) x WHERE x.scope IS NULL OR x.slot IS NOT NULL`

/**
 * Whether a key limit is declared for any of the claim's kinds or queues: an init plan, read once
 * per statement. Such a claim reads each queue from its head and moves no claim position: the
 * hand-off makes a key's next run due long after it was enqueued, behind any position.
 */
const keyLimitDeclared = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  sql`(EXISTS (SELECT 1 FROM ${s.keyLimits(sql)} WHERE scope = 'kind' AND name = ANY(${request.kinds as Array<string>}::text[]))
    OR EXISTS (SELECT 1 FROM ${s.keyLimits(sql)} WHERE scope = 'queue' AND name = ANY(${request.queues as Array<string>}::text[])))`

/**
 * One queue's due runs in claim order, locked as they are read, from the queue's claim position
 * `pos` (ClaimPosition): the lanes of higher priority from their heads, the position's lane from
 * its `run_at` less the margin, the lanes of lower priority from their heads. Without a position
 * the three are the whole queue from its head (the lanes above the lowest integer, then that
 * lane). Each part is one range of runs_due (queue, priority DESC, run_at, id), read only as far
 * as the parts before it left the limit unfilled, so the dead entries a held snapshot keeps at the
 * head of the position's lane are never read (docs/adr/0013). A keyed run is in runs_due only once
 * admitted (it holds its key's slot, migration 0013): its key's limit was decided before.
 */
const lanes = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) => {
  const lowest = -2147483648
  const part = (range: Statement.Fragment) =>
    sql`SELECT * FROM (
      SELECT id, queue, kind, priority, run_at, concurrency_key, claimed_by, claimed_at, claimed_fence, claimed_attempt
      FROM ${s.runs(sql)}
      WHERE state = 'pending' AND (key_scope IS NULL OR key_slot IS NOT NULL) AND run_at <= now() AND queue = q.name
        AND kind = ANY(${request.kinds as Array<string>}::text[]) AND ${range}
      ORDER BY priority DESC, run_at, id LIMIT ${request.limit}
      FOR UPDATE SKIP LOCKED
    )`
  // The three parts are an Append read in order under the LIMIT (no ORDER BY over the union: a
  // MergeAppend would read the head of every part first). Postgres reads a non-parallel Append in
  // order, and FOR UPDATE rules out a parallel plan; the claim's outer ORDER BY fixes the order of
  // what is returned, this fixes which runs are locked.
  return sql`${part(sql`priority > coalesce(pos.priority, ${lowest})`)} above
    UNION ALL
    ${part(sql`priority = coalesce(pos.priority, ${lowest})
        AND run_at >= coalesce(to_timestamp(pos.from_ms / 1000.0), '-infinity'::timestamptz)`)} lane
    UNION ALL
    ${part(sql`priority < coalesce(pos.priority, ${lowest})`)} below
    LIMIT ${request.limit}`
}

/**
 * The due runs of a claim, locked, as `d` (id, queue, kind, priority, run_at, claimed_*,
 * concurrency_key), in claim order: the FROM clause both claims share.
 *
 * One index scan per queue with queue = q.name: runs_due (queue, priority DESC, run_at, id) then
 * yields rows already in claim order and stops at the limit. (With queue = ANY(...) Postgres reads
 * and sorts every due row on each claim: O(backlog) per claim.) Each queue contributes its first
 * unlocked rows up to the limit, so the overall first ones are among them. Runs their key holds
 * back wait outside runs_due (admit.ts), so they neither block the runs behind them nor cost a
 * claim anything.
 */
const dueRows = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: ClaimRequest,
  positions: ReadonlyMap<string, ClaimPosition.ClaimPosition> = new Map()
) =>
  sql`FROM unnest(${activeQueues(sql, s, request)}) AS q(name)
        LEFT JOIN unnest(${[...positions.keys()]}::text[], ${[...positions.values()].map((p) => p.priority)}::integer[],
          ${[...positions.values()].map((p) => String(p.runAtMs - ClaimPosition.marginMs))}::float8[]) AS pos(queue, priority, from_ms)
          ON pos.queue = q.name AND NOT ${keyLimitDeclared(sql, s, request)}
        CROSS JOIN LATERAL (
          ${lanes(sql, s, request)}
        ) d
        ORDER BY d.priority DESC, d.run_at, d.id LIMIT ${request.limit}`

/** What a claim returns of each run for its queue's claim position. */
interface PlacedRow {
  readonly queue: string
  readonly id: string
  readonly priority: number
  readonly run_at_ms: number
}

const placed = (row: PlacedRow): ClaimPosition.Placed => ({
  queue: row.queue,
  priority: row.priority,
  runAtMs: Number(row.run_at_ms),
  id: row.id
})

/** Due, abandoned and timed-out runs, in that statement's order: expired leases first. */
const claimAll = (sql: SqlClient.SqlClient, s: StoreSchema, positions: ClaimPosition.Positions, request: ClaimRequest) =>
  Effect.gen(function*() {
    if (request.limit <= 0 || request.kinds.length === 0) return []
    const runs = s.runs(sql)
    const queues = activeQueues(sql, s, request)
    const kinds = request.kinds as Array<string>
    const limit = request.limit
    const ttlMs = Duration.toMillis(request.ttl)
    // Keyed runs left waiting with room for them (a limit raised, a run that became due, a race
    // between an enqueue and a completion) are admitted first, so this claim can take them.
    yield* admitted(admit(sql, s, { kinds: request.kinds, queues: request.queues }))
    const rows = yield* sql<ClaimRow & PlacedRow & { origin: number }>`
      WITH ${fenceFloor(sql, s)}, expired AS (
        -- A reclaimed run keeps the key slot it already holds: no admission.
        SELECT id, 0 AS origin, 0 AS priority, lease_expires_at AS due_at,
          claimed_by, claimed_at, claimed_fence, claimed_attempt, queue, kind, concurrency_key,
          NULL::text AS scope, NULL::integer AS per_key, NULL::integer AS place FROM ${runs}
        WHERE state = 'running' AND lease_expires_at <= now()
          AND queue = ANY(${queues}) AND kind = ANY(${kinds}::text[])
        ORDER BY lease_expires_at, id LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      ), timed_out AS (
        -- A suspension that times out starts running again: it needs a slot of its key, as a due run.
        SELECT x.* FROM (
          SELECT id FROM ${runs}
          WHERE state = 'suspended' AND suspend_deadline <= now()
            AND queue = ANY(${queues}) AND kind = ANY(${kinds}::text[])
          ORDER BY suspend_deadline, id LIMIT ${limit + KeyLimits.scanPastLimit}
        ) w CROSS JOIN LATERAL (
          SELECT r.id, 1 AS origin, 0 AS priority, r.suspend_deadline AS due_at,
            r.claimed_by, r.claimed_at, r.claimed_fence, r.claimed_attempt, r.queue, r.kind, r.concurrency_key, k.scope, k.per_key,
            -- No place in the due order: a timed-out suspension takes the first free slot.
            1 AS place
          FROM ${runs} r ${governingLimit(sql, s, "r")}
          WHERE r.id = w.id AND r.state = 'suspended' AND r.suspend_deadline <= now() AND (k.scope IS NULL OR k.running < k.per_key)
          FOR UPDATE OF r SKIP LOCKED
        ) x
        LIMIT ${limit}
      ), due AS (
        SELECT d.id, 2 AS origin, d.priority, d.run_at AS due_at,
          d.claimed_by, d.claimed_at, d.claimed_fence, d.claimed_attempt, d.queue, d.kind, d.concurrency_key,
          -- A due keyed run was admitted before: it holds its slot already.
          NULL::text AS scope, NULL::integer AS per_key, NULL::integer AS place
        ${dueRows(sql, s, request)}
      ), candidates AS (
        -- Each group's own order is carried into the cut, so which rows of the last group make
        -- the limit is stated, not left to how Postgres happens to concatenate the groups.
        SELECT * FROM (
          SELECT * FROM expired UNION ALL SELECT * FROM timed_out UNION ALL SELECT * FROM due
        ) c ORDER BY origin, priority DESC, due_at, id LIMIT ${limit}
      ), picked AS (
        ${sql.literal(slotted(s, "candidates", "a.origin, a.priority DESC, a.due_at, a.id"))}
      ), claimed AS (
        UPDATE ${runs} r SET
          fence = greatest(r.fence + 1, f.floor),
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
          claimed_fence = CASE WHEN p.origin = 2 THEN greatest(r.fence + 1, f.floor) END,
          claimed_attempt = CASE WHEN p.origin = 2 THEN r.attempt + 1 END,
          key_scope = CASE WHEN p.origin = 1 THEN p.scope ELSE r.key_scope END,
          key_slot = CASE WHEN p.origin = 1 THEN p.slot ELSE r.key_slot END,
          updated_at = now()
        -- The ids as an explicit restriction: picked rows are reached by primary key, not by a
        -- hash join over a scan of the whole table (which the planner prefers on small tables).
        FROM picked p, fence_floor f WHERE r.id = ANY(ARRAY(SELECT id FROM picked)) AND r.id = p.id
        RETURNING r.id, r.queue, r.kind, r.payload, r.attempt, r.max_attempts, r.fence, r.checkpoint, r.signals, r.concurrency_key,
          r.state, p.origin, (extract(epoch FROM now() - p.due_at) * 1000)::float8 AS wait_ms, r.trace_parent,
          r.priority, (extract(epoch FROM r.run_at) * 1000)::float8 AS run_at_ms
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
        trace_parent, priority, run_at_ms
      FROM claimed`
    // A due run this sweep took from behind a queue's position: that queue starts from its head again.
    positions.rewind(request.kinds, rows.filter((row) => row.origin === 2).map(placed))
    return rows.filter((row) => row.state === "running").map(toClaimed)
  })

/**
 * Due runs only: the claim a notification or a freed slot asks for. It leaves out the two sweeps
 * (expired leases, passed suspension deadlines), which the worker runs at most once per poll
 * interval, and with them the union and re-sort of three branches: the statement the drain sends
 * hundreds of times a second is one index scan and one update (docs/adr/0004).
 */
const claimDue = (sql: SqlClient.SqlClient, s: StoreSchema, positions: ClaimPosition.Positions, request: ClaimRequest) =>
  Effect.gen(function*() {
    if (request.limit <= 0 || request.kinds.length === 0) return []
    const runs = s.runs(sql)
    const rows = yield* sql<ClaimRow & PlacedRow & { keyed: boolean }>`
      WITH ${fenceFloor(sql, s)}, due AS (
        SELECT d.id, d.priority, d.run_at, d.claimed_by, d.claimed_at, d.claimed_fence, d.claimed_attempt
        ${dueRows(sql, s, request, positions.of(request.queues, request.kinds))}
      ), claimed AS (
        UPDATE ${runs} r SET
          fence = greatest(r.fence + 1, f.floor), state = 'running', attempt = r.attempt + 1,
          lease_owner = ${request.owner},
          lease_expires_at = now() + ${Duration.toMillis(request.ttl)}::float8 * interval '1 millisecond',
          finished_at = NULL, signal_name = NULL, signal_token = NULL, suspend_deadline = NULL,
          claimed_by = ${request.owner}, claimed_at = now(), claimed_fence = greatest(r.fence + 1, f.floor), claimed_attempt = r.attempt + 1,
          updated_at = now()
        -- By primary key (the ids as an explicit restriction, as in the full claim).
        FROM due d, fence_floor f WHERE r.id = ANY(ARRAY(SELECT id FROM due)) AND r.id = d.id
        RETURNING r.id, r.queue, r.kind, r.payload, r.attempt, r.max_attempts, r.fence, r.checkpoint, r.signals, r.concurrency_key, r.state,
          (extract(epoch FROM now() - r.run_at) * 1000)::float8 AS wait_ms, r.trace_parent,
          r.priority, (extract(epoch FROM r.run_at) * 1000)::float8 AS run_at_ms
      ), history AS (
        -- The claim this one supersedes (a retried or released run's) moves into the history.
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, owner, detail, at)
        SELECT id, claimed_fence, 'claimed', claimed_by, jsonb_build_object('attempt', claimed_attempt), claimed_at
        FROM due WHERE claimed_at IS NOT NULL
      )
      SELECT id::text AS id, queue, kind, payload, attempt, max_attempts, fence, checkpoint, signals, concurrency_key, state, wait_ms, trace_parent,
        priority, run_at_ms, ${keyLimitDeclared(sql, s, request)} AS keyed
      FROM claimed`
    // A keyed claim read from the head and passed held-back runs over: it moves no position.
    if (rows.length > 0 && rows[0]!.keyed !== true) positions.advance(request.kinds, rows.map(placed))
    return rows.map(toClaimed)
  })
