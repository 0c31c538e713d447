// What the console knows of runs beyond their fields (as @leasehold/core says it).
import type { Run } from "./api.js"

/** A workflow execution's run (core isWorkflowRun): it waits on its journal, not on its signal. */
export const isWorkflowRun = (run: Run): boolean =>
  run.kind.startsWith("workflow/") && typeof run.idempotencyKey === "string" &&
  run.idempotencyKey.startsWith(`${run.kind}/`)

/** A suspended run waiting for a signal, or a workflow waiting on a deferred meant for a person. */
export const isDecision = (run: Run): boolean =>
  run.state === "suspended" && (!isWorkflowRun(run) || (run.workflow?.awaiting ?? []).some((a) => a.forPerson))

/** What a suspended workflow waits on, as text. */
export const workflowWaits = (run: Run): string => {
  const awaiting = run.workflow?.awaiting ?? []
  if (awaiting.length === 0) return `its workflow journal (execution ${run.idempotencyKey})`
  return awaiting
    .map((
      a
    ) => (a.wakeAt
      ? `clock "${a.name}" until ${new Date(a.wakeAt).toISOString()}`
      : `deferred "${a.name}"${a.forPerson ? " (for a person)" : ""}`)
    )
    .join(", ")
}
