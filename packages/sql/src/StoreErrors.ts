/**
 * The driver's errors stop here: every `SqlError` a statement fails with becomes the core's
 * `StoreError`, carrying the driver's classification as its reason (the role `PersistenceError`
 * plays in Effect's cluster storage).
 *
 * @since 0.1.0
 */
import { StoreError } from "@leasehold/core"
import { Effect } from "effect"
import { SqlError } from "effect/sql"

/** The `StoreError` for a failed statement of `operation`. @category errors */
export const fromSql = (operation: string, error: SqlError.SqlError): StoreError =>
  new StoreError({ operation, reason: error.reason._tag, cause: error })

/** Maps the `SqlError`s of `effect` to `StoreError`; every other failure passes through. @category errors */
export const refail = (operation: string) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, SqlError.SqlError> | StoreError, R> =>
  Effect.catchIf(
    effect,
    SqlError.isSqlError as (e: E) => e is Extract<E, SqlError.SqlError>,
    (error) => Effect.fail(fromSql(operation, error))
  ) as Effect.Effect<A, Exclude<E, SqlError.SqlError> | StoreError, R>
