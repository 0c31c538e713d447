/**
 * Who a request is: one of the admin credentials (`Credentials`), its secret as bearer token or
 * basic-auth password, or no credential configured (open).
 */
import { type Credential, match } from "../Credentials.js"
import { problem } from "./Http.js"

export type Access = "bearer" | "basic" | "open"

/** How the request authenticated, and with which credential (none on an open server). */
export interface Admitted {
  readonly access: Access
  readonly credential: Credential | undefined
}

export const authenticate = (
  authorization: string | undefined,
  credentials: ReadonlyArray<Credential>
): Admitted | undefined => {
  if (credentials.length === 0) return { access: "open", credential: undefined }
  if (authorization === undefined) return undefined
  const [scheme, presented = ""] = authorization.trim().split(/\s+/, 2)
  switch (scheme?.toLowerCase()) {
    case "bearer": {
      const credential = match(credentials, presented)
      return credential === undefined ? undefined : { access: "bearer", credential }
    }
    case "basic": {
      const decoded = Buffer.from(presented, "base64").toString("utf8")
      const colon = decoded.indexOf(":")
      const credential = colon < 0 ? undefined : match(credentials, decoded.slice(colon + 1))
      return credential === undefined ? undefined : { access: "basic", credential }
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
export const admit = (headers: Readonly<Record<string, string | undefined>>, credentials: ReadonlyArray<Credential>) =>
  credentials.length === 0 && !loopbackHost(headers.host)
    ? "wrong-host" as const
    : authenticate(headers.authorization, credentials)

export const wrongHost = () =>
  problem(
    403,
    "host",
    "without an admin token the server answers only to a loopback host name (localhost, 127.0.0.1, [::1])"
  )

/** 401, asking a browser for basic auth. */
export const unauthorized = () =>
  problem(401, "unauthorized", "send an admin token as a bearer token or basic-auth password", {
    "www-authenticate": `Basic realm="leasehold", charset="UTF-8"`
  })
