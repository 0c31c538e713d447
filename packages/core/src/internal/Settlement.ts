/**
 * How a handler settled its run itself (a fenced transaction committed, or it suspended), so the
 * lease finalizer has nothing left to write. Kept off the public `CurrentRun` service: only
 * `Run.transaction` and `Run.awaitSignal` may report a settlement, never handler code.
 */
import type { CurrentRun } from "../CurrentRun.js"

/** @internal */
export type SelfSettlement = "completed" | "suspended"

const reporters = new WeakMap<CurrentRun["Service"], (how: SelfSettlement) => void>()

/** Ties a run's `CurrentRun` to the lease that is told how the handler settled it. @internal */
export const register = (current: CurrentRun["Service"], report: (how: SelfSettlement) => void): void => {
  reporters.set(current, report)
}

/** Reports a settlement for the run whose `CurrentRun` this is (a no-op outside a worker). @internal */
export const report = (current: CurrentRun["Service"], how: SelfSettlement): void => {
  reporters.get(current)?.(how)
}
