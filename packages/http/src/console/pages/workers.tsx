// Workers: every worker process the registry lists (idle ones too), and the leases each holds.
import { get, type Lease, type Worker } from "../api.js"
import { dateTime, duration } from "../format.js"
import { Loading, PageHeading, RunLink, Table, Time, useLoad, useTick } from "../ui.js"
import { Fragment, h } from "../vendor/preact.js"

export const LEASE_HEADERS = ["Run", "Kind", "Queue", "Fence", "Lease expires", "Time left"]

/** Time left counts down from what the server said (by the database's clock) since it was fetched. */
export const LeaseRow = (
  { fetchedAt, lease, withOwner }: { readonly lease: Lease; readonly fetchedAt: number; readonly withOwner?: boolean }
) => {
  const left = lease.expiresInMs - (Date.now() - fetchedAt)
  return (
    <tr data-run-id={lease.runId}>
      <td>
        <RunLink id={lease.runId} />
      </td>
      {withOwner ? <td class="mono">{lease.owner}</td> : null}
      <td>{lease.kind}</td>
      <td>{lease.queue}</td>
      <td class="num">{String(lease.fence)}</td>
      <td class="nowrap">{dateTime(new Date(fetchedAt + lease.expiresInMs))}</td>
      <td class={left < 0 ? "num expired" : "num"}>
        {left < 0 ? `expired ${duration(-left)} ago` : `${Math.round(left / 1000)} s`}
      </td>
    </tr>
  )
}

export const Workers = () => {
  const loaded = useLoad(
    async () => ({
      workers: (await get<{ workers: ReadonlyArray<Worker> }>("/api/workers")).workers,
      fetchedAt: Date.now()
    }),
    "workers"
  )
  useTick(1000)
  return (
    <Fragment>
      <PageHeading title="Workers" />
      <p class="lede">
        Every worker process alive (each announces itself with its heartbeat), those gone (killed: their heartbeat
        stopped, with when they were last seen, for 10 minutes), and the leases each holds with the time left before
        another worker may reclaim the run.
      </p>
      <div class="stack">
        <Loading loaded={loaded}>
          {({ fetchedAt, workers }) => (
            <Fragment>
              <Table
                caption="Worker processes"
                hiddenCaption
                dense
                headers={[
                  "Owner",
                  "Host",
                  "PID",
                  "Version",
                  "Queues",
                  "Concurrency",
                  "Runs held",
                  "Last heartbeat",
                  "Started"
                ]}
                count={workers.length}
                empty="No worker is running."
              >
                {workers.map((w) => (
                  <tr
                    key={w.owner}
                    data-owner={w.owner}
                    class={w.gone === true ? "gone" : w.registered ? undefined : "unregistered"}
                  >
                    <td class="mono">{w.owner}</td>
                    <td>{w.host ?? "—"}</td>
                    <td class="num">{w.pid === undefined ? "—" : String(w.pid)}</td>
                    <td class="nowrap">{w.version ?? "—"}</td>
                    <td>
                      {w.queues === undefined
                        ? "—"
                        : <ul class="plain">{w.queues.map((q) => <li key={q}>{q}</li>)}</ul>}
                    </td>
                    <td class="num">{w.concurrency === undefined ? "—" : String(w.concurrency)}</td>
                    <td class="num wrap">
                      {w.registered ? `${w.runsHeld} of ${w.concurrency}` : `${w.leases.length} (not registered)`}
                    </td>
                    <td class={w.gone === true ? "wrap" : undefined}>
                      {w.gone === true
                        ? (
                          <Fragment>
                            <span
                              class="badge gone"
                              title="Its heartbeat stopped without a shutdown: killed, or cut off"
                            >
                              gone
                            </span>
                            {" last seen "}
                          </Fragment>
                        )
                        : null}
                      <Time at={w.lastHeartbeatAt} />
                    </td>
                    <td>
                      <Time at={w.startedAt} />
                    </td>
                  </tr>
                ))}
              </Table>
              {workers.filter((w) => w.leases.length > 0).map((w) => (
                <section class="worker" aria-label={`Worker ${w.owner}`} key={w.owner}>
                  <h2 class="mono">{w.owner}</h2>
                  <p class="muted">{`${w.leases.length} live lease${w.leases.length === 1 ? "" : "s"}`}</p>
                  <Table
                    caption={`Leases held by ${w.owner}`}
                    hiddenCaption
                    headers={LEASE_HEADERS}
                    count={w.leases.length}
                  >
                    {w.leases.map((l) => <LeaseRow key={`${l.runId}/${l.fence}`} lease={l} fetchedAt={fetchedAt} />)}
                  </Table>
                </section>
              ))}
            </Fragment>
          )}
        </Loading>
      </div>
    </Fragment>
  )
}
