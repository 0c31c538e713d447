/**
 * `/metrics` of the admin server: the store's live runs (`RunStore.sample`), paused queues and the
 * history it keeps (`RunStore.historyStatus`), sampled at each scrape, as Prometheus gauges. The names are the worker's sampled ones
 * (`WorkerMetrics`), so a dashboard reads either; a queue without live runs has no series.
 */
import type { LiveSample, PausedQueue, Retention } from "@leasehold/core"

/** A label value in Prometheus's text format: backslash, quote and newline escaped. */
const label = (value: string) => `"${value.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")}"`

const family = (name: string, help: string, samples: ReadonlyArray<readonly [labels: string, value: number]>) => [
  `# HELP ${name} ${help}`,
  `# TYPE ${name} gauge`,
  ...samples.map(([labels, value]) => `${name}${labels} ${value}`)
]

/** The metric families this module writes (the registry's own ones of these names are left out). */
export const names = [
  "leasehold_queue_runs",
  "leasehold_queue_due_runs",
  "leasehold_queue_oldest_due_seconds",
  "leasehold_oldest_due_seconds",
  "leasehold_live_leases",
  "leasehold_queue_paused",
  "leasehold_history_runs",
  "leasehold_history_bytes",
  "leasehold_history_oldest_kept_seconds"
] as const

export const format = (
  sample: LiveSample,
  paused: ReadonlyArray<PausedQueue>,
  history: Retention.Status,
  now: number
): string =>
  [
    ...family(
      "leasehold_queue_runs",
      "Runs that have not ended, by queue and state (pending, running, suspended; sampled from the store)",
      sample.byStateAndQueue.map((r) => [`{queue=${label(r.queue)},state=${label(r.state)}}`, r.count])
    ),
    ...family(
      "leasehold_queue_due_runs",
      "Due runs a claim may take now, by queue (sampled)",
      sample.dueByQueue.map((r) => [`{queue=${label(r.queue)}}`, r.due])
    ),
    ...family(
      "leasehold_queue_oldest_due_seconds",
      "How long each queue's oldest due run has waited (sampled)",
      sample.dueByQueue.map((r) => [`{queue=${label(r.queue)}}`, r.oldestDueSeconds])
    ),
    ...family("leasehold_oldest_due_seconds", "How long the oldest due run has waited; 0 when none is due (sampled)", [[
      "",
      Math.max(0, ...sample.dueByQueue.map((r) => r.oldestDueSeconds))
    ]]),
    ...family("leasehold_live_leases", "Leases held now, by the store's clock (sampled)", [["", sample.liveLeases]]),
    ...family(
      "leasehold_queue_paused",
      "1 for each paused queue (sampled)",
      paused.map((p) => [`{queue=${label(p.queue)}}`, 1])
    ),
    ...family("leasehold_history_runs", "Runs the store keeps, ended ones included (the catalog's estimate)", [[
      "",
      history.runs
    ]]),
    ...family("leasehold_history_bytes", "Bytes the store's runs take on disk, indexes included", [[
      "",
      history.bytes
    ]]),
    ...family(
      "leasehold_history_oldest_kept_seconds",
      "Age of the oldest range of history kept; retention drops ranges past the window (0: none yet)",
      [["", history.oldestKeptAt === null ? 0 : Math.max(0, Math.round((now - history.oldestKeptAt.getTime()) / 1000))]]
    )
  ].join("\n") + "\n"

/** The registry's text without the families `format` writes (a worker in the same process samples them too). */
export const withoutSampled = (text: string): string =>
  text.split("\n").filter((line) => {
    const name = line.startsWith("# ") ? line.split(" ")[2] : line.split(/[{ ]/)[0]
    return !(names as ReadonlyArray<string | undefined>).includes(name)
  }).join("\n")
