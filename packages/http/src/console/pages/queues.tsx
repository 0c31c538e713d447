// Queues: runs by state, due runs and the oldest one's wait, rates over the last 5 minutes, the
// workers serving each, and whether it is paused, with pause and resume.
import { get, LIVE_STATES, post, type Queue } from "../api.js"
import { duration } from "../format.js"
import * as Live from "../live.js"
import { ErrorBox, Loading, PageHeading, Table, Time, useLoad } from "../ui.js"
import { useState } from "../vendor/hooks.js"
import { Fragment, h } from "../vendor/preact.js"

const rate = (
  perMinute: number
) => (perMinute === 0 ? "0" : perMinute < 1 ? perMinute.toFixed(2) : perMinute.toFixed(1))

export const Queues = () => {
  const loaded = useLoad(() => get<{ queues: ReadonlyArray<Queue> }>("/api/queues"), "queues")
  const [failure, setFailure] = useState<unknown>(undefined)
  const toggle = async (queue: Queue) => {
    const action = queue.paused ? "resume" : "pause"
    try {
      await post(`/api/queues/${encodeURIComponent(queue.queue)}/${action}`)
      setFailure(undefined)
      Live.announce(`Queue ${queue.queue} ${queue.paused ? "resumed" : "paused"}`)
    } catch (error) {
      setFailure(error)
    }
    await loaded.reload()
  }
  return (
    <Fragment>
      <PageHeading title="Queues" />
      <p class="lede">
        A paused queue's runs are not claimed (running ones finish; new ones are accepted and wait). Rates are per
        minute over the last 5 minutes.
      </p>
      {failure !== undefined ? <ErrorBox error={failure} /> : null}
      <Loading loaded={loaded}>
        {({ queues }) => (
          <Table
            caption="Queues"
            hiddenCaption
            dense
            count={queues.length}
            empty="No queue has runs or workers yet."
            headers={[
              "Queue",
              "Status",
              ...LIVE_STATES,
              "Due",
              "Oldest due",
              "Completed / min",
              "Failed / min",
              "Workers",
              "Action"
            ]}
          >
            {queues.map((q) => (
              <tr key={q.queue} data-queue={q.queue}>
                <th scope="row">
                  <a href={`#/runs?queue=${encodeURIComponent(q.queue)}`}>{q.queue}</a>
                </th>
                <td class="wrap">
                  {q.paused
                    ? <span class="badge paused" title={q.pausedSince ?? ""}>paused</span>
                    : <span class="badge active">active</span>}
                  {q.paused
                    ? (
                      <div class="muted small may-wrap">
                        since <Time at={q.pausedSince} />
                      </div>
                    )
                    : null}
                </td>
                {LIVE_STATES.map((state) => (
                  <td key={state} class={q.counts[state] === 0 ? "num muted" : "num"}>{String(q.counts[state])}</td>
                ))}
                <td class="num">{String(q.due)}</td>
                <td class="num nowrap">{q.oldestDueSeconds === null ? "—" : duration(q.oldestDueSeconds * 1000)}</td>
                <td class="num">{rate(q.completedPerMinute)}</td>
                <td class={q.failedPerMinute > 0 ? "num failed-rate" : "num"}>{rate(q.failedPerMinute)}</td>
                <td class="num">{String(q.workers)}</td>
                <td>
                  <button
                    type="button"
                    class={q.paused ? undefined : "secondary"}
                    onClick={() => void toggle(q)}
                    aria-label={`${q.paused ? "Resume" : "Pause"} queue ${q.queue}`}
                  >
                    {q.paused ? "Resume" : "Pause"}
                  </button>
                </td>
              </tr>
            ))}
          </Table>
        )}
      </Loading>
    </Fragment>
  )
}
