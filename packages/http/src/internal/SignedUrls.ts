/**
 * Signed URLs in what the admin API shows: a callback URL a handler keeps in its checkpoint, its
 * payload or its result resumes the run for whoever holds it, so reads answer it with its
 * signature masked, and only a write (`POST /api/runs/:id/signed-urls`) answers it whole.
 */

/** What a masked signature reads as. @category constants */
export const maskedSignature = "masked"

// A signature parameter (Leasehold's `sig`, and the common `signature` / `X-Amz-Signature`) and its value.
const signatureParameter = /([?&](?:sig|signature|x-amz-signature)=)[^&#\s"'<>]+/gi

// An absolute URL inside any text (a log line, a message), up to the first character a URL cannot hold.
const absoluteUrl = /https?:\/\/[^\s"'<>]+/gi

const maskText = (text: string): string =>
  text.replace(signatureParameter, (_, name: string) => `${name}${maskedSignature}`)

/** A signed URL as reads show it, and whole. */
export interface SignedUrl {
  readonly masked: string
  readonly url: string
}

/** The signed URLs in `text`, in order. */
const inText = (text: string): Array<SignedUrl> =>
  [...text.matchAll(absoluteUrl)].flatMap(([url]) => {
    const masked = maskText(url)
    return masked === url ? [] : [{ masked, url }]
  })

/**
 * `value` (plain JSON data: what a route answers) with every signature parameter of every string
 * masked, and the signed URLs it held, each once, in the order met.
 */
export const mask = (value: unknown): { readonly value: unknown; readonly urls: ReadonlyArray<SignedUrl> } => {
  const urls = new Map<string, SignedUrl>()
  const walk = (v: unknown): unknown => {
    if (typeof v === "string") {
      for (const found of inText(v)) if (!urls.has(found.url)) urls.set(found.url, found)
      return maskText(v)
    }
    if (Array.isArray(v)) return v.map(walk)
    // Dates and other instances keep their own JSON form (toJSON), read once here.
    if (v !== null && typeof v === "object") {
      const plain = typeof (v as { toJSON?: unknown }).toJSON === "function"
        ? (v as { toJSON: () => unknown }).toJSON()
        : v
      if (plain !== v) return walk(plain)
      return Object.fromEntries(Object.entries(v).map(([k, inner]) => [k, walk(inner)]))
    }
    return v
  }
  const masked = walk(value)
  return { value: masked, urls: [...urls.values()] }
}
