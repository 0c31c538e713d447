/**
 * Turns a command's failure into one readable line and an exit code: 2 for usage errors, 1 for
 * everything else. No stack trace for a user's mistake.
 *
 * @since 0.1.0
 */
import { isValueRefused } from "@leasehold/core"
import { Cause, Predicate } from "effect"
import { CliError } from "effect/cli"
import { SqlError } from "effect/sql"
import { UsageError } from "./Flags.js"

// One line, whitespace collapsed: a schema issue spans several indented lines.
const firstLine = (text: string) =>
  (text.split("\n").find((l) => l.trim().length > 0) ?? text).trim().replace(/\s+/g, " ")

/** What to show for an error: the user-facing message effect/cli would render, else its message. */
const messageOf = (error: unknown): string =>
  firstLine(
    (Predicate.isObject(error) ? CliError.getUserMessage(error) : undefined) ??
      (Predicate.hasProperty(error, "message") ? String(error.message) : String(error))
  )

/**
 * A mistake in how the command was called: effect/cli's parse and validation errors (but not a
 * handler's `UserError`), the commands' own `UsageError`, a payload or kind the tasks reject, an
 * option out of range, a value JSON cannot hold, a delete of running runs or of another count than
 * confirmed, and a value the database refused (`isValueRefused`). Leasehold's errors are matched by tag: a
 * `--tasks` module may bring its own copy of `@leasehold/core`.
 */
const isUsageError = (error: unknown): boolean =>
  (CliError.isCliError(error) && error._tag !== "UserError") ||
  error instanceof UsageError ||
  ["InvalidPayload", "UnknownKind", "InvalidConfig", "UnstorableValue", "RunsBusy", "DeleteCountChanged"].some((tag) =>
    Predicate.isTagged(error, tag)
  ) ||
  isValueRefused(error)

/** The reason's own cause (the driver's or server's message) says what actually went wrong. */
const explainSql = (error: SqlError.SqlError): string => {
  const { reason } = error
  const detail = Predicate.hasProperty(reason.cause, "message") ? reason.cause.message : reason.message ?? reason._tag
  const connecting = /Failed to connect|Invalid connection URL/.test(String(reason.message))
  return `${connecting ? "cannot connect to the database" : "database error"}: ${firstLine(String(detail))}`
}

/** The driver's error behind a failure, when there is one (a store wraps it in its `StoreError`). */
const sqlErrorOf = (error: unknown): SqlError.SqlError | undefined =>
  SqlError.isSqlError(error)
    ? error
    : Predicate.isTagged(error, "StoreError") && Predicate.hasProperty(error, "cause") &&
        SqlError.isSqlError(error.cause)
    ? error.cause
    : undefined

export const describeFailure = (cause: Cause.Cause<unknown>): { code: number; message: string | undefined } => {
  const error = Cause.squash(cause)
  if (CliError.isCliError(error) && error._tag === "ShowHelp") {
    // Help was printed already; with errors it was a bad invocation.
    const [first] = error.errors
    return first === undefined ? { code: 0, message: undefined } : { code: 2, message: messageOf(first) }
  }
  if (isValueRefused(error)) {
    const sql = sqlErrorOf(error)
    return {
      code: 2,
      message: `the database refused a value: ${
        sql === undefined ? messageOf(error) : explainSql(sql).replace(/^database error: /, "")
      }`
    }
  }
  if (isUsageError(error)) return { code: 2, message: messageOf(error) }
  const sql = sqlErrorOf(error)
  if (sql !== undefined) return { code: 1, message: explainSql(sql) }
  return { code: 1, message: messageOf(error) }
}
