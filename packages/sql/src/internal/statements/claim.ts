/**
 * Claim: one atomic statement takes up to `limit` runs that are due (pending and `run_at` passed),
 * abandoned (running with an expired lease) or past a suspension deadline, skipping rows other
 * workers hold locked. Every claim raises the run's fence by exactly 1, or, on the first claim
 * after a promotion, to the new timeline's floor (`fenceFloor`). Time is the database's `now()`
 * only.
 *
 * An abandoned run that has used all its attempts is failed here instead of claimed: expired
 * leases count as attempts, so a run that keeps killing its workers ends.
 *
 * Claims take no key slot: a keyed run is due once admitted (admit.ts). A sweep first puts
 * governed suspensions that timed out back in their keys' lines, then admits, then claims.
 */
import type { ClaimRequest } from "@leasehold/core"
import { ClaimPosition, RunStorage } from "@leasehold/core/store"
import { Duration, Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { admit, type KeyCursors, retryingCollisions } from "./admit.js"
import { activeQueues, claimAssignments, claimedColumns, fenceFloor, timeoutColumns } from "./claimFragments.js"
import * as ledger from "./ledger.js"
import { type ClaimRow, toClaimed } from "./rows.js"

/** Where the ledger put a claimed run (null for a run claimed in its row). */
interface LedgerPlace {
  readonly batch: string | null
  readonly pos: number | null
}

/** The claimed runs, each the ledger put in a batch remembered with its place there. */
const remembered = (refs: ledger.LedgerRefs, rows: ReadonlyArray<Omit<ClaimRow, "state"> & LedgerPlace>) => {
  for (const row of rows) {
    if (row.batch !== null && row.pos !== null) {
      refs.set(row.id, Number(row.fence), row.batch, row.pos, row.concurrency_key !== null)
    }
  }
  return rows.map(toClaimed)
}

export const claim = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  positions: ClaimPosition.Positions,
  request: ClaimRequest,
  keyCursors: KeyCursors = new Map(),
  refs: ledger.LedgerRefs = new ledger.LedgerRefs(),
  intoLedger = true
) =>
  request.dueOnly === true
    ? claimDue(sql, s, positions, request, refs, intoLedger)
    : claimAll(sql, s, positions, request, keyCursors, refs, intoLedger)

/**
 * Whether a key limit is declared for any of the claim's kinds or queues: an init plan, read once
 * per statement. Such a claim reads each queue from its head and moves no claim position: the
 * hand-off makes a key's next run due long after it was enqueued, behind any position.
 */
const keyLimitDeclared = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  sql`(EXISTS (SELECT 1 FROM ${s.keyLimits(sql)} WHERE scope = 'kind' AND name = ANY(${request.kinds as Array<
    string
  >}::text[]))
    OR EXISTS (SELECT 1 FROM ${s.keyLimits(sql)} WHERE scope = 'queue' AND name = ANY(${request.queues as Array<
    string
  >}::text[])))`

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
      SELECT ctid AS ready_ctid, id, queue, kind, priority, run_at, ledger
      FROM ${s.ready(sql)}
      WHERE run_at <= now() AND queue = q.name AND kind = ANY(${request.kinds as Array<string>}::text[]) AND ${range}
      ORDER BY priority DESC, run_at, id LIMIT ${request.limit}
      FOR UPDATE SKIP LOCKED
    )`
  // The three parts are an Append read in order under the LIMIT (no ORDER BY over the union: a
  // MergeAppend would read the head of every part first). Postgres reads a non-parallel Append in
  // order, and FOR UPDATE rules out a parallel plan; the claim's outer ORDER BY fixes the order of
  // what is returned, this fixes which runs are locked.
  return sql`${part(sql`priority > coalesce(pos.priority, ${lowest})`)} above
    UNION ALL
    ${
    part(sql`priority = coalesce(pos.priority, ${lowest})
        AND run_at >= coalesce(to_timestamp(pos.from_ms / 1000.0), '-infinity'::timestamptz)`)
  } lane
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
  sql`FROM unnest(${activeQueues(sql, s, request.queues)}) AS q(name)
        LEFT JOIN unnest(${[...positions.keys()]}::text[], ${[...positions.values()].map((p) => p.priority)}::integer[],
          ${
    [...positions.values()].map((p) => String(p.runAtMs - ClaimPosition.marginMs))
  }::float8[]) AS pos(queue, priority, from_ms)
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

/**
 * Whether a key limit governs the run `row` (its kind's or its queue's): an expression, two
 * primary-key probes of key_limits for a keyed run, none for the others.
 */
const governed = (sql: SqlClient.SqlClient, s: StoreSchema, row: string) =>
  sql.literal(`(${row}.concurrency_key IS NOT NULL AND (
    EXISTS (SELECT 1 FROM "${s.schema}".key_limits WHERE scope = 'kind' AND name = ${row}.kind)
    OR EXISTS (SELECT 1 FROM "${s.schema}".key_limits WHERE scope = 'queue' AND name = ${row}.queue)))`)

/**
 * Claims the pending runs `ids` (an array expression) for `request`'s owner: the update both claims
 * make of due runs, reached by primary key only. It joins nothing: a join with the CTE that picked
 * the runs (which the planner guesses at one row) was planned as a nested loop that read every
 * picked run again for each of them, quadratic in the claim (470 ms for 1,000 runs; test
 * plans.test.ts).
 */
const claimPending = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest, ids: Statement.Fragment) =>
  sql`UPDATE ${s.runs(sql)} r SET
          ${claimAssignments(sql, { owner: request.owner, ttlMs: Duration.toMillis(request.ttl), claimedAt: "now()" })}
        FROM fence_floor f WHERE r.id = ANY(${ids})
        RETURNING ${placedColumns(sql)}, 2 AS origin, (extract(epoch FROM now() - r.run_at) * 1000)::float8 AS wait_ms`

/** What a claim returns of each run it updated (`r`) with its due time, beside its origin and how long it waited. */
const placedColumns = (sql: SqlClient.SqlClient) =>
  sql`${claimedColumns(sql)}, (extract(epoch FROM r.run_at) * 1000)::float8 AS run_at_ms`

/**
 * Takes the due runs `picked` (ready_ctid, id, ledger, priority, run_at), locked by the claim, as
 * (a store of storage "rows" picks every run with ledger false: it claims them in their rows)
 * CTE `claimed_due`: their ready rows deleted; the runs the ledger holds (state `ledger`) claimed
 * in one new claim batch at fence + 1 (or the floor), their rows untouched; the others claimed in
 * their rows (`claimPending`), the claim each supersedes moved into the history (`prior`).
 */
const taking = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest, picked: Statement.Fragment) =>
  sql`picked AS MATERIALIZED (${picked}),
      taken AS (
        DELETE FROM ${s.ready(sql)} y WHERE y.ctid = ANY(ARRAY(SELECT ready_ctid FROM picked))
      ), prior AS (
        SELECT r.id, r.claimed_fence, r.claimed_by, r.claimed_attempt, r.claimed_at FROM ${s.runs(sql)} r
        WHERE r.id = ANY(ARRAY(SELECT id FROM picked WHERE NOT ledger)) AND r.claimed_at IS NOT NULL
      ), row_claimed AS (
        ${claimPending(sql, s, request, sql`ARRAY(SELECT id FROM picked WHERE NOT ledger)`)}
      ), granted AS MATERIALIZED (
        SELECT r.id, r.queue, r.kind, r.payload, greatest(r.fence + 1, f.floor) AS fence, r.attempt + 1 AS attempt,
          r.max_attempts, r.checkpoint, r.signals, r.concurrency_key, r.trace_parent, r.priority, r.run_at,
          ${sql.literal(timeoutColumns("r"))},
          row_number() OVER (ORDER BY p.priority DESC, p.run_at, p.id) AS pos
        FROM picked p CROSS JOIN fence_floor f
          -- One primary-key probe per pick (never a join the planner could loop over the picks).
          CROSS JOIN LATERAL (SELECT * FROM ${s.runs(sql)} o WHERE o.id = p.id) r
        WHERE p.ledger AND r.state = 'ledger'
      ), batch AS (
        INSERT INTO ${s.claimBatches(sql)} (owner, expires_at, ids, fences, attempts, span)
        SELECT ${request.owner}::text, now() + ${Duration.toMillis(request.ttl)}::float8 * interval '1 millisecond',
          array_agg(id ORDER BY pos), array_agg(fence ORDER BY pos), array_agg(attempt ORDER BY pos),
          range_agg(int8range(id, id + 1))
        FROM granted HAVING count(*) > 0
        RETURNING batch
      ), claimed_due AS (
        SELECT c.*, NULL::bigint AS batch, NULL::bigint AS pos FROM row_claimed c
        UNION ALL
        SELECT g.id, g.queue, g.kind, g.payload, g.attempt, g.max_attempts, g.fence, g.checkpoint, g.signals,
          g.concurrency_key, 'running'::text, g.trace_parent, g.priority, g.attempt_timeout_ms, g.deadline_in_ms,
          (extract(epoch FROM g.run_at) * 1000)::float8,
          2, (extract(epoch FROM now() - g.run_at) * 1000)::float8, b.batch, g.pos
        FROM granted g CROSS JOIN batch b
      )`

/**
 * Suspensions a key limit governs whose deadline passed: each becomes pending with its signal
 * timed out, and waits in its key's line (migration 0013's key_slot_rules) at its own place in
 * claim order (its run_at is still its first one's: ahead of the runs enqueued after it). It is
 * taken by a claim once admitted, as a due run; a claim never takes a slot itself.
 */
const timeOutGoverned = (sql: SqlClient.SqlClient, s: StoreSchema, request: ClaimRequest) =>
  sql`
    WITH timed_out AS (
      UPDATE ${s.runs(sql)} r SET state = 'pending',
        signals = r.signals || jsonb_build_object(r.signal_name, jsonb_build_object('_tag', 'TimedOut')),
        signal_name = NULL, signal_token = NULL, suspend_deadline = NULL, updated_at = now()
      WHERE r.id IN (
        SELECT id FROM ${s.runs(sql)} o
        WHERE state = 'suspended' AND suspend_deadline <= now() AND concurrency_key IS NOT NULL
          AND queue = ANY(${activeQueues(sql, s, request.queues)}) AND kind = ANY(${request.kinds as Array<
    string
  >}::text[])
          AND ${governed(sql, s, "o")}
        ORDER BY suspend_deadline, id LIMIT ${RunStorage.scanPastLimit}
        FOR UPDATE SKIP LOCKED
      ) AND r.state = 'suspended'
      RETURNING r.id, r.fence, r.attempt
    )
    INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
    SELECT id, fence, 'signal_timed_out', jsonb_build_object('attempt', attempt) FROM timed_out`

/**
 * How many expired ledger batches one sweep moves to their rows at the least (the rest wait for
 * the next sweep). A sweep moves as many batches as it may claim runs, since each batch holds one
 * run or more: it never takes a due run while expired ones are left in batches it did not move,
 * and a sweep that took only expired runs is followed by another (Worker, I53).
 */
const expiredBatchesPerSweep = 8

/** Due, abandoned and timed-out runs, in that statement's order: expired leases first. */
const claimAll = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  positions: ClaimPosition.Positions,
  request: ClaimRequest,
  keyCursors: KeyCursors,
  refs: ledger.LedgerRefs,
  intoLedger: boolean
) =>
  Effect.gen(function*() {
    if (request.limit <= 0 || request.kinds.length === 0) return []
    // Ledger batches whose lease expired have their open runs moved to their rows first: the
    // expired-lease branch below reclaims them there.
    yield* ledger.expire(sql, s, Math.max(expiredBatchesPerSweep, request.limit))
    const runs = s.runs(sql)
    const queues = activeQueues(sql, s, request.queues)
    const kinds = request.kinds as Array<string>
    const limit = request.limit
    const ttlMs = Duration.toMillis(request.ttl)
    // Governed suspensions that timed out join their keys' lines; then keyed runs left waiting
    // with room for them (a limit raised, a run that became due, a race between an enqueue and a
    // completion) are admitted, so this claim can take them.
    yield* timeOutGoverned(sql, s, request)
    const admission = yield* retryingCollisions(
      admit(sql, s, { kinds: request.kinds, queues: request.queues }, keyCursors)
    )
    for (const [group, last] of Object.entries(admission[0]?.cursors ?? {})) {
      if (last === null) keyCursors.delete(group)
      else keyCursors.set(group, last)
    }
    const rows = yield* sql<ClaimRow & PlacedRow & LedgerPlace & { origin: number }>`
      WITH ${fenceFloor(sql, s)}, expired AS (
        -- A reclaimed run keeps the key slot it already holds.
        SELECT NULL::tid AS ready_ctid, id, 0 AS origin, 0 AS priority, lease_expires_at AS due_at,
          claimed_by, claimed_at, claimed_fence, claimed_attempt, queue, kind, concurrency_key, false AS ledger FROM ${runs}
        WHERE state = 'running' AND lease_expires_at <= now()
          AND queue = ANY(${queues}) AND kind = ANY(${kinds}::text[])
        ORDER BY lease_expires_at, id LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      ), timed_out AS (
        -- A suspension that timed out starts running again, unless a key limit governs it: that
        -- one joined its key's line before this claim (timeOutGoverned).
        SELECT NULL::tid AS ready_ctid, id, 1 AS origin, 0 AS priority, suspend_deadline AS due_at,
          claimed_by, claimed_at, claimed_fence, claimed_attempt, queue, kind, concurrency_key, false AS ledger FROM ${runs} r
        WHERE state = 'suspended' AND suspend_deadline <= now()
          AND queue = ANY(${queues}) AND kind = ANY(${kinds}::text[]) AND NOT ${governed(sql, s, "r")}
        ORDER BY suspend_deadline, id LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      ), due AS (
        SELECT d.ready_ctid, d.id, 2 AS origin, d.priority, d.run_at AS due_at,
          NULL::text AS claimed_by, NULL::timestamptz AS claimed_at, NULL::bigint AS claimed_fence,
          NULL::integer AS claimed_attempt, d.queue, d.kind, NULL::text AS concurrency_key, d.ledger
        -- A due keyed run was admitted before: it holds its slot already.
        ${dueRows(sql, s, request)}
      ), candidates AS (
        -- Each group's own order is carried into the cut, so which rows of the last group make
        -- the limit is stated, not left to how Postgres happens to concatenate the groups.
        SELECT * FROM (
          SELECT * FROM expired UNION ALL SELECT * FROM timed_out UNION ALL SELECT * FROM due
        ) c ORDER BY origin, priority DESC, due_at, id LIMIT ${limit}
      ), ${
      taking(
        sql,
        s,
        request,
        sql`SELECT ready_ctid, id, ledger AND ${intoLedger}::boolean AS ledger, priority, due_at AS run_at FROM candidates WHERE origin = 2`
      )
    },
      claimed_other AS (
        -- Reclaims and timed-out suspensions: they need their pick's origin and due time.
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
          -- A routine claim is recorded on the row only (run_history reads it there); these are
          -- exceptional and get a history row at once.
          claimed_by = NULL, claimed_at = NULL, claimed_fence = NULL, claimed_attempt = NULL,
          updated_at = now()
        -- Joined by primary key alone (no restriction by the array of ids, which the planner can
        -- read again for each pick): one probe per pick. The runtime's settings keep the plan on
        -- the index whatever the table held when planned (PgRunStore.runtimeSettings).
        FROM candidates p, fence_floor f WHERE p.origin < 2 AND r.id = p.id
        RETURNING ${placedColumns(sql)}, p.origin, (extract(epoch FROM now() - p.due_at) * 1000)::float8 AS wait_ms,
          NULL::bigint AS batch, NULL::bigint AS pos
      ), claimed AS (
        SELECT * FROM claimed_due UNION ALL SELECT * FROM claimed_other
      ), history AS (
        -- The claim this one supersedes moves from the row into the history, with its own time.
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, owner, detail, at)
        SELECT id, claimed_fence, 'claimed', claimed_by, jsonb_build_object('attempt', claimed_attempt), claimed_at
        FROM candidates WHERE claimed_at IS NOT NULL
        UNION ALL
        SELECT id, claimed_fence, 'claimed', claimed_by, jsonb_build_object('attempt', claimed_attempt), claimed_at
        FROM prior
        UNION ALL
        SELECT id, fence,
          CASE WHEN state = 'failed' THEN 'failed' WHEN origin = 0 THEN 'reclaimed' ELSE 'signal_timed_out' END,
          ${request.owner}, jsonb_build_object('attempt', attempt), now()
        FROM claimed WHERE origin <> 2
      )
      SELECT id::text AS id, queue, kind, payload, attempt, max_attempts, fence, checkpoint, signals, concurrency_key, state, origin, wait_ms,
        trace_parent, priority, run_at_ms, batch::text AS batch, pos::int AS pos, attempt_timeout_ms, deadline_in_ms
      FROM claimed
      -- In claim order: reclaims, then timed-out suspensions, each by due time; then due runs.
      ORDER BY claimed.origin, CASE WHEN claimed.origin < 2 THEN claimed.wait_ms END DESC,
        CASE WHEN claimed.origin = 2 THEN claimed.priority END DESC, CASE WHEN claimed.origin = 2 THEN claimed.run_at_ms END,
        claimed.id`
    // A due run this sweep took from behind a queue's position: that queue starts from its head again.
    positions.rewind(request.kinds, rows.filter((row) => row.origin === 2).map(placed))
    return remembered(refs, rows.filter((row) => row.state === "running"))
  })

/**
 * Due runs only: the claim a notification or a freed slot asks for. It leaves out the two sweeps
 * (expired leases, passed suspension deadlines), which the worker runs once per poll interval
 * and again after a sweep that found some (Worker, I53), and with them the union and re-sort of three branches: the statement the drain sends
 * hundreds of times a second is one index scan and one update (docs/adr/0004).
 */
const claimDue = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  positions: ClaimPosition.Positions,
  request: ClaimRequest,
  refs: ledger.LedgerRefs,
  intoLedger: boolean
) =>
  Effect.gen(function*() {
    if (request.limit <= 0 || request.kinds.length === 0) return []
    const rows = yield* sql<Omit<ClaimRow, "state"> & PlacedRow & LedgerPlace & { keyed: true | null }>`
      WITH ${fenceFloor(sql, s)}, due AS MATERIALIZED (
        SELECT d.ready_ctid, d.id, d.priority, d.run_at, d.ledger
        ${dueRows(sql, s, request, positions.of(request.queues, request.kinds))}
      ), ${
      taking(
        sql,
        s,
        request,
        sql`SELECT ready_ctid, id, ledger AND ${intoLedger}::boolean AS ledger, priority, run_at FROM due`
      )
    },
      history AS (
        -- The claim this one supersedes (a retried or released run's) moves into the history.
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, owner, detail, at)
        SELECT id, claimed_fence, 'claimed', claimed_by, jsonb_build_object('attempt', claimed_attempt), claimed_at
        FROM prior
      )
      -- Only what the worker and this store read, each row: no state (always running here); signals
      -- and keyed null in the common case (none delivered; no key limit), which decodes nothing.
      SELECT id::text AS id, queue, kind, payload, attempt, max_attempts, fence, checkpoint, NULLIF(signals, '{}'::jsonb) AS signals,
        concurrency_key, wait_ms, trace_parent, priority, run_at_ms, CASE WHEN ${
      keyLimitDeclared(sql, s, request)
    } THEN true END AS keyed,
        batch::text AS batch, pos::int AS pos, attempt_timeout_ms, deadline_in_ms
      FROM claimed_due claimed
      -- In claim order (the update went by primary key).
      ORDER BY claimed.priority DESC, claimed.run_at_ms, claimed.id`
    // A claim under a key limit read from the head (admitted runs are made due late): it moves no position.
    if (rows.length > 0 && rows[0]!.keyed !== true) positions.advance(request.kinds, rows.map(placed))
    return remembered(refs, rows)
  })
