/**
 * A storage layout under the layout loop (`storeLoop.js layouts`): the statements a store sends on
 * its routine path, each a method, run by `LayoutLoop` on one database of its own. A layout is a
 * candidate shape of the store's tables (or a peer's own statements), not a store: it implements
 * only what the loop measures, and docs/adr/0017 says how each would keep the guarantees the loop
 * does not exercise.
 */

/** A lease the layout granted, as its claim answered it. */
export interface Held {
  readonly id: string
  readonly fence: number
  /** The claim batch that holds the run, and its place in it (batch layouts only). */
  readonly batch?: string | undefined
  readonly pos?: number | undefined
  readonly key?: string | undefined
  /** The peer's own job row, passed back to its completion as it expects it. */
  readonly row?: unknown
}

export interface LayoutSession {
  /** Runs 0..count-1 of the bench's kind, unkeyed. */
  readonly enqueue: (from: number, count: number) => Promise<void>
  /** Keyed runs of the keyed kind: run i has key k(i mod keys), at a limit of 1 per key. */
  readonly enqueueKeyed: (from: number, count: number, keys: number) => Promise<void>
  /** Due runs of the bench's kind (or of the keyed kind), up to `limit`. */
  readonly claim: (limit: number, keyed?: boolean) => Promise<ReadonlyArray<Held>>
  /** Completes every lease in `held` (results null); fails if any was not completed. */
  readonly complete: (held: ReadonlyArray<Held>) => Promise<void>
  /** Completes keyed runs and returns the successors their freed slots were handed to, claimed. */
  readonly completeHandingOff: (held: ReadonlyArray<Held>) => Promise<ReadonlyArray<Held>>
  /** Renews the leases in `held`; answers how many are still held. Undefined: the layout has no renewal. */
  readonly renew?: (held: ReadonlyArray<Held>) => Promise<number>
  /** Set-up for the reclaim: the leases in `held` expire now (not measured). */
  readonly expire: (held: ReadonlyArray<Held>) => Promise<void>
  /** The sweep that takes runs whose lease expired, up to `limit`. */
  readonly reclaim: (limit: number) => Promise<ReadonlyArray<Held>>
  readonly close: () => Promise<void>
}

export interface Layout {
  /** Short name used on the command line and in the tables. */
  readonly id: string
  readonly description: string
  /** The schema the layout's tables live in (dead tuples are summed over it). */
  readonly schema: string
  /** Creates the layout's tables in the database at `url`. */
  readonly install: (url: string) => Promise<void>
  /** Opens a session on the installed tables; its connections carry `application_name` "layout". */
  readonly open: (url: string) => Promise<LayoutSession>
}

/** The kinds every layout's runs are of. */
export const KIND = "noop"
export const KEYED_KIND = "keyed"

/** The ttl every claim grants: long enough that nothing expires unless the loop says so. */
export const TTL_MS = 300_000
