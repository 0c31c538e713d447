// Approvals: every run waiting for a person's decision, the one waiting longest first, each with
// its payload, checkpoint and a form built from its signal's schema.
import { get, type Run, runsPath } from "../api.js"
import { isDecision, isWorkflowRun, workflowWaits } from "../runInfo.js"
import { DecisionForm } from "../schemaForm.js"
import { Json, Loading, PageHeading, RunLink, Time, useLoad } from "../ui.js"
import { useRef, useState } from "../vendor/hooks.js"
import { Fragment, h } from "../vendor/preact.js"

const KEEP_DECIDED_MS = 5000

/**
 * Suspended runs that wait for a person, oldest suspension first. The page is the 500 oldest
 * suspended runs (`after` id 0), not the newest: with more waiting, the ones waiting longest are kept.
 */
export const loadDecisions = async (): Promise<ReadonlyArray<Run>> => {
  const runs = (await get<{ runs: ReadonlyArray<Run> }>(runsPath({ state: "suspended", limit: 500, after: "0" }))).runs
  return runs.filter(isDecision).sort((a, b) =>
    new Date(a.updatedAt).getTime() - new Date(b.updatedAt).getTime() || Number(a.id) - Number(b.id)
  )
}

const Card = ({ onDecided, run }: { readonly run: Run; readonly onDecided: () => void }) => {
  const [decided, setDecided] = useState(false)
  const titleId = `approval-${run.id}`
  return (
    <article class={decided ? "approval decided" : "approval"} aria-labelledby={titleId} data-run-id={run.id}>
      <h2 id={titleId}>
        <span>{run.kind}</span> <RunLink id={run.id} />
      </h2>
      <dl class="facts">
        <dt>Queue</dt>
        <dd>{run.queue}</dd>
        <dt>Waiting for</dt>
        <dd>
          {isWorkflowRun(run) ? workflowWaits(run) : run.signalName ?? "—"}
          {!isWorkflowRun(run) && run.signalToken !== null
            ? (
              <Fragment>
                (token <code>{run.signalToken}</code>)
              </Fragment>
            )
            : null}
        </dd>
        <dt>Waiting since</dt>
        <dd>
          <Time at={run.updatedAt} />
        </dd>
        <dt>Deadline</dt>
        <dd>
          <Time at={run.suspendDeadline} />
        </dd>
        <dt>Suspended under fence</dt>
        <dd>{String(run.fence)}</dd>
      </dl>
      <h3>Payload</h3>
      <Json value={run.payload} label={`Payload of run ${run.id}`} />
      {run.checkpoint !== null && run.checkpoint !== undefined
        ? (
          <Fragment>
            <h3>Checkpoint</h3>
            <Json value={run.checkpoint} label={`Checkpoint of run ${run.id}`} />
          </Fragment>
        )
        : null}
      <DecisionForm
        run={run}
        onDone={() => {
          setDecided(true)
          onDecided()
        }}
      />
    </article>
  )
}

export const Approvals = () => {
  const loaded = useLoad(loadDecisions, "approvals")
  // A decided card stays a few seconds with its message before it leaves the inbox.
  const kept = useRef(new Map<string, Run>())
  const [, setVersion] = useState(0)
  return (
    <Fragment>
      <PageHeading title="Approvals" />
      <p class="lede">
        Runs suspended until someone decides, the one waiting longest first. A decision resumes the run under a new,
        higher fence.
      </p>
      <Loading loaded={loaded}>
        {(runs) => {
          const ids = new Set(runs.map((r) => r.id))
          const shown = [...runs, ...[...kept.current.values()].filter((r) => !ids.has(r.id))]
            .sort((a, b) =>
              new Date(a.updatedAt).getTime() - new Date(b.updatedAt).getTime() || Number(a.id) - Number(b.id)
            )
          const waiting = runs.filter((r) => !kept.current.has(r.id)).length
          return (
            <Fragment>
              <p class="muted" role="status">
                {waiting === 0 ? "Nothing is waiting for a decision." : `${waiting} waiting for a decision.`}
              </p>
              <div class="inbox">
                {shown.map((run) => (
                  <Card
                    key={run.id}
                    run={run}
                    onDecided={() => {
                      kept.current.set(run.id, run)
                      setTimeout(() => {
                        kept.current.delete(run.id)
                        setVersion((n) => n + 1)
                      }, KEEP_DECIDED_MS)
                    }}
                  />
                ))}
              </div>
            </Fragment>
          )
        }}
      </Loading>
    </Fragment>
  )
}
