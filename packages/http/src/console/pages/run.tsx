// A run: its facts with dates, durations, wait and run time, its trace, its attempts under their
// fences, suspensions, stale writes refused, operator actions, a workflow's journal, its values.
import {
  type AttemptLog,
  get,
  getSession,
  type LogLine,
  post,
  remove,
  type RunDetail,
  runPath,
  type Session,
  type WorkflowOutcome
} from "../api.js"
import { between, compact, duration, shortId, traceIds, traceLink } from "../format.js"
import * as Live from "../live.js"
import { isDecision, isWorkflowRun, workflowWaits } from "../runInfo.js"
import { DecisionForm } from "../schemaForm.js"
import {
  ConfirmButton,
  ErrorBox,
  Json,
  Loading,
  PageHeading,
  RunLink,
  Section,
  StateBadge,
  Table,
  Time,
  useLoad
} from "../ui.js"
import { useEffect, useRef, useState } from "../vendor/hooks.js"
import { type ComponentChildren, Fragment, h } from "../vendor/preact.js"

const TERMINAL = ["completed", "failed", "cancelled"]

const exitText = (exit: unknown): { readonly outcome: string; readonly value: unknown } => {
  const e = exit as { _tag?: unknown; value?: unknown; cause?: unknown } | null
  if (e === null || typeof e !== "object") return { outcome: "—", value: exit }
  if (e._tag === "Success") return { outcome: "succeeded", value: e.value }
  if (e._tag === "Failure") return { outcome: "failed", value: e.cause }
  return { outcome: String(e._tag ?? "recorded"), value: exit }
}

// A log line as text (the handler's own words: user data, a text node, never markup).
const lineText = (line: LogLine): string =>
  `${line.at} ${line.level.toUpperCase()} ${line.message}${line.cut > 0 ? ` [${line.cut} more characters cut]` : ""}${
    Object.entries(line.annotations).map(([key, value]) => ` ${key}=${value}`).join("")
  }`

const AttemptLogs = ({ logs }: { readonly logs: ReadonlyArray<AttemptLog> }) =>
  logs.length === 0
    ? <p>No lines kept: a failed attempt's are, and a completed one's when its handler keeps them.</p>
    : (
      <Fragment>
        {logs.map((log) => (
          <div key={log.fence} class="attempt-log" data-fence={String(log.fence)}>
            <h3>
              {`Fence ${log.fence}, attempt ${log.attempt}, ${log.outcome}: ${log.lines.length} line${
                log.lines.length === 1 ? "" : "s"
              }`}
              {log.dropped > 0 ? `, ${log.dropped} earlier left out` : ""}
            </h3>
            <pre class="log" tabIndex={0} aria-label={`Log lines of fence ${log.fence}`}>
              {log.lines.map(lineText).join("\n")}
            </pre>
          </div>
        ))}
      </Fragment>
    )

export const RunPage = ({ id }: { readonly id: string }) => {
  const loaded = useLoad(async () => {
    const [detail, session] = await Promise.all([
      get<RunDetail>(runPath(id)),
      getSession().catch((): Session | null => null)
    ])
    return { detail, traceUrl: session?.traceUrl ?? null, readOnly: session?.readOnly ?? true }
  }, `run/${id}`)
  const [failure, setFailure] = useState<unknown>(undefined)
  const lastState = useRef<string | undefined>(undefined)
  const state = loaded.data?.detail.run.state
  useEffect(() => {
    if (state !== undefined && lastState.current !== undefined && lastState.current !== state) {
      Live.announce(`Run is now ${state}`)
    }
    lastState.current = state
  }, [state])
  const act = (action: "cancel" | "retry", label: string) => async () => {
    try {
      await post(`${runPath(id)}/${action}`)
      setFailure(undefined)
      Live.announce(`${label}: done`)
    } catch (error) {
      setFailure(error)
    }
    await loaded.reload()
  }
  const run = loaded.data?.detail.run
  return (
    <Fragment>
      <PageHeading title={`Run ${shortId(id)}`}>
        <div class="actions">
          {run !== undefined && !TERMINAL.includes(run.state)
            ? (
              <ConfirmButton
                label="Cancel run"
                class="danger"
                question="Cancel this run? Its fence advances, so a worker still holding it is refused."
                onConfirm={act("cancel", "Cancel run")}
              />
            )
            : null}
          {run !== undefined && (run.state === "failed" || run.state === "cancelled")
            ? <button type="button" onClick={() => void act("retry", "Retry run")()}>Retry run</button>
            : null}
          {run !== undefined && run.state !== "running"
            ? (
              <ConfirmButton
                label="Delete run"
                class="danger"
                question="Delete this run for good? Its payload, result and history go; its idempotency key is free again."
                onConfirm={async () => {
                  try {
                    await remove(runPath(id))
                    Live.announce(`Run ${shortId(id)} deleted`)
                    location.hash = "#/runs"
                  } catch (error) {
                    setFailure(error)
                  }
                }}
              />
            )
            : null}
        </div>
      </PageHeading>
      {failure !== undefined ? <ErrorBox error={failure} /> : null}
      <div class="stack">
        <Loading loaded={loaded}>
          {({ detail: { attemptLogs, children, history, journal, run, signedUrls }, readOnly, traceUrl }) => {
            const last = history.attempts.at(-1)
            const first = history.attempts[0]
            const ids = traceIds(run.traceParent)
            const link = ids === null ? null : traceLink(traceUrl, ids)
            const facts: ReadonlyArray<readonly [string, ComponentChildren]> = [
              ["Id", <span class="mono">{run.id}</span>],
              ["State", <StateBadge state={run.state} />],
              ["Kind", run.kind],
              ["Queue", run.queue],
              ["Fence", <strong class="fence">{String(run.fence)}</strong>],
              ["Attempt", `${run.state === "suspended" ? run.attempt + 1 : run.attempt} of ${run.maxAttempts}`],
              ["Lease owner", run.leaseOwner ?? "—"],
              ["Lease expires", <Time at={run.leaseExpiresAt} />],
              ["Priority", String(run.priority)],
              ["Created", <Time at={run.createdAt} />],
              ["Due", <Time at={run.runAt} />],
              ["Started", <Time at={last?.start} />],
              ["Finished", <Time at={run.finishedAt} />],
              ["Updated", <Time at={run.updatedAt} />],
              [
                "Duration",
                run.finishedAt === null
                  ? `${duration(between(run.createdAt, new Date().toISOString()))} so far`
                  : duration(between(run.createdAt, run.finishedAt))
              ],
              // The wait of the first attempt (enqueued → first claim) and the last attempt's run time.
              ["Wait time", duration(between(run.createdAt, first?.start))],
              ["Run time", duration(between(last?.start, last?.end ?? run.finishedAt))],
              ["Attempt timeout", run.attemptTimeoutMs === null ? "—" : duration(run.attemptTimeoutMs)],
              ["Deadline", <Time at={run.deadline} />],
              [
                "Trace",
                ids === null ? "—" : link === null
                  ? <code title={run.traceParent ?? ""}>{ids.traceId}</code>
                  : <a href={link} rel="noreferrer noopener" target="_blank" class="mono">{ids.traceId}</a>
              ],
              ["Idempotency key", run.idempotencyKey ?? "—"],
              ["Concurrency key", run.concurrencyKey ?? "—"],
              [
                "Waiting for",
                run.state === "suspended" && isWorkflowRun(run)
                  ? workflowWaits(run)
                  : run.signalName !== null
                  ? (
                    <span>
                      {`signal "${run.signalName}", token `}
                      <code>{run.signalToken ?? "—"}</code>
                      {", deadline "}
                      <Time at={run.suspendDeadline} />
                    </span>
                  )
                  : "—"
              ]
            ]
            return (
              <Fragment>
                <dl class="summary">
                  {facts.map(([term, value]) => (
                    <div key={term}>
                      <dt>{term}</dt>
                      <dd>{value}</dd>
                    </div>
                  ))}
                </dl>
                {isDecision(run)
                  ? (
                    <Section id="decide" title="Decision">
                      <DecisionForm run={run} onDone={() => void loaded.reload()} />
                    </Section>
                  )
                  : null}
                {journal !== null ?
                  (
                    <Section id="journal" title="Workflow journal">
                      <Table
                        caption="Activities, deferreds and clocks in the order they were written"
                        hiddenCaption
                        count={journal.length}
                        headers={["At", "Entry", "Name", "Attempt", "Fence", "Outcome", "Value"]}
                        empty="Nothing journalled yet."
                      >
                        {journal.map((entry, i) => {
                          if (entry.type === "clock") {
                            return (
                              <tr key={i} data-entry="clock">
                                <td>
                                  <Time at={entry.wakeAt} />
                                </td>
                                <td>clock</td>
                                <td class="mono">{entry.name}</td>
                                <td />
                                <td />
                                <td>{entry.fired ? "fired" : "waiting"}</td>
                                <td />
                              </tr>
                            )
                          }
                          const exit = entry.type === "deferred" && !entry.done
                            ? { outcome: "awaited", value: undefined }
                            : exitText(entry.exit)
                          return (
                            <tr key={i} data-entry={entry.type}>
                              <td>
                                <Time at={entry.at} />
                              </td>
                              <td>{entry.type}</td>
                              <td class="mono">{entry.name}</td>
                              <td class="num">{entry.type === "activity" ? String(entry.attempt) : ""}</td>
                              <td class="num">
                                {entry.type === "activity" ? <strong>{String(entry.fence)}</strong> : ""}
                              </td>
                              <td>
                                <span
                                  class={`outcome outcome-${
                                    exit.outcome === "succeeded"
                                      ? "completed"
                                      : exit.outcome === "failed"
                                      ? "failed"
                                      : "suspended"
                                  }`}
                                >
                                  {exit.outcome}
                                </span>
                              </td>
                              <td>
                                {exit.value === undefined ? "" : <code class="inline-json">{compact(exit.value)}</code>}
                              </td>
                            </tr>
                          )
                        })}
                      </Table>
                    </Section>
                  ) :
                  null}
                {children !== null && children !== undefined ?
                  (
                    <Section id="children" title="Child workflows">
                      <Table
                        caption="Workflows this one started, oldest first"
                        hiddenCaption
                        count={children.length}
                        headers={["Run", "Workflow", "Execution", "State", "Created", "Finished"]}
                        empty="No child workflow."
                      >
                        {children.map((child) => (
                          <tr key={child.id} data-run-id={child.id}>
                            <td>
                              <RunLink id={child.id} />
                            </td>
                            <td>{child.kind.replace(/^workflow\//, "")}</td>
                            <td class="mono">{child.execution ?? "—"}</td>
                            <td>
                              <StateBadge state={child.state} />
                            </td>
                            <td>
                              <Time at={child.createdAt} />
                            </td>
                            <td>
                              <Time at={child.finishedAt} />
                            </td>
                          </tr>
                        ))}
                      </Table>
                    </Section>
                  ) :
                  null}
                <Section id="attempts" title="Attempts">
                  <Table
                    caption="Each claim, under its own fence"
                    hiddenCaption
                    count={history.attempts.length}
                    empty="Not claimed yet."
                    headers={["Fence", "Owner", "Taken", "Started", "Ended", "Run time", "Outcome", "Detail"]}
                  >
                    {history.attempts.map((a) => (
                      <tr key={a.fence}>
                        <td class="num">
                          <strong>{String(a.fence)}</strong>
                        </td>
                        <td class="mono">{a.owner ?? "—"}</td>
                        <td>{a.via}</td>
                        <td>
                          <Time at={a.start} />
                        </td>
                        <td>
                          <Time at={a.end} />
                        </td>
                        <td class="num nowrap">{duration(between(a.start, a.end))}</td>
                        <td>
                          <span class={`outcome outcome-${String(a.outcome).replace(/[^a-z_]/g, "")}`}>
                            {String(a.outcome).replace(/_/g, " ")}
                          </span>
                        </td>
                        <td class="text">{a.detail ?? ""}</td>
                      </tr>
                    ))}
                  </Table>
                </Section>
                <Section id="logs" title="Attempt logs">
                  <AttemptLogs logs={attemptLogs ?? []} />
                </Section>
                <Section id="suspensions" title="Suspensions">
                  <Table
                    caption="Waits for a signal"
                    hiddenCaption
                    count={history.suspensions.length}
                    empty="Never suspended."
                    headers={[
                      "Fence",
                      isWorkflowRun(run) ? "Waited for" : "Signal",
                      "Suspended",
                      "Deadline",
                      "Ended",
                      "Outcome",
                      "Resumed with"
                    ]}
                  >
                    {history.suspensions.map((s, i) => (
                      <tr key={i}>
                        <td class="num">{String(s.fence)}</td>
                        <td>{s.waitedFor ?? s.signal ?? "—"}</td>
                        <td>
                          <Time at={s.suspendedAt} />
                        </td>
                        <td>
                          <Time at={s.deadline} />
                        </td>
                        <td>
                          <Time at={s.endedAt} />
                        </td>
                        <td>{String(s.outcome).replace(/_/g, " ")}</td>
                        <td>
                          {s.payload === null || s.payload === undefined
                            ? ""
                            : <code class="inline-json">{compact(s.payload)}</code>}
                        </td>
                      </tr>
                    ))}
                  </Table>
                </Section>
                <Section id="stale" title="Stale writes refused">
                  <Table
                    caption="Writes refused because their fence was superseded"
                    hiddenCaption
                    count={history.rejectedWrites.length}
                    empty="None: no superseded holder tried to write."
                    headers={["At", "Operation", "Presented fence", "Stored fence"]}
                  >
                    {history.rejectedWrites.map((r, i) => (
                      <tr key={i}>
                        <td>
                          <Time at={r.at} />
                        </td>
                        <td>{r.operation}</td>
                        <td class="num">{String(r.presentedFence)}</td>
                        <td class="num">{r.storedFence === null ? "—" : String(r.storedFence)}</td>
                      </tr>
                    ))}
                  </Table>
                </Section>
                {history.adminActions.length > 0 ?
                  (
                    <Section id="admin" title="Operator actions">
                      <Table
                        caption="Cancel, retry and resume, with who made them"
                        hiddenCaption
                        count={history.adminActions.length}
                        headers={["At", "Action", "Fence", "By", "From"]}
                      >
                        {history.adminActions.map((a, i) => (
                          <tr key={i}>
                            <td>
                              <Time at={a.at} />
                            </td>
                            <td>{a.action}</td>
                            <td class="num">{String(a.fence)}</td>
                            <td class="actor">{a.by ?? "the application"}</td>
                            <td>{a.via ?? ""}</td>
                          </tr>
                        ))}
                      </Table>
                    </Section>
                  ) :
                  null}
                {signedUrls !== undefined && signedUrls.length > 0 ?
                  (
                    <Section id="signed-urls" title="Signed URLs">
                      <p class="muted">
                        {readOnly
                          ? "Their signatures are masked: whoever holds one can resume the run. Copying one needs write access."
                          : "Their signatures are masked: whoever holds one can resume the run. Copy asks the server for the whole URL."}
                      </p>
                      <ul class="signed-urls">
                        {signedUrls.map((masked) => (
                          <li key={masked}>
                            <code class="inline-json">{masked}</code>
                            {readOnly ? null : <CopySignedUrl runId={run.id} masked={masked} />}
                          </li>
                        ))}
                      </ul>
                    </Section>
                  ) :
                  null}
                <Section id="checkpoint" title="Checkpoint">
                  <Json value={run.checkpoint} label="Checkpoint" />
                </Section>
                <Section id="payload" title="Payload">
                  <Json value={run.payload} label="Payload" />
                </Section>
                {run.error !== null && run.error !== undefined
                  ? (
                    <Section id="error" title="Error">
                      <Json value={run.error} label="Error" />
                    </Section>
                  )
                  : run.workflow?.outcome
                  ? <WorkflowResult outcome={run.workflow.outcome} />
                  : (
                    <Section id="result" title="Result">
                      <Json value={run.result} label="Result" />
                    </Section>
                  )}
                <details class="events">
                  <summary>{`History events (${history.events.length})`}</summary>
                  <Table
                    caption="Stored history"
                    hiddenCaption
                    count={history.events.length}
                    empty="No events."
                    headers={["At", "Event", "Fence", "Owner", "Detail"]}
                  >
                    {history.events.map((e) => (
                      <tr key={e.id}>
                        <td>
                          <Time at={e.at} />
                        </td>
                        <td>{e.kind}</td>
                        <td class="num">{String(e.fence)}</td>
                        <td class="mono">{e.owner ?? ""}</td>
                        <td>
                          {e.detail === null || e.detail === undefined
                            ? ""
                            : <code class="inline-json">{compact(e.detail)}</code>}
                        </td>
                      </tr>
                    ))}
                  </Table>
                </details>
              </Fragment>
            )
          }}
        </Loading>
      </div>
    </Fragment>
  )
}

/**
 * Copies one signed URL whole to the clipboard: asked of the server (a write: CSRF, refused when
 * read-only) at the click, so the page never holds it. Where the clipboard is not available (a page
 * not served from a secure origin), the URL is shown in a selected field for this person to copy.
 */
const CopySignedUrl = ({ runId, masked }: { readonly runId: string; readonly masked: string }) => {
  const [failure, setFailure] = useState<unknown>(undefined)
  const [shown, setShown] = useState<string | undefined>(undefined)
  const field = useRef<HTMLInputElement>(null)
  useEffect(() => field.current?.select(), [shown])
  const copy = async () => {
    try {
      const answer = await post<{ urls: ReadonlyArray<{ masked: string; url: string }> }>(
        `${runPath(runId)}/signed-urls`
      )
      const url = answer?.urls.find((u) => u.masked === masked)?.url
      if (url === undefined) throw new Error("the run no longer holds this URL")
      setFailure(undefined)
      if (navigator.clipboard === undefined) return setShown(url)
      await navigator.clipboard.writeText(url)
      Live.announce("Copied the signed URL")
    } catch (error) {
      setFailure(error)
    }
  }
  return (
    <Fragment>
      {" "}
      <button type="button" class="secondary" onClick={() => void copy()}>Copy</button>
      {shown !== undefined ? <input ref={field} readOnly aria-label="Signed URL" value={shown} /> : null}
      {failure !== undefined ? <ErrorBox error={failure} /> : null}
    </Fragment>
  )
}

/** A workflow run's result as its workflow returned it: the value, the error, the defect, or an interruption. */
const WorkflowResult = ({ outcome }: { outcome: WorkflowOutcome }) => {
  const [said, value] = outcome._tag === "Succeeded"
    ? ["The workflow succeeded with:", outcome.value]
    : outcome._tag === "Failed"
    ? ["The workflow failed with:", outcome.error]
    : outcome._tag === "Died"
    ? ["The workflow died of:", outcome.defect]
    : ["The workflow was interrupted.", undefined]
  return (
    <Section id="result" title="Result">
      <p>{said}</p>
      {outcome._tag === "Interrupted" ? null : <Json value={value} label={said} />}
    </Section>
  )
}
