/** What each system under the bench provides: enqueueing in the parent, a worker in a child. */
import type { RunStore, WorkerEvents } from "@leasehold/core"

export interface WorkerHooks {
  /** Called by the no-op handler with the run's index (payload `{ i }`). */
  readonly onRun: (i: number) => void
  /** Handlers never finish (lease-holding measures). */
  readonly hold: boolean
  /** Leasehold only: the worker's structured events. */
  readonly onEvent?: ((event: WorkerEvents.WorkerEvent) => void) | undefined
  /** Leasehold only: wraps the store the worker uses (to count and time renewals). */
  readonly wrapStore?: ((store: RunStore["Service"]) => RunStore["Service"]) | undefined
}

export interface WorkerHandle {
  /** Starts taking work; everything before this (connections, migrations) is set-up. */
  readonly go: () => Promise<void>
  /** Graceful stop, then connections closed. */
  readonly stop: () => Promise<void>
}

export interface EnqueueSession {
  readonly enqueueMany: (indices: ReadonlyArray<number>) => Promise<void>
  /**
   * The system's bulk enqueue as an application calls it (Leasehold: `Client.enqueueMany`, each
   * payload encoded by the handler's schema); `enqueueMany` when absent.
   */
  readonly enqueueBulk?: ((indices: ReadonlyArray<number>) => Promise<void>) | undefined
  readonly enqueueOne: (i: number) => Promise<void>
  readonly close: () => Promise<void>
}

export interface System<O> {
  readonly name: string
  /** Postgres schemas holding the system's tables (for dead tuples). */
  readonly schemas: ReadonlyArray<string>
  /** Migrates the fresh database and opens a connection for enqueueing. */
  readonly enqueueSession: (url: string, options: O) => Promise<EnqueueSession>
  readonly startWorker: (url: string, options: O, hooks: WorkerHooks) => Promise<WorkerHandle>
  /** One row `{ n }`: runs not yet completed. */
  readonly remainingSql: string
  /** One row `{ n }`: runs completed, out of `total` enqueued. */
  readonly completedSql: (total: number) => string
  /** One row of system-specific checks after a drain. */
  readonly verifySql: string
}
