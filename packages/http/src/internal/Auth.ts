/** Who a request is: the admin token as bearer or basic-auth password, or no token configured. */
import { constantTimeEqualText } from "./Hmac.js"
import { problem } from "./Http.js"

export type Access = "bearer" | "basic" | "open"

export const authenticate = (authorization: string | undefined, token: string | undefined): Access | undefined => {
  if (token === undefined) return "open"
  if (authorization === undefined) return undefined
  const [scheme, credentials = ""] = authorization.trim().split(/\s+/, 2)
  switch (scheme?.toLowerCase()) {
    case "bearer":
      return constantTimeEqualText(credentials, token) ? "bearer" : undefined
    case "basic": {
      const decoded = Buffer.from(credentials, "base64").toString("utf8")
      const colon = decoded.indexOf(":")
      return colon >= 0 && constantTimeEqualText(decoded.slice(colon + 1), token) ? "basic" : undefined
    }
    default:
      return undefined
  }
}

/**
 * Without a token the API is open to whoever reaches the loopback address, so the request must
 * also name a loopback host: a page whose own name was rebound to 127.0.0.1 (DNS rebinding)
 * sends its own name in `Host` and is refused.
 */
export const loopbackHost = (host: string | undefined): boolean => {
  if (host === undefined) return false
  const name = host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.replace(/:\d+$/, "")
  return name === "localhost" || name === "[::1]" || /^127(\.\d{1,3}){3}$/.test(name)
}

/** Who the request is, or `undefined` (401); an open server refuses non-loopback `Host` names. */
export const admit = (headers: Readonly<Record<string, string | undefined>>, token: string | undefined) =>
  token === undefined && !loopbackHost(headers.host)
    ? "wrong-host" as const
    : authenticate(headers.authorization, token)

export const wrongHost = () =>
  problem(
    403,
    "host",
    "without an admin token the server answers only to a loopback host name (localhost, 127.0.0.1, [::1])"
  )

/** 401, asking a browser for basic auth. */
export const unauthorized = () =>
  problem(401, "unauthorized", "send the admin token as a bearer token or basic-auth password", {
    "www-authenticate": `Basic realm="leasehold", charset="UTF-8"`
  })
