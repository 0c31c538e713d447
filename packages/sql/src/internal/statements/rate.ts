/**
 * Rate limits (core RateLimits, migration 0023, docs/adr/0021-rate-limits.md). A run a rate limit
 * governs carries `rate_scope` on its row and is never in the ready set: the routine claim does not
 * read it. The rated claim starts such runs in its own transaction, before the routine claim:
 *
 * 1. the windows (limit and, per key, key) of the first due governed runs in claim order that
 *    have room in this statement's snapshot (a full window ahead takes none of the claim's places), each
 *    locked for the transaction with `pg_try_advisory_xact_lock` (a window another claimer holds is
 *    skipped, never waited on: its runs are that claimer's to start);
 * 2. in a new statement, so its snapshot sees every start committed by the window's previous
 *    holder, each window's room (its limit less the starts since `statement_timestamp()` less the
 *    interval), that many of its runs claimed, and one `rate_starts` row appended per start, at
 *    `statement_timestamp()`; the run's claim is recorded at that same time.
 *
 * The lock orders the windows' holders, and each statement starts after the previous holder
 * committed, so starts are recorded in the order they were decided and no window of `interval`
 * holds more than `limit` of them (a sliding window). No row is updated per start.
 */
import { RateLimits } from "@leasehold/core"
import type { ClaimedRun, ClaimRequest } from "@leasehold/core"
import { RateWakes, RunStorage } from "@leasehold/core/store"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { activeQueues, claimAssignments, claimedColumns, fenceFloor } from "./claimFragments.js"
import { type ClaimRow, num, toClaimed } from "./rows.js"

/**
 * The rate limit governing a run of `kind` in `queue` (SQL expressions of the statement): `'kind'`
 * when its kind declares one, else `'queue'` when its queue does, else null.
 */
export const governing = (s: StoreSchema, kind: string, queue: string): string =>
  `(CASE WHEN EXISTS (SELECT 1 FROM "${s.schema}".rate_limits WHERE scope = 'kind' AND name = ${kind}) THEN 'kind'
    WHEN EXISTS (SELECT 1 FROM "${s.schema}".rate_limits WHERE scope = 'queue' AND name = ${queue}) THEN 'queue' END)`

/** A window the claim locked, or (scope null) one holding back due runs, with when it opens again. */
interface Window {
  readonly scope: string | null
  readonly name: string
  readonly window_key: string
  readonly per_interval: number
  readonly interval_ms: number
  readonly per_key: boolean
  readonly opens_in_ms: number | null
  readonly queues: ReadonlyArray<string> | null
}

/** The first moment a window holding back due runs has room, from the statement's time, with their queues. */
const earliestWake = (
  rows: ReadonlyArray<Window>
): { readonly inMs: number; readonly queues: ReadonlyArray<string> } | undefined => {
  const wake = RateWakes.soonest(
    rows.flatMap((row) =>
      row.opens_in_ms === null || row.queues === null ? [] : [{ at: row.opens_in_ms, queues: row.queues }]
    )
  )
  return wake === undefined ? undefined : { inMs: wake.at, queues: wake.queues }
}

/** When the last rated claim's held-back runs may start (`RateWakes`): set by each rated claim. */
export interface RatedWake {
  next: { readonly inMs: number; readonly queues: ReadonlyArray<string> } | undefined
}

/**
 * What this store last saw of its claims' rate limits: whether any was declared for a claim's kinds
 * and queues, by those kinds and queues (a worker claims the same ones every time). A claim of due
 * runs only (`dueOnly`, the drain's claim) asks again only while one was: the routine claim never
 * takes a governed run, so a limit another store declared meanwhile is only started late (at the
 * worker's next sweep, within its poll interval), never over its limit. This store's own
 * declarations and removals forget what it saw.
 */
export class RatedSeen {
  private readonly declared = new Map<string, boolean>()
  private static scope(request: ClaimRequest): string {
    return `${request.kinds.join("\u0000")}\u0001${request.queues.join("\u0000")}`
  }
  get(request: ClaimRequest): boolean | undefined {
    return this.declared.get(RatedSeen.scope(request))
  }
  set(request: ClaimRequest, declared: boolean): void {
    this.declared.set(RatedSeen.scope(request), declared)
  }
  forget(): void {
    this.declared.clear()
  }
}

export const claimRated = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: ClaimRequest,
  seen: RatedSeen,
  wake: RatedWake
) => Effect.map(claimRatedRows(sql, s, request, seen, wake), (rows) => rows.map(toClaimed))

/**
 * A claim: the rated claim first, then the routine claim (`claim`, claim.ts) for the rest of the
 * limit from the ready set. Composed here, so claim.ts need not know of rate limits.
 */
export const withRated = <E, R>(
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: ClaimRequest,
  seen: RatedSeen,
  wake: RatedWake,
  routine: (rest: ClaimRequest) => Effect.Effect<ReadonlyArray<ClaimedRun>, E, R>
) =>
  Effect.flatMap(claimRated(sql, s, request, seen, wake), (rated) =>
    rated.length === 0
      ? routine(request)
      : Effect.map(routine({ ...request, limit: request.limit - rated.length }), (claimed) => [...rated, ...claimed]))

const claimRatedRows = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: ClaimRequest,
  seen: RatedSeen,
  wake: RatedWake
) =>
  Effect.gen(function*() {
    wake.next = undefined
    if (request.limit <= 0 || request.kinds.length === 0) return [] as ReadonlyArray<ClaimRow>
    if (request.dueOnly === true && seen.get(request) === false) return [] as ReadonlyArray<ClaimRow>
    const kinds = request.kinds as Array<string>
    const [declared] = yield* sql<{ any: boolean }>`
      SELECT EXISTS (SELECT 1 FROM ${s.rateLimits(sql)}
        WHERE (scope = 'kind' AND name = ANY(${kinds}::text[])) OR (scope = 'queue' AND name = ANY(${request
      .queues as Array<string>}::text[]))) AS any`
    seen.set(request, declared?.any === true)
    if (declared?.any !== true) return []
    const queues = activeQueues(sql, s, request.queues)
    return yield* sql.withTransaction(Effect.gen(function*() {
      const windows = yield* sql<Window>`
        WITH due AS MATERIALIZED (
          SELECT r.rate_scope AS scope, CASE r.rate_scope WHEN 'kind' THEN r.kind ELSE r.queue END AS name, r.concurrency_key, r.queue,
            row_number() OVER (ORDER BY r.priority DESC, r.run_at, r.id) AS place
          FROM (
            SELECT * FROM ${s.runs(sql)} o
            WHERE o.state = 'pending' AND o.rate_scope IS NOT NULL AND (o.key_scope IS NULL OR o.key_slot IS NOT NULL)
              AND o.run_at <= now() AND o.queue = ANY(${queues}) AND o.kind = ANY(${kinds}::text[])
            ORDER BY o.priority DESC, o.run_at, o.id LIMIT ${RunStorage.scanPastLimit}
          ) r
        ), windows AS MATERIALIZED (
          SELECT d.scope, d.name, CASE WHEN l.per_key THEN coalesce(d.concurrency_key, '') ELSE '' END AS window_key,
            l.per_interval, l.interval_ms, l.per_key, min(d.place) AS first, count(*) AS waiting, array_agg(DISTINCT d.queue) AS queues
          FROM due d JOIN ${s.rateLimits(sql)} l ON l.scope = d.scope AND l.name = d.name
          GROUP BY 1, 2, 3, 4, 5, 6
        ), counted AS MATERIALIZED (
          SELECT w.*, (SELECT count(*) FROM ${s.rateStarts(sql)} t
            WHERE t.scope = w.scope AND t.name = w.name AND t.window_key = w.window_key
              AND t.started_at > statement_timestamp() - w.interval_ms * interval '1 millisecond') AS started
          FROM windows w
        ), open AS MATERIALIZED (
          -- A window full in this snapshot takes no place among the claim's: the windows with room
          -- behind it start (the second statement counts again, under the lock).
          SELECT * FROM counted WHERE started < per_interval ORDER BY first LIMIT ${request.limit}
        )
        SELECT scope, name, window_key, per_interval, interval_ms, per_key, NULL::float8 AS opens_in_ms, NULL::text[] AS queues, first
        FROM open
        WHERE pg_try_advisory_xact_lock(hashtextextended(${`leasehold-rate:${s.schema}:`} || scope || ':' || name || ':' || window_key, 0))
        UNION ALL
        -- The wake (RateWakes): a window left holding back due runs (more of them than its room) has
        -- room again when its (started - limit + 1)-th oldest start leaves the interval, or its
        -- oldest once this claim filled it (this claim's own starts, now, if it had none).
        SELECT NULL, NULL, NULL, NULL, NULL, NULL,
          extract(epoch FROM coalesce(
            (SELECT t.started_at FROM ${s.rateStarts(sql)} t
              WHERE t.scope = c.scope AND t.name = c.name AND t.window_key = c.window_key
                AND t.started_at > statement_timestamp() - c.interval_ms * interval '1 millisecond'
              ORDER BY t.started_at OFFSET greatest(c.started - c.per_interval, 0) LIMIT 1),
            statement_timestamp()) + c.interval_ms * interval '1 millisecond' - statement_timestamp()) * 1000, c.queues, NULL
        FROM counted c WHERE c.waiting > c.per_interval - c.started
        ORDER BY first`
      wake.next = earliestWake(windows)
      if (windows.every((w) => w.scope === null)) return [] as ReadonlyArray<ClaimRow>
      const ttlMs = Duration.toMillis(request.ttl)
      // The claim is recorded at the start's own time: the time its window counted.
      const claimedAt = "statement_timestamp()"
      const locked = windows.filter((w): w is Window & { scope: string } => w.scope !== null)
      return yield* sql<ClaimRow>`
        WITH ${fenceFloor(sql, s)}, windows AS (
          SELECT * FROM unnest(${locked.map((w) => w.scope)}::text[], ${locked.map((w) => w.name)}::text[],
            ${locked.map((w) => w.window_key)}::text[], ${locked.map((w) => w.per_interval)}::int[],
            ${locked.map((w) => w.interval_ms)}::float8[], ${locked.map((w) => w.per_key)}::boolean[])
            AS w(scope, name, window_key, per_interval, interval_ms, per_key)
        ), room AS MATERIALIZED (
          SELECT w.*, w.per_interval - (
            SELECT count(*) FROM ${s.rateStarts(sql)} t
            WHERE t.scope = w.scope AND t.name = w.name AND t.window_key = w.window_key
              AND t.started_at > statement_timestamp() - w.interval_ms * interval '1 millisecond'
          ) AS room
          FROM windows w
        ), picked AS MATERIALIZED (
          SELECT p.id, p.priority, p.run_at, w.scope, w.name, w.window_key
          FROM room w CROSS JOIN LATERAL (
            SELECT r.id, r.priority, r.run_at FROM ${s.runs(sql)} r
            WHERE r.state = 'pending' AND r.rate_scope = w.scope AND (CASE w.scope WHEN 'kind' THEN r.kind ELSE r.queue END) = w.name
              AND (NOT w.per_key OR coalesce(r.concurrency_key, '') = w.window_key)
              AND (r.key_scope IS NULL OR r.key_slot IS NOT NULL) AND r.run_at <= now()
              AND r.queue = ANY(${queues}) AND r.kind = ANY(${kinds}::text[])
            ORDER BY r.priority DESC, r.run_at, r.id LIMIT greatest(w.room, 0)
            FOR UPDATE OF r SKIP LOCKED
          ) p
          ORDER BY p.priority DESC, p.run_at, p.id LIMIT ${request.limit}
        ), prior AS (
          SELECT r.id, r.claimed_fence, r.claimed_by, r.claimed_attempt, r.claimed_at FROM ${s.runs(sql)} r
          WHERE r.id = ANY(ARRAY(SELECT id FROM picked)) AND r.claimed_at IS NOT NULL
        ), claimed AS (
          UPDATE ${s.runs(sql)} r SET ${claimAssignments(sql, { owner: request.owner, ttlMs, claimedAt })}
          FROM fence_floor f WHERE r.id = ANY(ARRAY(SELECT id FROM picked)) AND r.state = 'pending'
          RETURNING ${claimedColumns(sql)}, r.run_at, (extract(epoch FROM now() - r.run_at) * 1000)::float8 AS wait_ms
        ), started AS (
          INSERT INTO ${s.rateStarts(sql)} (scope, name, window_key, started_at, run_id)
          SELECT p.scope, p.name, p.window_key, statement_timestamp(), p.id FROM picked p JOIN claimed c ON c.id = p.id
        ), forgotten AS (
          -- Starts older than their window's interval count no more.
          DELETE FROM ${s.rateStarts(sql)} t USING windows w
          WHERE t.scope = w.scope AND t.name = w.name AND t.window_key = w.window_key
            AND t.started_at <= statement_timestamp() - w.interval_ms * interval '1 millisecond'
        ), history AS (
          INSERT INTO ${s.events(sql)} (run_id, fence, kind, owner, detail, at)
          SELECT id, claimed_fence, 'claimed', claimed_by, jsonb_build_object('attempt', claimed_attempt), claimed_at FROM prior
        )
        SELECT id::text AS id, queue, kind, payload, attempt, max_attempts, fence, checkpoint, signals, concurrency_key, state,
          2 AS origin, wait_ms, trace_parent, attempt_timeout_ms, deadline_in_ms
        FROM claimed ORDER BY priority DESC, run_at, id`
    }))
  })

/** Marks the unfinished runs of the changed kinds and queues with the rate limit that governs them now. */
const regovern = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  kinds: ReadonlyArray<string>,
  queues: ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    if (kinds.length === 0 && queues.length === 0) return
    // The runs the ledger holds move to their rows first, pending and running alike: a governed
    // run is never in the ledger. A running one keeps its lease (its batch's expiry) and is
    // governed once it is pending again (retried, released, snoozed or reclaimed).
    yield* sql`SELECT ${sql.literal(`"${s.schema}".hold`)}(ARRAY(
        SELECT y.id FROM ${s.ready(sql)} y
        WHERE y.ledger AND (y.kind = ANY(${kinds as Array<string>}::text[]) OR y.queue = ANY(${queues as Array<
      string
    >}::text[]))
        UNION ALL
        -- Keyed ledger runs waiting for a slot (migration 0025), which have no ready row yet.
        SELECT w.id FROM ${s.waiting(sql)} w
        WHERE w.kind = ANY(${kinds as Array<string>}::text[]) OR w.queue = ANY(${queues as Array<string>}::text[])
        UNION ALL
        SELECT r.id FROM ${s.claimBatches(sql)} c CROSS JOIN LATERAL unnest(c.ids) AS u(id) JOIN ${
      s.runs(sql)
    } r ON r.id = u.id
        WHERE c.settled_at IS NULL AND u.id <> ALL (c.closed) AND r.state = 'ledger'
          AND (r.kind = ANY(${kinds as Array<string>}::text[]) OR r.queue = ANY(${queues as Array<
      string
    >}::text[]))), NULL)`
    yield* sql`
      UPDATE ${s.runs(sql)} r SET rate_scope = g.scope
      FROM (
        SELECT o.id, ${sql.literal(governing(s, "o.kind", "o.queue"))} AS scope FROM ${s.runs(sql)} o
        WHERE o.state IN ('pending', 'running', 'suspended')
          AND (o.kind = ANY(${kinds as Array<string>}::text[]) OR o.queue = ANY(${queues as Array<string>}::text[]))
      ) g
      WHERE r.id = g.id AND r.rate_scope IS DISTINCT FROM g.scope`
  })

/** Checks every limit, then upserts them in one statement: one invalid limit writes nothing. */
export const set = (sql: SqlClient.SqlClient, s: StoreSchema, limits: ReadonlyArray<RateLimits.RateLimit>) =>
  Effect.gen(function*() {
    const checked: Array<RateLimits.CheckedRateLimit> = []
    for (const limit of limits) checked.push(yield* RateLimits.check(limit))
    if (checked.length === 0) return
    yield* sql`
      INSERT INTO ${s.rateLimits(sql)} (scope, name, per_interval, interval_ms, per_key)
      SELECT DISTINCT ON (scope, name) scope, name, per_interval, interval_ms, per_key
      FROM unnest(${checked.map((l) => l.scope)}::text[], ${checked.map((l) => l.name)}::text[], ${
      checked.map((l) => l.limit)
    }::int[],
        ${checked.map((l) => l.intervalMs)}::float8[], ${checked.map((l) => l.perKey)}::boolean[])
        WITH ORDINALITY AS t(scope, name, per_interval, interval_ms, per_key, ord)
      ORDER BY scope, name, ord DESC
      ON CONFLICT (scope, name) DO UPDATE SET per_interval = excluded.per_interval, interval_ms = excluded.interval_ms,
        per_key = excluded.per_key, updated_at = now()`
    yield* regovern(
      sql,
      s,
      checked.filter((l) => l.scope === "kind").map((l) => l.name),
      checked.filter((l) => l.scope === "queue").map((l) => l.name)
    )
  })

export const remove = (sql: SqlClient.SqlClient, s: StoreSchema, scope: RateLimits.RateLimitScope, name: string) =>
  Effect.gen(function*() {
    const removed = yield* sql<{ name: string }>`
      WITH gone AS (DELETE FROM ${s.rateLimits(sql)} WHERE scope = ${scope} AND name = ${name} RETURNING name),
      forgotten AS (DELETE FROM ${
      s.rateStarts(sql)
    } WHERE scope = ${scope} AND name = ${name} AND EXISTS (SELECT 1 FROM gone))
      SELECT name FROM gone`
    if (removed.length === 0) return false
    yield* regovern(sql, s, scope === "kind" ? [name] : [], scope === "queue" ? [name] : [])
    return true
  })

/** The declared limits with, for each, the starts in its last interval and its due runs not started. */
export const list = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  Effect.map(
    sql<
      {
        scope: RateLimits.RateLimitScope
        name: string
        per_interval: number
        interval_ms: number
        per_key: boolean
        started: bigint
        due: bigint
      }
    >`
      SELECT l.scope, l.name, l.per_interval, l.interval_ms, l.per_key,
        (SELECT count(*) FROM ${s.rateStarts(sql)} t
          WHERE t.scope = l.scope AND t.name = l.name AND t.started_at > now() - l.interval_ms * interval '1 millisecond') AS started,
        (SELECT count(*) FROM ${s.runs(sql)} r
          WHERE r.state = 'pending' AND r.rate_scope = l.scope AND r.run_at <= now() AND (r.key_scope IS NULL OR r.key_slot IS NOT NULL)
            AND (CASE l.scope WHEN 'queue' THEN r.queue ELSE r.kind END) = l.name) AS due
      FROM ${s.rateLimits(sql)} l
      ORDER BY l.scope COLLATE "C", l.name COLLATE "C"`,
    (rows) =>
      rows.map((r): RateLimits.RateLimitInfo => ({
        scope: r.scope,
        name: r.name,
        limit: r.per_interval,
        intervalMs: r.interval_ms,
        perKey: r.per_key,
        startedInWindow: num(r.started),
        due: num(r.due)
      }))
  )
