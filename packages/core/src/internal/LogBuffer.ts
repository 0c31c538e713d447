/**
 * The log lines of one attempt as they are captured (LogCapture): a ring of the attempt's last
 * `AttemptLogs.maxLines` lines, counting those it overwrote; the text bounds are applied once,
 * when the lines are taken.
 *
 * @internal
 */
import * as AttemptLogs from "../AttemptLogs.js"
import * as AttemptLogStorage from "../AttemptLogStorage.js"

/** A logged value as text: a string as it is, anything else as JSON. */
export const valueText = (value: unknown): string => {
  if (typeof value === "string") return value
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

const annotationsText = (annotations: Readonly<Record<string, unknown>>): Record<string, string> => {
  const text: Record<string, string> = {}
  for (const key in annotations) text[key] = valueText(annotations[key])
  return text
}

/** A line as captured: its annotations formatted only when the attempt's lines are taken. */
export interface CapturedLine {
  readonly level: string
  readonly at: Date
  readonly message: string
  /** Effect's annotations record (replaced, never changed, by each `annotateLogs`): formatted when taken. */
  readonly annotations: Readonly<Record<string, unknown>>
}

/** The last `AttemptLogs.maxLines` lines of one attempt. */
export class LogBuffer {
  readonly #lines: Array<CapturedLine> = []
  /** Where the next line goes once the ring is full (its oldest line). */
  #next = 0
  #dropped = 0

  add(line: CapturedLine): void {
    if (this.#lines.length < AttemptLogs.maxLines) {
      this.#lines.push(line)
      return
    }
    this.#lines[this.#next] = line
    this.#next = (this.#next + 1) % AttemptLogs.maxLines
    this.#dropped++
  }

  /** The attempt's lines, oldest first, within the bounds (`AttemptLogStorage.bound`). */
  take(attempt: number): AttemptLogs.AttemptLogInput {
    const ordered = this.#lines.slice(this.#next).concat(this.#lines.slice(0, this.#next))
    return AttemptLogStorage.bound({
      attempt,
      dropped: this.#dropped,
      lines: ordered.map((line) => ({
        level: line.level,
        at: line.at,
        message: line.message,
        annotations: annotationsText(line.annotations),
        cut: 0
      }))
    })
  }
}
