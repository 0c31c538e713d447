/**
 * What the store's own transactions share: the isolation level the ledger's lock-then-decide
 * needs, and a bound on how long a transaction may sit idle holding what it locked.
 */
import { Duration, Effect } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import { sqlState } from "../../StoreErrors.js"

/** The most `idle_in_transaction_session_timeout` takes (milliseconds, a 32-bit integer). */
const maxIdleBoundMs = 2_147_483_647

/**
 * A select-list expression that bounds the idle time of the transaction it runs in to `ttl`: the
 * server ends a transaction (and its session) that sits idle that long between two statements, so
 * a holder gone silent mid-transaction (its socket dropped, never reset) lets its batch row and
 * row locks go about one lease TTL after its last statement; TCP keepalives alone take hours.
 * Transaction-local (`set_config(..., true)`): it ends with the transaction, and a pooler in
 * transaction mode hands the server connection on without it. A stricter bound the session
 * already has stays.
 */
export const idleBound = (sql: SqlClient.SqlClient, ttl: Duration.Duration) => {
  const ms = idleBoundMs(ttl)
  return sql`set_config('idle_in_transaction_session_timeout',
    least(nullif(extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000, 0), ${ms}::int)::int::text,
    true)`
}

/** A bound as `idle_in_transaction_session_timeout` takes it: whole milliseconds, at least 1. */
export const idleBoundMs = (ttl: Duration.Duration): number =>
  Math.min(maxIdleBoundMs, Math.max(1, Math.ceil(Duration.toMillis(ttl))))

/**
 * The transaction level the ledger's writers need (docs/adr/0022): READ COMMITTED, where each
 * statement sees what committed before it began, so a decision taken after a lock was granted sees
 * every write the lock waited for. A session or caller asking for REPEATABLE READ (its snapshot taken
 * at the first statement, before the wait) would decide from before the wait.
 */
export const readCommitted = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.provideService(effect, SqlClient.BeginTransaction, "BEGIN ISOLATION LEVEL READ COMMITTED")

/** What `lock_claim_batches` (migration 0030) answers in a transaction stricter than READ COMMITTED. */
const notReadCommitted = "LH001"

/**
 * A statement that locks claim batches through `lock_claim_batches` and decides after the locks
 * are granted: one round trip, where the ledger's writers used to run BEGIN, a lock, the decision
 * and COMMIT. In a session whose transactions default to a stricter level the function refuses
 * (its read would see the statement's snapshot, taken before the wait), and the statement runs
 * again in a READ COMMITTED transaction of its own. Inside a caller's transaction it runs as part
 * of it: the store's own are READ COMMITTED (`readCommitted`).
 */
export const lockingStatement = <A, E extends SqlError.SqlError, R>(
  sql: SqlClient.SqlClient,
  statement: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.catchIf(
    statement,
    (error) => sqlState(error) === notReadCommitted,
    () => readCommitted(sql.withTransaction(statement))
  ) as Effect.Effect<A, E, R>
