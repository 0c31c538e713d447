/**
 * The batch ledger's statements (migration 0018, docs/adr/0017-batch-ledger-storage.md): a run in
 * state `ledger` is claimed by one claim-batch row per claim statement (claim.ts), completed by one
 * completion-batch row per completion statement, and renewed by one update per batch. Every other
 * write first moves the run to its row (`hold`), where the row's own guarded statements decide.
 *
 * A run is running under fence f while it sits at its place in an unsettled claim batch with fence
 * f, is not in that batch's `closed` array and not named by one of its completion batches.
 *
 * Every writer of a batch first takes its row lock, and reads what it decides from only in a later
 * statement, whose snapshot sees whatever committed before the lock was granted (READ COMMITTED):
 * completions and renewals `FOR NO KEY UPDATE`, which orders them among themselves, and `hold`
 * `FOR UPDATE`, which orders it before or after them all. So what one writer decides (a run still
 * open, a batch all ended) is never read from a snapshot that misses another's committed write
 * (docs/adr/0022). A completion and a renewal by run do both in one round trip: a server-side
 * function locks, then reads (`lock_claim_batches`, migration 0030).
 */
import type { ClaimedRun, ClaimNext, LeaseKey } from "@leasehold/core"
import { Duration, Effect } from "effect"
import type { SqlClient, SqlError } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { handOff } from "./admit.js"
import { type ClaimRow, textArray, toClaimed } from "./rows.js"
import { idleBound, idleBoundMs, lockingStatement, readCommitted } from "./transactions.js"

/** Where a claim put a run: its claim batch and its place (1-based) in the batch's arrays. */
export interface LedgerRef {
  readonly batch: string
  readonly pos: number
}

/** Where the ledger put a claimed run, as a statement returns it (both null for a run claimed in its row). */
export interface LedgerPlace {
  readonly batch: string | null
  readonly pos: number | null
}

/** A claimed run, its claim reference remembered in `refs` when the ledger claimed it. */
export const remember = <R extends Omit<ClaimRow, "state"> & LedgerPlace>(refs: LedgerRefs | undefined, row: R) => {
  if (refs !== undefined && row.batch !== null && row.pos !== null) {
    refs.set(row.id, Number(row.fence), row.batch, row.pos, row.concurrency_key !== null)
  }
  return toClaimed(row)
}

/**
 * The claim references of the leases this store claimed, in this process's memory only: they
 * spare a completion or a renewal the search for a run's batch. A lease without one (claimed by
 * another process, or forgotten) is found by its batch's span instead.
 */
export class LedgerRefs {
  // Keyed by the run id as the store's claims hand it out (`id::text`): a worker names its lease
  // by that very string, so a lookup builds no key. A run is claimed in the ledger once (I62), so
  // an id has one reference, held with its lease's fence and found only under that fence. A lease
  // spelled otherwise ("007") is looked up under the database's spelling when its own misses.
  private readonly refs = new Map<string, HeldRef>()
  set(runId: string, fence: number, batch: string, pos: number, keyed = true): void {
    this.refs.set(runId, { batch, pos, runId, fence, keyed })
  }
  get(lease: LeaseKey): HeldRef | undefined {
    const ref = this.refs.get(lease.runId) ?? this.refs.get(canonicalRunId(lease.runId))
    return ref !== undefined && ref.fence === lease.fence ? ref : undefined
  }
  has(lease: LeaseKey): boolean {
    return this.get(lease) !== undefined
  }
  delete(lease: LeaseKey): void {
    const ref = this.get(lease)
    if (ref !== undefined) this.forget(ref)
  }
  /** Drops a reference `get` returned, without looking its lease up again. */
  forget(ref: HeldRef): void {
    if (this.refs.get(ref.runId) === ref) this.refs.delete(ref.runId)
  }
  get size(): number {
    return this.refs.size
  }
}

/** A claim reference as `LedgerRefs` holds it: with the run id it is held under and its fence. */
export interface HeldRef extends LedgerRef {
  readonly runId: string
  readonly fence: number
  /** Whether the run carries a concurrency key (its claim said so): it may hold a key slot. */
  readonly keyed: boolean
}

/** Whether a lease's run id can name a run of the ledger (its batches' arrays hold bigints). */
export const isRunId = (id: string) => /^[0-9]{1,19}$/.test(id)

/** A run id as Postgres prints it ("007" is run 7); what is not a run id, as given. */
export const canonicalRunId = (id: string): string =>
  /^[1-9][0-9]{0,14}$/.test(id) ? id : isRunId(id) ? String(BigInt(id)) : id

/**
 * The leases as a statement's `input` rows (id, fence, result, batch, pos, ord), each with its claim
 * reference: the one given, else its unsettled batch found through the span index.
 */
const inputRows = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  leases: ReadonlyArray<LeaseKey>,
  known: ReadonlyArray<LedgerRef | undefined>,
  results: ReadonlyArray<string | null> | null
) => {
  return sql`
    SELECT t.id, t.fence, t.result, t.ord, coalesce(t.batch, f.batch) AS batch, coalesce(t.pos, f.pos) AS pos
    FROM unnest(${textArray(leases.map((l) => l.runId))}::bigint[], ${
    textArray(leases.map((l) => String(l.fence)))
  }::bigint[],
      ${results}::jsonb[], ${textArray(known.map((r) => r?.batch ?? null))}::bigint[],
      ${textArray(known.map((r) => r === undefined ? null : String(r.pos)))}::integer[])
      WITH ORDINALITY AS t(id, fence, result, batch, pos, ord)
    LEFT JOIN LATERAL (
      SELECT b.batch, array_position(b.ids, t.id) AS pos FROM ${sql.literal(`"${s.schema}".claim_batches`)} b
      WHERE t.batch IS NULL AND b.span @> t.id AND b.settled_at IS NULL ORDER BY b.batch DESC LIMIT 1
    ) f ON true`
}

/**
 * How long a transaction that completed runs in the ledger may then sit idle, holding their
 * batches' locks (a keyed completion's, a fenced transaction's): its worker goes on at once, so
 * only a stopped process or a silent network waits this long.
 */
const completionIdleBound = Duration.seconds(5)

/** The run ids as the text of an int8multirange: each id a range of its own (the server merges them). */
const idRanges = (ids: ReadonlyArray<string>) => `{${ids.map((id) => `[${id},${BigInt(id) + 1n})`).join(",")}}`

/**
 * The open batches of these leases (`held`), locked and then read by `lock_claim_batches`
 * (migration 0030): the unsettled claim batches named by a known reference and, for a lease
 * without one, those whose span holds its run, locked in batch order `FOR NO KEY UPDATE`, which
 * conflicts with itself and with `hold`'s `FOR UPDATE` (a second completion or renewal of a batch
 * waits for the first to commit, then sees it). The function reads the batches only once their
 * locks are granted, in a statement of its own: under READ COMMITTED that read sees every write
 * the lock waited for, though the statement calling it began before. Then the completions they
 * have (`earlier`), and the leases of `input` still open at their place and fence (`open_leases`).
 * The locks are held while the statement runs, or to the end of the transaction it runs in, which
 * may then sit idle at most `bound`: the function sets `idle_in_transaction_session_timeout` as
 * `idleBound` does for a statement of its own.
 */
const openLeases = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  leases: ReadonlyArray<LeaseKey>,
  known: ReadonlyArray<LedgerRef | undefined>,
  bound: Duration.Duration,
  owner?: string
) => {
  const batches = [...new Set(known.flatMap((r) => r === undefined ? [] : [r.batch]))]
  const unknown = leases.flatMap((l, i) => known[i] === undefined ? [canonicalRunId(l.runId)] : [])
  return sql`
  held AS MATERIALIZED (
    SELECT * FROM ${sql.literal(`"${s.schema}".lock_claim_batches`)}(${batches}::bigint[],
      ${unknown.length === 0 ? null : idRanges(unknown)}::int8multirange, ${owner ?? null}::text,
      ${idleBoundMs(bound)}::int)
  ), earlier AS MATERIALIZED (
    SELECT h.batch, unnest(h.completed) AS id FROM held h
  ), open_leases AS MATERIALIZED (
    -- Set differences as hashed subplans (NOT IN over a CTE), never a join that compares the
    -- batch's runs pair by pair (test/plans.test.ts).
    SELECT DISTINCT ON (i.id, i.fence) i.* FROM input i JOIN held h ON h.batch = i.batch
    WHERE h.ids[i.pos] = i.id AND h.fences[i.pos] = i.fence AND i.id <> ALL (h.closed)
      AND (i.batch, i.id) NOT IN (SELECT batch, id FROM earlier)
    ORDER BY i.id, i.fence, i.ord
  )`
}

/** What a completion in the ledger answers: the leases it did not complete, and the successors it claimed. */
export interface LedgerCompletion {
  /** Places (0-based) of the leases it did not complete, for the row's own completion to decide. */
  readonly missed: ReadonlyArray<number>
  /** By place: the key's next run the completion's freed slot was handed to and claimed for `next`. */
  readonly successors: ReadonlyMap<number, ClaimedRun>
}

/**
 * Completes the leases still open in the ledger: one completion-batch row per claim batch, results
 * only when one is not null, each batch settled once all its runs are completed or closed. The
 * key slots the completed runs held (key_holds, migration 0025) are given back in the same
 * statement and handed to their keys' next waiting runs (admit.ts › handOff), claimed for `next`
 * when it is given. `known`: each lease's reference as the caller already found it in `refs`
 * (looked up here when not given); the references are forgotten once the statement has answered.
 */
export const complete = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  leases: ReadonlyArray<LeaseKey & { readonly result: string | null; readonly keyed?: boolean | undefined }>,
  refs: LedgerRefs,
  known: ReadonlyArray<HeldRef | undefined> = leases.map((l) => refs.get(l)),
  next?: ClaimNext
): Effect.Effect<LedgerCompletion, SqlError.SqlError> =>
  Effect.gen(function*() {
    if (leases.length === 0) return { missed: [], successors: new Map() }
    const usable = leases.filter((l) => isRunId(l.runId))
    if (usable.length < leases.length) return { missed: leases.map((_, i) => i), successors: new Map() }
    const results = leases.some((l) => l.result !== null) ? leases.map((l) => l.result ?? "null") : null
    // A run may hold a slot if it carries a key: as the worker says, or as its claim said (a run
    // said unkeyed gives its slot back, not handed on, as on its row). A batch of runs neither
    // says is keyed reads no run row; a lease the caller says nothing of (a fenced transaction's)
    // goes by its claim, and without one it may hold a slot.
    const keyed = leases.some((l, i) => l.keyed === true || known[i] === undefined || known[i]!.keyed)
    const hands = leases.map((l) => l.keyed !== false)
    const handing = !keyed ? sql`` : sql`, freeing AS MATERIALIZED (
        -- The slots the completed runs held: one primary-key probe of the run and one of key_holds each.
        -- Read after the completion batches are written (from done): only a completed run frees its slot.
        -- Each successor reports the place of the lease whose slot it took (after): no join back to the leases.
        SELECT o.id, h.scope, h.name, h.key, h.slot, o.ord AS after, (${hands}::boolean[])[o.ord::int] AS hand FROM open_leases o
        JOIN (SELECT DISTINCT claim_batch FROM done) d ON d.claim_batch = o.batch
        CROSS JOIN LATERAL (SELECT r.key_scope, r.kind, r.queue, r.concurrency_key FROM ${s.runs(sql)} r
          WHERE r.id = o.id AND r.key_scope IS NOT NULL) r
        JOIN ${sql.literal(`"${s.schema}".key_holds`)} h ON h.scope = r.key_scope
          AND h.name = CASE r.key_scope WHEN 'kind' THEN r.kind ELSE r.queue END AND h.key = r.concurrency_key AND h.run_id = o.id
      ), ${handOff(sql, s, next)}`
    const claimedNext = !keyed || next === undefined ? sql`` : sql`
      UNION ALL
      SELECT 'next', h.after::text, h.id::text, h.fence, h.queue, h.kind, h.payload, h.attempt, h.max_attempts, h.checkpoint,
        h.signals, h.concurrency_key, h.trace_parent, h.wait_ms, h.batch::text, h.pos::int, h.attempt_timeout_ms, h.deadline_in_ms
      FROM handed h WHERE h.claim`
    const decide = sql<{ tag: "missed" | "next"; ord: string } & Omit<ClaimRow, "state"> & LedgerPlace>`
      WITH input AS MATERIALIZED (${inputRows(sql, s, leases, known, results)}),
      ${openLeases(sql, s, leases, known, completionIdleBound)},
      done AS (
        INSERT INTO ${sql.literal(`"${s.schema}".completion_batches`)} (claim_batch, ids, fences, results)
        SELECT batch, array_agg(id ORDER BY ord), array_agg(fence ORDER BY ord),
          CASE WHEN bool_or(result IS NOT NULL AND result <> 'null'::jsonb)
            THEN array_agg(coalesce(result, 'null'::jsonb) ORDER BY ord) END
        FROM open_leases GROUP BY batch
        RETURNING claim_batch, cardinality(ids) AS n
      ), settled AS (
        UPDATE ${sql.literal(`"${s.schema}".claim_batches`)} c SET settled_at = now()
        FROM done d JOIN held h ON h.batch = d.claim_batch
        WHERE c.batch = d.claim_batch
          -- Counted by distinct runs: every run of the batch closed or completed, by now or before.
          AND (SELECT count(DISTINCT e.id) FROM (
            SELECT unnest(h.closed) AS id UNION ALL SELECT id FROM earlier WHERE batch = d.claim_batch
            UNION ALL SELECT id FROM open_leases WHERE batch = d.claim_batch) e) >= h.size
      )${handing}
      SELECT 'missed' AS tag, i.ord::text AS ord, NULL::text AS id, NULL::bigint AS fence, NULL::text AS queue, NULL::text AS kind,
        NULL::jsonb AS payload, NULL::integer AS attempt, NULL::integer AS max_attempts, NULL::jsonb AS checkpoint,
        NULL::jsonb AS signals, NULL::text AS concurrency_key, NULL::text AS trace_parent, NULL::float8 AS wait_ms,
        NULL::text AS batch, NULL::int AS pos, NULL::integer AS attempt_timeout_ms, NULL::float8 AS deadline_in_ms
      FROM input i WHERE i.ord NOT IN (SELECT ord FROM open_leases)
      ${claimedNext}`
    // The references go once the completion has committed (the outermost transaction's commit).
    const forget = Effect.sync(() => {
      for (const ref of known) if (ref !== undefined) refs.forget(ref)
    })
    const rows = yield* lockingStatement(sql, Effect.tap(decide, () => sql.afterCommit(forget)))
    const successors = new Map<number, ClaimedRun>()
    for (const row of rows) if (row.tag === "next") successors.set(Number(row.ord) - 1, remember(refs, row))
    return { missed: rows.filter((r) => r.tag === "missed").map((r) => Number(r.ord) - 1), successors }
  })

/**
 * Renews the owner's leases open in the ledger: one update per claim batch. Runs of a renewed
 * batch its worker no longer names keep the expiry they had: they are moved to their rows with
 * it (`hold`), where they expire and are reclaimed as any lease. Returns the places (0-based) of
 * the leases not renewed here, for the row's own renewal to decide.
 */
export const renew = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  owner: string,
  leases: ReadonlyArray<LeaseKey>,
  ttl: Duration.Duration,
  refs: LedgerRefs
) =>
  Effect.gen(function*() {
    if (leases.length === 0) return [] as ReadonlyArray<number>
    if (!leases.every((l) => isRunId(l.runId))) return leases.map((_, i) => i)
    const known = leases.map((l) => refs.get(l))
    const decide = sql<{ tag: "lost" | "lapsed"; ord: string | null; id: string | null; expires_at: Date | null }>`
      WITH input AS MATERIALIZED (${inputRows(sql, s, leases, known, null)}),
      ${openLeases(sql, s, leases, known, ttl, owner)},
      lapsed AS MATERIALIZED (
        SELECT h.batch, u.id, h.expires_at FROM held h, unnest(h.ids) AS u(id)
        WHERE h.batch = ANY (ARRAY(SELECT DISTINCT batch FROM open_leases)) AND u.id <> ALL (h.closed)
          AND (h.batch, u.id) NOT IN (SELECT batch, id FROM earlier)
          AND (h.batch, u.id) NOT IN (SELECT batch, id FROM open_leases)
      ), renewed AS (
        UPDATE ${sql.literal(`"${s.schema}".claim_batches`)} c
        SET expires_at = now() + ${Duration.toMillis(ttl)}::float8 * interval '1 millisecond'
        FROM held h
        WHERE c.batch = h.batch AND h.batch = ANY (ARRAY(SELECT DISTINCT batch FROM open_leases))
        RETURNING c.batch
      )
      SELECT 'lost' AS tag, i.ord::text AS ord, NULL::text AS id, NULL::timestamptz AS expires_at FROM input i
      -- By run and fence, not place: a lease listed twice is renewed once and held twice.
      WHERE (i.id, i.fence) NOT IN (SELECT o.id, o.fence FROM open_leases o WHERE o.batch = ANY (ARRAY(SELECT batch FROM renewed)))
      UNION ALL
      SELECT 'lapsed', NULL, l.id::text, l.expires_at FROM lapsed l`
    const rows = yield* lockingStatement(sql, decide)
    const lapsed = rows.filter((r) => r.tag === "lapsed")
    if (lapsed.length > 0) {
      const until = lapsed.reduce((min, r) => (r.expires_at! < min ? r.expires_at! : min), lapsed[0]!.expires_at!)
      yield* hold(sql, s, lapsed.map((r) => r.id!), until)
    }
    return rows.filter((r) => r.tag === "lost").map((r) => Number(r.ord) - 1)
  })

/** The leases a renewal names in one claim batch, by their place in it (a place is one run). */
class NamedInBatch {
  /** The run id at each named place. */
  readonly ids: Array<string> = []
  /** The leases naming each place: the first one, then any that list it again. */
  readonly first: Array<number> = []
  readonly again: Array<{ readonly pos: number; readonly lease: number }> = []
  add(pos: number, id: string, lease: number): void {
    if (this.first[pos] === undefined) {
      this.first[pos] = lease
      this.ids[pos] = id
    } else this.again.push({ pos, lease })
  }
  /** The leases naming run `id`. */
  leasesOf(id: string): Array<number> {
    const pos = this.ids.indexOf(id)
    return pos < 0 ? [] : [this.first[pos]!, ...this.again.filter((a) => a.pos === pos).map((a) => a.lease)]
  }
  /** Every lease naming this batch. */
  leases(): Array<number> {
    return [...this.first.filter((i) => i !== undefined), ...this.again.map((a) => a.lease)]
  }
  /**
   * The named ids as the text of an int8multirange, read in place order: a claim lists its runs in
   * id order mostly, so a batch whose runs are all held is one range. Out of order ids start a
   * range of their own (the server sorts and merges them).
   */
  ranges(): string {
    const parts: Array<string> = []
    let from: bigint | number | undefined
    let to: bigint | number = 0
    const close = () => from !== undefined && parts.push(`[${from},${typeof to === "number" ? to + 1 : to + 1n})`)
    this.ids.forEach((text) => {
      // Exact as numbers below 2^53; longer ids as bigints.
      const id = text.length <= 15 ? Number(text) : BigInt(text)
      if (
        from !== undefined && typeof id === typeof to &&
        (typeof id === "number" ? id === (to as number) + 1 : id === (to as bigint) + 1n)
      ) {
        to = id
        return
      }
      close()
      from = to = id
    })
    close()
    return `{${parts.join(",")}}`
  }
}

/**
 * Renews the leases this store claimed in the ledger, named by their claim references: one row
 * per claim batch is sent (the batch and the ids it still holds there, as a multirange), never
 * one per run. A reference fixes the lease's fence: a batch's ids and fences are written once, by
 * the claim that granted them, and a run is claimed in the ledger once (I62); `refs` holds a
 * reference only for the (id, fence) that claim returned. The statement checks that each batch is
 * the owner's and unsettled and every named id one of its runs, and finds the named runs no
 * longer open there (closed: moved to their rows; or completed) by the batch's few ended runs,
 * not by its many open ones. Open runs of a renewed batch that are not named keep the expiry
 * they had: they are moved to their rows with it (`hold`), where they expire and are reclaimed as
 * any lease. A batch not renewed (gone, another owner's, settled, or none of its named runs still
 * open) answers for all its named leases. Its row is locked before the statement decides, so a
 * hold or a completion of the batch is seen whole, before or after (see the module's header).
 *
 * Returns the places (0-based) of the leases not renewed here, for the row's own renewal to decide.
 */
export const renewClaimed = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  owner: string,
  leases: ReadonlyArray<{ readonly runId: string; readonly ref: LedgerRef }>,
  ttl: Duration.Duration
): Effect.Effect<ReadonlyArray<number>, SqlError.SqlError> =>
  Effect.gen(function*() {
    const byBatch = new Map<string, NamedInBatch>()
    leases.forEach(({ ref, runId }, i) => {
      let named = byBatch.get(ref.batch)
      if (named === undefined) byBatch.set(ref.batch, named = new NamedInBatch())
      named.add(ref.pos, canonicalRunId(runId), i)
    })
    const batches = [...byBatch.keys()]
    if (batches.length === 0) return [] as ReadonlyArray<number>
    const batchTable = sql.literal(`"${s.schema}".claim_batches`)
    const decide = sql<{ tag: "stale" | "lost" | "lapsed"; batch: string; id: string | null; expires_at: Date | null }>`
      WITH named AS MATERIALIZED (
        SELECT n.batch, n.ids FROM unnest(${batches}::bigint[], ${
      textArray(batches.map((b) => byBatch.get(b)!.ranges()))
    }::int8multirange[]) AS n(batch, ids)
      ), held AS MATERIALIZED (
        -- Counted from the ranges: the ids array is read only by a lapse.
        SELECT c.batch, n.ids AS named, (SELECT sum(upper(r) - lower(r)) FROM unnest(n.ids) AS r) AS n,
          c.ids, (SELECT sum(upper(r) - lower(r)) FROM unnest(c.span) AS r) AS size, c.closed, c.expires_at
        FROM named n JOIN ${batchTable} c ON c.batch = n.batch
        WHERE c.batch = ANY (${batches}::bigint[]) AND c.settled_at IS NULL AND c.owner = ${owner}
          -- Every named id is one of the batch's runs: the span is exactly the batch's ids.
          AND c.span @> n.ids
      ), ended AS MATERIALIZED (
        -- The runs of each batch no longer open there: moved to their rows, or completed.
        SELECT h.batch, u.id FROM held h, unnest(h.closed) AS u(id)
        UNION
        SELECT d.claim_batch AS batch, u.id FROM ${
      sql.literal(`"${s.schema}".completion_batches`)
    } d, unnest(d.ids) AS u(id)
        WHERE d.claim_batch = ANY (ARRAY(SELECT batch FROM held))
      ), counts AS MATERIALIZED (
        SELECT e.batch, count(*) AS ended, count(*) FILTER (WHERE h.named @> e.id) AS lost
        FROM ended e JOIN held h ON h.batch = e.batch GROUP BY e.batch
      ), tally AS MATERIALIZED (
        -- open: the batch's runs not ended; still: the named ones among them.
        SELECT h.batch, h.named, h.ids, h.closed, h.expires_at, h.size - coalesce(e.ended, 0) AS open,
          h.n - coalesce(e.lost, 0) AS still
        FROM held h LEFT JOIN counts e ON e.batch = h.batch
      ), lapsed AS MATERIALIZED (
        -- Only in a batch where fewer runs are named than are open: otherwise its ids are not read.
        SELECT t.batch, u.id, t.expires_at FROM tally t, unnest(t.ids) AS u(id)
        WHERE t.still > 0 AND t.still < t.open AND NOT t.named @> u.id AND (t.batch, u.id) NOT IN (SELECT batch, id FROM ended)
      ), renewed AS (
        UPDATE ${batchTable} c
        SET expires_at = now() + ${Duration.toMillis(ttl)}::float8 * interval '1 millisecond'
        FROM tally t
        WHERE c.batch = t.batch AND t.still > 0
        RETURNING c.batch
      )
      SELECT 'stale' AS tag, n.batch::text AS batch, NULL::text AS id, NULL::timestamptz AS expires_at FROM named n
      WHERE n.batch NOT IN (SELECT batch FROM renewed)
      UNION ALL
      SELECT 'lost', e.batch::text, e.id::text, NULL FROM ended e JOIN tally t ON t.batch = e.batch
      WHERE t.named @> e.id AND e.batch IN (SELECT batch FROM renewed)
      UNION ALL
      SELECT 'lapsed', l.batch::text, l.id::text, l.expires_at FROM lapsed l`
    // The batches locked first, the decision in a statement of its own: see the module's header.
    const rows = yield* readCommitted(sql.withTransaction(Effect.andThen(
      sql`SELECT ${idleBound(sql, ttl)} AS idle_bound FROM ${batchTable} c
        WHERE c.batch = ANY (${batches}::bigint[]) AND c.settled_at IS NULL AND c.owner = ${owner}
        ORDER BY c.batch FOR NO KEY UPDATE OF c`,
      decide
    )))
    // A batch not renewed (gone, settled, another owner's, or none of its named runs open) answers
    // for all its named leases: their runs are no longer open there (moved to their rows, where
    // the row renewal finds those still held, or ended).
    const missed: Array<number> = []
    const lapsed: Array<{ id: string; expiresAt: Date }> = []
    for (const row of rows) {
      if (row.tag === "stale") missed.push(...byBatch.get(row.batch)!.leases())
      else if (row.tag === "lost") missed.push(...byBatch.get(row.batch)!.leasesOf(row.id!))
      else lapsed.push({ id: row.id!, expiresAt: row.expires_at! })
    }
    if (lapsed.length > 0) {
      const until = lapsed.reduce((min, r) => (r.expiresAt < min ? r.expiresAt : min), lapsed[0]!.expiresAt)
      yield* hold(sql, s, lapsed.map((r) => r.id), until)
    }
    return missed.sort((a, b) => a - b)
  })

/**
 * Moves runs from the ledger to their rows (the migration's `hold`): a pending one stays pending,
 * an open one becomes running with its batch's lease, or until `leaseUntil`. Runs not in the
 * ledger are left as they are. Its own statement, committed before the write it prepares: it
 * changes how a run is recorded, never who holds it.
 */
export const hold = (sql: SqlClient.SqlClient, s: StoreSchema, ids: ReadonlyArray<string>, leaseUntil?: Date) =>
  ids.length === 0 || !ids.every(isRunId)
    ? Effect.succeed(0)
    : Effect.map(
      sql<{ moved: number }>`SELECT ${sql.literal(`"${s.schema}".hold`)}(${ids as Array<string>}::bigint[],
        ${leaseUntil ?? null}::timestamptz) AS moved`,
      (rows) => rows[0]?.moved ?? 0
    )

/**
 * The sweep's share of the ledger: the open runs of up to `batches` claim batches whose lease
 * expired are moved to their rows, where the claim's expired-lease branch reclaims them.
 */
export const expire = (sql: SqlClient.SqlClient, s: StoreSchema, batches: number) =>
  // A batch another transaction holds (a completion in flight, or one whose client went silent
  // mid-transaction and may never commit) is skipped, not waited for: the sweep, and the claim it
  // belongs to, go on with the other expired batches, and take that one once it is free.
  sql`SELECT ${sql.literal(`"${s.schema}".hold`)}(ARRAY(
      SELECT u.id FROM (
        SELECT c.ids FROM ${sql.literal(`"${s.schema}".claim_batches`)} c
        WHERE c.settled_at IS NULL AND c.expires_at <= now() ORDER BY c.expires_at LIMIT ${batches}
        FOR UPDATE OF c SKIP LOCKED
      ) e, unnest(e.ids) AS u(id)), NULL) AS moved`

/**
 * The ledger's share of a delete (deletes.ts), inside its transaction: locks the claim batches
 * whose span covers one of `ids` (`FOR UPDATE`, in batch order, as `hold` does), then answers the
 * ids still in an unsettled batch (open there, or their batch-mates are: the delete refuses them),
 * or, when there are none, takes the ids out of their settled batches (ids, fences, attempts,
 * closed, span, and the completion batches' ids, fences, results), deleting the batches left
 * empty. A settled batch is written by no one else, so its positions may shift.
 */
export const forgetDeleted = (sql: SqlClient.SqlClient, s: StoreSchema, ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const claims = sql.literal(`"${s.schema}".claim_batches`)
    const completions = sql.literal(`"${s.schema}".completion_batches`)
    const wanted = sql`(SELECT range_agg(int8range(w, w + 1)) FROM unnest(${ids as Array<string>}::bigint[]) w)`
    const locked = yield* sql<{ batch: string; settled: boolean }>`
      SELECT c.batch::text AS batch, c.settled_at IS NOT NULL AS settled FROM ${claims} c
      WHERE c.span && ${wanted} ORDER BY c.batch FOR UPDATE`
    if (locked.length === 0) return [] as ReadonlyArray<string>
    const open = yield* sql<{ id: string }>`
      SELECT DISTINCT u.id::text AS id FROM ${claims} c, unnest(c.ids) AS u(id)
      WHERE c.batch = ANY(${locked.map((b) => b.batch)}::bigint[]) AND c.settled_at IS NULL
        AND u.id = ANY(${ids as Array<string>}::bigint[])`
    if (open.length > 0) return open.map((r) => r.id)
    const batches = locked.map((b) => b.batch)
    yield* sql`
      WITH kept AS (
        SELECT c.batch, array_agg(u.id ORDER BY u.n) AS ids, array_agg(u.fence ORDER BY u.n) AS fences,
          array_agg(u.attempt ORDER BY u.n) AS attempts
        FROM ${claims} c, unnest(c.ids, c.fences, c.attempts) WITH ORDINALITY AS u(id, fence, attempt, n)
        WHERE c.batch = ANY(${batches}::bigint[]) AND u.id <> ALL(${ids as Array<string>}::bigint[])
        GROUP BY c.batch
      )
      UPDATE ${claims} c SET ids = coalesce(k.ids, '{}'), fences = coalesce(k.fences, '{}'),
        attempts = coalesce(k.attempts, '{}'),
        closed = ARRAY(SELECT x FROM unnest(c.closed) x WHERE x <> ALL(${ids as Array<string>}::bigint[])),
        span = c.span - ${wanted}
      FROM (SELECT b FROM unnest(${batches}::bigint[]) b) t LEFT JOIN kept k ON k.batch = t.b
      WHERE c.batch = t.b`
    yield* sql`
      WITH kept AS (
        SELECT d.ctid AS row_id, array_agg(u.id ORDER BY u.n) AS ids, array_agg(u.fence ORDER BY u.n) AS fences,
          CASE WHEN d.results IS NULL THEN NULL ELSE array_agg(d.results[u.n] ORDER BY u.n) END AS results
        FROM ${completions} d, unnest(d.ids, d.fences) WITH ORDINALITY AS u(id, fence, n)
        WHERE d.claim_batch = ANY(${batches}::bigint[]) AND u.id <> ALL(${ids as Array<string>}::bigint[])
        GROUP BY d.ctid, d.results
      )
      UPDATE ${completions} d SET ids = k.ids, fences = k.fences, results = k.results
      FROM kept k WHERE d.ctid = k.row_id AND d.ids && ${ids as Array<string>}::bigint[]`
    yield* sql`
      DELETE FROM ${completions} d WHERE d.claim_batch = ANY(${batches}::bigint[])
        AND NOT EXISTS (SELECT 1 FROM unnest(d.ids) u WHERE u <> ALL(${ids as Array<string>}::bigint[]))`
    yield* sql`DELETE FROM ${claims} c WHERE c.batch = ANY(${batches}::bigint[]) AND cardinality(c.ids) = 0`
    return [] as ReadonlyArray<string>
  })
