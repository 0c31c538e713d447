/**
 * The worker registry: every worker process announces itself in the store (owner, host, pid,
 * version, queues, concurrency, the runs it holds), again at each heartbeat, so operators see idle
 * workers too, not only the owners of live leases. One row per worker, written in place: the
 * store's row is not indexed by anything the heartbeat changes, so a refresh is a HOT update
 * (PgRunStore, migration `0019_worker_registry`) and nothing counts up per run. A worker that stops
 * removes its row; one that dies stops being listed as alive once its `ttl` passes (`RunStore.workers`),
 * is listed as gone (`RunStore.goneWorkers`) for 10 minutes more, and its row is then deleted by
 * another worker's next announcement.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schedule } from "effect"
import { createRequire } from "node:module"
import * as os from "node:os"
import type { RunStore } from "./RunStore.js"

// The models live beside the store's other models (RunRecord), which the store's interface imports.
export type { WorkerAnnouncement, WorkerInfo } from "./RunRecord.js"

/** The version of this package, as a worker announces it. @category constants */
export const version: string =
  (createRequire(import.meta.url)("../package.json") as { readonly version: string }).version

/** @category models */
export interface AnnounceOptions {
  readonly owner: string
  readonly queues: ReadonlyArray<string>
  readonly kinds: ReadonlyArray<string>
  readonly concurrency: number
  /** How often to announce: the worker's heartbeat interval. */
  readonly interval: Duration.Duration
  /** Runs held now, read at each announcement. */
  readonly runsHeld: () => number
}

/**
 * Announces the worker at once and then every `interval` for as long as it runs, and retires it
 * when interrupted. A failed announcement is retried at the next interval: the registry is for
 * operators only, and never stops or slows the worker's work.
 *
 * @category running
 */
export const announce = (store: RunStore["Service"], options: AnnounceOptions): Effect.Effect<never> => {
  const startedAt = new Date()
  // Three missed heartbeats, as a lease's TTL is a few heartbeats long.
  const ttl = Duration.millis(Duration.toMillis(options.interval) * 3)
  const once = Effect.suspend(() =>
    store.announceWorker({
      owner: options.owner,
      host: os.hostname(),
      pid: process.pid,
      version,
      queues: options.queues,
      kinds: options.kinds,
      concurrency: options.concurrency,
      runsHeld: options.runsHeld(),
      startedAt,
      ttl
    })
  ).pipe(Effect.ignore, Effect.withTracerEnabled(false))
  return Effect.repeat(once, Schedule.spaced(options.interval)).pipe(
    Effect.andThen(Effect.never),
    Effect.ensuring(Effect.ignore(Effect.withTracerEnabled(store.retireWorker(options.owner), false)))
  )
}
