/**
 * Claim positions: where a store's due-only claims stand in each queue's claim order, so that the
 * next one starts there instead of at the head of the queue.
 *
 * Under a long-held snapshot (an analytics query, a `REPEATABLE READ` report) the index entries of
 * every run claimed since the snapshot began stay in the due index: nothing may prune them yet. A
 * claim that walks from the head walks all of them, so its cost grows with the snapshot's age
 * (docs/adr/0013). A due-only claim instead starts each queue at the run the previous due-only
 * claim of that store took last there (for the same kinds), less a margin of `marginMs` of
 * `run_at`, in the same priority lane; lanes of other priorities are read from their heads.
 *
 * A run made due behind that point (enqueued with a `run_at` in the past, or by a transaction that
 * began more than the margin ago) is not seen by due-only claims: the worker's sweep, which reads
 * every queue from its head at least once per poll interval, takes it, and a sweep that takes
 * such a run clears that queue's position, so the due-only claims that follow read from the head
 * and take the rest of any backlog there. Releases, retries and resumes make a run due at the
 * database's `now()`, ahead of every position. Claims under a key limit read from the head and
 * move no position.
 *
 * A position lives in the store's memory (one per process), never in a row: a row updated by every
 * claim is what a held snapshot makes bloat. Both stores keep them by the same rule, so the model
 * test compares their claims one for one.
 *
 * @since 0.1.0
 */

/** The last run a due-only claim took in a queue: its priority lane and `run_at` (epoch ms). @category models */
export interface ClaimPosition {
  readonly priority: number
  readonly runAtMs: number
}

/** How far behind a queue's position a due-only claim still looks, in ms of `run_at`. @category constants */
export const marginMs = 1_000

/** A due run as the position rule sees it. @category models */
export interface Placed {
  readonly queue: string
  readonly priority: number
  readonly runAtMs: number
  readonly id: string
}

/** Whether a due-only claim from `position` reaches a due run of that queue. @category predicates */
export const reaches = (position: ClaimPosition | undefined, run: Pick<Placed, "priority" | "runAtMs">): boolean =>
  position === undefined || run.priority !== position.priority || run.runAtMs >= position.runAtMs - marginMs

/** Later in claim order: lower priority, or the same priority and later `run_at`, then id. */
const later = (a: Placed, b: Placed): boolean =>
  a.priority !== b.priority
    ? a.priority < b.priority
    : a.runAtMs !== b.runAtMs
    ? a.runAtMs > b.runAtMs
    : laterId(a.id, b.id)

// Ids as the database prints them (decimal, no sign, no leading zero): a longer one is larger, and
// ids of one length compare as text. Spares two BigInt parses per run claimed.
const laterId = (a: string, b: string): boolean => a.length !== b.length ? a.length > b.length : a > b

/**
 * The positions of one store: per queue and set of kinds (workers of one process that serve
 * different kinds of a queue keep apart, so neither skips the other's runs).
 *
 * @category models
 */
export class Positions {
  private readonly byKey = new Map<string, ClaimPosition>()

  private static key(queue: string, kinds: ReadonlyArray<string>) {
    return `${queue}\u0000${[...new Set(kinds)].sort().join("\u0000")}`
  }

  /** The position of each queue these kinds have one in. */
  of(queues: ReadonlyArray<string>, kinds: ReadonlyArray<string>): Map<string, ClaimPosition> {
    const out = new Map<string, ClaimPosition>()
    for (const queue of queues) {
      const position = this.byKey.get(Positions.key(queue, kinds))
      if (position !== undefined) out.set(queue, position)
    }
    return out
  }

  /**
   * After a sweep: a queue it took a due run from that lies behind that queue's position starts
   * again from its head, so a backlog made due behind the position is read at the rate of due-only
   * claims, not one sweep's worth per poll interval.
   */
  rewind(kinds: ReadonlyArray<string>, takenDue: ReadonlyArray<Placed>): void {
    // One key per queue, not per run: a sweep takes hundreds of runs from a handful of queues.
    const keys = new Map<string, string>()
    for (const run of takenDue) {
      let key = keys.get(run.queue)
      if (key === undefined) keys.set(run.queue, key = Positions.key(run.queue, kinds))
      if (!reaches(this.byKey.get(key), run)) this.byKey.delete(key)
    }
  }

  /**
   * After a due-only claim without key limits: each queue it took runs from moves to the last of
   * them in claim order. (A keyed claim reads from the head and passes held-back runs over, so
   * what it took says nothing of where the queue's unclaimed runs begin.)
   */
  advance(kinds: ReadonlyArray<string>, taken: ReadonlyArray<Placed>): void {
    const last = new Map<string, Placed>()
    for (const run of taken) {
      const seen = last.get(run.queue)
      if (seen === undefined || later(run, seen)) last.set(run.queue, run)
    }
    for (const [queue, run] of last) {
      this.byKey.set(Positions.key(queue, kinds), { priority: run.priority, runAtMs: run.runAtMs })
    }
  }
}
