/**
 * Turns a command's failure into one readable line and an exit code: 2 for usage errors, 1 for
 * everything else. No stack trace for a user's mistake.
 *
 * @since 0.1.0
 */
import { Cause } from "effect"

const usageTags = new Set([
  "UsageError",
  "UnrecognizedOption",
  "DuplicateOption",
  "MissingOption",
  "MissingArgument",
  "UnexpectedArgument",
  "InvalidValue",
  "UnknownSubcommand",
  "ValidationError",
  "ShowHelp",
  "InvalidPayload",
  "UnknownKind"
])

// One line, whitespace collapsed: a schema issue spans several indented lines.
const firstLine = (text: string) =>
  (text.split("\n").find((l) => l.trim().length > 0) ?? text).trim().replace(/\s+/g, " ")

/** The reason's own cause (the driver's or server's message) says what actually went wrong. */
const explainSql = (error: any): string => {
  const reason = error?.reason
  const detail = reason?.cause?.message ?? reason?.message ?? reason?._tag
  const connecting = /Failed to connect|Invalid connection URL/.test(String(reason?.message))
  const prefix = connecting ? "cannot connect to the database" : "database error"
  return `${prefix}${detail ? `: ${firstLine(String(detail))}` : ""}`
}

export const describeFailure = (cause: Cause.Cause<unknown>): { code: number; message: string | undefined } => {
  const error: any = Cause.squash(cause)
  const tag: string | undefined = error?._tag
  if (tag === "ShowHelp") {
    // Help was printed already; with errors it was a bad invocation.
    const errors = error.errors ?? []
    return { code: errors.length > 0 ? 2 : 0, message: errors.length > 0 ? firstLine(String(errors[0]?.message ?? errors[0])) : undefined }
  }
  if (tag !== undefined && usageTags.has(tag)) return { code: 2, message: firstLine(String(error.message)) }
  if (tag === "SqlError") return { code: 1, message: explainSql(error) }
  if (error instanceof Error || typeof error?.message === "string") return { code: 1, message: firstLine(String(error.message)) }
  return { code: 1, message: firstLine(String(error)) }
}
