/**
 * HMAC-SHA256 and constant-time comparison (node:crypto). Keys stay in closures of the callers;
 * nothing here logs or returns a key.
 */
import { createHash, createHmac, timingSafeEqual } from "node:crypto"

export const hmac = (key: Uint8Array | string, message: string | Uint8Array): Buffer =>
  createHmac("sha256", key).update(message).digest()

/** Equal bytes, compared in time that does not depend on where they differ. */
export const constantTimeEqual = (a: Uint8Array, b: Uint8Array): boolean =>
  a.length === b.length && timingSafeEqual(a, b)

/**
 * Decodes base64 (padded) or base64url (unpadded); `undefined` unless the text is exactly the
 * canonical spelling, padding included: a signature has one spelling, so a URL has one form.
 */
export const decodeBase64 = (text: string, encoding: "base64" | "base64url"): Buffer | undefined => {
  const bytes = Buffer.from(text, encoding)
  return bytes.toString(encoding) === text ? bytes : undefined
}

/** Two strings equal, in constant time whatever their lengths (both are hashed first). */
export const constantTimeEqualText = (a: string, b: string): boolean =>
  timingSafeEqual(createHash("sha256").update(a).digest(), createHash("sha256").update(b).digest())
