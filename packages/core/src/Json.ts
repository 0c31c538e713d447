/**
 * JSON text for values the store keeps (results, checkpoints, payloads). Encoding happens before a
 * value reaches a statement, so a value JSON cannot hold is a typed failure of its own run or
 * call, never a failed statement that takes others down with it. "JSON" here is what PostgreSQL's
 * `jsonb` accepts: no string (nor key) may hold a NUL or an unpaired surrogate, which JSON text can
 * spell (`\u0000`, `\ud800`) but `jsonb` refuses.
 *
 * @since 0.1.0
 */
import { Exit } from "effect"
import { UnstorableValue } from "./Errors.js"

// `JSON.stringify` writes a NUL as `\u0000` and an unpaired surrogate as `\udXXX`; neither escape
// can appear otherwise, except after an escaped backslash (an odd run of backslashes).
const refusedEscape = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/i
const refusedEscapes = new RegExp(refusedEscape.source, "gi")
const refusedChar = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

const describeChar = (text: string): string =>
  text.includes("\u0000") ? "a NUL (\\u0000)" : "an unpaired surrogate (not Unicode)"

const pathPart = (key: string): string => /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`

/** Where in a parsed value the first string or key `jsonb` refuses is, as `$.a[0]["b c"]`. */
const refusedAt = (value: unknown, path: string): { path: string; text: string } | undefined => {
  if (typeof value === "string") return refusedChar.test(value) ? { path, text: value } : undefined
  if (Array.isArray(value)) {
    for (const [index, item] of value.entries()) {
      const found = refusedAt(item, `${path}[${index}]`)
      if (found !== undefined) return found
    }
    return undefined
  }
  if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      if (refusedChar.test(key)) return { path: `${path} (a key)`, text: key }
      const found = refusedAt(item, `${path}${pathPart(key)}`)
      if (found !== undefined) return found
    }
  }
  return undefined
}

/**
 * The JSON text of `value` (`undefined` and functions become `null`), or `UnstorableValue`
 * naming what it was and why (a BigInt, a cycle, a throwing `toJSON`, a string holding a NUL or
 * an unpaired surrogate, with the path to it).
 *
 * @category encoding
 */
export const encode = (value: unknown, what: string, runId?: string): Exit.Exit<string, UnstorableValue> => {
  const unstorable = (issue: string) =>
    Exit.fail(new UnstorableValue({ what, ...(runId === undefined ? {} : { runId }), issue }))
  let text: string
  try {
    text = JSON.stringify(value) ?? "null"
  } catch (error) {
    return unstorable(error instanceof Error ? error.message : String(error))
  }
  // Most texts hold no escape at all: one substring search, no regular expression.
  if (!text.includes("\\u") || !refusedEscape.test(text)) return Exit.succeed(text)
  const found = refusedAt(JSON.parse(text), "$")
  return unstorable(
    found === undefined
      ? "holds a character PostgreSQL's jsonb cannot store"
      : `${found.path} holds ${describeChar(found.text)}, which PostgreSQL's jsonb cannot store`
  )
}

/**
 * The JSON text of a diagnostic value (a run's error), never failing on characters `jsonb`
 * refuses: a NUL or an unpaired surrogate becomes U+FFFD, so an error's own text cannot keep the
 * failure from being recorded.
 *
 * @category encoding
 */
export const encodeDiagnostic = (value: unknown): string => {
  const text = JSON.stringify(value) ?? "null"
  return text.includes("\\u") && refusedEscape.test(text)
    ? text.replace(refusedEscapes, (match) => `${match.slice(0, -6)}\\ufffd`)
    : text
}
