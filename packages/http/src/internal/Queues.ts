/** The queues page's rows, put together from reads the store already has. */
import type { PausedQueue, RunState, Stats, Throughput, WorkerRegistry } from "@leasehold/core"

/** One queue as the console shows it. */
export interface QueueOverview {
  readonly queue: string
  readonly counts: Readonly<Record<RunState, number>>
  readonly paused: boolean
  readonly pausedSince: Date | null
  /** Due runs a claim may take now, and how long the oldest has waited. */
  readonly due: number
  readonly oldestDueSeconds: number | null
  /** Completed and failed per minute, averaged over the throughput's window. */
  readonly completedPerMinute: number
  readonly failedPerMinute: number
  /** Workers alive that serve it. */
  readonly workers: number
}

const zero = (): Record<RunState, number> => ({
  pending: 0,
  running: 0,
  suspended: 0,
  completed: 0,
  failed: 0,
  cancelled: 0
})

/**
 * Every queue that has runs, is paused, or is served by a worker, by name (byte order, as the
 * store orders names).
 */
export const overview = (
  stats: Stats,
  paused: ReadonlyArray<PausedQueue>,
  workers: ReadonlyArray<WorkerRegistry.WorkerInfo>,
  throughput: Throughput.Throughput
): Array<QueueOverview> => {
  const names = new Set<string>([
    ...stats.byStateAndQueue.map((r) => r.queue),
    ...paused.map((p) => p.queue),
    ...workers.flatMap((w) => w.queues)
  ])
  return [...names].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).map((queue) => {
    const counts = zero()
    for (const r of stats.byStateAndQueue) if (r.queue === queue) counts[r.state] = r.count
    const due = stats.dueByQueue.find((d) => d.queue === queue)
    const pause = paused.find((p) => p.queue === queue)
    const minutes = throughput.series.filter((m) => m.queue === queue)
    return {
      queue,
      counts,
      paused: pause !== undefined,
      pausedSince: pause?.since ?? null,
      due: due?.due ?? 0,
      oldestDueSeconds: due?.oldestDueSeconds ?? null,
      completedPerMinute: minutes.reduce((n, m) => n + m.completed, 0) / throughput.minutes,
      failedPerMinute: minutes.reduce((n, m) => n + m.failed, 0) / throughput.minutes,
      workers: workers.filter((w) => w.queues.includes(queue)).length
    }
  })
}
