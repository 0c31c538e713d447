/**
 * The signature of a callback URL: base64url HMAC-SHA256 over `v1.<runId>.<signal>.<exp>`. The
 * first secret signs; every secret verifies (key rotation).
 */
import { constantTimeEqual, decodeBase64, hmac } from "./Hmac.js"

/** The text that is signed. Run ids never contain a dot, so the parts cannot be shifted. */
export const message = (runId: string, signal: string, exp: string): string => `v1.${runId}.${signal}.${exp}`

export const sign = (secret: string, runId: string, signal: string, exp: string): string =>
  hmac(secret, message(runId, signal, exp)).toString("base64url")

/** Whether `sig` is the signature of the parts under one of the secrets (constant time per secret). */
export const verify = (
  secrets: ReadonlyArray<string>,
  runId: string,
  signal: string,
  exp: string,
  sig: string
): boolean => {
  // A run id with a dot could move part of the signal into the id: never signed, so never valid.
  if (runId.includes(".") || runId === "") return false
  const presented = decodeBase64(sig, "base64url")
  if (presented === undefined) return false
  let valid = false
  for (const secret of secrets) {
    // Every secret is tried, whichever matches: the time taken does not say which key signed.
    if (constantTimeEqual(presented, hmac(secret, message(runId, signal, exp)))) valid = true
  }
  return valid
}
