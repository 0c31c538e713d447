/**
 * Guarded writes: everything a lease holder writes is matched on id + fence + state running. A
 * write that matches nothing is diagnosed afterwards (`diagnose`) to give the precise reason: a
 * higher stored fence is `FenceRejected` (and recorded in the run's history), an equal fence on a
 * run no longer running is `LeaseNotHeld`, a missing row is `RunNotFound`. No clock is consulted.
 *
 * The guard is written `state = 'running' COLLATE "C"`, and batch statements reach their rows by
 * primary key with the guards as join conditions: why, with the measurements, in
 * docs/adr/0001-guarded-writes-by-primary-key.md.
 */
import {
  type ClaimedRun,
  type ClaimNext,
  type CompleteItem,
  type FailOutcome,
  type FailRequest,
  FenceRejected,
  type FinalizeOutcome,
  Json,
  type LeaseKey,
  LeaseNotHeld,
  RunNotFound,
  type RunState,
  type SignalOutcome,
  SignalTokenInUse,
  type SnoozeRequest,
  type StoreError,
  type SuspendOutcome,
  type SuspendRequest,
  type UnstorableValue
} from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Cause, Duration, Effect, type Exit, Schema } from "effect"
import { type SqlClient, SqlError, type Statement } from "effect/sql"
import * as StoreErrors from "../../StoreErrors.js"
import type { StoreSchema } from "../../StoreSchema.js"
import { handOff, heldSlotColumns } from "./admit.js"
import * as attemptLogs from "./attemptLogs.js"
import * as ledger from "./ledger.js"
import { type ClaimRow, num } from "./rows.js"
import { idleBound, readCommitted } from "./transactions.js"

interface Diagnosis {
  readonly runId: string
  readonly presented: number
  readonly stored: number | null
  readonly state: RunState | null
}

/** Reads the current fence of runs whose guarded write matched nothing; records real stale writes. */
export const diagnose = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  operation: string,
  leases: ReadonlyArray<LeaseKey>
) =>
  Effect.gen(function*() {
    const rows = yield* sql<{ id: string; presented: bigint; stored: bigint | null; state: RunState | null }>`
      WITH input AS (
        SELECT * FROM unnest(${leases.map((l) => l.runId)}::bigint[], ${
      leases.map((l) => String(l.fence))
    }::bigint[]) AS t(id, fence)
      ), current AS (
        SELECT i.id, i.fence AS presented, r.fence AS stored, r.state
        FROM input i LEFT JOIN ${s.runsNow(sql)} r ON r.id = i.id
      ), recorded AS (
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
        SELECT id, presented, 'stale_write_rejected',
          jsonb_build_object('operation', ${operation}::text, 'storedFence', stored, 'state', state)
        FROM current WHERE stored IS NOT NULL AND stored <> presented
      )
      SELECT id::text AS id, presented, stored, state FROM current`
    return rows.map((r): Diagnosis => ({
      runId: r.id,
      presented: num(r.presented),
      stored: r.stored === null ? null : num(r.stored),
      state: r.state
    }))
  })

export const toError = (operation: string, d: Diagnosis) =>
  d.stored === null || d.state === null
    ? new RunNotFound({ runId: d.runId })
    : d.stored !== d.presented
    ? new FenceRejected({ runId: d.runId, presentedFence: d.presented, storedFence: d.stored, operation })
    : new LeaseNotHeld({ runId: d.runId, fence: d.presented, state: d.state, operation })

/** Runs a single-row guarded write; when it matched nothing, fails with the diagnosed reason. */
export const guardedOne = <A, E>(
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  operation: string,
  lease: LeaseKey,
  write: Effect.Effect<ReadonlyArray<A>, E>,
  refs?: ledger.LedgerRefs
) =>
  Effect.flatMap(inRow(sql, s, lease, write, refs), (rows) =>
    rows.length > 0
      ? Effect.succeed(rows[0]!)
      : Effect.flatMap(diagnose(sql, s, operation, [lease]), ([d]) => Effect.fail(toError(operation, d!))))

/**
 * Runs a guarded write of one run on its row, the run moved out of the ledger first (ledger.ts ›
 * hold) when this store claimed it there, or when the write matched nothing and the run may still
 * be in the ledger (claimed by another process): then the write is tried once more.
 */
export const inRow = <A, E>(
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  lease: LeaseKey,
  write: Effect.Effect<ReadonlyArray<A>, E>,
  refs?: ledger.LedgerRefs
): Effect.Effect<ReadonlyArray<A>, E | SqlError.SqlError> =>
  // The reference is looked up when the write runs, not when it is built (a retried write looks again).
  Effect.suspend(() => inRowNow(sql, s, lease, write, refs))

const inRowNow = <A, E>(
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  lease: LeaseKey,
  write: Effect.Effect<ReadonlyArray<A>, E>,
  refs?: ledger.LedgerRefs
): Effect.Effect<ReadonlyArray<A>, E | SqlError.SqlError> => {
  if (refs !== undefined && refs.has(lease)) {
    // The reference goes once the move has committed: until then a renewal names the run in its
    // batch (where it is open, or seen closed), never leaves it unnamed there (which would lapse it).
    return Effect.andThen(
      Effect.tap(ledger.hold(sql, s, [lease.runId]), () => Effect.sync(() => refs.delete(lease))),
      write
    )
  }
  return Effect.flatMap(write, (rows) =>
    rows.length > 0
      ? Effect.succeed(rows)
      : Effect.flatMap(ledger.hold(sql, s, [lease.runId]), (moved) => moved > 0 ? write : Effect.succeed(rows)))
}

/**
 * What becomes of a completed run: `keep` (default) or `delete` in the completion's own guarded
 * statement; runs with an idempotency key are kept either way (docs/adr/0005).
 */
export type CompletedRuns = "keep" | "delete"

/** The SET list of a completion that keeps its run: completed, with `result`, the lease let go. */
const completedSet = (sql: SqlClient.SqlClient, result: Statement.Fragment) =>
  // The run's key slot, if it holds one, is given back here rather than by the row trigger
  // (migration 0014); the statement hands it on (admit.ts › handOff).
  sql`state = 'completed', result = ${result}, lease_owner = NULL, lease_expires_at = NULL, key_slot = NULL,
          finished_at = now(), updated_at = now()`

/**
 * Retention of uniqueness windows' holds (migration 0024), in a statement that deletes completed
 * runs (its `deleted`): the holds of those runs that can never hold again (a window with states:
 * a deleted run is in none; one with a period only: once it ended), and up to `ended` other holds
 * whose period ended, whatever their runs (a period never holds again once over). Each condition
 * is on the hold's own row, so a hold taken over meanwhile (a new run, a new period) is kept.
 */
const releasedHolds = (sql: SqlClient.SqlClient, s: StoreSchema, ended: number) =>
  sql`released_holds AS (
        DELETE FROM ${s.uniqueHolds(sql)} h
        WHERE h.run_id = ANY(ARRAY(SELECT id FROM deleted)) AND (h.states IS NOT NULL OR h.held_until <= now())
      ), ended_holds AS (
        DELETE FROM ${s.uniqueHolds(sql)} h
        WHERE (h.kind, h.unique_key) IN (
          SELECT e.kind, e.unique_key FROM ${s.uniqueHolds(sql)} e
          WHERE e.held_until <= now() AND e.run_id <> ALL (ARRAY(SELECT id FROM deleted))
          ORDER BY e.held_until LIMIT ${ended} FOR UPDATE SKIP LOCKED)
      )`

/**
 * Completes a batch in one statement, each row matched on id + fence + running. An item whose run
 * is already completed under the same fence is acknowledged (`Finalized`): it is a retry of the
 * holder's own completion. The statement
 * returns only the items it did not complete (none, normally), by position: the worker's side
 * decodes nothing for the runs that went through. When no run has a result (handlers that return
 * nothing, or null) the results array is not sent at all.
 */
export const completeBatch = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  items: ReadonlyArray<CompleteItem>,
  completedRuns: CompletedRuns = "keep",
  next?: ClaimNext,
  refs?: ledger.LedgerRefs
) =>
  refs === undefined ?
    completeInRows(sql, s, items, completedRuns, next) :
    inOneTransaction(items, next) ?
    readCommitted(sql.withTransaction(ledgerOnce(sql, s, items, completedRuns, next, refs))) :
    ledgerThenRows(sql, s, items, completedRuns, next, refs)

/**
 * A completion outside a transaction (it claims no successor): the runs this store claimed in
 * the ledger are completed there, in one statement; the rest (and any the ledger no longer holds:
 * moved to their rows meanwhile) in their rows, and what the rows missed in the ledger again
 * (found by span). Each statement holds its batch locks only while it runs.
 */
const ledgerThenRows = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  items: ReadonlyArray<CompleteItem>,
  completedRuns: CompletedRuns,
  next: ClaimNext | undefined,
  refs: ledger.LedgerRefs
) =>
  Effect.gen(function*() {
    // One pass over the batch: a batch is a worker's whole flush, and this runs for every item.
    // Each item's claim reference is looked up once, here, and handed to the ledger's statement.
    const { inLedger, known, rest, outcomes } = byReference(items, refs)
    if (inLedger.length > 0) {
      const { missed, successors } = yield* ledger.complete(
        sql,
        s,
        inLedger.map((i) => items[i]!),
        refs,
        known,
        next
      )
      for (const m of missed) rest.push(inLedger[m]!)
      for (const [m, successor] of successors) {
        const item = items[inLedger[m]!]!
        outcomes[inLedger[m]!] = { _tag: "Finalized", runId: item.runId, fence: item.fence, next: successor }
      }
    }
    if (rest.length === 0) return outcomes
    const restOutcomes = yield* completeInRows(sql, s, rest.map((i) => items[i]!), completedRuns, next, refs)
    rest.forEach((i, k) => {
      outcomes[i] = restOutcomes[k]!
    })
    return outcomes
  })

/**
 * The places of the items this store claimed in the ledger (with their references) and of the
 * rest, and their outcomes, each `Finalized` until a statement says otherwise.
 */
const byReference = (items: ReadonlyArray<CompleteItem>, refs: ledger.LedgerRefs) => {
  const inLedger: Array<number> = []
  const known: Array<ledger.HeldRef> = []
  const rest: Array<number> = []
  const outcomes: Array<FinalizeOutcome> = new Array(items.length)
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!
    const ref = refs.get(item)
    if (ref !== undefined) {
      inLedger.push(i)
      known.push(ref)
    } else rest.push(i)
    outcomes[i] = { _tag: "Finalized", runId: item.runId, fence: item.fence }
  }
  return { inLedger, known, rest, outcomes }
}

/** Whether a completion claims keyed runs' successors, and so is one transaction (ledgerOnce). */
const inOneTransaction = (items: ReadonlyArray<CompleteItem>, next: ClaimNext | undefined): next is ClaimNext =>
  next !== undefined && items.some((i) => i.keyed !== false)

/**
 * A completion that claims keyed runs' successors is one transaction, the ledger's statement and
 * the rows' together: a failure after it rolls its claims back with it, so a retried batch does
 * not find its completions done and the runs it claimed leased to nobody who knows it.
 *
 * Its claim batches are all locked by one ledger statement, in batch order (docs/adr/0022): the
 * rows' statement for the runs without a claim reference comes first, then one ledger statement
 * for the runs this store claimed there and those the rows missed (found by their batches' span),
 * then the rows' statement for what the ledger no longer holds (moved to their rows by a hold),
 * which takes no batch lock. Two ledger statements in one transaction would each lock in batch
 * order, but not in one order together: two such transactions could deadlock.
 */
const ledgerOnce = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  items: ReadonlyArray<CompleteItem>,
  completedRuns: CompletedRuns,
  next: ClaimNext,
  refs: ledger.LedgerRefs
) =>
  Effect.gen(function*() {
    const { inLedger, known, rest, outcomes } = byReference(items, refs)
    const knownItems = inLedger.map((i) => items[i]!)
    // The ledger's one statement: the known leases first, then those the rows missed; answers
    // for the latter, by their place among the rows' misses.
    const inTheLedger = (missedInRows: ReadonlyArray<CompleteItem>) =>
      Effect.gen(function*() {
        // A lease whose id cannot name a ledger run stays missed, and is not sent: the ledger's
        // statement answers every lease missed when one of them cannot name a run.
        const asked = missedInRows.flatMap((item, k) => ledger.isRunId(item.runId) ? [k] : [])
        const completion = yield* ledger.complete(
          sql,
          s,
          [...knownItems, ...asked.map((k) => missedInRows[k]!)],
          refs,
          [...known, ...asked.map(() => undefined)],
          next
        )
        const missedKnown: Array<number> = []
        const missedOfRows = missedInRows.flatMap((item, k) => ledger.isRunId(item.runId) ? [] : [k])
        for (const m of completion.missed) {
          if (m < inLedger.length) missedKnown.push(inLedger[m]!)
          else missedOfRows.push(asked[m - inLedger.length]!)
        }
        const successorsOfRows = new Map<number, ClaimedRun>()
        for (const [m, successor] of completion.successors) {
          if (m >= inLedger.length) successorsOfRows.set(asked[m - inLedger.length]!, successor)
          else {
            const item = items[inLedger[m]!]!
            outcomes[inLedger[m]!] = { _tag: "Finalized", runId: item.runId, fence: item.fence, next: successor }
          }
        }
        if (missedKnown.length > 0) {
          const rowOutcomes = yield* completeInRows(
            sql,
            s,
            missedKnown.map((i) => items[i]!),
            completedRuns,
            next,
            refs,
            notInTheLedger
          )
          missedKnown.forEach((i, k) => {
            outcomes[i] = rowOutcomes[k]!
          })
        }
        return { missed: missedOfRows, successors: successorsOfRows } satisfies ledger.LedgerCompletion
      })
    if (rest.length === 0) {
      yield* inTheLedger([])
      return outcomes
    }
    const restOutcomes = yield* completeInRows(
      sql,
      s,
      rest.map((i) => items[i]!),
      completedRuns,
      next,
      refs,
      inTheLedger
    )
    rest.forEach((i, k) => {
      outcomes[i] = restOutcomes[k]!
    })
    return outcomes
  })

/** What the rows' statement missed, not looked for in the ledger (the transaction's one ledger statement came before it). */
const notInTheLedger = (missed: ReadonlyArray<CompleteItem>): Effect.Effect<ledger.LedgerCompletion> =>
  Effect.succeed({ missed: missed.map((_, k) => k), successors: new Map() })

/**
 * What is done with the runs the rows' statement missed, by their place among its misses: by
 * default, those the ledger holds are completed there (a run claimed in the ledger by another
 * process, found by its batch's span).
 */
type AfterRows = (missed: ReadonlyArray<CompleteItem>) => Effect.Effect<ledger.LedgerCompletion, SqlError.SqlError>

const completeInRows = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  items: ReadonlyArray<CompleteItem>,
  completedRuns: CompletedRuns,
  next?: ClaimNext,
  refs?: ledger.LedgerRefs,
  afterRows?: AfterRows
) =>
  // A completion that claims is one transaction with its diagnosis: a failure after the statement
  // (the diagnosis' round trip) rolls the claims back with it, so a retried batch does not find its
  // completions done and the runs it claimed leased to nobody who knows it.
  next === undefined || items.every((i) => i.keyed === false)
    ? completeBatchStatement(sql, s, items, completedRuns, undefined, refs, afterRows)
    : sql.withTransaction(completeBatchStatement(sql, s, items, completedRuns, next, refs, afterRows))

const completeBatchStatement = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  items: ReadonlyArray<CompleteItem>,
  completedRuns: CompletedRuns,
  next?: ClaimNext,
  refs?: ledger.LedgerRefs,
  afterRows?: AfterRows
) =>
  Effect.gen(function*() {
    if (items.length === 0) return [] as ReadonlyArray<FinalizeOutcome>
    const ids = items.map((i) => i.runId)
    // Results arrive as JSON text, encoded per run; null is stored as JSON null.
    const results = items.some((i) => i.result !== null) ? items.map((i) => i.result ?? "null") : null
    const runs = s.runs(sql)
    const batchResult = sql`coalesce(i.result, 'null'::jsonb)`
    // Rows are reached by primary key only (docs/adr/0001).
    const writes = completedRuns === "delete"
      ? sql`deleted AS (
        DELETE FROM ${runs} r USING input i
        WHERE r.id = ANY(${ids}::bigint[]) AND r.id = i.id AND r.fence = i.fence AND r.state = i.held
          AND r.idempotency_key IS NULL
        RETURNING r.id, r.fence, i.scope, i.name, i.key, i.slot
      ), kept AS (
        UPDATE ${runs} r SET ${completedSet(sql, batchResult)}
        FROM input i
        WHERE r.id = ANY(${ids}::bigint[]) AND r.id = i.id AND r.fence = i.fence AND r.state = i.held
          AND r.idempotency_key IS NOT NULL
        RETURNING r.id, r.fence, i.scope, i.name, i.key, i.slot
      ), done AS (
        SELECT * FROM deleted UNION ALL SELECT * FROM kept
      ), forgotten AS (
        DELETE FROM ${s.events(sql)} WHERE run_id = ANY(ARRAY(SELECT id FROM deleted))
      ), ${attemptLogs.forgetting(sql, s)}${releasedHolds(sql, s, items.length)}`
      : sql`done AS (
        UPDATE ${runs} r SET ${completedSet(sql, batchResult)}
        FROM input i
        WHERE r.id = ANY(${ids}::bigint[]) AND r.id = i.id AND r.fence = i.fence AND r.state = i.held
        RETURNING r.id, r.fence, i.scope, i.name, i.key, i.slot
      )`
    // Runs with a concurrency key may hold a key slot: the input reads theirs before the write (one
    // primary-key probe per run), the write returns it beside each completed run, and the freed
    // slots are handed on in the same statement (admit.ts › handOff). Nothing of this for the runs
    // the caller says are unkeyed (the worker says so of each run). Why the slots come with the
    // input and not from a pre-read joined to the completed runs: docs/adr/0014 ("Two quadratic joins").
    const keyed = items.some((i) => i.keyed !== false)
    const given = sql`unnest(${ids}::bigint[], ${items.map((i) => String(i.fence))}::bigint[], ${results}::jsonb[],
          ${items.map((i) => i.keyed !== false)}::boolean[]) WITH ORDINALITY AS t(id, fence, result, keyed, ord)`
    const slots = !keyed
      ? sql`SELECT t.id, t.fence, t.result, t.ord, 'running'::text AS held,
          NULL::text AS scope, NULL::text AS name, NULL::text AS key, NULL::integer AS slot
        FROM ${given}`
      : sql`SELECT t.id, t.fence, t.result, t.ord, 'running'::text AS held, o.*
        FROM ${given}
        -- Lateral: one primary-key probe per run, never a nested loop over the batch (docs/adr/0014).
        LEFT JOIN LATERAL (
          SELECT ${
        sql.literal(heldSlotColumns("o"))
      } FROM ${runs} o WHERE o.id = t.id AND t.keyed AND o.key_slot IS NOT NULL
        ) o ON true`
    const handing = !keyed
      ? sql``
      : sql`, freeing AS (SELECT id, scope, name, key, slot, id AS after, true AS hand FROM done WHERE slot IS NOT NULL), ${
        handOff(sql, s, next)
      }`
    // The successors claimed in the hand-off come back beside the items the statement missed.
    const claimedNext = !keyed || next === undefined ? sql`` : sql`
      UNION ALL
      SELECT 'next', i.ord::int - 1, h.id::text, h.fence, h.after::text, h.queue,
        h.kind, h.payload, h.attempt, h.max_attempts, h.checkpoint, h.signals, h.concurrency_key, h.trace_parent, h.wait_ms,
        h.batch::text, h.pos::int, h.attempt_timeout_ms, h.deadline_in_ms
      FROM row_handed h JOIN (SELECT id, min(ord) AS ord FROM input GROUP BY id) i ON i.id = h.after
      WHERE h.claim
      UNION ALL
      -- A slot a row run freed may go to a run of the ledger (claimed in a new batch).
      SELECT 'next', i.ord::int - 1, h.id::text, h.fence, h.after::text, h.queue,
        h.kind, h.payload, h.attempt, h.max_attempts, h.checkpoint, h.signals, h.concurrency_key, h.trace_parent, h.wait_ms,
        h.batch::text, h.pos::int, h.attempt_timeout_ms, h.deadline_in_ms
      FROM ledger_handed h JOIN (SELECT id, min(ord) AS ord FROM input GROUP BY id) i ON i.id = h.after
      WHERE h.claim`
    const rows = yield* sql<
      ClaimRow & { tag: "missed" | "next"; ord: string | null; after: string | null } & ledger.LedgerPlace
    >`
      WITH input AS MATERIALIZED (
        -- A null results array pads every row's result with SQL null: stored as JSON null.
        ${slots}
      ), ${writes}${handing}
      -- No history row: run_history reads the completion off the run row.
      SELECT 'missed' AS tag, i.ord::int - 1 AS ord, i.id::text AS id, i.fence, NULL::text AS after, NULL::text AS queue,
        NULL::text AS kind, NULL::jsonb AS payload, NULL::integer AS attempt, NULL::integer AS max_attempts, NULL::jsonb AS checkpoint,
        NULL::jsonb AS signals, NULL::text AS concurrency_key, NULL::text AS trace_parent, NULL::float8 AS wait_ms,
        NULL::text AS batch, NULL::int AS pos, NULL::integer AS attempt_timeout_ms, NULL::float8 AS deadline_in_ms
      FROM input i
      WHERE NOT EXISTS (SELECT 1 FROM done d WHERE d.id = i.id AND d.fence = i.fence)
      ${claimedNext}`
    const missedInRows = rows.filter((r) => r.tag === "missed")
    const missedItems = missedInRows.map((r) => ({ ...items[Number(r.ord)]!, runId: r.id }))
    // A run another process claimed in the ledger is completed there (its batch found by its span).
    const inLedger: ledger.LedgerCompletion = afterRows !== undefined
      ? yield* afterRows(missedItems)
      : refs === undefined || missedInRows.length === 0
      ? { missed: missedInRows.map((_, k) => k), successors: new Map() }
      : yield* ledger.complete(sql, s, missedItems, refs, undefined, next)
    const missed = inLedger.missed.map((k) => missedInRows[k]!)
    // Each successor goes to the (first) item whose run freed its slot, by position.
    const successors = new Map(
      rows.filter((r) => r.tag === "next").map((r) => [Number(r.ord), ledger.remember(refs, r)])
    )
    // Those the ledger's completion of missed runs claimed, by the item whose run freed the slot.
    for (const [k, successor] of inLedger.successors) successors.set(Number(missedInRows[k]!.ord), successor)
    const outcomes = items.map((i, ord): FinalizeOutcome => {
      const successor = successors.get(ord)
      return successor === undefined
        ? { _tag: "Finalized", runId: i.runId, fence: i.fence }
        : { _tag: "Finalized", runId: i.runId, fence: i.fence, next: successor }
    })
    if (missed.length === 0) return outcomes
    const diagnosed = yield* diagnose(sql, s, "complete", missed.map((r) => ({ runId: r.id, fence: num(r.fence) })))
    // Both sides name runs as Postgres prints their ids, whatever form the items used.
    const byKey = new Map(diagnosed.map((d) => [`${d.runId}:${d.presented}`, d]))
    for (const row of missed) {
      const item = items[Number(row.ord)]!
      const d = byKey.get(`${row.id}:${num(row.fence)}`)
      // Completed under this very fence: only this lease's holder could have done that, so this
      // is the same completion sent again (a retried statement whose first answer was lost).
      if (d !== undefined && d.stored === item.fence && d.state === "completed") continue
      outcomes[Number(row.ord)] = {
        _tag: "Rejected",
        runId: item.runId,
        fence: item.fence,
        storedFence: d?.stored ?? item.fence,
        state: d?.state ?? "missing"
      }
    }
    return outcomes
  })

/** Records a failed attempt: a retry after `retryDelayMs` while attempts remain, else failed. */
/** A run's error as JSON text: characters jsonb refuses are replaced, so the failure is always recorded. */
const errorText = (error: unknown): string | null => error === undefined ? null : Json.encodeDiagnostic(error)

export const fail = (sql: SqlClient.SqlClient, s: StoreSchema, request: FailRequest, refs?: ledger.LedgerRefs) => {
  const delay = sql`${request.retryDelayMs ?? null}::float8`
  const wantsRetry = sql`${delay} IS NOT NULL AND attempt < max_attempts`
  // No retry is scheduled at or past the run's deadline (by now()): the run fails for good, saying why.
  const stoppedByDeadline = sql`${wantsRetry} AND deadline <= now() + ${delay} * interval '1 millisecond'`
  const retrying = sql`${wantsRetry} AND NOT coalesce(deadline <= now() + ${delay} * interval '1 millisecond', false)`
  return guardedOne(
    sql,
    s,
    "fail",
    request,
    sql<{ state: RunState }>`
      WITH f AS (
        UPDATE ${s.runs(sql)} SET
          state = CASE WHEN ${retrying} THEN 'pending' ELSE 'failed' END,
          run_at = CASE WHEN ${retrying} THEN now() + ${delay} * interval '1 millisecond' ELSE run_at END,
          finished_at = CASE WHEN ${retrying} THEN NULL ELSE now() END,
          error = CASE WHEN ${stoppedByDeadline} THEN ${errorText(RunStorage.deadlineFailure(request.error))}::jsonb
            ELSE ${errorText(request.error)}::jsonb END,
          lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
        WHERE id = ${request.runId}::bigint AND fence = ${request.fence}::bigint AND state = 'running' COLLATE "C"
        RETURNING id, fence, state, lease_owner, run_at, error
      ), history AS (
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
        SELECT id, fence, CASE WHEN state = 'failed' THEN 'failed' ELSE 'retry_scheduled' END,
          jsonb_build_object('error', error, 'runAt', run_at)
        FROM f
      )${attemptLogs.withFailure(sql, s, request)}
      SELECT state FROM f`,
    refs
  ).pipe(
    Effect.map((row): FailOutcome =>
      row.state === "failed" ? { _tag: "Failed" } : { _tag: "RetryScheduled", delayMs: request.retryDelayMs ?? 0 }
    )
  )
}

/** Gives the run back at once, refunding the attempt: the run did not fail, its worker let go. */
export const release = (sql: SqlClient.SqlClient, s: StoreSchema, lease: LeaseKey, refs?: ledger.LedgerRefs) =>
  guardedOne(
    sql,
    s,
    "release",
    lease,
    sql<{ id: string }>`
      WITH r AS (
        UPDATE ${s.runs(sql)} SET
          state = 'pending', run_at = now(), attempt = greatest(attempt - 1, 0),
          lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
        WHERE id = ${lease.runId}::bigint AND fence = ${lease.fence}::bigint AND state = 'running' COLLATE "C"
        RETURNING id, fence, queue
      ), history AS (
        INSERT INTO ${s.events(sql)} (run_id, fence, kind) SELECT id, fence, 'released' FROM r
      )
      SELECT id::text AS id, pg_notify(${s.channel}, 'q:' || queue) FROM r`,
    refs
  ).pipe(Effect.asVoid)

/**
 * Ends the held attempt without failing it (`Run.snooze`): as `release`, the attempt refunded and
 * the lease and key slot let go (the row triggers hand the slot on and govern the run again), but
 * due at the database's `now()` + the delay. Workers are woken only when it is due at once.
 */
export const snooze = (sql: SqlClient.SqlClient, s: StoreSchema, request: SnoozeRequest, refs?: ledger.LedgerRefs) =>
  guardedOne(
    sql,
    s,
    "snooze",
    request,
    sql<{ id: string }>`
      WITH r AS (
        UPDATE ${s.runs(sql)} SET
          state = 'pending', run_at = now() + ${request.delayMs}::float8 * interval '1 millisecond',
          attempt = greatest(attempt - 1, 0), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
        WHERE id = ${request.runId}::bigint AND fence = ${request.fence}::bigint AND state = 'running' COLLATE "C"
        RETURNING id, fence, queue, run_at
      ), history AS (
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
        SELECT id, fence, 'snoozed', jsonb_build_object('runAt', run_at) FROM r
      )
      SELECT id::text AS id, CASE WHEN ${request.delayMs}::float8 = 0 THEN pg_notify(${s.channel}, 'q:' || queue) END FROM r`,
    refs
  ).pipe(Effect.asVoid)

export const checkpoint = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  lease: LeaseKey,
  value: unknown,
  refs?: ledger.LedgerRefs
) =>
  Effect.flatMap(Json.encode(value ?? null, "checkpoint", lease.runId), (encoded) =>
    guardedOne(
      sql,
      s,
      "checkpoint",
      lease,
      sql<{ id: string }>`
        UPDATE ${s.runs(sql)} SET checkpoint = ${encoded}::jsonb, updated_at = now()
        WHERE id = ${lease.runId}::bigint AND fence = ${lease.fence}::bigint AND state = 'running' COLLATE "C"
        RETURNING id::text AS id`,
      refs
    )).pipe(Effect.asVoid)

/** Suspends the run and releases its lease outright; the attempt is refunded (waiting is not failing). */
export const suspend = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  request: SuspendRequest,
  refs?: ledger.LedgerRefs
) => {
  const timeoutMs = request.timeout === undefined ? null : Duration.toMillis(request.timeout)
  const held = sql`id = ${request.runId}::bigint AND fence = ${request.fence}::bigint AND state = 'running' COLLATE "C"`
  return Effect.gen(function*() {
    const suspended = yield* inRow(
      sql,
      s,
      request,
      sql<{ id: string }>`
      WITH u AS (
        UPDATE ${s.runs(sql)} SET
          state = 'suspended', lease_owner = NULL, lease_expires_at = NULL,
          attempt = greatest(attempt - 1, 0),
          signal_name = ${request.signal}, signal_token = ${request.token},
          suspend_deadline = CASE WHEN ${timeoutMs}::float8 IS NULL THEN NULL
            ELSE now() + ${timeoutMs}::float8 * interval '1 millisecond' END,
          updated_at = now()
        -- An outcome delivered while the run was still running: nothing to wait for.
        WHERE ${held} AND signals -> ${request.signal}::text IS NULL
        RETURNING id, fence, signal_name, suspend_deadline
      ), history AS (
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
        SELECT id, fence, 'suspended', jsonb_build_object('signal', signal_name, 'deadline', suspend_deadline) FROM u
      )
      SELECT id::text AS id FROM u`,
      refs
    )
    if (suspended.length > 0) return { _tag: "Suspended" } satisfies SuspendOutcome as SuspendOutcome
    const delivered = yield* sql<{ outcome: SignalOutcome | null }>`
      SELECT signals -> ${request.signal}::text AS outcome FROM ${s.runs(sql)} WHERE ${held}`
    const outcome = delivered[0]?.outcome
    if (outcome !== undefined && outcome !== null) {
      return { _tag: "AlreadySignalled", outcome } satisfies SuspendOutcome as SuspendOutcome
    }
    const [diagnosis] = yield* diagnose(sql, s, "suspend", [request])
    return yield* Effect.fail(toError("suspend", diagnosis!))
  }).pipe(
    // The token's uniqueness is the database's to enforce; say so in the run's own terms.
    Effect.catchIf(
      (error): error is SqlError.SqlError =>
        error._tag === "SqlError" && error.reason._tag === "UniqueViolation" &&
        error.reason.constraint === "runs_signal_token",
      () => Effect.fail(new SignalTokenInUse({ runId: request.runId, token: request.token }))
    )
  )
}

/**
 * The caller's effect and the run's completion in one transaction. The fence is checked first so
 * a stale holder does no work, and again by the guarded completion, which decides: if it matches
 * nothing the transaction rolls back, the caller's writes with it.
 *
 * With the lease's `ttl`, the check also bounds the transaction's idle time (`idleBound`), at no
 * extra round trip. A transaction the server ended so (a silent holder's, or one whose effect sat
 * idle a whole TTL between statements) fails at its next statement or its commit: a
 * `StoreError` (or the caller's own statement's error), never a success, and nothing of it
 * committed; its runs are reclaimed by the next sweep once their lease has expired.
 */
export const completeInTransaction = <A, E, R>(
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  lease: LeaseKey,
  effect: Effect.Effect<A, E, R>,
  encodeResult: (a: A) => Exit.Exit<string, UnstorableValue>,
  completedRuns: CompletedRuns = "keep",
  refs?: ledger.LedgerRefs,
  ttl?: Duration.Duration
): Effect.Effect<A, E | FenceRejected | LeaseNotHeld | RunNotFound | UnstorableValue | StoreError, R> => {
  const bound = ttl === undefined ? sql`` : sql`, ${idleBound(sql, ttl)} AS idle_bound`
  const readFence = sql<{ fence: bigint; state: RunState }>`
    SELECT fence, state FROM ${s.runsNow(sql)} WHERE id = ${lease.runId}::bigint`
  // The first statement of the run's row transaction: the check, and the idle bound with it.
  const checkFence = sql<{ fence: bigint; state: RunState }>`
    SELECT fence, state${bound} FROM ${s.runsNow(sql)} WHERE id = ${lease.runId}::bigint`
  // The stored row decides, as `diagnose` reads it: gone is RunNotFound (a deleted completion), a
  // higher fence is FenceRejected, the same fence on a run no longer running is LeaseNotHeld.
  const rejection = (rows: ReadonlyArray<{ fence: bigint; state: RunState }>) =>
    Effect.fail(toError("transaction", {
      runId: lease.runId,
      presented: lease.fence,
      stored: rows[0] === undefined ? null : num(rows[0].fence),
      state: rows[0]?.state ?? null
    }))
  const check = Effect.flatMap(
    checkFence,
    (rows) =>
      rows[0] !== undefined && num(rows[0].fence) === lease.fence && rows[0].state === "running"
        ? Effect.void
        : rejection(rows)
  )
  // The run's key slot, if it holds one, is read before the completion and handed on in the same
  // statement (admit.ts › handOff), as a batched completion's are.
  const complete = (result: string) => {
    const completed = completedSet(sql, sql`${result}::jsonb`)
    const writes = completedRuns === "delete"
      ? sql`deleted AS (
        DELETE FROM ${s.runs(sql)}
        WHERE id = ${lease.runId}::bigint AND fence = ${lease.fence}::bigint AND state = 'running' COLLATE "C"
          AND idempotency_key IS NULL
        RETURNING id
      ), kept AS (
        -- A run with an idempotency key stays, completed (see CompletedRuns).
        UPDATE ${s.runs(sql)} SET ${completed}
        WHERE id = ${lease.runId}::bigint AND fence = ${lease.fence}::bigint AND state = 'running' COLLATE "C"
          AND idempotency_key IS NOT NULL
        RETURNING id
      ), forgotten AS (
        DELETE FROM ${s.events(sql)} WHERE run_id IN (SELECT id FROM deleted)
      ), ${attemptLogs.forgetting(sql, s)}${releasedHolds(sql, s, 1)}, done AS (
        SELECT id FROM deleted UNION ALL SELECT id FROM kept
      )`
      : sql`done AS (
        UPDATE ${s.runs(sql)} SET ${completed}
        WHERE id = ${lease.runId}::bigint AND fence = ${lease.fence}::bigint AND state = 'running' COLLATE "C"
        RETURNING id
      )`
    return sql<{ id: string }>`
      WITH released AS MATERIALIZED (
        SELECT id, ${sql.literal(heldSlotColumns("r"))} FROM ${s.runs(sql)} r
        WHERE id = ${lease.runId}::bigint AND key_slot IS NOT NULL
      ), ${writes}, freeing AS (
        SELECT r.*, r.id AS after, true AS hand FROM released r JOIN done d ON d.id = r.id
      ), ${handOff(sql, s)}
      SELECT id::text AS id FROM done`
  }
  const body = Effect.gen(function*() {
    yield* check
    // The caller's own failures are told apart from the store's (its SqlErrors are its own).
    const value = yield* Effect.mapError(effect, (error) => new CallerFailure({ error }))
    const result = yield* encodeResult(value)
    const done = yield* complete(result)
    // Superseded between the check and the completion: say why, and roll back.
    if (done.length === 0) return yield* Effect.flatMap(readFence, rejection)
    return value
  })
  // A run this store claimed in the ledger completes there, in the caller's transaction, as one
  // completion batch. Its batch row is not held while the caller's effect runs: a sweep, or a
  // hold of another run of the batch, goes on meanwhile (a long transaction delays no one else's
  // reclaim). The completion decides, under the batch's lock (ledger.ts): if the run was moved to
  // its row meanwhile (a signal delivered, say), the row's guarded completion decides instead.
  // The idle bound set by the check lets the transaction go if the holder falls silent.
  const inLedger = (ref: ledger.HeldRef) =>
    Effect.gen(function*() {
      const held = yield* sql`
      SELECT 1 AS held${bound} FROM ${s.claimBatches(sql)} c
      WHERE c.batch = ${ref.batch}::bigint AND c.settled_at IS NULL AND c.ids[${ref.pos}::int] = ${lease.runId}::bigint
        AND c.fences[${ref.pos}::int] = ${lease.fence}::bigint AND ${lease.runId}::bigint <> ALL (c.closed)
        AND NOT EXISTS (SELECT 1 FROM ${
        s.completionBatches(sql)
      } d WHERE d.claim_batch = c.batch AND ${lease.runId}::bigint = ANY (d.ids))`
      // Not open in its batch any more (moved to its row, or superseded there): the row decides.
      if (held.length === 0) return yield* Effect.fail(new MovedToRow())
      const value = yield* Effect.mapError(effect, (error) => new CallerFailure({ error }))
      const result = yield* encodeResult(value)
      const { missed } = yield* ledger.complete(sql, s, [{ ...lease, result }], refs!)
      if (missed.length === 0) return value
      const done = yield* complete(result)
      if (done.length === 0) return yield* Effect.flatMap(readFence, rejection)
      return value
    })
  // Otherwise the run's row decides; a run still in the ledger is moved there first, outside the
  // caller's transaction (a hold inside it would keep its whole batch's completions waiting).
  const inRows = Effect.suspend(() =>
    Effect.andThen(
      Effect.tap(ledger.hold(sql, s, [lease.runId]), () => Effect.sync(() => refs?.delete(lease))),
      transact(sql, body)
    )
  )
  // The reference is looked up when the transaction runs; the transaction is READ COMMITTED
  // whatever the caller's context asks, as the ledger's completion needs (docs/adr/0022).
  const transaction = Effect.suspend(() => {
    const ref = refs?.get(lease)
    return ref === undefined
      ? inRows
      : transact(sql, inLedger(ref)).pipe(
        Effect.catchIf((error): error is MovedToRow => error instanceof MovedToRow, () => inRows)
      )
  }).pipe(readCommitted)
  return transaction.pipe(
    StoreErrors.refail("transaction"),
    // The history row for a rejected transaction is written after the rollback, on its own.
    Effect.tapError((error) =>
      (error as { _tag?: unknown })._tag === "FenceRejected"
        ? Effect.ignore(diagnose(sql, s, "transaction", [lease]))
        : Effect.void
    ),
    Effect.catchIf(
      (error): error is CallerFailure => error instanceof CallerFailure,
      (failure) => Effect.fail(failure.error as E)
    )
  ) as Effect.Effect<A, E | FenceRejected | LeaseNotHeld | RunNotFound | UnstorableValue | StoreError, R>
}

/** A fenced transaction's run found moved from the ledger to its row: the row's transaction follows. */
class MovedToRow extends Schema.TaggedError<MovedToRow>()("MovedToRow", {}) {}

/** A failure of the caller's effect inside a fenced transaction, kept apart from the store's own. */
class CallerFailure extends Schema.TaggedError<CallerFailure>()("CallerFailure", { error: Schema.Unknown }) {}

/** What a fenced transaction's own statements and checks fail with. */
const isTransactionFailure = (defect: unknown): boolean =>
  SqlError.isSqlError(defect) || defect instanceof CallerFailure || defect instanceof MovedToRow ||
  defect instanceof FenceRejected ||
  defect instanceof LeaseNotHeld || defect instanceof RunNotFound ||
  (defect as { _tag?: unknown } | null)?._tag === "UnstorableValue"

/**
 * `sql.withTransaction`, but a transaction whose connection was lost fails as it would have, not
 * with defects. Lost (ended by the server's idle bound, or reset), the connection fails the
 * driver's ROLLBACK too, and a failing finalizer turns every failure of the transaction into a
 * defect: the caller would see a defect for what is a lost connection. Nothing of the transaction
 * was committed (the server ends a transaction with its session), so its first failure, the one
 * that started the rollback, is given back as a failure; anything else (a real defect, an
 * interruption) stays as it was.
 */
const transact = <A, E, R>(
  sql: SqlClient.SqlClient,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | SqlError.SqlError, R> =>
  Effect.catchCause(sql.withTransaction(effect), (cause) => {
    const defects = cause.reasons.map((reason) => Cause.isDieReason(reason) ? reason.defect : undefined)
    const lost = defects.length > 0 && defects.every((d) => d !== undefined && isTransactionFailure(d)) &&
      defects.slice(1).some(SqlError.isSqlError)
    return lost ? Effect.fail(defects[0] as E | SqlError.SqlError) : Effect.failCause(cause)
  })
