/**
 * Leasehold under the bench: enqueue through the store, a worker through `Worker.run` with leases,
 * heartbeats and fences on (there is no way to turn them off). Two systems: completed runs kept
 * (the default, with results and history) and completed runs deleted (`completedRuns: "delete"`).
 */
import { Client, Handler, KeyLimits, RateLimits, RunStore, Worker, WorkerEvents } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, type Duration, Effect, Exit, Fiber, Layer, Logger, Schema, Scope } from "effect"
import type { SqlClient } from "effect/sql"
import { SqlClient as SqlClientService } from "effect/sql"
import * as Pg from "../pg.js"
import type { EnqueueSession, System, WorkerHandle, WorkerHooks } from "./system.js"

export const SCHEMA = "leasehold"
export const KIND = "noop"

export interface LeaseholdOptions {
  readonly concurrency: number
  readonly maxCompletionBatch: number
  readonly ttl: string
  readonly heartbeat?: string | undefined
  readonly pollInterval: string
  readonly shutdownGrace?: string | undefined
  readonly maxConnections: number
  /** The worker's metrics recorded (`Worker.run({ metrics })`). */
  readonly metrics?: boolean | undefined
  /** Each attempt in a consumer span, recorded by Effect's tracer (not exported). */
  readonly traces?: boolean | undefined
  /** The share of runs traced when `traces` is on. */
  readonly traceSampleRate?: number | undefined
  /**
   * Each run logs this many lines (`Effect.logInfo`, one annotation), to one application logger
   * that drops them: what `keepLogs` changes is the attempt logs' capture and writes alone.
   */
  readonly logLines?: number | undefined
  /** The handler's `keepLogs` (attempt logs) when `logLines` is set. */
  readonly keepLogs?: "failed" | "always" | "never" | undefined
}

const Payload = Schema.Struct({ i: Schema.Number })

/** A store and its SqlClient, built in a scope the caller closes. */
export const openStore = async (
  url: string,
  options: {
    readonly maxConnections: number
    readonly migrate: boolean
    readonly completedRuns?: PgRunStore.CompletedRuns
    readonly storage?: PgRunStore.Storage
  }
) => {
  const scope = Effect.runSync(Scope.make())
  const layer = PgRunStore.layer({
    schema: SCHEMA,
    migrate: options.migrate,
    completedRuns: options.completedRuns,
    storage: options.storage
  }).pipe(
    Layer.provideMerge(
      Database.layerFromUrl(url, { maxConnections: options.maxConnections, applicationName: "bench-leasehold" })
    )
  )
  const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  return {
    store: Context.get(context, RunStore),
    sql: Context.get(context, SqlClientService.SqlClient) as SqlClient.SqlClient,
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> => Effect.runPromise(effect)

/** The keyed variant's limit: at most one running run per key of the bench's kind. */
const keyLimits = [KeyLimits.perKind(KIND, 1)]

/**
 * The rated variant's limit: a million starts a second for the bench's kind, far above what a
 * drain reaches, so the variant measures what a rate limit costs the claim, not the limit itself.
 */
const rateLimits = [RateLimits.perKind(KIND, 1_000_000, "1 second")]

/** How a variant's runs are enqueued (`enqueueSessionWith`). */
interface EnqueueShape {
  /** Concurrency keys: run i gets key i mod keys. None by default. */
  readonly keys?: number | undefined
  readonly storage?: PgRunStore.Storage | undefined
  /** Rate limits declared before the runs. None by default. */
  readonly rated?: ReadonlyArray<RateLimits.RateLimit> | undefined
  /** Run i in a unique window of its own key (the default states: pending, running, suspended). */
  readonly unique?: boolean | undefined
  /** Run i enqueued with idempotency key `i<i>`, as a workflow execution or a schedule tick carries one. */
  readonly idempotent?: boolean | undefined
}

/** Runs enqueued in the shape given; plain runs in the ledger by default. */
const enqueueSessionWith = (
  { idempotent = false, keys, rated, storage = "ledger", unique = false }: EnqueueShape = {}
) =>
async (url: string): Promise<EnqueueSession> => {
  const { store, close } = await openStore(url, { maxConnections: 2, migrate: true, storage })
  if (rated !== undefined) await run(store.setRateLimits(rated))
  // The limit is declared before the runs, as an application declares it: each run is admitted
  // or left waiting as it is enqueued (the workers declare the same limit again, which changes nothing).
  if (keys !== undefined) await run(store.setKeyLimits(keyLimits))
  const request = (i: number) => ({
    kind: KIND,
    payload: { i },
    concurrencyKey: keys === undefined ? undefined : `k${i % keys}`,
    unique: unique ? { key: `u${i}` } : undefined,
    idempotencyKey: idempotent ? `i${i}` : undefined
  })
  const handler = Handler.make({ kind: KIND, payload: Payload, handle: () => Effect.void })
  return {
    enqueueMany: (indices) => run(store.enqueue(indices.map(request))).then(() => undefined),
    enqueueBulk: keys === undefined && !unique && !idempotent
      ? (indices) =>
        run(
          Effect.provideService(Client.enqueueMany(handler, indices.map((i) => ({ i }))), RunStore, store)
        ).then(() => undefined)
      : undefined,
    enqueueOne: (i) => run(store.enqueue([request(i)])).then(() => undefined),
    close
  }
}
const enqueueSession = enqueueSessionWith()

const startWorker = (
  completedRuns: PgRunStore.CompletedRuns,
  keyLimits?: ReadonlyArray<KeyLimits.KeyLimit>,
  storage?: PgRunStore.Storage
) =>
async (url: string, options: LeaseholdOptions, hooks: WorkerHooks): Promise<WorkerHandle> => {
  const opened = await openStore(url, {
    maxConnections: options.maxConnections,
    migrate: false,
    completedRuns,
    ...(storage === undefined ? {} : { storage })
  })
  const store = hooks.wrapStore === undefined ? opened.store : hooks.wrapStore(opened.store)
  const logLines = options.logLines ?? 0
  const lines = Array.from({ length: logLines }, (_, n) => n)
  const handler = Handler.make({
    kind: KIND,
    payload: Payload,
    ...(options.keepLogs === undefined ? {} : { keepLogs: options.keepLogs }),
    handle: ({ i }) =>
      hooks.hold
        ? Effect.never
        : logLines === 0
        ? Effect.sync(() => hooks.onRun(i))
        : Effect.andThen(
          Effect.annotateLogs(
            Effect.forEach(lines, (n) => Effect.logInfo(`step ${n} of run ${i}`), { discard: true }),
            {
              order: "o-1"
            }
          ),
          Effect.sync(() => hooks.onRun(i))
        )
  })
  const sink = {
    emit: (event: WorkerEvents.WorkerEvent) =>
      hooks.onEvent === undefined ? Effect.void : Effect.sync(() => hooks.onEvent!(event))
  }
  let fiber: Fiber.Fiber<never, unknown> | undefined
  return {
    go: async () => {
      fiber = Effect.runFork(
        Worker.run({
          handlers: [handler],
          concurrency: options.concurrency,
          maxCompletionBatch: options.maxCompletionBatch,
          // Options travel as JSON: durations are strings such as "30 seconds".
          ttl: options.ttl as Duration.Input,
          heartbeat: options.heartbeat as Duration.Input | undefined,
          pollInterval: options.pollInterval as Duration.Input,
          shutdownGrace: options.shutdownGrace as Duration.Input | undefined,
          metrics: options.metrics,
          traces: options.traces,
          traceSampleRate: options.traceSampleRate,
          keyLimits
        }).pipe(
          Effect.provideService(RunStore, store),
          Effect.provideService(WorkerEvents.WorkerEvents, sink),
          (worker) => logLines === 0 ? worker : Effect.provide(worker, Logger.layer([Logger.make(() => {})]))
        )
      )
    },
    stop: async () => {
      if (fiber !== undefined) await Effect.runPromise(Fiber.interrupt(fiber))
      await opened.close()
    }
  }
}

/**
 * Runs still to finish, each count served by an index: ready to claim, waiting for a key's slot,
 * running in their rows, running in the ledger (open in their claim batches).
 */
const remainingSql = `SELECT ((SELECT count(*) FROM ${SCHEMA}.ready)
  + (SELECT count(*) FROM ${SCHEMA}.runs WHERE state = 'pending' AND rate_scope IS NOT NULL AND (key_scope IS NULL OR key_slot IS NOT NULL))
  + (SELECT count(*) FROM ${SCHEMA}.runs WHERE state = 'pending' AND key_scope = 'kind' AND key_slot IS NULL)
  + (SELECT count(*) FROM ${SCHEMA}.runs WHERE state = 'pending' AND key_scope = 'queue' AND key_slot IS NULL)
  + (SELECT count(*) FROM ${SCHEMA}.runs WHERE state = 'running')
  + (SELECT coalesce(sum(cardinality(c.ids) - cardinality(c.closed)
      - coalesce((SELECT sum(cardinality(d.ids)) FROM ${SCHEMA}.completion_batches d WHERE d.claim_batch = c.batch), 0)), 0)
    FROM ${SCHEMA}.claim_batches c WHERE c.settled_at IS NULL))::int AS n`

/** Runs completed: in their rows, and in the ledger's completion batches. */
const completedSql = () =>
  `SELECT ((SELECT count(*) FROM ${SCHEMA}.runs WHERE state = 'completed')
  + (SELECT coalesce(sum(cardinality(ids)), 0) FROM ${SCHEMA}.completion_batches))::int AS n`

const keeping: System<LeaseholdOptions> = {
  name: "leasehold",
  schemas: [SCHEMA],
  enqueueSession,
  startWorker: startWorker("keep"),
  remainingSql,
  completedSql,
  verifySql: `SELECT
      (SELECT count(*) FROM ${SCHEMA}.runs)::int AS total,
      (SELECT count(*) FROM ${SCHEMA}.runs_now WHERE state = 'completed')::int AS completed,
      (SELECT count(*) FROM ${SCHEMA}.runs_now WHERE state = 'completed' AND fence <> 1)::int AS reclaimed,
      (SELECT count(*) FROM (SELECT run_id FROM ${SCHEMA}.run_history GROUP BY run_id
        HAVING array_agg(kind ORDER BY at, seq NULLS LAST) = ARRAY['claimed', 'completed']) h)::int AS history`
}

// Completed runs leave no row: what is completed is what was enqueued and is gone (a failed run
// would stay, and count as not completed).
const deleting: System<LeaseholdOptions> = {
  name: "leasehold (completed runs deleted)",
  schemas: [SCHEMA],
  enqueueSession: enqueueSessionWith({ storage: "rows" }),
  startWorker: startWorker("delete"),
  remainingSql,
  completedSql: (total) => `SELECT (${total} - count(*))::int AS n FROM ${SCHEMA}.runs`,
  verifySql: `SELECT
      (SELECT count(*) FROM ${SCHEMA}.runs)::int AS total,
      (SELECT count(*) FROM ${SCHEMA}.run_events)::int AS events`
}

/** Per-key concurrency: runs over `KEYS` keys, at most one running per key (a kind's limit). */
export const KEYS = 1_000
const keyed: System<LeaseholdOptions> = {
  ...keeping,
  name: `leasehold (${KEYS} keys, 1 running per key)`,
  enqueueSession: enqueueSessionWith({ keys: KEYS }),
  startWorker: startWorker("keep", keyLimits)
}

/** A rate limit on the bench's kind, set high: its runs take the row path and the rated claim. */
const rated: System<LeaseholdOptions> = {
  ...keeping,
  name: "leasehold (rate limit of 1,000,000 a second)",
  enqueueSession: enqueueSessionWith({ rated: rateLimits })
}

/** A unique window on every run, each its own key: no enqueue is refused, so the variant measures what a window costs. */
const unique: System<LeaseholdOptions> = {
  ...keeping,
  name: "leasehold (a unique window on every run)",
  enqueueSession: enqueueSessionWith({ unique: true })
}

/** An idempotency key on every run, each its own: no enqueue meets a repeated key, so the variant measures what a key costs. */
const idempotent: System<LeaseholdOptions> = {
  ...keeping,
  name: "leasehold (an idempotency key on every run)",
  enqueueSession: enqueueSessionWith({ idempotent: true })
}

// Today's layout before the ledger (every run's row written by its claim and its completion),
// measured beside it in the same run.
const rows: System<LeaseholdOptions> = {
  ...keeping,
  name: "leasehold (run rows, no ledger)",
  enqueueSession: enqueueSessionWith({ storage: "rows" }),
  startWorker: startWorker("keep", undefined, "rows")
}

export const leasehold = keeping
export const leaseholdRows = rows
export const leaseholdKeyed = keyed
export const leaseholdRated = rated
export const leaseholdUnique = unique
export const leaseholdIdempotent = idempotent
export const leaseholdDeleting = deleting

/** Where a store's history ends: its last run id and claim batch (the drain's own come after). */
export interface HistoryFloor {
  readonly runs: number
  readonly batches: number
}

export const historyFloor = async (url: string): Promise<HistoryFloor> => {
  const [row] = await Pg.query(
    url,
    `SELECT (SELECT last_value FROM ${SCHEMA}.runs_id_seq)::float8 AS runs,
       (SELECT last_value FROM ${SCHEMA}.claim_batches_batch_seq)::float8 AS batches`
  )
  return { runs: Number(row.runs), batches: Number(row.batches) }
}

/** `leasehold` counting only the runs past `floor`: a drain on top of a store's history. */
export const pastHistory = (floor: HistoryFloor): System<LeaseholdOptions> => ({
  ...keeping,
  completedSql: () =>
    `SELECT ((SELECT count(*) FROM ${SCHEMA}.runs WHERE state = 'completed' AND id > ${floor.runs})
    + (SELECT coalesce(sum(cardinality(ids)), 0) FROM ${SCHEMA}.completion_batches WHERE claim_batch > ${floor.batches}))::int AS n`,
  verifySql: `SELECT
      (SELECT count(*) FROM ${SCHEMA}.runs WHERE id > ${floor.runs})::int AS total,
      (SELECT count(*) FROM ${SCHEMA}.runs_now WHERE state = 'completed' AND id > ${floor.runs})::int AS completed,
      (SELECT count(*) FROM ${SCHEMA}.runs_now WHERE state = 'completed' AND fence <> 1 AND id > ${floor.runs})::int AS reclaimed,
      (SELECT count(*) FROM (SELECT run_id FROM ${SCHEMA}.run_history WHERE run_id > ${floor.runs} GROUP BY run_id
        HAVING array_agg(kind ORDER BY at, seq NULLS LAST) = ARRAY['claimed', 'completed']) h)::int AS history`
})
