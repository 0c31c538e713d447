/**
 * How every store keeps attempt logs (`RunStore.fail`, `RunStore.completeBatch`,
 * `RunStore.keepAttemptLog`): the bounds applied to what it is given, and the lines as JSON text.
 * For store implementers (`@leasehold/core/store`); the worker bounds its buffer by the same rule.
 *
 * @since 0.1.0
 */
import { type AttemptLogInput, type LogLine, maxCharacters, maxLineCharacters, maxLines } from "./AttemptLogs.js"
import * as Json from "./Json.js"

const sizeOf = (line: LogLine): number => {
  let size = line.message.length
  for (const key in line.annotations) size += key.length + line.annotations[key]!.length
  return size
}

const cutLine = (line: LogLine): LogLine => {
  if (line.message.length <= maxLineCharacters) return line
  return {
    ...line,
    message: line.message.slice(0, maxLineCharacters),
    cut: line.cut + line.message.length - maxLineCharacters
  }
}

/**
 * The lines within the bounds: each message cut at `maxLineCharacters`, then the newest lines
 * that fit in `maxLines` and `maxCharacters`; the older ones are counted in `dropped`. Both
 * stores apply it to what they are given, so no caller can store more.
 *
 * @category bounds
 */
export const bound = (log: AttemptLogInput): AttemptLogInput => {
  const kept: Array<LogLine> = []
  let size = 0
  let index = log.lines.length - 1
  for (; index >= 0 && kept.length < maxLines; index--) {
    const line = cutLine(log.lines[index]!)
    size += sizeOf(line)
    if (size > maxCharacters) break
    kept.push(line)
  }
  const dropped = log.dropped + index + 1
  return { attempt: log.attempt, lines: kept.reverse(), dropped }
}

/**
 * The lines as the JSON text a store keeps (times as ISO strings); never failing on a character
 * `jsonb` refuses (it becomes U+FFFD: `Json.encodeDiagnostic`), so a line cannot keep a failure
 * from being recorded.
 *
 * @category encoding
 */
export const encodeLines = (lines: ReadonlyArray<LogLine>): string =>
  Json.encodeDiagnostic(
    lines.map((line) => ({
      level: line.level,
      at: line.at.toISOString(),
      message: line.message,
      annotations: line.annotations,
      cut: line.cut
    }))
  )

/** The lines a store kept, as `encodeLines` wrote them. @category decoding */
export const decodeLines = (value: unknown): Array<LogLine> =>
  (Array.isArray(value) ? value : []).map((line: Record<string, unknown>) => ({
    level: String(line["level"]),
    at: new Date(String(line["at"])),
    message: String(line["message"]),
    annotations: (line["annotations"] ?? {}) as Record<string, string>,
    cut: Number(line["cut"] ?? 0)
  }))
