/**
 * A test that fails with a database error says what the database said, in one line: the error's
 * message with the server's own words and SQLSTATE, instead of every field of `SqlError`, its
 * reason and the driver's error printed out (by vitest's report and by @effect/vitest's log of
 * the failure). Loaded in every test worker (vitest.config.ts, `setupFiles`).
 */
import { SqlError } from "effect/sql"
import { inspect } from "node:util"

type Reason = SqlError.SqlError["reason"]

/** `<reason>: <message>: <the server's message> (SQLSTATE <code>)`, from what is there. */
export const describeReason = (reason: Reason): string => {
  const driver = reason.cause as { readonly message?: unknown; readonly code?: unknown } | null | undefined
  const message = reason.message ?? ""
  const said = typeof driver?.message === "string" && driver.message !== message ? `: ${driver.message}` : ""
  const code = typeof driver?.code === "string" ? ` (SQLSTATE ${driver.code})` : ""
  return `${reason._tag}${message === "" ? "" : `: ${message}`}${said}${code}`
}

const oneLine = (prototype: object, text: (self: any) => string) => {
  const target = prototype as Record<PropertyKey, unknown>
  // Read by Node's inspect: Effect's logger prints a failure's reason and cause with it.
  target[inspect.custom] = function(this: unknown) {
    return text(this)
  }
  // Read by vitest when it reports the failure. Its cause is in the message already: the
  // read-only `cause` keeps vitest from adding the chain back.
  target.toJSON = function(this: Error) {
    const json = {
      name: this.name,
      message: text(this),
      stack: `${text(this)}\n${(this.stack ?? "").split("\n").slice(1).join("\n")}`
    }
    return Object.defineProperty(json, "cause", { value: undefined, enumerable: false, writable: false })
  }
}

oneLine(SqlError.SqlError.prototype, (self: SqlError.SqlError) => `SqlError: ${describeReason(self.reason)}`)
for (
  const reason of [
    SqlError.ConnectionError,
    SqlError.AuthenticationError,
    SqlError.AuthorizationError,
    SqlError.SqlSyntaxError,
    SqlError.UniqueViolation,
    SqlError.ConstraintError,
    SqlError.DeadlockError,
    SqlError.SerializationError,
    SqlError.LockTimeoutError,
    SqlError.StatementTimeoutError,
    SqlError.UnknownError
  ]
) oneLine(reason.prototype, (self: Reason) => describeReason(self))
