/** Messages between the bench and its worker processes (Node IPC, JSON). */
import type { VariantId } from "./variants.js"

export interface ChildConfig {
  readonly variant: VariantId
  /** URL of the bench database. */
  readonly url: string
  /** drain: no-op handlers; latency: report each handler start; hold: handlers never finish. */
  readonly role: "drain" | "latency" | "hold"
  /** Options for the system; the variant's own when absent. */
  readonly options?: unknown
  /** Leasehold: report once this many runs have been claimed. */
  readonly claimTarget?: number | undefined
  /** Leasehold: count and time every renewal statement. */
  readonly observeRenewals?: boolean | undefined
}

/** Calls, items and time spent per store operation (Leasehold), measured at the store boundary. */
export type StoreProfile = Record<string, { calls: number; items: number; ms: number }>

/** What a worker process spent: CPU (user + system) and, for Leasehold, time per store operation. */
export interface ProcessProfile {
  readonly cpuMs: number
  readonly wallMs: number
  readonly store?: StoreProfile | undefined
}

export type ParentMessage = { readonly t: "go" } | { readonly t: "stop" }

export type ChildMessage =
  | { readonly t: "ready" }
  | { readonly t: "progress"; readonly executed: number; readonly claimed: number }
  | { readonly t: "started"; readonly i: number; readonly at: number }
  | { readonly t: "claimedAll"; readonly n: number; readonly at: number }
  | {
    readonly t: "renew"
    readonly sentAt: number
    readonly ms: number
    readonly leases: number
    readonly renewed: number
  }
  | { readonly t: "heartbeatSent"; readonly leases: number; readonly at: number }
  | { readonly t: "anomaly"; readonly event: string }
  | { readonly t: "done"; readonly executed: ReadonlyArray<number>; readonly profile: ProcessProfile }
  | { readonly t: "error"; readonly message: string }
