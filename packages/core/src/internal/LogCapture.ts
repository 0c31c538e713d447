/**
 * The capture of a run's log lines (`AttemptLogs`): one `Logger` for the whole worker, added to the
 * loggers of the run fibers it starts, that reads the run a line belongs to from the fiber's own
 * context (its `CurrentRun`, which the worker provides to the handler and every fiber it forks)
 * and appends the line to that attempt's buffer: a ring of the last `AttemptLogs.maxLines` lines,
 * made on the attempt's first line. Lines of fibers that run no handler are ignored at the cost of
 * one context lookup. The text bounds are applied once, when the attempt's lines are taken.
 *
 * @internal
 */
import { Cause, Context, Logger, References } from "effect"
import { CurrentRun } from "../CurrentRun.js"
import { LogBuffer, valueText } from "./LogBuffer.js"
import * as Settlement from "./Settlement.js"

const messageText = (message: unknown, cause: Cause.Cause<unknown>): string => {
  const parts = Array.isArray(message) ? message : [message]
  const text = parts.length === 1 && typeof parts[0] === "string" ? parts[0] : parts.map(valueText).join(" ")
  return cause.reasons.length === 0 ? text : `${text}${text === "" ? "" : "\n"}${Cause.pretty(cause)}`
}

/** The worker's capturing logger: a line goes to the buffer of the run whose fiber logged it. */
export const logger: Logger.Logger<unknown, void> = Logger.make(({ cause, date, fiber, logLevel, message }) => {
  const current = Context.getOrUndefined(fiber.context, CurrentRun)
  if (current === undefined) return
  const lease = Settlement.leaseOf(current)
  if (lease === undefined || lease.keepLogs === "never") return
  lease.logs ??= new LogBuffer()
  lease.logs.add({
    level: logLevel,
    at: date,
    message: messageText(message, cause),
    annotations: fiber.getRef(References.CurrentLogAnnotations)
  })
})
