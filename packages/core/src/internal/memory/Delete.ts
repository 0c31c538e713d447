/**
 * Deleting runs and the operators' audit (`packages/sql/src/internal/statements/deletes.ts`,
 * migration 0028): a delete counts first, then removes at most `deleteBatchSize` runs per
 * statement, each statement with its audit line, and everything kept of them.
 *
 * @internal
 */
import { RunsBusy } from "../../Errors.js"
import type { ActionRecord, ActionsQuery, DeleteCount, OperatorAction } from "../../OperatorActions.js"
import { isWorkflowRun } from "../../RunRecord.js"
import { auditedFilter, deleteBatchSize } from "../../RunStorage.js"
import type { DeleteRequest, RunFilter } from "../../RunStore.js"
import { matches } from "./Read.js"
import { enter } from "./Slots.js"
import { err, ok, type Outcome, type State } from "./State.js"

/** The runs the filter selects, how many are running, and the highest id among them (none past it is deleted). */
export const count = (state: State, filter: RunFilter): DeleteCount & { readonly maxId: number } => {
  let count = 0
  let busy = 0
  let maxId = 0
  for (const run of state.runs.values()) {
    if (!matches(run, filter)) continue
    count += 1
    if (run.state === "running") busy += 1
    maxId = Math.max(maxId, Number(run.id))
  }
  return { count, busy, maxId }
}

/**
 * Deletes up to `deleteBatchSize` of the selected runs numbered up to `maxId` (the lowest first),
 * with their history, idempotency key, unique window, callbacks and attempt logs; a slot a run
 * held goes to its key's next run. Refuses the whole batch when one of them is running. Returns
 * how many it deleted.
 */
export const deleteBatch = (
  state: State,
  request: DeleteRequest,
  maxId: number,
  deletedBefore: number,
  now: number
): Outcome<{ readonly deleted: number; readonly executions: ReadonlySet<string> }, RunsBusy> => {
  const batch = [...state.runs.values()]
    .filter((r) => Number(r.id) <= maxId && matches(r, request.filter))
    .sort((a, b) => Number(a.id) - Number(b.id))
    .slice(0, deleteBatchSize)
  const busy = batch.filter((r) => r.state === "running").length
  if (busy > 0) return err(new RunsBusy({ busy, deleted: deletedBefore }))
  if (batch.length === 0) return ok({ deleted: 0, executions: new Set() })
  const gone = new Set(batch.map((r) => r.id))
  for (const run of batch) {
    // A slot given back is handed on at the statement's end, as the row trigger does.
    enter(state, run, "cancelled")
    state.runs.delete(run.id)
    if (run.idempotencyKey !== null && state.keys.get(run.idempotencyKey) === run.id) {
      state.keys.delete(run.idempotencyKey)
    }
  }
  for (const [key, hold] of state.uniqueHolds) if (gone.has(hold.runId)) state.uniqueHolds.delete(key)
  for (const key of state.callbacks.keys()) if (gone.has(key.slice(0, key.indexOf(":")))) state.callbacks.delete(key)
  for (let i = state.events.length - 1; i >= 0; i--) if (gone.has(state.events[i]!.runId)) state.events.splice(i, 1)
  for (const id of gone) state.attemptLogs.delete(id)
  if (request.actor !== undefined) {
    recordAction(state, {
      actor: request.actor,
      action: "runs.delete",
      target: auditedFilter(request.filter),
      detail: { count: batch.length, ids: batch.map((r) => r.id) }
    }, now)
  }
  // A workflow's journal is kept by its execution: its run's idempotency key (isWorkflowRun).
  const executions = new Set(batch.filter(isWorkflowRun).map((r) => r.idempotencyKey!))
  return ok({ deleted: batch.length, executions })
}

export const recordAction = (state: State, record: ActionRecord, now: number): void => {
  state.actions.push({
    id: String(state.nextActionId++),
    at: new Date(now),
    by: record.actor.name,
    via: record.actor.via,
    action: record.action,
    target: record.target,
    detail: record.detail === undefined ? null : JSON.parse(JSON.stringify(record.detail))
  })
}

export const actions = (state: State, query: ActionsQuery): Array<OperatorAction> =>
  state.actions
    .filter((a) =>
      query.before === undefined || /^[0-9]{1,18}$/.test(query.before) && Number(a.id) < Number(query.before)
    )
    .reverse()
    .slice(0, query.limit)
