/**
 * The limits of the names, keys and times a store keeps, checked before anything is written, the
 * same way by every store. PostgreSQL refuses a NUL in text, an index entry over about 2.7 kB and
 * an interval out of range; these checks refuse them first, naming the option, so bad input is a
 * typed error of its caller and never a failed statement. The byte limits are UTF-8 bytes (one
 * per ASCII character) and keep every index entry within PostgreSQL's bound.
 *
 * @since 0.1.0
 */
import { Exit } from "effect"
import { InvalidConfig } from "./Errors.js"

/** The longest kind, in UTF-8 bytes. @category limits */
export const maxKindBytes = 255
/** The longest queue name, in UTF-8 bytes. @category limits */
export const maxQueueBytes = 255
/** The longest signal name, in UTF-8 bytes. @category limits */
export const maxSignalBytes = 255
/** The longest schedule name, in UTF-8 bytes. @category limits */
export const maxScheduleNameBytes = 255
/** The longest idempotency key, in UTF-8 bytes. @category limits */
export const maxIdempotencyKeyBytes = 1024
/** The longest concurrency key, in UTF-8 bytes. @category limits */
export const maxConcurrencyKeyBytes = 1024
/** The longest key of a uniqueness window, in UTF-8 bytes. @category limits */
export const maxUniqueKeyBytes = 1024
/** The longest signal token, in UTF-8 bytes. @category limits */
export const maxSignalTokenBytes = 1024
/** The longest Standard Webhooks `webhook-id` kept for replay refusal, in UTF-8 bytes. @category limits */
export const maxDeliveryIdBytes = 1024

/**
 * The longest delay before a run is due, and the longest expiry or suspension timeout: 100 years,
 * in milliseconds. Far inside what PostgreSQL's timestamps and JavaScript's dates can hold.
 *
 * @category limits
 */
export const maxDelayMs = 100 * 365.25 * 24 * 3600 * 1000

// An unpaired UTF-16 surrogate has no UTF-8 form: PostgreSQL would store U+FFFD in its place.
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

const encoder = new TextEncoder()

/**
 * Why a name or key cannot be stored, or `undefined` when it can: it must be a non-empty string
 * of valid Unicode without NUL, at most `maxBytes` UTF-8 bytes.
 *
 * @category validation
 */
export const textIssue = (value: unknown, maxBytes: number): string | undefined => {
  if (typeof value !== "string" || value === "") return "must be a non-empty string"
  if (value.includes("\u0000")) return "must not contain NUL (\\u0000)"
  if (loneSurrogate.test(value)) return "is not valid Unicode (an unpaired surrogate)"
  // At most 3 bytes per UTF-16 unit: short strings need no encoding to be within the limit.
  const bytes = value.length * 3 <= maxBytes ? value.length : encoder.encode(value).length
  if (bytes > maxBytes) return `is ${bytes} bytes long, over the limit of ${maxBytes}`
  return undefined
}

/** `InvalidConfig` naming `option` when `value` is not a storable name or key (`textIssue`). @category validation */
export const checkText = (option: string, value: unknown, maxBytes: number): Exit.Exit<void, InvalidConfig> => {
  const issue = textIssue(value, maxBytes)
  return issue === undefined ? Exit.void : Exit.fail(new InvalidConfig({ option, issue }))
}

/** `InvalidConfig` naming `option` unless `ms` is a finite delay from 0 to `maxDelayMs`. @category validation */
export const checkDelay = (option: string, ms: number): Exit.Exit<void, InvalidConfig> =>
  typeof ms === "number" && Number.isFinite(ms) && ms >= 0 && ms <= maxDelayMs
    ? Exit.void
    : Exit.fail(
      new InvalidConfig({ option, issue: `${ms} ms is not a finite delay from 0 to ${maxDelayMs} ms (100 years)` })
    )
