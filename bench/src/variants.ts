/**
 * The configurations under test. Each peer runs as its own documentation recommends for throughput
 * and in its default mode; the options here are exactly what is passed (printed with the results).
 */
import type { GraphileOptions } from "./systems/graphile.js"
import { graphile } from "./systems/graphile.js"
import type { LeaseholdOptions } from "./systems/leasehold.js"
import {
  leasehold,
  leaseholdDeleting,
  leaseholdIdempotent,
  leaseholdKeyed,
  leaseholdRated,
  leaseholdRows,
  leaseholdUnique
} from "./systems/leasehold.js"
import type { PgBossOptions } from "./systems/pgboss.js"
import { pgboss } from "./systems/pgboss.js"
import type { System } from "./systems/system.js"

export type VariantId =
  | "leasehold"
  | "leasehold-delete"
  | "leasehold-rows"
  | "leasehold-keyed"
  | "leasehold-rated"
  | "leasehold-unique"
  | "leasehold-idempotent"
  | "leasehold-metrics"
  | "leasehold-traces"
  | "leasehold-traces-sampled"
  | "leasehold-logs-never"
  | "leasehold-logs"
  | "leasehold-logs-always"
  | "graphile-batched"
  | "graphile-default"
  | "pgboss-tuned"
  | "pgboss-default"

export interface Variant<O = unknown> {
  readonly id: VariantId
  readonly label: string
  readonly system: System<O>
  readonly mode: "tuned" | "default"
  /** Passed to the system for the drain (throughput and cost). */
  readonly options: O
  /** Passed for the pickup-latency measure (LISTEN/NOTIFY on); `options` when absent. */
  readonly latencyOptions?: O | undefined
  /** Where the options come from. */
  readonly source: string
  /** Run only when named in `--only` (telemetry's cost, measured against `leasehold`). */
  readonly optIn?: boolean | undefined
}

const leaseholdOptions: LeaseholdOptions = {
  concurrency: 2000,
  maxCompletionBatch: 500,
  ttl: "30 seconds",
  pollInterval: "1 second",
  maxConnections: 10
}

const graphileBatched: GraphileOptions = {
  run: {
    concurrency: 24,
    maxPoolSize: 25,
    preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
  }
}

const graphileDefault: GraphileOptions = { run: {} }

const pgbossTuned: PgBossOptions = {
  constructor: { useListenNotify: true },
  queue: { notify: true },
  work: { batchSize: 500, localConcurrency: 4, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }
}

const pgbossDefault: PgBossOptions = { constructor: {}, queue: {}, work: {} }

// pg-boss polls every 2 s by default; NOTIFY needs both the instance listener and a notify queue.
const pgbossDefaultWithNotify: PgBossOptions = {
  constructor: { useListenNotify: true },
  queue: { notify: true },
  work: {}
}

export const variants: ReadonlyArray<Variant<any>> = [
  {
    id: "leasehold",
    label: "Leasehold",
    system: leasehold,
    mode: "tuned",
    options: leaseholdOptions,
    source:
      "Worker.run options (2,000 runs in flight, completions flushed 500 per statement); leases, heartbeats, fences and run history always on"
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-delete",
    label: "Leasehold, completed deleted",
    system: leaseholdDeleting,
    mode: "tuned",
    options: leaseholdOptions,
    source:
      "the same Worker.run options on a store built with completedRuns: \"delete\" (a completion deletes the run and its history in its guarded statement, as graphile-worker deletes finished jobs); leases, heartbeats and fences on"
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-rows",
    label: "Leasehold, run rows (no ledger)",
    system: leaseholdRows,
    mode: "tuned",
    options: leaseholdOptions,
    source:
      "the same Worker.run options on a store built with storage: \"rows\" (the layout before the batch ledger: each claim and completion writes the run's row), history kept",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-keyed",
    label: "Leasehold, 1,000 keys at 1 per key",
    system: leaseholdKeyed,
    mode: "tuned",
    options: leaseholdOptions,
    source:
      "the Leasehold options; run i carries concurrency key k(i mod 1000) and the kind declares at most 1 running run per key (issue 13's keyed drain)",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-rated",
    label: "Leasehold, rate limit (1,000,000 a second)",
    system: leaseholdRated,
    mode: "tuned",
    options: leaseholdOptions,
    source:
      "the Leasehold options; the kind declares a rate limit of 1,000,000 starts a second (issue 33): its runs take the row path and the rated claim, and the limit is never reached",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-unique",
    label: "Leasehold, a unique window on every run",
    system: leaseholdUnique,
    mode: "tuned",
    options: leaseholdOptions,
    source:
      "the Leasehold options; run i is enqueued with unique: { key: u(i) } (issue 33's window, default states): no enqueue is refused, so the variant measures what a window costs the drain",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-idempotent",
    label: "Leasehold, an idempotency key on every run",
    system: leaseholdIdempotent,
    mode: "tuned",
    options: leaseholdOptions,
    source:
      "the Leasehold options; run i is enqueued with idempotencyKey i(i) (as every workflow execution, schedule tick and durable-queue element is): no key repeats, so the variant measures what a key costs the drain",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-metrics",
    label: "Leasehold, metrics on",
    system: leasehold,
    mode: "tuned",
    options: { ...leaseholdOptions, metrics: true },
    source:
      "the Leasehold options with metrics: true (recorded into Effect's registry, as a Prometheus scrape or OTLP export reads them)",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-traces",
    label: "Leasehold, traces on",
    system: leasehold,
    mode: "tuned",
    options: { ...leaseholdOptions, traces: true },
    source:
      "the Leasehold options with traces: true (a consumer span per attempt and spans per statement, made by Effect's tracer; not exported)",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-traces-sampled",
    label: "Leasehold, traces on, 10% sampled",
    system: leasehold,
    mode: "tuned",
    options: { ...leaseholdOptions, traces: true, traceSampleRate: 0.1 },
    source: "traces: true with traceSampleRate 0.1 (one run in ten traced, decided by run id; the others make no span)",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-logs-never",
    label: "Leasehold, 3 log lines a run, not captured",
    system: leasehold,
    mode: "tuned",
    options: { ...leaseholdOptions, logLines: 3, keepLogs: "never" },
    source:
      "the Leasehold options; each run logs 3 lines (Effect.logInfo, to one application logger that drops them) and its handler keeps none (keepLogs: \"never\": no capture)",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-logs",
    label: "Leasehold, 3 log lines a run, captured",
    system: leasehold,
    mode: "tuned",
    options: { ...leaseholdOptions, logLines: 3, keepLogs: "failed" },
    source:
      "the same 3 lines a run under keepLogs \"failed\" (the default): captured per attempt, nothing written for a completed attempt",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "leasehold-logs-always",
    label: "Leasehold, 3 log lines a run, kept",
    system: leasehold,
    mode: "tuned",
    options: { ...leaseholdOptions, logLines: 3, keepLogs: "always" },
    source:
      "the same 3 lines a run under keepLogs \"always\": each completed attempt's lines written after its batch's completion (one statement per batch)",
    optIn: true
  } satisfies Variant<LeaseholdOptions>,
  {
    id: "graphile-batched",
    label: "graphile-worker batched",
    system: graphile,
    mode: "tuned",
    options: graphileBatched,
    source: "worker.graphile.org/docs/performance (concurrentJobs 24, maxPoolSize 25, localQueue 500, batch delays 0)"
  } satisfies Variant<GraphileOptions>,
  {
    id: "graphile-default",
    label: "graphile-worker default",
    system: graphile,
    mode: "default",
    options: graphileDefault,
    source: "run() defaults: concurrency 1, maxPoolSize 10, pollInterval 2000, no local queue, no batching"
  } satisfies Variant<GraphileOptions>,
  {
    id: "pgboss-tuned",
    label: "pg-boss tuned",
    system: pgboss,
    mode: "tuned",
    options: pgbossTuned,
    source:
      "work() batch fetch: 4 local workers × 500 jobs (2,000 in flight), burst while batches come back full, LISTEN/NOTIFY queue"
  } satisfies Variant<PgBossOptions>,
  {
    id: "pgboss-default",
    label: "pg-boss default",
    system: pgboss,
    mode: "default",
    options: pgbossDefault,
    latencyOptions: pgbossDefaultWithNotify,
    source: "defaults: batchSize 1, polling every 2 s; for latency useListenNotify + queue notify added"
  } satisfies Variant<PgBossOptions>
]

export const variantById = (id: string): Variant<any> => {
  const found = variants.find((v) => v.id === id)
  if (found === undefined) throw new Error(`unknown variant ${id}`)
  return found
}
