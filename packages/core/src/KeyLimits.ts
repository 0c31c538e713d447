/**
 * Per-key concurrency: a run may carry a concurrency key (`EnqueueRequest.concurrencyKey`), and a
 * queue or a kind declares how many runs of one key may run at once, for example one refund per
 * customer, or three calls per tenant to a rate-limited API. The claim enforces it across every
 * worker: a run whose key has no room is passed over, and the runs behind it are claimed.
 *
 * A key's slot is held by a *running* run: from its claim until it completes, fails, is released,
 * or is cancelled. A run whose lease expired holds its slot until it is reclaimed (its worker may
 * still be running it), and the reclaim keeps it. A suspended run holds no lease and so no slot:
 * a resumed run is admitted again like any other.
 *
 * When both a run's queue and its kind declare a limit, both apply, each counting the key's
 * running runs in its own scope (of that queue, of that kind). A key no limit covers is not
 * limited.
 *
 * @since 0.1.0
 */
import { Exit } from "effect"
import { InvalidConfig } from "./Errors.js"

/** @category models */
export type KeyLimitScope = "queue" | "kind"

/** At most `perKey` running runs per concurrency key among the runs of a queue or of a kind. @category models */
export interface KeyLimit {
  readonly scope: KeyLimitScope
  /** The queue's or the kind's name. */
  readonly name: string
  readonly perKey: number
}

/** At most `perKey` running runs per key in `queue`. @category constructors */
export const perQueue = (queue: string, perKey: number): KeyLimit => ({ scope: "queue", name: queue, perKey })

/** At most `perKey` running runs per key of `kind`. @category constructors */
export const perKind = (kind: string, perKey: number): KeyLimit => ({ scope: "kind", name: kind, perKey })

/**
 * Checks a limit before anything is written: a known scope, a non-empty name and a whole
 * `perKey` of at least 1.
 *
 * @category validation
 */
export const check = (limit: KeyLimit): Exit.Exit<KeyLimit, InvalidConfig> => {
  const invalid = (option: string, issue: string) => Exit.fail(new InvalidConfig({ option, issue }))
  if (limit.scope !== "queue" && limit.scope !== "kind") return invalid("scope", `"${String(limit.scope)}" is not queue or kind`)
  if (typeof limit.name !== "string" || limit.name === "") return invalid(limit.scope, "must be a non-empty string")
  if (!(Number.isInteger(limit.perKey) && limit.perKey >= 1 && limit.perKey < 2 ** 31)) {
    return invalid("perKey", `${limit.perKey} is not a whole number of at least 1`)
  }
  return Exit.succeed({ scope: limit.scope, name: limit.name, perKey: limit.perKey })
}

/** Checks a concurrency key given at enqueue: a non-empty string. @category validation */
export const checkKey = (key: unknown): Exit.Exit<void, InvalidConfig> =>
  key === undefined || (typeof key === "string" && key !== "")
    ? Exit.void
    : Exit.fail(new InvalidConfig({ option: "concurrencyKey", issue: "must be a non-empty string" }))

/**
 * How many more runs of a key may start, given the limits declared for the run's queue and kind
 * and the key's running runs in each scope: `undefined` when neither declares a limit. The rule
 * both stores apply (`key_room` in SQL).
 *
 * @category rules
 */
export const room = (
  limits: { readonly queue: number | undefined; readonly kind: number | undefined },
  running: { readonly inQueue: number; readonly ofKind: number }
): number | undefined => {
  if (limits.queue === undefined && limits.kind === undefined) return undefined
  const rooms = [
    limits.queue === undefined ? Infinity : limits.queue - running.inQueue,
    limits.kind === undefined ? Infinity : limits.kind - running.ofKind
  ]
  return Math.max(0, Math.min(...rooms))
}

/**
 * Of candidates in claim order, the ones their keys admit: every run without a limit (`room`
 * undefined), and the first `room` runs of each key. A key's room is read once per claim.
 *
 * @category rules
 */
export const admit = <A extends { readonly key: string | null; readonly room: number | undefined }>(
  candidates: ReadonlyArray<A>
): Array<A> => {
  const taken = new Map<string, number>()
  return candidates.filter((c) => {
    if (c.room === undefined || c.key === null) return true
    const n = (taken.get(c.key) ?? 0) + 1
    taken.set(c.key, n)
    return n <= c.room
  })
}

/**
 * How many due runs past its limit a claim looks at in each queue: runs their key holds back are
 * passed over up to this many, so a claim that cannot fill its limit (its keys are full) does not
 * read the whole backlog. More held-back runs than this at the head of a queue hold back the runs
 * behind them until they drain.
 *
 * @category rules
 */
export const scanPastLimit = 1_000

/** A declared limit as the store lists it. @category models */
export interface KeyLimitInfo extends KeyLimit {
  /** Distinct keys with a running run in the limit's scope now. */
  readonly keysRunning: number
  /** Due runs with a key in the limit's scope: the ones a full key is holding back among them. */
  readonly keyedDue: number
}
