/**
 * Admission: a keyed run under a limit waits (pending, `key_scope` set, no slot, outside the due
 * index) until it is given a free slot of its key. The update that frees a slot hands it on itself
 * (migration 0013's `key_slot_hand_off`); this statement admits the rest: runs enqueued while
 * their key has room, keys whose limit was raised or declared, and runs that became due or were
 * left waiting by a race (an enqueue and a completion of one key at once). A key's waiting due
 * runs take its free slots in claim order, so a run never overtakes an older one of its key.
 * (docs/adr/0014-per-key-concurrency.md, "Admission at the hand-off".)
 */
import type { ClaimNext } from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Duration, Effect } from "effect"
import type { SqlClient, SqlError } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { activeQueues, claimAssignments, fenceFloor, timeoutColumns } from "./claimFragments.js"
import { heldSlots } from "./slots.js"

/**
 * Which keys to admit: those of the limits of the named kinds and queues (or of every declared
 * limit, `every`), all of their keys with waiting runs or only the named keys.
 */
export type AdmitScope =
  & (
    | { readonly kinds: ReadonlyArray<string>; readonly queues: ReadonlyArray<string> }
    | { readonly every: true }
  )
  & { readonly keys?: ReadonlyArray<string> | undefined }

/** The waiting runs of scope `scope` ('kind' or 'queue', a constant) in the row's own column. */
const waitingOf = (s: StoreSchema, scope: "kind" | "queue", group: string) =>
  `"${s.schema}".runs w WHERE w.state = 'pending' AND w.key_scope = '${scope}' AND w.key_slot IS NULL AND w.${scope} = ${group}.name`

/** The ledger's waiting runs of scope `scope` (migration 0025's `waiting`, by `waiting_by_key`). */
const ledgerWaitingOf = (s: StoreSchema, scope: "kind" | "queue", group: string) =>
  `"${s.schema}".waiting w WHERE w.scope = '${scope}' AND w.name = ${group}.name`

/** A loose index scan of the distinct keys of `from` (a FROM ... WHERE of `w`) after `g.after`. */
const distinctKeys = (from: string, column: string) =>
  `(WITH RECURSIVE t(key) AS (
        (SELECT w.${column} FROM ${from} AND w.${column} > coalesce(g.after, '') ORDER BY w.${column} LIMIT 1)
        UNION ALL
        SELECT (SELECT w.${column} FROM ${from} AND w.${column} > t.key ORDER BY w.${column} LIMIT 1)
        FROM t WHERE t.key IS NOT NULL
      ) SELECT key FROM t WHERE key IS NOT NULL LIMIT ${RunStorage.scanPastLimit})`

/**
 * The distinct keys with waiting runs in a group `g` (scope, name), in their rows or in the
 * ledger, each read as a loose index scan of its waiting index (one descent per key, not one row
 * per waiting run), at most `RunStorage.scanPastLimit` of them per statement, from the key after
 * `g.after` (the cursor the last sweep left: each sweep goes on where the one before stopped, and
 * starts again from the first key once it has read the last).
 */
const waitingKeys = (s: StoreSchema, scope: "kind" | "queue") =>
  `SELECT t.key FROM (
      SELECT DISTINCT u.key FROM (
        ${distinctKeys(waitingOf(s, scope, "g"), "concurrency_key")}
        UNION ALL
        ${distinctKeys(ledgerWaitingOf(s, scope, "g"), "key")}
      ) u ORDER BY u.key LIMIT ${RunStorage.scanPastLimit}
    ) t WHERE g.scope = '${scope}'`

/**
 * A key's waiting due runs in claim order, locked, skipping rows others hold: the first ones,
 * as many as `window` (a LIMIT clause) says, for the key `k.key` of group `k` (`k.scope`, `k.name`),
 * from its rows and from the ledger's line merged (`ledger` says which).
 */
const firstWaiting = (s: StoreSchema, scope: "kind" | "queue", window: string) =>
  `SELECT * FROM (
      SELECT * FROM (
        SELECT w.id, w.queue, w.kind, w.priority, w.run_at, w.claimed_by, w.claimed_at, w.claimed_fence, w.claimed_attempt,
          false AS ledger
        FROM ${waitingOf(s, scope, "k")} AND w.concurrency_key = k.key AND w.run_at <= now()
          -- A paused queue's runs are not admitted: they would hold their keys' slots while paused.
          -- (Read once per statement: the paused queues are few, and the list is an init plan.)
          AND w.queue <> ALL (ARRAY(SELECT p.queue FROM "${s.schema}".paused_queues p))
          AND k.scope = '${scope}'
        ORDER BY w.priority DESC, w.run_at, w.id ${window}
        FOR UPDATE OF w SKIP LOCKED
      ) ${scope}_rows
      UNION ALL
      SELECT * FROM (
        SELECT w.id, w.queue, w.kind, w.priority, w.run_at, NULL::text, NULL::timestamptz, NULL::bigint, NULL::integer, true
        FROM ${ledgerWaitingOf(s, scope, "k")} AND w.key = k.key AND w.run_at <= now()
          AND w.queue <> ALL (ARRAY(SELECT p.queue FROM "${s.schema}".paused_queues p))
          AND k.scope = '${scope}'
        ORDER BY w.priority DESC, w.run_at, w.id ${window}
        FOR UPDATE OF w SKIP LOCKED
      ) ${scope}_ledger
      ORDER BY priority DESC, run_at, id ${window}
    ) ${scope}_runs`

/** `firstWaiting` of both scopes (only the one of `k.scope` reads anything). */
const waitingRuns = (s: StoreSchema, window: string) =>
  `${firstWaiting(s, "kind", window)} UNION ALL SELECT * FROM (${firstWaiting(s, "queue", window)}) q`

/** Where each limit's sweep stands among its waiting keys (group `scope:name` to the last key read). */
export type KeyCursors = Map<string, string>

export const admit = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  scope: AdmitScope,
  cursors: ReadonlyMap<string, string> = new Map()
) => {
  const keyed = { queue: "k.name", kind: "k.name", concurrencyKey: "k.key" }
  return sql<{ admitted: number; cursors: Record<string, string | null> | null }>`
    WITH groups AS MATERIALIZED (
      SELECT l.scope, l.name, l.per_key, c.after FROM ${s.keyLimits(sql)} l
      LEFT JOIN unnest(${[...cursors.keys()]}::text[], ${[...cursors.values()]}::text[]) AS c(grp, after)
        ON c.grp = l.scope || ':' || l.name
      ${
    "every" in scope ? sql`` : sql`WHERE (l.scope = 'kind' AND l.name = ANY(${scope.kinds as Array<string>}::text[]))
        OR (l.scope = 'queue' AND l.name = ANY(${scope.queues as Array<string>}::text[]))`
  }
    ), keyed AS MATERIALIZED (
      SELECT g.scope, g.name, g.per_key, k.key FROM groups g CROSS JOIN LATERAL (
        ${
    scope.keys === undefined
      ? sql.literal(`${waitingKeys(s, "kind")} UNION ALL ${waitingKeys(s, "queue")}`)
      : sql`SELECT DISTINCT u.key FROM unnest(${scope.keys as Array<string>}::text[]) AS u(key)`
  }
      ) k
    ), held AS MATERIALIZED (
      -- The key's held slots, one probe of its scope's slot index.
      SELECT k.*, ${sql.literal(heldSlots(s, "k.scope", keyed))} AS slots FROM keyed k
    ), free AS MATERIALIZED (
      -- The numbers below the limit no run holds, in order, but no more of them than the limit
      -- leaves room for beside every slot held (one above a lowered limit counts too): the key's
      -- n-th waiting run takes the n-th.
      SELECT h.scope, h.name, h.key, f.slots, cardinality(f.slots) AS free
      FROM held h CROSS JOIN LATERAL (
        SELECT ARRAY(SELECT g.slot FROM generate_series(0, h.per_key - 1) AS g(slot)
          WHERE g.slot <> ALL (h.slots) ORDER BY g.slot LIMIT greatest(0, h.per_key - cardinality(h.slots))) AS slots
      ) f
      WHERE cardinality(f.slots) > 0
    ), chosen AS MATERIALIZED (
      SELECT r.id, r.ledger, r.queue, r.kind, r.priority, r.run_at, k.scope, k.name, k.key,
        k.slots[row_number() OVER (PARTITION BY k.scope, k.name, k.key ORDER BY r.priority DESC, r.run_at, r.id)] AS slot
      FROM free k CROSS JOIN LATERAL (
        ${sql.literal(waitingRuns(s, "LIMIT k.free"))}
      ) r
    ), row_admitted AS (
      UPDATE ${s.runs(sql)} r SET key_slot = w.slot
      FROM chosen w WHERE r.id = w.id AND NOT w.ledger
      RETURNING r.queue
    ), ${ledgerAdmitted(sql, s, "chosen")}, admitted AS (
      SELECT queue FROM row_admitted UNION ALL SELECT queue FROM ledger_admitted
    ), woken AS (
      SELECT pg_notify(${s.channel}, 'q:' || queue) FROM (SELECT DISTINCT queue FROM admitted) q
    )
    SELECT (SELECT count(*) FROM admitted)::int AS admitted, (SELECT count(*) FROM woken) AS woken,
      -- Each group's cursor: its last key read when it read as many as the bound, else none.
      (SELECT jsonb_object_agg(c.grp, c.last) FROM (
        SELECT k.scope || ':' || k.name AS grp, CASE WHEN count(*) >= ${RunStorage.scanPastLimit} THEN max(k.key) END AS last
        FROM keyed k GROUP BY k.scope, k.name
      ) c) AS cursors`
}

/**
 * An admission that meets another's: two statements that both saw a slot free cannot both take it
 * (the unique slot index refuses the second, which then writes nothing); it is tried again, with a
 * fresh snapshot that sees the slot taken. Inside a transaction, give it a savepoint
 * (`sql.withTransaction`) so a refused attempt does not abort the transaction.
 */
export const retryingCollisions = <A, E, R>(statement: Effect.Effect<A, E, R>) =>
  Effect.retry(statement, { times: 10, while: slotCollision })

/** `retryingCollisions`, answering how many runs were admitted. */
export const admitted = <E, R>(statement: Effect.Effect<ReadonlyArray<{ admitted: number }>, E, R>) =>
  Effect.map(retryingCollisions(statement), (rows) => rows[0]?.admitted ?? 0)

/**
 * `admit` in a transaction of its own on the application's pool, JIT off: the statement's cost
 * estimate crosses `jit_above_cost` even on an empty store, and compiling it costs more than any run
 * it admits (the runtime pool has JIT off already, ADR 0002).
 */
export const admitOnApplicationPool = (sql: SqlClient.SqlClient, s: StoreSchema, scope: AdmitScope) =>
  sql.withTransaction(Effect.andThen(sql`SET LOCAL jit = off`, admit(sql, s, scope)))

/**
 * Admission on the way of an application's own write (an enqueue, a resume, a retry), in a
 * savepoint: one that meets another admission of the same key (a slot taken since its snapshot,
 * or a deadlock between two transactions admitting two keys in opposite orders) gives up instead
 * of failing the write, and leaves its runs waiting for the next sweep.
 */
export const admitInPassing = (sql: SqlClient.SqlClient, s: StoreSchema, scope: AdmitScope) =>
  admitOnApplicationPool(sql, s, scope).pipe(Effect.asVoid, Effect.catchIf(slotCollision, () => Effect.void))

/**
 * The ledger runs of `from` (id, ledger, queue, kind, priority, run_at, scope, name, key, slot)
 * admitted to their slots without a write of their rows: out of their key's line, the slot a
 * key_holds row (its primary key refuses a slot another statement took since this one's
 * snapshot), and a ready row for the claim (CTE `ledger_admitted`, their queues).
 */
const ledgerAdmitted = (sql: SqlClient.SqlClient, s: StoreSchema, from: string) =>
  sql.literal(`ledger_unwaited AS (
      DELETE FROM "${s.schema}".waiting x WHERE x.id = ANY (ARRAY(SELECT id FROM ${from} WHERE ledger))
    ), ledger_held AS (
      INSERT INTO "${s.schema}".key_holds (scope, name, key, slot, run_id)
      SELECT scope, name, key, slot, id FROM ${from} WHERE ledger
    ), ledger_admitted AS (
      INSERT INTO "${s.schema}".ready (id, queue, kind, priority, run_at, ledger)
      SELECT id, queue, kind, priority, run_at, true FROM ${from} WHERE ledger
      RETURNING queue
    )`)

export const slotCollision = (error: unknown): boolean => {
  if ((error as { _tag?: unknown })._tag !== "SqlError") return false
  const reason = (error as SqlError.SqlError).reason
  return reason._tag === "DeadlockError" ||
    (reason._tag === "UniqueViolation" &&
      ["runs_key_slots_kind", "runs_key_slots_queue", "key_holds_pkey"].includes(reason.constraint ?? ""))
}

/**
 * The slots a statement's completions gave back, handed to their keys' next waiting due runs in
 * the same statement, set-based: as the row trigger `key_slot_hand_off` does for the other ways a
 * run stops, which leaves completions to this (one statement per completed row cost a completion
 * four times its own write, mostly the executor opening every index of runs again). `freeing`
 * names the CTE of the slots the completed runs held, read before the write (id, scope, name,
 * key, slot, `after`: what each successor reports as the run it follows, the freeing run's id
 * or its item's place, and `hand`: whether the slot is handed on or only given back; the write's own RETURNING sees the slot already given back). Each key's freed slots
 * go to its first waiting due runs in claim order; a slot at or above a lowered limit is not
 * handed on, nor any while the key holds one there. Only the slots this statement freed are
 * handed out, and nobody else sees them free before it commits, so the hand-off never meets
 * another writer on the slot index.
 */
export const handOff = (sql: SqlClient.SqlClient, s: StoreSchema, next?: ClaimNext) => {
  // With `next`: a successor of the asked kinds in the asked (unpaused) queues is claimed for its
  // owner in the same statement, as claim.ts claims a due run (fence, attempt, lease: on the row for
  // a row run, in one new claim batch for the ledger's), and comes back as the `next` of the
  // completion whose slot it took.
  const claims = next === undefined
    ? sql`false`
    // A run a rate limit governs is given its slot, not started: only the rated claim starts it.
    // (One primary-key probe, only in a completion that claims: the admission statements that share
    // these lines read no column a store's older schema lacks.)
    // A run of the ledger is never governed by one (rate.ts moves it to its row first): no probe.
    : sql`(r.kind = ANY(${next.kinds as Array<string>}::text[]) AND r.queue = ANY(${activeQueues(sql, s, next.queues)})
        AND (r.ledger OR NOT EXISTS (SELECT 1 FROM ${s.runs(sql)} x WHERE x.id = r.id AND x.rate_scope IS NOT NULL)))`
  const owner = next?.owner ?? null
  const ttlMs = next === undefined ? 0 : Duration.toMillis(next.ttl)
  // What a successor carries into the update and the history (the lateral's run, `r`).
  const successor = `r.id, r.ledger, r.claimed_by, r.claimed_at, r.claimed_fence, r.claimed_attempt`
  const holds = sql.literal(`"${s.schema}".key_holds`)
  return sql`given_back AS MATERIALIZED (
      -- The freed slots out of key_holds, by their holders (a row's mirror then finds none to
      -- delete): a successor of the ledger takes its slot in a new row in this very statement.
      DELETE FROM ${holds} h USING freeing f
      WHERE h.scope = f.scope AND h.name = f.name AND h.key = f.key AND h.slot = f.slot AND h.run_id = f.id
      RETURNING f.id, f.scope, f.name, f.key, f.slot, f.after, f.hand
    ), freed AS MATERIALIZED (
      SELECT f.id, f.scope, f.name, f.key, f.slot, f.after, l.per_key
      FROM given_back f JOIN ${s.keyLimits(sql)} l ON l.scope = f.scope AND l.name = f.name
        LEFT JOIN ${s.keyLimitPeaks(sql)} p ON p.scope = f.scope AND p.name = f.name
      -- A slot given back by a run its completion said unkeyed is not handed on (hand).
      WHERE f.slot < l.per_key AND f.hand
        -- A key that still holds a slot above a lowered limit gets none back until it holds none
        -- there. Only a limit below its peak can leave such a slot (a slot is only ever given below
        -- the limit of its day, and the peak is the highest): the probe runs for those only.
        AND CASE WHEN coalesce(p.peak, 2147483647) > l.per_key THEN NOT ${
    sql.literal(slotAbove(s, "f", "l.per_key"))
  } ELSE true END
    ), successors AS MATERIALIZED (
      -- A key at a limit of 1 gets at most its one slot back (slot 0; key_holds holds one holder
      -- of it): its first waiting run, one probe, with no grouping or sort of the batch.
      SELECT ${sql.literal(successor)}, r.queue, r.kind, k.scope, k.name, k.key, k.slot, k.after, ${claims} AS claim
      FROM freed k CROSS JOIN LATERAL (${sql.literal(waitingRuns(s, "LIMIT 1"))}) r
      WHERE k.per_key = 1
      UNION ALL
      -- A key at a higher limit may get several: its first n waiting runs in one probe, the n-th
      -- taking the n-th slot. (One probe per slot would not do: the update takes each successor as
      -- it comes, and a later probe of the key no longer sees the runs this statement updated.)
      SELECT ${
    sql.literal(successor)
  }, r.queue, r.kind, k.scope, k.name, k.key, k.slots[r.nth], k.afters[r.nth], ${claims}
      FROM (
        SELECT f.scope, f.name, f.key, array_agg(f.slot ORDER BY f.slot) AS slots, array_agg(f.after ORDER BY f.slot) AS afters,
          count(*) AS free
        FROM freed f WHERE f.per_key > 1 GROUP BY f.scope, f.name, f.key
      ) k CROSS JOIN LATERAL (
        SELECT w.*, row_number() OVER (ORDER BY w.priority DESC, w.run_at, w.id) AS nth
        FROM (${sql.literal(waitingRuns(s, "LIMIT k.free"))}) w
      ) r
    ), ${fenceFloor(sql, s)}, row_handed AS (
      UPDATE ${s.runs(sql)} r SET key_slot = sc.slot,
        ${claimAssignments(sql, { owner, ttlMs, claimedAt: "now()", when: sql`sc.claim` })}
      -- By id, not by the version the lateral locked: that version may have been committed after
      -- this statement's snapshot (the lock follows a concurrent update), and an update by ctid
      -- would then match nothing; by id, the update follows the row to it.
      FROM successors sc, fence_floor f WHERE r.id = sc.id AND NOT sc.ledger
      RETURNING r.id, sc.after, sc.claim, r.queue, r.kind, r.payload, r.attempt, r.max_attempts, r.fence, r.checkpoint, r.signals,
        r.concurrency_key, r.trace_parent, (extract(epoch FROM now() - r.run_at) * 1000)::float8 AS wait_ms,
        -- One admitted and not claimed here announces itself, as an enqueued run does.
        CASE WHEN NOT sc.claim THEN pg_notify(${s.channel}, 'q:' || r.queue) END AS woken,
        NULL::bigint AS batch, NULL::bigint AS pos, ${sql.literal(timeoutColumns("r"))}
    ), ledger_next AS MATERIALIZED (
      -- Successors in the ledger: their rows are read (one primary-key probe each), never written.
      SELECT sc.id, sc.after, sc.claim, sc.scope, sc.name, sc.key, sc.slot, r.queue, r.kind, r.payload, r.priority, r.run_at,
        r.max_attempts, r.checkpoint, r.signals, r.concurrency_key, r.trace_parent, r.attempt_timeout_ms, r.deadline,
        CASE WHEN sc.claim THEN greatest(r.fence + 1, f.floor) ELSE r.fence END AS fence,
        CASE WHEN sc.claim THEN r.attempt + 1 ELSE r.attempt END AS attempt,
        row_number() OVER (PARTITION BY sc.claim ORDER BY sc.id) AS pos
      FROM successors sc CROSS JOIN fence_floor f CROSS JOIN LATERAL (SELECT * FROM ${
    s.runs(sql)
  } o WHERE o.id = sc.id) r
      WHERE sc.ledger AND r.state = 'ledger'
    ), ledger_unwaited AS (
      DELETE FROM ${sql.literal(`"${s.schema}".waiting`)} x WHERE x.id = ANY (ARRAY(SELECT id FROM ledger_next))
    ), ledger_held AS (
      INSERT INTO ${holds} (scope, name, key, slot, run_id) SELECT scope, name, key, slot, id FROM ledger_next
    ), ledger_ready AS (
      INSERT INTO ${s.ready(sql)} (id, queue, kind, priority, run_at, ledger)
      SELECT id, queue, kind, priority, run_at, true FROM ledger_next WHERE NOT claim
      -- One admitted and not claimed here announces itself, as an enqueued run does.
      RETURNING pg_notify(${s.channel}, 'q:' || queue)
    ), ledger_batch AS (
      -- The claimed ones, in one claim batch for the owner, as claim.ts writes one.
      INSERT INTO ${s.claimBatches(sql)} (owner, expires_at, ids, fences, attempts, span)
      SELECT ${owner}::text, now() + ${ttlMs}::float8 * interval '1 millisecond',
        array_agg(id ORDER BY pos), array_agg(fence ORDER BY pos), array_agg(attempt ORDER BY pos), range_agg(int8range(id, id + 1))
      FROM ledger_next WHERE claim HAVING count(*) > 0
      RETURNING batch
    ), ledger_handed AS (
      SELECT n.id, n.after, n.claim, n.queue, n.kind, n.payload, n.attempt, n.max_attempts, n.fence, n.checkpoint, n.signals,
        n.concurrency_key, n.trace_parent, (extract(epoch FROM now() - n.run_at) * 1000)::float8 AS wait_ms,
        CASE WHEN n.claim THEN b.batch END AS batch, CASE WHEN n.claim THEN n.pos END AS pos,
        ${sql.literal(timeoutColumns("n"))}
      FROM ledger_next n LEFT JOIN ledger_batch b ON true
    ), handed AS (
      SELECT id, after, claim, queue, kind, payload, attempt, max_attempts, fence, checkpoint, signals, concurrency_key,
        trace_parent, wait_ms, batch, pos, attempt_timeout_ms, deadline_in_ms
      FROM row_handed
      UNION ALL
      SELECT * FROM ledger_handed
    ), superseded AS (
      -- The claim a claimed successor's supersedes (a retried or released run's) moves into the history.
      INSERT INTO ${s.events(sql)} (run_id, fence, kind, owner, detail, at)
      SELECT id, claimed_fence, 'claimed', claimed_by, jsonb_build_object('attempt', claimed_attempt), claimed_at
      FROM successors WHERE claim AND claimed_at IS NOT NULL
    )`
}

/**
 * Whether the key of `f` (scope, name, key) holds a slot at or above `limit` (a lowered limit):
 * one range probe of key_holds' primary key.
 */
const slotAbove = (s: StoreSchema, f: string, limit: string) =>
  `EXISTS (SELECT 1 FROM "${s.schema}".key_holds o WHERE o.scope = ${f}.scope AND o.name = ${f}.name
      AND o.key = ${f}.key AND o.slot >= ${limit})`

/**
 * The columns of a run `r` that name the slot it holds (scope, name, key, slot), as `freeing`
 * (above) reads them; all null for a run that holds none.
 */
export const heldSlotColumns = (r: string) =>
  `${r}.key_scope AS scope, CASE ${r}.key_scope WHEN 'kind' THEN ${r}.kind ELSE ${r}.queue END AS name,
    ${r}.concurrency_key AS key, ${r}.key_slot AS slot`
