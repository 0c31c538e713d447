// Overview: runs by state, the store's throughput charts, runs by queue, the leases closest to running out.
import { get, type History, LIVE_STATES, type Stats, type Throughput, type Worker } from "../api.js"
import { FinishedChart, LatencyChart, minutes } from "../chart.js"
import { dateTime, duration } from "../format.js"
import { Loading, PageHeading, Section, Table, useLoad, useTick } from "../ui.js"
import { useState } from "../vendor/hooks.js"
import { Fragment, h } from "../vendor/preact.js"
import { LEASE_HEADERS, LeaseRow } from "./workers.js"

const LIVE_SHOWN = 10

const megabytes = (bytes: number) => `${(bytes / 1_048_576).toFixed(1)} MB`

export const Charts = (
  { throughput, queues }: { readonly throughput: Throughput; readonly queues: ReadonlyArray<string> }
) => {
  const [queue, setQueue] = useState<string>("")
  const slots = minutes(throughput, queue === "" ? null : queue)
  const scope = queue === "" ? "all queues" : `queue ${queue}`
  return (
    <Fragment>
      <div class="filters">
        <div class="field">
          <label for="chart-queue">Queue</label>
          <select
            id="chart-queue"
            value={queue}
            onChange={(e) => setQueue((e.currentTarget as HTMLSelectElement).value)}
          >
            <option value="">all queues</option>
            {queues.map((q) => <option key={q} value={q}>{q}</option>)}
          </select>
        </div>
      </div>
      <div class="charts">
        <FinishedChart
          slots={slots}
          note={`Runs finished per minute, ${scope}, last ${throughput.minutes} minutes (from the store).`}
        />
        <LatencyChart slots={slots} pick={(m) => m.wait} what="wait time" />
        <LatencyChart slots={slots} pick={(m) => m.run} what="run time" />
      </div>
      {queue === ""
        ? <p class="muted">Across queues the lines show the highest queue's percentile each minute.</p>
        : null}
      {throughput.truncated
        ? (
          <p class="muted">
            More runs finished than the store reads for a chart: the oldest of the window are not counted.
          </p>
        )
        : null}
    </Fragment>
  )
}

export const Overview = () => {
  const loaded = useLoad(async () => {
    const [stats, workers, throughput, history] = await Promise.all([
      get<Stats>("/api/stats"),
      get<{ workers: ReadonlyArray<Worker> }>("/api/workers"),
      get<Throughput>("/api/throughput?minutes=60"),
      get<History>("/api/history")
    ])
    return { stats, workers: workers.workers, throughput, history, fetchedAt: Date.now() }
  }, "overview")
  useTick(1000)
  return (
    <Fragment>
      <PageHeading title="Overview" />
      <div class="stack">
        <Loading loaded={loaded}>
          {({ fetchedAt, history, stats, throughput, workers }) => {
            const totals = Object.fromEntries(LIVE_STATES.map((s) => [s, 0])) as Record<string, number>
            const byQueue = new Map<string, Record<string, number>>()
            for (const { count, queue, state } of stats.byStateAndQueue) {
              totals[state] = (totals[state] ?? 0) + count
              const row = byQueue.get(queue) ?? Object.fromEntries(LIVE_STATES.map((s) => [s, 0]))
              row[state] = count
              byQueue.set(queue, row)
            }
            const queues = [...byQueue.keys()].sort()
            const leases = workers.flatMap((w) => w.leases).sort((a, b) => a.expiresInMs - b.expiresInMs)
            return (
              <Fragment>
                <Section id="by-state" title="Runs by state">
                  <ul class="cards" aria-label="Runs by state">
                    {LIVE_STATES.map((state) => (
                      <li class={`card state-${state}`} key={state}>
                        <a href={`#/runs?state=${state}`}>
                          <span class="card-value">{String(totals[state])}</span>
                          <span class="card-label">{state}</span>
                        </a>
                      </li>
                    ))}
                    {(["completed", "failed"] as const).map((state) => (
                      // Ended runs: the throughput window (the stats count live runs only, ADR 0030).
                      <li class={`card state-${state}`} key={state}>
                        <a href={`#/runs?state=${state}`}>
                          <span class="card-value">
                            {String(throughput.series.reduce((n, m) => n + m[state], 0))}
                            {throughput.truncated ? "+" : ""}
                          </span>
                          <span class="card-label">{state}, last {throughput.minutes} min</span>
                        </a>
                      </li>
                    ))}
                    <li class="card">
                      <a href="#/workers">
                        <span class="card-value">{String(stats.liveLeases)}</span>
                        <span class="card-label">live leases</span>
                      </a>
                    </li>
                  </ul>
                  <dl class="facts">
                    <dt>Oldest pending run waiting</dt>
                    <dd>{stats.oldestPendingSeconds === null ? "—" : duration(stats.oldestPendingSeconds * 1000)}</dd>
                    <dt>Stale writes refused by the fence</dt>
                    <dd>{String(stats.fenceRejections)}</dd>
                    <dt>Runs reclaimed after a lease ran out</dt>
                    <dd>{String(stats.reclaims)}</dd>
                    <dt>History kept</dt>
                    <dd data-fact="history">
                      {history.oldestKeptAt === null
                        ? "—"
                        : `about ${history.runs.toLocaleString("en-US")} runs, ${megabytes(history.bytes)}, since ${
                          dateTime(new Date(history.oldestKeptAt))
                        }`}
                    </dd>
                  </dl>
                </Section>
                <Section id="throughput" title="Throughput">
                  <Charts throughput={throughput} queues={queues} />
                </Section>
                <Section id="by-queue" title="By queue">
                  <Table
                    caption="Runs by queue and state"
                    hiddenCaption
                    headers={["Queue", ...LIVE_STATES]}
                    count={queues.length}
                    empty="No runs yet."
                  >
                    {queues.map((queue) => (
                      <tr key={queue}>
                        <th scope="row">
                          <a href={`#/runs?queue=${encodeURIComponent(queue)}`}>{queue}</a>
                        </th>
                        {LIVE_STATES.map((state) => (
                          <td key={state} class={byQueue.get(queue)![state] === 0 ? "num muted" : "num"}>
                            {String(byQueue.get(queue)![state])}
                          </td>
                        ))}
                      </tr>
                    ))}
                  </Table>
                  <p>
                    <a href="#/queues">Queues: pause, resume, rates</a>
                  </p>
                </Section>
                <Section id="live-leases" title="Live leases">
                  <Table
                    caption={leases.length > LIVE_SHOWN
                      ? `The ${LIVE_SHOWN} closest to running out, of ${leases.length}`
                      : "Closest to running out first"}
                    hiddenCaption={leases.length <= LIVE_SHOWN}
                    headers={["Run", "Owner", ...LEASE_HEADERS.slice(1)]}
                    count={leases.length}
                    empty="No run is leased right now."
                  >
                    {leases.slice(0, LIVE_SHOWN).map((l) => (
                      <LeaseRow key={`${l.runId}/${l.fence}`} lease={l} fetchedAt={fetchedAt} withOwner />
                    ))}
                  </Table>
                </Section>
              </Fragment>
            )
          }}
        </Loading>
      </div>
    </Fragment>
  )
}
