/** Reads for operators: one run, a filtered page of runs, a run's history, and counters. */
import { type ListFilter, type LiveLease, type RunFilter, RunNotFound, RunState, type Stats } from "@leasehold/core"
import { Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { isRunId, num, toEvents, toRecords } from "./rows.js"
import { liveRuns, openLedgerRuns } from "./sample.js"

const columns = (sql: SqlClient.SqlClient) =>
  sql.literal(`id::text AS id, queue, kind, payload, priority, run_at, state,
  attempt, max_attempts, fence, lease_owner, lease_expires_at, checkpoint, result, error, signal_name, signal_token,
  suspend_deadline, signals, idempotency_key, concurrency_key, key_slot,
  (state = 'pending' AND key_scope IS NOT NULL AND key_slot IS NULL) AS waiting_for_key, trace_parent, attempt_timeout_ms, deadline, created_at, updated_at, finished_at`)

export const get = (sql: SqlClient.SqlClient, s: StoreSchema, runId: string) =>
  Effect.gen(function*() {
    if (!isRunId(runId)) return yield* Effect.fail(new RunNotFound({ runId }))
    const rows = yield* sql`SELECT ${columns(sql)} FROM ${s.runsNow(sql)} WHERE id = ${runId}::bigint`
    if (rows.length === 0) return yield* Effect.fail(new RunNotFound({ runId }))
    return (yield* toRecords(rows))[0]!
  })

/**
 * The WHERE condition of a run filter (state, queue, kind, payload fields), all parameters. Only
 * the fields given are compared (no `$1 IS NULL OR ...`), so a plan made once still reaches the
 * runs of a state by its index.
 */
export const filterCondition = (sql: SqlClient.SqlClient, filter: RunFilter): Statement.Fragment =>
  sql.and([
    sql`true`,
    ...(filter.state === undefined ? [] : [stateIs(sql, filter.state)]),
    ...(filter.queue === undefined ? [] : [sql`queue = ${filter.queue}`]),
    ...(filter.kind === undefined ? [] : [sql`kind = ${filter.kind}`]),
    // `#>>` reads a field as text: a string as it is, a number or boolean as JSON; null as NULL.
    ...(filter.payload ?? []).map((f) => sql`payload #>> ${f.path as Array<string>}::text[] = ${f.value}`),
    // Ids that are not run ids name no run (an empty array selects nothing).
    ...(filter.ids === undefined ? [] : [sql`id = ANY(${filter.ids.filter(isRunId)}::bigint[])`]),
    ...(filter.concurrencyKey === undefined ? [] : [sql`concurrency_key = ${filter.concurrencyKey}`]),
    ...(filter.idempotencyKey === undefined ? [] : [sql`idempotency_key = ${filter.idempotencyKey}`]),
    ...(filter.errorText === undefined ? [] : [sql`error::text ILIKE ${`%${escapeLike(filter.errorText)}%`}`]),
    ...(filter.createdFrom === undefined ? [] : [sql`created_at >= ${filter.createdFrom}`]),
    ...(filter.createdTo === undefined ? [] : [sql`created_at < ${filter.createdTo}`])
  ])

/** Text matched as it is by LIKE: its wildcards and the escape character escaped. */
const escapeLike = (text: string) => text.replace(/[\\%_]/g, (c) => `\\${c}`)

/**
 * `state = '<state>'` with the state written out (one of six words, checked), not a parameter: a
 * generic plan then still knows whether the state's runs are in `runs_listed` (a partial index).
 */
const stateIs = (sql: SqlClient.SqlClient, state: string): Statement.Fragment =>
  (RunState.literals as ReadonlyArray<string>).includes(state) ? sql.literal(`state = '${state}'`) : sql`false`

/** How far before a window's start the id bound is taken: a run's id and its `created_at` (its
 * enqueue transaction's start) can disagree by as long as an enqueue transaction lasts. */
const idSlack = "1 minute"

/**
 * The lowest run id a creation window starting at `from` can hold: a binary search of the primary
 * key (one probe a step, about 2·log2 of the id range at most), never a scan, and one probe per
 * step into one partition once `runs` is range-partitioned by id. Ids are handed out in creation
 * order up to `idSlack`; the search looks for `from` less the slack, and the window's exact
 * condition (`created_at >= from`) still applies to the runs read.
 */
const firstIdFrom = (sql: SqlClient.SqlClient, s: StoreSchema, from: Date) =>
  Effect.map(
    sql<{ lo: string }>`
      WITH RECURSIVE search(lo, hi) AS (
        SELECT coalesce((SELECT min(id) FROM ${s.runs(sql)}), 0), coalesce((SELECT max(id) FROM ${s.runs(sql)}), 0) + 1
        UNION ALL
        SELECT CASE WHEN p.created_at < ${from}::timestamptz - ${idSlack}::interval THEN p.id + 1 ELSE b.lo END,
          CASE WHEN p.created_at < ${from}::timestamptz - ${idSlack}::interval THEN b.hi ELSE (b.lo + b.hi) / 2 END
        FROM search b
        -- The first run at or after the middle (ids have gaps); none there (deleted since): go lower.
        LEFT JOIN LATERAL (
          SELECT r.id, r.created_at FROM ${s.runs(sql)} r WHERE r.id >= (b.lo + b.hi) / 2 ORDER BY r.id LIMIT 1
        ) p ON true
        WHERE b.lo < b.hi
      )
      SELECT lo::text AS lo FROM search WHERE lo >= hi`,
    (rows) => rows[0]?.lo ?? "0"
  )

/**
 * A page newest first by the bigint id (the table's column, not the text it is returned as), from
 * a keyset cursor: the primary key read backwards, or for a state few runs are in (suspended,
 * failed, cancelled) `runs_listed` (migration 0016); the page `after` a cursor is read forwards
 * from it and turned round. Never a sort of the table, however deep the page.
 */
export const list = (sql: SqlClient.SqlClient, s: StoreSchema, filter: ListFilter) =>
  Effect.gen(function*() {
    for (const cursor of [filter.before, filter.after]) if (cursor !== undefined && !isRunId(cursor)) return []
    // A creation window is also an id range (ids follow creation): the scan by id stops at its start.
    const from = filter.createdFrom === undefined ? undefined : yield* firstIdFrom(sql, s, filter.createdFrom)
    const where = sql.and([
      filterCondition(sql, filter),
      ...(from === undefined ? [] : [sql`r.id >= ${from}::bigint`]),
      ...(filter.before === undefined ? [] : [sql`r.id < ${filter.before}::bigint`]),
      ...(filter.after === undefined ? [] : [sql`r.id > ${filter.after}::bigint`]),
      ...(filter.errorText === undefined ? [] : [sql`r.state <> 'ledger'`])
    ])
    // The states only a row records (never the ledger) are read from the rows and their index;
    // the others as each run stands (runs_now), newest first by the primary key.
    if (filter.state === "running") return yield* listRunning(sql, s, filter)
    const rare = filter.state === "suspended" || filter.state === "failed" || filter.state === "cancelled"
    // An error is only ever written on a run's row (a failure moves a ledger run to its row first),
    // so a search by error text reads the rows alone, not each ledger run as it stands.
    const rowsOnly = rare || filter.errorText !== undefined
    const table = rowsOnly ? s.runs(sql) : s.runsNow(sql)
    const rows = filter.after === undefined
      ? yield* sql`
        SELECT ${columns(sql)} FROM ${table} r WHERE ${where}
        ORDER BY r.id DESC LIMIT ${filter.limit} OFFSET ${filter.offset ?? 0}`
      : yield* sql`
        SELECT * FROM (
          SELECT ${columns(sql)}, r.id AS seq FROM ${table} r WHERE ${where}
          ORDER BY r.id LIMIT ${filter.limit} OFFSET ${filter.offset ?? 0}
        ) page ORDER BY page.seq DESC`
    return yield* toRecords(rows)
  })

/**
 * Running runs are few (as many as the workers' slots): their ids are read from where they are
 * held (their rows' runs_running, the ledger's open batches), filtered on their rows and sorted,
 * and only the page is read as each run stands. Never a search of the table.
 */
const listRunning = (sql: SqlClient.SqlClient, s: StoreSchema, filter: ListFilter) =>
  Effect.gen(function*() {
    const where = sql.and([
      filterCondition(sql, { ...filter, state: undefined }),
      ...(filter.before === undefined ? [] : [sql`r.id < ${filter.before}::bigint`]),
      ...(filter.after === undefined ? [] : [sql`r.id > ${filter.after}::bigint`])
    ])
    const held = sql`
      SELECT h.run_id FROM (
        SELECT id AS run_id FROM ${s.runs(sql)} WHERE state = 'running'
        UNION ALL
        SELECT o.id FROM ${openLedgerRuns(sql, s)} o
      ) h
      -- One primary-key probe per running run, its filter read on its row.
      CROSS JOIN LATERAL (SELECT r.id FROM ${s.runs(sql)} r WHERE r.id = h.run_id AND ${where} LIMIT 1) r
      ORDER BY h.run_id ${filter.after === undefined ? sql`DESC` : sql`ASC`} LIMIT ${filter.limit} OFFSET ${
      filter.offset ?? 0
    }`
    const rows = yield* sql`
      SELECT ${columns(sql)} FROM (${held}) page
      CROSS JOIN LATERAL (SELECT * FROM ${s.runsNow(sql)} v WHERE v.id = page.run_id) n
      ORDER BY page.run_id DESC`
    return yield* toRecords(rows)
  })

/** Leases held now, by the database's clock (the `runs_running` index, then the expiry). */
export const leases = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  Effect.map(
    sql<
      {
        owner: string
        run_id: string
        fence: bigint
        kind: string
        queue: string
        attempt: number
        expires_in_ms: number
      }
    >`
      SELECT owner, id::text AS run_id, fence, kind, queue, attempt, expires_in_ms FROM (
        SELECT lease_owner AS owner, id, fence, kind, queue, attempt,
          greatest(0, extract(epoch FROM lease_expires_at - now()) * 1000)::float8 AS expires_in_ms
        FROM ${s.runs(sql)} WHERE state = 'running' AND lease_expires_at > now()
        UNION ALL
        SELECT o.owner, o.id, o.fence, r.kind, r.queue, o.attempt,
          greatest(0, extract(epoch FROM o.expires_at - now()) * 1000)::float8
        FROM ${openLedgerRuns(sql, s)} o JOIN ${s.runs(sql)} r ON r.id = o.id
        WHERE o.expires_at > now()
      ) held
      ORDER BY owner, id`,
    (rows) =>
      rows.map((r): LiveLease => ({
        owner: r.owner,
        runId: r.run_id,
        fence: num(r.fence),
        kind: r.kind,
        queue: r.queue,
        attempt: r.attempt,
        expiresInMs: Number(r.expires_in_ms)
      }))
  )

export const history = (sql: SqlClient.SqlClient, s: StoreSchema, runId: string) =>
  Effect.gen(function*() {
    yield* get(sql, s, runId)
    // Stored rows and what the run row records (its current claim, its completion), in time order.
    // The ledger's share: the claim and completion of a run its row has not taken over (closed).
    const rows = yield* sql`
      SELECT id, run_id, fence, kind, owner, detail, at FROM (
        SELECT e.id::text AS id, e.id AS seq, e.run_id, e.fence, e.kind, e.owner, e.detail, e.at
        FROM ${s.events(sql)} e WHERE e.run_id = ${runId}::bigint
        UNION ALL
        SELECT r.id || '/claimed/' || r.claimed_fence, NULL, r.id, r.claimed_fence, 'claimed', r.claimed_by,
          jsonb_build_object('attempt', r.claimed_attempt), r.claimed_at
        FROM ${s.runs(sql)} r WHERE r.id = ${runId}::bigint AND r.claimed_at IS NOT NULL
        UNION ALL
        SELECT r.id || '/completed', NULL, r.id, r.fence, 'completed', NULL, NULL, r.finished_at
        FROM ${s.runs(sql)} r WHERE r.id = ${runId}::bigint AND r.state = 'completed'
        UNION ALL
        SELECT c.run_id || '/claimed/' || c.fence, NULL, c.run_id, c.fence, 'claimed', c.owner,
          jsonb_build_object('attempt', c.attempt), c.claimed_at
        FROM ${ledgerClaims(sql, s, runId)} c
        UNION ALL
        SELECT c.run_id || '/completed', NULL, c.run_id, c.fence, 'completed', NULL, NULL, d.at
        FROM ${ledgerClaims(sql, s, runId)} c
        JOIN ${s.completionBatches(sql)} d ON d.claim_batch = c.batch AND c.run_id = ANY (d.ids)
      ) h
      ORDER BY at, seq NULLS LAST`
    return yield* toEvents(rows)
  })

/** The ledger claims of one run its row has not taken over, as a FROM item. */
const ledgerClaims = (sql: SqlClient.SqlClient, s: StoreSchema, runId: string) =>
  sql`(
    SELECT c.batch, ${runId}::bigint AS run_id, c.fences[p.pos] AS fence, c.attempts[p.pos] AS attempt, c.owner, c.claimed_at
    FROM ${s.claimBatches(sql)} c, LATERAL (SELECT array_position(c.ids, ${runId}::bigint) AS pos) p
    WHERE c.span @> ${runId}::bigint AND ${runId}::bigint <> ALL (c.closed)
  )`

/**
 * Counts of the runs that have not ended, by queue and state, read from the live indexes only
 * (`sample.ts` › `liveRuns`): its cost follows the live runs, never the history (ADR 0030). Ended
 * runs are counted per minute over a window by `throughput`.
 */
export const stats = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  sql.withTransaction(Effect.gen(function*() {
    // Each branch of liveRuns can be read from its partial index alone (as `sample` reads it).
    yield* sql`SET LOCAL enable_seqscan = off`
    const live = yield* liveRuns(sql, s)
    // The due runs only: those a claim may take (ready), and keyed ones waiting for a slot.
    const dueByQueue = yield* sql<{ queue: string; due: bigint; oldest: number }>`
      SELECT queue, count(*) AS due, extract(epoch FROM now() - min(run_at))::float8 AS oldest FROM (
        SELECT queue, run_at FROM ${s.ready(sql)} WHERE run_at <= now()
        UNION ALL
        -- One branch per key scope, each its partial index's predicate (runs_waiting_kind, _queue).
        SELECT queue, run_at FROM ${s.runs(sql)}
        WHERE state = 'pending' AND key_scope = 'kind' AND key_slot IS NULL AND run_at <= now()
        UNION ALL
        SELECT queue, run_at FROM ${s.runs(sql)}
        WHERE state = 'pending' AND key_scope = 'queue' AND key_slot IS NULL AND run_at <= now()
        UNION ALL
        SELECT queue, run_at FROM ${s.waiting(sql)} WHERE run_at <= now()
      ) due GROUP BY queue ORDER BY queue`
    const [row] = yield* sql<{ rejections: bigint; reclaims: bigint }>`
      SELECT
        (SELECT count(*) FROM ${s.events(sql)} WHERE kind = 'stale_write_rejected') AS rejections,
        (SELECT count(*) FROM ${s.events(sql)} WHERE kind = 'reclaimed') AS reclaims`
    const due = dueByQueue.map((r) => ({ queue: r.queue, due: num(r.due), oldestDueSeconds: Number(r.oldest) }))
    return {
      byStateAndQueue: live.map((r) => ({ queue: r.queue, state: r.state, count: num(r.count) })),
      liveLeases: live.reduce((sum, r) => sum + num(r.live), 0),
      // The oldest due run of all is the oldest of the queues' (one scan of the due runs, not two).
      oldestPendingSeconds: due.length === 0 ? null : Math.max(...due.map((q) => q.oldestDueSeconds)),
      dueByQueue: due,
      fenceRejections: num(row!.rejections),
      reclaims: num(row!.reclaims)
    } satisfies Stats
  }))
