/**
 * Attempt logs: the Effect log lines a handler wrote during one attempt (`Effect.log`,
 * `Effect.logInfo`, `logWarning`, `logError`, ... at or above the minimum log level), with their
 * level, time, message and annotations, kept in the store with the attempt. A failed attempt's
 * lines are written with its failure, in the same statement; a completed attempt's only when its
 * handler asks for them (`Handler.make({ keepLogs: "always" })`). Bounded: the last `maxLines`
 * lines of an attempt and `maxCharacters` of text in all, each message cut at
 * `maxLineCharacters`; what was left out is counted (`dropped`, `cut`), never silently lost.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { InvalidConfig } from "./Errors.js"

/**
 * Which attempts' lines are kept: `"failed"` (the default) those of failed attempts,
 * `"always"` those of completed attempts too, `"never"` none (nothing is captured: a handler
 * whose lines must not be stored, such as one that logs secrets).
 *
 * @category models
 */
export type KeepLogs = "failed" | "always" | "never"

/** Most lines kept of one attempt: the last ones (those nearest its end). @category bounds */
export const maxLines = 100

/** Most characters of text kept of one attempt, messages and annotations together. @category bounds */
export const maxCharacters = 16_384

/** Most characters kept of one line's message; the rest is cut and the line marked. @category bounds */
export const maxLineCharacters = 2_048

/** One log line as kept. @category models */
export interface LogLine {
  /** Effect's log level: `Fatal`, `Error`, `Warn`, `Info`, `Debug` or `Trace`. */
  readonly level: string
  readonly at: Date
  /** The message as text (values that are not strings as JSON), a cause's rendering appended. */
  readonly message: string
  /** The fiber's log annotations (`Effect.annotateLogs`), each value as text. */
  readonly annotations: Readonly<Record<string, string>>
  /** Characters cut off the end of the message (0 when whole). */
  readonly cut: number
}

/** An attempt's lines as a worker hands them to the store. @category models */
export interface AttemptLogInput {
  /** The attempt the lines were logged in (as its handler saw it: `CurrentRun.attempt`). */
  readonly attempt: number
  /** Oldest first. */
  readonly lines: ReadonlyArray<LogLine>
  /** Earlier lines of the attempt left out by the bounds. */
  readonly dropped: number
}

/** An attempt's lines as the store keeps them: one per claim (run id and fence). @category models */
export interface AttemptLog extends AttemptLogInput {
  readonly runId: string
  /** The fence of the claim the attempt ran under: one attempt's, whatever retries and resumes did to the attempt count. */
  readonly fence: number
  /** How the attempt ended. */
  readonly outcome: "failed" | "completed"
  /** When it was written, by the store's clock. */
  readonly at: Date
}

/** Checks a handler's `keepLogs`. @category validation */
export const check = (kind: string, keepLogs: unknown): Effect.Effect<KeepLogs, InvalidConfig> =>
  keepLogs === undefined
    ? Effect.succeed("failed")
    : keepLogs === "failed" || keepLogs === "always" || keepLogs === "never"
    ? Effect.succeed(keepLogs)
    : Effect.fail(
      new InvalidConfig({
        option: "keepLogs",
        issue: `${JSON.stringify(keepLogs)} (handler ${kind}) is not "failed", "always" or "never"`
      })
    )

/** A log line as one line of text: time, level, message, annotations, and what was cut. @category formatting */
export const lineText = (line: LogLine): string => {
  const annotations = Object.entries(line.annotations).map(([key, value]) => ` ${key}=${value}`).join("")
  const cut = line.cut > 0 ? ` [${line.cut} more characters cut]` : ""
  return `${line.at.toISOString()} ${line.level.toUpperCase()} ${line.message}${cut}${annotations}`
}
