/**
 * Retention of history (ADR 0028): completed runs, with their events, claims and completions, are
 * kept for a window after they end and then reclaimed, without an operator. PostgreSQL keeps
 * history in id ranges (partitions) and drops a range once none of its runs keeps it and its last
 * end is older than the window; the memory store drops each run by the same rule. A run that is
 * pending, running, suspended or waiting, or whose unique window holds its key, is never dropped;
 * an idempotency key answers for as long as its run is kept: at least `keep` after the run ended.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schedule } from "effect"

/**
 * How long history is kept after a run ends: `keep` for completed runs, `keepFailed` for a range
 * (PostgreSQL) or run (memory) that holds a failed or cancelled run.
 *
 * @category models
 */
export interface Window {
  readonly keep: Duration.Duration
  readonly keepFailed: Duration.Duration
}

/**
 * Seven days, failed and cancelled runs too: a range is reclaimed whole, so a longer window for
 * failed runs would keep every range that holds one failure (ADR 0028).
 *
 * @category constants
 */
export const defaultWindow: Window = { keep: Duration.days(7), keepFailed: Duration.days(7) }

/**
 * How often a worker runs the maintenance (one worker at a time: the others find it taken).
 *
 * @category constants
 */
export const defaultEvery: Duration.Duration = Duration.minutes(5)

/** @category models */
export interface MaintainRequest extends Window {
  /** Report what would be done, doing nothing. */
  readonly dryRun: boolean
}

/**
 * One thing the maintenance did (or would do): `create` a range ahead of the ids, mark a range
 * `quiet` (nothing keeps it; its window starts), or `drop` a range (memory: one run) and what it
 * held. `from` and `to` are the range's ids (or claim batches), `to` excluded.
 *
 * @category models
 */
export interface Action {
  readonly action: "create" | "quiet" | "drop"
  readonly table: "runs" | "claim_batches"
  readonly from: string
  readonly to: string
}

/**
 * What is kept: the ranges of runs, the runs and bytes they hold (PostgreSQL's estimate from the
 * catalog, not a count), and when the oldest range kept was created.
 *
 * @category models
 */
export interface Status {
  readonly ranges: ReadonlyArray<
    {
      readonly table: "runs" | "claim_batches"
      readonly from: string
      readonly to: string
      readonly createdAt: Date
      readonly quietSince: Date | null
    }
  >
  readonly runs: number
  readonly bytes: number
  readonly oldestKeptAt: Date | null
}

/**
 * Runs the maintenance now and then every `every` for as long as it runs. A failed pass is tried
 * again at the next one: retention never stops or slows the worker's work.
 *
 * @category running
 */
export const maintain = (
  // The store's one operation it calls (RunStore imports this module's models).
  store: { readonly maintainHistory: (request: MaintainRequest) => Effect.Effect<ReadonlyArray<Action>, unknown> },
  options: { readonly every: Duration.Duration; readonly window: Window }
): Effect.Effect<never> =>
  Effect.repeat(
    Effect.suspend(() => store.maintainHistory({ ...options.window, dryRun: false })).pipe(
      Effect.ignore,
      Effect.withTracerEnabled(false)
    ),
    Schedule.spaced(options.every)
  ).pipe(Effect.andThen(Effect.never))
