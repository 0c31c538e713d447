/**
 * The driver's errors stop here: every `SqlError` a statement fails with becomes the core's
 * `StoreError`, carrying the driver's classification as its reason (the role `PersistenceError`
 * plays in Effect's cluster storage).
 *
 * @since 0.1.0
 */
import { StoreError } from "@leasehold/core"
import { Effect, Schema } from "effect"
import { SqlError } from "effect/sql"

/**
 * The SQLSTATEs with which PostgreSQL refuses a value rather than fails: a NUL in text (22021) or
 * JSON (22P05), JSON it cannot read (22P02), a number or interval out of range (22003, 22008,
 * 22015), a string too long (22001), an index entry or row too large (54000). The statement wrote
 * nothing, and sending it again cannot succeed: the caller's input is at fault.
 *
 * @category errors
 */
export const valueRefusedCodes: ReadonlySet<string> = new Set([
  "22021",
  "22P05",
  "22P02",
  "22003",
  "22008",
  "22015",
  "22001",
  "54000"
])

/**
 * The SQLSTATE with which PostgreSQL ends a session whose transaction sat idle longer than
 * `idle_in_transaction_session_timeout` (a fenced transaction sets its lease TTL there): the
 * transaction was rolled back.
 *
 * @category errors
 */
export const idleInTransactionTimeoutCode = "25P03"

/** The SQLSTATE behind a driver error, when the server sent one. */
export const sqlState = (error: SqlError.SqlError): string | undefined => {
  const code = (error.reason.cause as { readonly code?: unknown } | undefined)?.code
  return typeof code === "string" ? code : undefined
}

/**
 * The `StoreError` for a failed statement of `operation`. A value PostgreSQL refuses is reason
 * `ValueRefused` (`valueRefusedCodes`): the checks before each statement (`Limits`, `Json`) are
 * meant to catch such input first, this is the line behind them. A transaction the server ended
 * for sitting idle too long is reason `TransactionIdleTimeout` (`idleInTransactionTimeoutCode`).
 *
 * @category errors
 */
export const fromSql = (operation: string, error: SqlError.SqlError): StoreError => {
  const code = sqlState(error)
  return code !== undefined && valueRefusedCodes.has(code)
    ? new StoreError({ operation, reason: "ValueRefused", cause: error })
    : code === idleInTransactionTimeoutCode
    ? new StoreError({ operation, reason: "TransactionIdleTimeout", cause: error })
    : new StoreError({ operation, reason: error.reason._tag, cause: error })
}

/** A row that does not have the shape the store expects (a schema edited by hand, a newer store). @category errors */
export class MalformedRow extends Schema.TaggedError<MalformedRow>()("MalformedRow", { message: Schema.String }) {}

type DriverError = SqlError.SqlError | MalformedRow

const isDriverError = (error: unknown): error is DriverError =>
  SqlError.isSqlError(error) || error instanceof MalformedRow

/** Maps the `SqlError`s (and malformed rows) of `effect` to `StoreError`; every other failure passes through. @category errors */
export const refail =
  (operation: string) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, DriverError> | StoreError, R> =>
    Effect.catchIf(
      effect,
      isDriverError as (e: E) => e is Extract<E, DriverError>,
      (error: DriverError) =>
        Effect.fail(
          error instanceof MalformedRow
            ? new StoreError({ operation, reason: "MalformedRow", cause: error })
            : fromSql(operation, error)
        )
    ) as Effect.Effect<A, Exclude<E, DriverError> | StoreError, R>
