/**
 * The signatures of callback URLs: base64url HMAC-SHA256 over an unambiguous encoding of the
 * signed parts. The first secret signs; every secret verifies (key rotation).
 *
 * The signed text (v2) is a domain tag followed by the parts, each written as its UTF-8 byte
 * length, a colon, and the part itself: `<len>:<domain><len>:<part>...`. Read from the start, a
 * text has exactly one split into parts, so no URL's signature verifies other parts than the ones
 * it was made for, whatever characters they hold; the domain tag keeps a run callback's text and
 * a deferred callback's apart. The text starts with a digit, so it never equals a v1 text.
 *
 * v1 (`v1.<run>.<signal>.<exp>`, a deferred's run part `workflow:<name>:<execution>`) could be
 * re-split. A v1 signature still verifies where the presented parts admit one split only (see
 * `legacyRun` and `legacyDeferred`), so URLs handed out before v2 keep working until they expire.
 */
import { constantTimeEqual, decodeBase64, hmac } from "./Hmac.js"

/** What a run callback URL signs. */
export interface RunTarget {
  readonly runId: string
  readonly signal: string
}

/** What a deferred callback URL signs. */
export interface DeferredTarget {
  readonly workflow: string
  readonly executionId: string
  readonly deferred: string
}

const runDomain = "leasehold/callback/v2"
const deferredDomain = "leasehold/deferred-callback/v2"

/** Each part prefixed with its byte length: the text splits back into exactly these parts. */
const encode = (parts: ReadonlyArray<string>): string =>
  parts.map((part) => `${Buffer.byteLength(part, "utf8")}:${part}`).join("")

/** The v2 text a run callback URL signs. */
export const runMessage = (target: RunTarget, exp: string): string =>
  encode([runDomain, target.runId, target.signal, exp])

/** The v2 text a deferred callback URL signs. */
export const deferredMessage = (target: DeferredTarget, exp: string): string =>
  encode([deferredDomain, target.workflow, target.executionId, target.deferred, exp])

/**
 * `exp` as URLs carry it: unix seconds, 1 to 12 digits (until the year 33658). Anything else (a
 * sign, a fraction, an exponent, `Infinity`, text) is refused before any signature is checked,
 * so an expiry is always a whole number that can pass.
 */
export const parseExp = (exp: string): number | undefined =>
  /^[0-9]{1,12}$/.test(exp) ? Number.parseInt(exp, 10) : undefined

/**
 * The v1 text of a run callback, only where it has one reading: a run id of digits, a signal
 * without a dot and an `exp` of digits. Otherwise `undefined`: the parts could have been shifted.
 */
const legacyRun = (target: RunTarget, exp: string): string | undefined =>
  /^[0-9]+$/.test(target.runId) && target.signal !== "" && !target.signal.includes(".") && parseExp(exp) !== undefined
    ? `v1.${target.runId}.${target.signal}.${exp}`
    : undefined

/**
 * The v1 text of a deferred callback, only where it has one reading: a workflow name without a
 * colon or dot, an execution id and a deferred name without a dot, an `exp` of digits.
 */
const legacyDeferred = (target: DeferredTarget, exp: string): string | undefined =>
  /^[^:.]+$/.test(target.workflow) && /^[^.]+$/.test(target.executionId) && /^[^.]+$/.test(target.deferred) &&
    parseExp(exp) !== undefined
    ? `v1.workflow:${target.workflow}:${target.executionId}.${target.deferred}.${exp}`
    : undefined

export const signRun = (secret: string, target: RunTarget, exp: string): string =>
  hmac(secret, runMessage(target, exp)).toString("base64url")

export const signDeferred = (secret: string, target: DeferredTarget, exp: string): string =>
  hmac(secret, deferredMessage(target, exp)).toString("base64url")

/** Whether `sig` is the HMAC of one of the texts under one of the secrets (constant time per comparison). */
const verifyAny = (secrets: ReadonlyArray<string>, texts: ReadonlyArray<string | undefined>, sig: string): boolean => {
  const presented = decodeBase64(sig, "base64url")
  if (presented === undefined) return false
  let valid = false
  for (const text of texts) {
    if (text === undefined) continue
    for (const secret of secrets) {
      // Every secret and text is tried, whichever matches: the time taken does not say which key signed.
      if (constantTimeEqual(presented, hmac(secret, text))) valid = true
    }
  }
  return valid
}

/** Whether `sig` signs this run callback under one of the secrets; never for a malformed `exp`. */
export const verifyRun = (secrets: ReadonlyArray<string>, target: RunTarget, exp: string, sig: string): boolean =>
  target.runId !== "" && parseExp(exp) !== undefined &&
  verifyAny(secrets, [runMessage(target, exp), legacyRun(target, exp)], sig)

/** Whether `sig` signs this deferred callback under one of the secrets; never for a malformed `exp`. */
export const verifyDeferred = (
  secrets: ReadonlyArray<string>,
  target: DeferredTarget,
  exp: string,
  sig: string
): boolean =>
  parseExp(exp) !== undefined && verifyAny(secrets, [deferredMessage(target, exp), legacyDeferred(target, exp)], sig)
