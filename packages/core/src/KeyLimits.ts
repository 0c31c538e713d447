/**
 * Per-key concurrency: a run may carry a concurrency key (`EnqueueRequest.concurrencyKey`), and a
 * queue or a kind declares how many runs of one key may run at once, for example one refund per
 * customer, or three calls per tenant to a rate-limited API. The store enforces it across every
 * worker: a run whose key has no room waits outside the claims' index, and the runs behind it are
 * claimed.
 *
 * A run is governed by its kind's limit if its kind declares one, else by its queue's. It is
 * *admitted* when it takes one of its key's numbered slots in that scope (of that kind in any
 * queue, or of that queue among the kinds without a limit of their own), and holds it while
 * pending and running: until it completes, fails, is released, suspended or cancelled, when the
 * slot goes to the key's next waiting run (and, in a worker's completion, that run is claimed for
 * it at once). A run whose lease expired keeps its slot until it is reclaimed, and the reclaim
 * keeps it. A unique index on the held slots makes the limit exact, with no counter row. A key no
 * limit covers is not limited. Limits count the runs admitted under them: a run already running
 * when a limit is declared holds none of its slots. When a limit is lowered, the runs above it
 * finish and no run is admitted until the key is below the new limit.
 *
 * @since 0.1.0
 */
import { Exit } from "effect"
import { InvalidConfig } from "./Errors.js"
import * as Limits from "./Limits.js"

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
  if (limit.scope !== "queue" && limit.scope !== "kind") {
    return invalid("scope", `"${String(limit.scope)}" is not queue or kind`)
  }
  const nameIssue = Limits.textIssue(limit.name, limit.scope === "kind" ? Limits.maxKindBytes : Limits.maxQueueBytes)
  if (nameIssue !== undefined) return invalid(limit.scope, nameIssue)
  if (!(Number.isInteger(limit.perKey) && limit.perKey >= 1 && limit.perKey < 2 ** 31)) {
    return invalid("perKey", `${limit.perKey} is not a whole number of at least 1`)
  }
  return Exit.succeed({ scope: limit.scope, name: limit.name, perKey: limit.perKey })
}

/** Checks a concurrency key given at enqueue: absent, or within `Limits`. @category validation */
export const checkKey = (key: unknown): Exit.Exit<void, InvalidConfig> =>
  key === undefined ? Exit.void : Limits.checkText("concurrencyKey", key, Limits.maxConcurrencyKeyBytes)

/**
 * The limit that governs a keyed run: its kind's if the kind declares one, else its queue's;
 * `undefined` when neither does (the key is then not limited). The rule both stores apply.
 *
 * @category rules
 */
export const governing = (
  declared: { readonly kind: number | undefined; readonly queue: number | undefined }
): { readonly scope: KeyLimitScope; readonly perKey: number } | undefined =>
  declared.kind !== undefined
    ? { scope: "kind", perKey: declared.kind }
    : declared.queue !== undefined
    ? { scope: "queue", perKey: declared.queue }
    : undefined

/** A declared limit as the store lists it. @category models */
export interface KeyLimitInfo extends KeyLimit {
  /** Distinct keys with a running run in the limit's scope now. */
  readonly keysRunning: number
  /** Due runs with a key in the limit's scope: the ones a full key is holding back among them. */
  readonly keyedDue: number
}

/**
 * A key's use of its limit: the slots its runs hold (running, or admitted and pending) and the
 * runs waiting for one, with how long the oldest of them has been due.
 *
 * @category models
 */
export interface KeyUsage {
  readonly key: string
  readonly held: number
  readonly waiting: number
  /** Seconds since the oldest waiting run became due, by the store's clock; null when none waits. */
  readonly oldestWaitingSeconds: number | null
}
