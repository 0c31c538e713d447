/**
 * The driver's errors stop here: every `SqlError` a statement fails with becomes the core's
 * `StoreError`, carrying the driver's classification as its reason (the role `PersistenceError`
 * plays in Effect's cluster storage).
 *
 * @since 0.1.0
 */
import { StoreError } from "@leasehold/core"
import { Data, Effect } from "effect"
import { SqlError } from "effect/sql"

/** The `StoreError` for a failed statement of `operation`. @category errors */
export const fromSql = (operation: string, error: SqlError.SqlError): StoreError =>
  new StoreError({ operation, reason: error.reason._tag, cause: error })

/** A row that does not have the shape the store expects (a schema edited by hand, a newer store). @category errors */
export class MalformedRow extends Data.TaggedError("MalformedRow")<{ readonly message: string }> {}

type DriverError = SqlError.SqlError | MalformedRow

const isDriverError = (error: unknown): error is DriverError => SqlError.isSqlError(error) || error instanceof MalformedRow

/** Maps the `SqlError`s (and malformed rows) of `effect` to `StoreError`; every other failure passes through. @category errors */
export const refail = (operation: string) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, DriverError> | StoreError, R> =>
  Effect.catchIf(
    effect,
    isDriverError as (e: E) => e is Extract<E, DriverError>,
    (error: DriverError) =>
      Effect.fail(
        error instanceof MalformedRow ? new StoreError({ operation, reason: "MalformedRow", cause: error }) : fromSql(operation, error)
      )
  ) as Effect.Effect<A, Exclude<E, DriverError> | StoreError, R>
