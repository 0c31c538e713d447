/**
 * Standard Webhooks (https://www.standardwebhooks.com) verification: `webhook-signature` holds
 * space-separated `v1,<base64 HMAC-SHA256(key, id.timestamp.body)>`; the key is the base64 after
 * `whsec_`; the timestamp must be within the tolerance of now.
 */
import { Limits } from "@leasehold/core"
import { constantTimeEqual, decodeBase64, hmac } from "./Hmac.js"

const maxDeliveryIdBytes = Limits.maxDeliveryIdBytes

export type Verification =
  | { readonly _tag: "Valid"; readonly id: string }
  | { readonly _tag: "Invalid"; readonly reason: string }

/** A `whsec_` secret's key bytes, or `undefined` when it is not one. */
export const parseSecret = (secret: string): Uint8Array | undefined => {
  const trimmed = secret.trim()
  const encoded = trimmed.startsWith("whsec_") ? trimmed.slice("whsec_".length) : trimmed
  if (encoded.length === 0) return undefined
  // A secret is configuration, not a presented signature: written with or without its padding.
  const padded = encoded.length % 4 === 0 ? encoded : encoded + "=".repeat(4 - (encoded.length % 4))
  const bytes = decodeBase64(padded, "base64")
  return bytes === undefined || bytes.length === 0 ? undefined : bytes
}

export const sign = (key: Uint8Array, id: string, timestamp: string, body: Uint8Array): string =>
  `v1,${hmac(key, Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body])).toString("base64")}`

export const verify = (options: {
  readonly keys: ReadonlyArray<Uint8Array>
  readonly id: string | undefined
  readonly timestamp: string | undefined
  readonly signature: string | undefined
  readonly body: Uint8Array
  readonly nowSeconds: number
  readonly toleranceSeconds: number
}): Verification => {
  const { id, timestamp, signature } = options
  if (id === undefined || timestamp === undefined || signature === undefined) {
    return { _tag: "Invalid", reason: "webhook-id, webhook-timestamp and webhook-signature must be sent together" }
  }
  if (id === "") return { _tag: "Invalid", reason: "empty webhook-id" }
  // Kept for replay refusal: a key the store can index.
  if (Buffer.byteLength(id, "utf8") > maxDeliveryIdBytes) {
    return { _tag: "Invalid", reason: `webhook-id is longer than ${maxDeliveryIdBytes} bytes` }
  }
  if (!/^\d{1,12}$/.test(timestamp)) return { _tag: "Invalid", reason: "webhook-timestamp is not unix seconds" }
  if (Math.abs(options.nowSeconds - Number(timestamp)) > options.toleranceSeconds) {
    return { _tag: "Invalid", reason: "webhook-timestamp is too far from now" }
  }
  if (options.keys.length === 0) return { _tag: "Invalid", reason: "no webhook secret is configured" }
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), options.body])
  const expected = options.keys.map((key) => hmac(key, signed))
  let valid = false
  for (const entry of signature.split(" ")) {
    const comma = entry.indexOf(",")
    if (comma < 0 || entry.slice(0, comma) !== "v1") continue
    const presented = decodeBase64(entry.slice(comma + 1), "base64")
    if (presented === undefined) continue
    for (const digest of expected) if (constantTimeEqual(presented, digest)) valid = true
  }
  return valid ? { _tag: "Valid", id } : { _tag: "Invalid", reason: "no webhook-signature matches" }
}
