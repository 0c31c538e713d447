/**
 * Named admin credentials: several secrets, each with a name (recorded with every action made
 * with it, never the secret) and a scope, read-only (`ro`: every write answers 403) or read-write
 * (`rw`). Given through the environment:
 *
 * - `LEASEHOLD_ADMIN_TOKENS="alice:rw:<secret>,ci:ro:<secret>"`: comma-separated
 *   `name:scope:secret` entries (a secret may itself hold `:`, not `,`).
 * - `LEASEHOLD_ADMIN_TOKEN=<secret>`: one read-write credential named `admin` (as before).
 *
 * Both may be set; every secret at least 16 characters, every name different. Rotation: add the
 * new secret beside the old (under its own name, or the same scope), restart, move the clients,
 * then remove the old one and restart again. A request's secret is compared with every
 * credential's in constant time.
 *
 * @since 0.1.0
 */
import { InvalidConfig, OperatorActions } from "@leasehold/core"
import { Effect, Redacted } from "effect"
import { constantTimeEqualText } from "./internal/Hmac.js"

/** @category models */
export type Scope = "ro" | "rw"

/** @category models */
export interface Credential {
  readonly name: string
  readonly scope: Scope
  readonly secret: Redacted.Redacted<string>
}

/** The name the single `LEASEHOLD_ADMIN_TOKEN` is recorded under. @category constants */
export const singleTokenName = "admin"

/** The fewest characters a secret may have. @category constants */
export const minSecretLength = 16

/**
 * The credentials of `LEASEHOLD_ADMIN_TOKENS` (and `LEASEHOLD_ADMIN_TOKEN`, as `admin:rw`). An
 * invalid entry fails with `InvalidConfig` naming its place and name, never its secret.
 *
 * @category constructors
 */
export const parse = (
  tokens: string | undefined,
  single?: Redacted.Redacted<string> | undefined
): Effect.Effect<ReadonlyArray<Credential>, InvalidConfig> =>
  Effect.gen(function*() {
    const option = "LEASEHOLD_ADMIN_TOKENS"
    const credentials: Array<Credential> = []
    if (single !== undefined) {
      if (Redacted.value(single).length < minSecretLength) {
        return yield* new InvalidConfig({
          option: "LEASEHOLD_ADMIN_TOKEN",
          issue: `needs at least ${minSecretLength} characters`
        })
      }
      credentials.push({ name: singleTokenName, scope: "rw", secret: single })
    }
    const entries = tokens === undefined || tokens.trim() === "" ? [] : tokens.split(",")
    for (const [i, entry] of entries.entries()) {
      const first = entry.indexOf(":")
      const second = first < 0 ? -1 : entry.indexOf(":", first + 1)
      const where = `entry ${i + 1}`
      if (second < 0) {
        return yield* new InvalidConfig({ option, issue: `${where} is not name:scope:secret` })
      }
      const name = entry.slice(0, first).trim()
      const scope = entry.slice(first + 1, second).trim()
      const secret = entry.slice(second + 1)
      const nameIssue = OperatorActions.actorNameIssue(name)
      if (nameIssue !== undefined) return yield* new InvalidConfig({ option, issue: `${where}: the name ${nameIssue}` })
      if (scope !== "ro" && scope !== "rw") {
        return yield* new InvalidConfig({ option, issue: `${where} (${name}): the scope must be ro or rw` })
      }
      credentials.push({ name, scope, secret: Redacted.make(secret) })
    }
    const seen = new Set<string>()
    for (const c of credentials) {
      if (Redacted.value(c.secret).length < minSecretLength) {
        return yield* new InvalidConfig({
          option,
          issue: `the secret of ${c.name} needs at least ${minSecretLength} characters`
        })
      }
      if (seen.has(c.name)) return yield* new InvalidConfig({ option, issue: `the name ${c.name} is given twice` })
      seen.add(c.name)
    }
    for (const [i, a] of credentials.entries()) {
      for (const b of credentials.slice(i + 1)) {
        if (Redacted.value(a.secret) === Redacted.value(b.secret)) {
          return yield* new InvalidConfig({ option, issue: `${a.name} and ${b.name} have the same secret` })
        }
      }
    }
    return credentials
  })

/**
 * The credential whose secret is `presented`, comparing it with every one (constant time each,
 * and all of them whichever matches), or `undefined`.
 *
 * @category predicates
 */
export const match = (credentials: ReadonlyArray<Credential>, presented: string): Credential | undefined => {
  let found: Credential | undefined
  for (const c of credentials) {
    if (constantTimeEqualText(presented, Redacted.value(c.secret)) && found === undefined) found = c
  }
  return found
}
