// Schedules: each one's cron, next ticks, last tick and the run it enqueued, its missed-tick
// policy, and pause / resume.
import { get, post, type Schedule } from "../api.js"
import { duration } from "../format.js"
import * as Live from "../live.js"
import { ErrorBox, Loading, PageHeading, RunLink, StateBadge, Table, Time, useLoad } from "../ui.js"
import { useState } from "../vendor/hooks.js"
import { Fragment, h } from "../vendor/preact.js"

const missedPolicy = (s: Schedule) =>
  s.missed === "skip"
    ? "skip missed ticks"
    : s.missed === "once"
    ? `run once for missed ticks (within ${duration(s.backfillWindowMs)})`
    : `run every missed tick (up to ${s.maxBackfill}, within ${duration(s.backfillWindowMs)})`

export const Schedules = () => {
  const loaded = useLoad(() => get<{ schedules: ReadonlyArray<Schedule> }>("/api/schedules"), "schedules")
  const [failure, setFailure] = useState<unknown>(undefined)
  const toggle = async (s: Schedule) => {
    try {
      await post(`/api/schedules/${encodeURIComponent(s.name)}/${s.paused ? "resume" : "pause"}`)
      setFailure(undefined)
      Live.announce(`Schedule ${s.name} ${s.paused ? "resumed" : "paused"}`)
    } catch (error) {
      setFailure(error)
    }
    await loaded.reload()
  }
  return (
    <Fragment>
      <PageHeading title="Schedules" />
      <p class="lede">
        Each tick enqueues one run, whatever the number of workers. A paused schedule's ticks neither fire nor count as
        missed.
      </p>
      {failure !== undefined ? <ErrorBox error={failure} /> : null}
      <Loading loaded={loaded}>
        {({ schedules }) => (
          <Table
            caption="Schedules"
            hiddenCaption
            count={schedules.length}
            empty="No schedule is registered."
            headers={[
              "Schedule",
              "Cron",
              "Kind",
              "Queue",
              "Next ticks",
              "Last tick",
              "Last tick's run",
              "Missed ticks",
              "Status",
              "Action"
            ]}
          >
            {schedules.map((s) => (
              <tr key={s.name} data-schedule={s.name}>
                <th scope="row">{s.name}</th>
                <td>
                  <code class="nowrap">{s.cron}</code> <span class="muted nowrap">{s.timeZone}</span>
                </td>
                <td>{s.kind}</td>
                <td>{s.queue}</td>
                <td>
                  {s.nextTicks.length === 0 ?
                    <span class="muted">—</span> :
                    (
                      <ul class="plain">
                        {s.nextTicks.map((t) => (
                          <li key={t}>
                            <Time at={t} />
                          </li>
                        ))}
                      </ul>
                    )}
                </td>
                <td>
                  <Time at={s.lastTick} />
                </td>
                <td>
                  {s.lastRun === null ? <span class="muted">—</span> : (
                    <span class="nowrap">
                      <RunLink id={s.lastRun.id} /> <StateBadge state={s.lastRun.state} />
                    </span>
                  )}
                </td>
                <td class="text">{missedPolicy(s)}</td>
                <td>
                  {s.paused ? <span class="badge paused">paused</span> : <span class="badge active">active</span>}
                </td>
                <td>
                  <button
                    type="button"
                    class={s.paused ? undefined : "secondary"}
                    onClick={() => void toggle(s)}
                    aria-label={`${s.paused ? "Resume" : "Pause"} schedule ${s.name}`}
                  >
                    {s.paused ? "Resume" : "Pause"}
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
