/**
 * Enqueue: one statement inserts a batch, honours idempotency keys (a repeated key yields the
 * existing run) and wakes idle workers of each queue with one notification.
 */
import { checkEnqueueRequest, type Enqueued, type EnqueueRequest, Json } from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Effect, Option } from "effect"
import type { SqlClient, SqlError } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { admitInPassing } from "./admit.js"
import * as rate from "./rate.js"
import { textArray } from "./rows.js"

/** The requests as rows, each with an id drawn from the sequence up front, so each result maps back to its request exactly. */
const inputRows = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  requests: ReadonlyArray<EnqueueRequest>,
  payloads: ReadonlyArray<string>
) =>
  sql`
    SELECT nextval(pg_get_serial_sequence(${`"${s.schema}".runs`}, 'id')) AS id, t.*
    FROM unnest(
      ${requests.map((r) => r.kind)}::text[],
      ${payloads}::jsonb[],
      ${requests.map((r) => r.queue ?? "default")}::text[],
      ${requests.map((r) => r.priority ?? 0)}::int[],
      ${requests.map((r) => r.delayMs ?? 0)}::float8[],
      ${requests.map((r) => r.maxAttempts ?? 5)}::int[],
      ${textArray(requests.map((r) => r.idempotencyKey ?? null))}::text[],
      ${textArray(requests.map((r) => r.traceParent ?? null))}::text[],
      ${textArray(requests.map((r) => r.concurrencyKey ?? null))}::text[],
      ${
    textArray(requests.map((r) => r.attemptTimeoutMs === undefined ? null : String(r.attemptTimeoutMs)))
  }::text[]::int[],
      ${textArray(requests.map(deadlineText))}::text[]::timestamptz[],
      ${
    textArray(requests.map((r) => r.deadlineAfterMs === undefined ? null : String(r.deadlineAfterMs)))
  }::text[]::float8[]
    ) WITH ORDINALITY AS t(kind, payload, queue, priority, delay_ms, max_attempts, idempotency_key, trace_parent, concurrency_key,
      attempt_timeout_ms, deadline_at, deadline_after_ms, ord)`

/** A request's deadline as a time, as text for a timestamptz[] parameter; null without one. */
const deadlineText = (request: EnqueueRequest): string | null => request.deadlineAt?.toISOString() ?? null

/**
 * The deadline column's value from an input row (`inputRows`): the time given, or the duration
 * counted from the database's `now()`, the clock that later decides it.
 */
const deadlineOf = (row: string) =>
  `coalesce(${row}.deadline_at, now() + ${row}.deadline_after_ms * interval '1 millisecond')`

/**
 * Where a new run is recorded: `ledger` puts every run no rate limit governs in the batch ledger
 * (migration 0018; keyed ones with their slots and waits, 0025; those with a unique window, their
 * window judged by the ledger's state, 0031; those with an idempotency key, the key held by
 * `idempotency_keys`, 0033 and 0034); `rows` records every run in its row.
 */
export type Storage = "ledger" | "rows"

/**
 * The state a new run is inserted in, from its input row's `rate_scope`: a run a rate limit
 * governs is kept on its row, out of the ledger (rate.ts); a keyed one is in the ledger, its slot
 * and its wait in key_holds and waiting (migration 0025).
 */
const initialState = (sql: SqlClient.SqlClient, storage: Storage) =>
  storage === "ledger" ? sql`CASE WHEN rate_scope IS NULL THEN 'ledger' ELSE 'pending' END` : sql`'pending'`

export const enqueue = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  requests: ReadonlyArray<EnqueueRequest>,
  storage: Storage = "rows"
) =>
  Effect.gen(function*() {
    if (requests.length === 0) return [] as ReadonlyArray<Enqueued>
    // Every payload is encoded before the statement: one JSON cannot hold writes nothing at all.
    const payloads: Array<string> = []
    for (const request of requests) {
      yield* checkEnqueueRequest(request)
      payloads.push(yield* Json.encode(request.payload ?? null, "payload"))
    }
    if (requests.every((r) => r.unique === undefined)) return yield* enqueueChecked(sql, s, requests, payloads, storage)
    // A unique window is decided by enqueue_run (migrations 0022, 0024), one request at a time in
    // request order (the ids drawn in that order), in one transaction for the batch: every hold of
    // the batch taken first, in one order (`takeHolds`), and the batch's keyed runs admitted once
    // at its end, in claim order, as a batch without windows admits them.
    return yield* retryDeadlocks(
      sql,
      sql.withTransaction(Effect.gen(function*() {
        yield* takeHolds(sql, s, requests, payloads)
        const out = yield* Effect.forEach(requests, (request, i) =>
          request.unique === undefined
            ? Effect.map(insertChecked(sql, s, [request], [payloads[i]!], storage), (out) => out[0]!)
            : enqueueUnique(sql, s, request, payloads[i]!, storage))
        const scope = admitScope(requests)
        if (scope !== undefined) yield* admitInPassing(sql, s, scope)
        return out
      }))
    )
  })

/** How many times a batch the server chose as a deadlock's victim is sent again. */
const deadlockRetries = 5

/**
 * Sends the batch again when the server broke a deadlock by aborting it, if its transaction was
 * the outermost one: it was rolled back whole, so nothing of it stands. A batch of unique requests
 * takes its holds in one order first (`takeHolds`); its requests with idempotency keys then lock
 * those keys in request order, which another such batch may take in the opposite order. Inside a
 * caller's transaction the abort is the caller's to handle: the error is returned.
 */
const retryDeadlocks = <A, R>(sql: SqlClient.SqlClient, batch: Effect.Effect<A, SqlError.SqlError, R>) =>
  Effect.flatMap(Effect.serviceOption(sql.transactionService), (outer) =>
    Option.isSome(outer)
      ? batch
      : Effect.retry(batch, { times: deadlockRetries, while: (error) => error.reason._tag === "DeadlockError" }))

/**
 * Takes the hold of every unique request of a batch, in (kind, key) order, before any run is
 * enqueued: two batches of the same keys in any orders queue on the first key they share and never
 * deadlock. A key without a hold row gets a placeholder that holds nothing (its period ended at
 * -infinity), which the request's enqueue_run takes over in this transaction; a key with one is
 * locked by a no-op update. The holds come before the batch's other locks (its idempotency keys), so
 * a batch that takes a hold never waits for it while holding a key another batch waits on.
 */
const takeHolds = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  requests: ReadonlyArray<EnqueueRequest>,
  payloads: ReadonlyArray<string>
) => {
  const unique = requests.flatMap((r, i) =>
    r.unique === undefined ? [] : [{ kind: r.kind, key: r.unique.key ?? null, payload: payloads[i]! }]
  )
  // Alone in its batch, a request's hold is the batch's only lock: no cycle to close.
  if (requests.length < 2) return Effect.void
  return Effect.asVoid(sql`
    INSERT INTO ${s.uniqueHolds(sql)} AS h (kind, unique_key, run_id, states, held_until)
    SELECT DISTINCT ON (t.kind, k.hold_key) t.kind, k.hold_key, 0, NULL, '-infinity'
    FROM unnest(${unique.map((u) => u.kind)}::text[], ${textArray(unique.map((u) => u.key))}::text[], ${
    unique.map((u) => u.payload)
  }::jsonb[])
      AS t(kind, unique_key, payload)
    CROSS JOIN LATERAL (SELECT ${sql.literal(`"${s.schema}".unique_hold_key`)}(t.unique_key, t.payload) AS hold_key) k
    ORDER BY t.kind, k.hold_key
    ON CONFLICT (kind, unique_key) DO UPDATE SET run_id = h.run_id`)
}

/** The kinds, queues and keys a batch's keyed runs are admitted by; none without a concurrency key. */
const admitScope = (requests: ReadonlyArray<EnqueueRequest>) => {
  const keys = [
    ...new Set(
      requests.flatMap((r) => r.concurrencyKey === undefined || r.concurrencyKey === null ? [] : [r.concurrencyKey])
    )
  ]
  return keys.length === 0
    ? undefined
    : { kinds: requests.map((r) => r.kind), queues: requests.map((r) => r.queue ?? "default"), keys }
}

/** Inserts a checked batch without unique windows; admits nothing. */
const insertChecked = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  requests: ReadonlyArray<EnqueueRequest>,
  payloads: ReadonlyArray<string>,
  storage: Storage
) =>
  requests.every((r) => r.idempotencyKey === undefined)
    ? enqueueWithoutKeys(sql, s, requests, payloads, storage)
    : enqueueWithKeys(sql, s, requests, payloads, storage)

/** A batch whose requests were checked and whose payloads were encoded, none with a unique window. */
const enqueueChecked = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  requests: ReadonlyArray<EnqueueRequest>,
  payloads: ReadonlyArray<string>,
  storage: Storage
) => {
  const insert = insertChecked(sql, s, requests, payloads, storage)
  const scope = admitScope(requests)
  if (scope === undefined) return insert
  // A keyed run under a limit is inserted waiting (migration 0013's key_slot_rules); in the same
  // transaction its key's free slots go to its waiting due runs in claim order, so the run is
  // due at once if its key has room and no older run of the key waits.
  return sql.withTransaction(Effect.tap(insert, () => admitInPassing(sql, s, scope)))
}

/**
 * One request with a unique window, through the store's own SQL function (`enqueue_run`); the batch
 * admits its key. A run it creates gets its timeouts by an update in the same transaction
 * (`enqueue_run` takes none).
 */
const enqueueUnique = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: EnqueueRequest,
  payload: string,
  storage: Storage
) =>
  Effect.tap(enqueueUniqueRun(sql, s, request, payload, storage), (enqueued) =>
    enqueued.created && hasTimeouts(request)
      ? Effect.asVoid(sql`UPDATE ${s.runs(sql)} SET attempt_timeout_ms = ${request.attemptTimeoutMs ?? null}::int,
          deadline = coalesce(${deadlineText(request)}::timestamptz,
            now() + ${request.deadlineAfterMs ?? null}::float8 * interval '1 millisecond')
        WHERE id = ${enqueued.id}::bigint`)
      : Effect.void)

const hasTimeouts = (request: EnqueueRequest) =>
  request.attemptTimeoutMs !== undefined || request.deadlineAt !== undefined || request.deadlineAfterMs !== undefined

const enqueueUniqueRun = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: EnqueueRequest,
  payload: string,
  storage: Storage
) => {
  const window = request.unique!
  const states = RunStorage.uniqueStates(window)
  return Effect.map(
    sql<{ id: string; created: boolean }>`
      SELECT e.id::text AS id, e.created FROM ${sql.literal(`"${s.schema}".enqueue_run`)}(
        kind => ${request.kind}, payload => ${payload}::jsonb, queue => ${request.queue ?? "default"},
        run_at => now() + ${request.delayMs ?? 0}::float8 * interval '1 millisecond', priority => ${
      request.priority ?? 0
    }::int,
        max_attempts => ${request.maxAttempts ?? 5}::int, concurrency_key => ${request.concurrencyKey ?? null}::text,
        trace_parent => ${request.traceParent ?? null}::text, admit_keys => false, unique_key => ${
      window.key ?? null
    }::text,
        unique_states => ${states === undefined ? null : textArray([...states])}::text[],
        unique_for => ${window.periodMs ?? null}::float8 * interval '1 millisecond',
        into_ledger => ${storage === "ledger"}::boolean
      ) e`,
    (rows): Enqueued => ({ id: rows[0]!.id, created: rows[0]!.created })
  )
}

/**
 * A batch with idempotency keys: a repeated key yields the existing run. Each key is held by its
 * `idempotency_keys` row (migration 0033), inserted before its run. The keys are inserted in
 * key order (byte order, whatever the database's collation), not request order: each insert waits
 * on an uncommitted insert of its key, so two batches of the same keys in opposite orders would
 * each hold a key the other waits for. The ids are still drawn in request order (`inputRows`), and
 * a key repeated in the batch is still created by its first request (`ord` breaks the tie).
 */
const enqueueWithKeys = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  requests: ReadonlyArray<EnqueueRequest>,
  payloads: ReadonlyArray<string>,
  storage: Storage
) =>
  Effect.gen(function*() {
    const runs = s.runs(sql)
    const rows = yield* sql<{ id: string; created: boolean; key: string | null }>`
      WITH input AS MATERIALIZED (
        ${inputRows(sql, s, requests, payloads)}
      ), keys AS (
        INSERT INTO ${s.idempotencyKeys(sql)} (key, run_id)
        SELECT idempotency_key, id FROM input WHERE idempotency_key IS NOT NULL
        ORDER BY idempotency_key COLLATE "C", ord
        ON CONFLICT (key) DO NOTHING
        RETURNING run_id
      ), inserted AS (
        INSERT INTO ${runs} (id, kind, payload, queue, priority, run_at, max_attempts, idempotency_key, trace_parent, concurrency_key, state,
          rate_scope, attempt_timeout_ms, deadline)
        SELECT id, kind, payload, queue, priority, now() + delay_ms * interval '1 millisecond', max_attempts, idempotency_key, trace_parent,
          concurrency_key, ${initialState(sql, storage)}, rate_scope, attempt_timeout_ms, ${
      sql.literal(deadlineOf("input"))
    }
        FROM (SELECT i.*, ${sql.literal(rate.governing(s, "i.kind", "i.queue"))} AS rate_scope FROM input i) input
        WHERE idempotency_key IS NULL OR id IN (SELECT run_id FROM keys)
        RETURNING id, queue
      ), woken AS (
        SELECT pg_notify(${s.channel}, 'q:' || queue) FROM (SELECT DISTINCT queue FROM inserted) q
      )
      SELECT COALESCE(ins.id, existing.run_id)::text AS id, ins.id IS NOT NULL AS created, i.idempotency_key AS key,
        (SELECT count(*) FROM woken) AS woken
      FROM input i
      LEFT JOIN inserted ins ON ins.id = i.id
      LEFT JOIN ${s.idempotencyKeys(sql)} existing ON ins.id IS NULL AND existing.key = i.idempotency_key
      ORDER BY i.ord`
    // A key inserted by a transaction that committed during this statement is not in its snapshot.
    const missing = rows.filter((r) => r.id === null && r.key !== null).map((r) => r.key!)
    const late = missing.length === 0 ? [] : yield* sql<{ id: string; key: string }>`
      SELECT run_id::text AS id, key FROM ${s.idempotencyKeys(sql)} WHERE key = ANY(${missing}::text[])`
    const lateByKey = new Map(late.map((r) => [r.key, r.id]))
    return rows.map((r): Enqueued => ({ id: r.id ?? lateByKey.get(r.key!)!, created: r.created }))
  })

/**
 * The common case, no idempotency key in the batch: no conflict to handle and no existing run to
 * look up, so a lighter statement (about half the planning and execution time of the general one
 * for a single run, which is on the path of pickup latency).
 */
const enqueueWithoutKeys = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  requests: ReadonlyArray<EnqueueRequest>,
  payloads: ReadonlyArray<string>,
  storage: Storage
) =>
  Effect.map(
    sql<{ id: string }>`
      WITH input AS MATERIALIZED (
        ${inputRows(sql, s, requests, payloads)}
      ), inserted AS (
        INSERT INTO ${
      s.runs(sql)
    } (id, kind, payload, queue, priority, run_at, max_attempts, trace_parent, concurrency_key, state, rate_scope,
          attempt_timeout_ms, deadline)
        SELECT id, kind, payload, queue, priority, now() + delay_ms * interval '1 millisecond', max_attempts, trace_parent, concurrency_key,
          ${initialState(sql, storage)},
          rate_scope, attempt_timeout_ms, ${sql.literal(deadlineOf("input"))}
        FROM (SELECT i.*, ${
      sql.literal(rate.governing(s, "i.kind", "i.queue"))
    } AS rate_scope FROM input i) input ORDER BY ord
        RETURNING queue
      ), woken AS (
        SELECT pg_notify(${s.channel}, 'q:' || queue) FROM (SELECT DISTINCT queue FROM inserted) q
      )
      SELECT id::text AS id, (SELECT count(*) FROM woken) AS woken FROM input ORDER BY ord`,
    (rows) => rows.map((r): Enqueued => ({ id: r.id, created: true }))
  )
