// Key limits: each declared limit, the keys running under it, and its keys waiting longest; then
// the rate limits, with the starts in each one's last interval.
import { get, type KeyLimit, type RateLimit } from "../api.js"
import { duration } from "../format.js"
import { Loading, PageHeading, Table, useLoad } from "../ui.js"
import { Fragment, h } from "../vendor/preact.js"

export const Limits = () => {
  const loaded = useLoad(
    () => get<{ limits: ReadonlyArray<KeyLimit>; rateLimits: ReadonlyArray<RateLimit> }>("/api/limits?top=10"),
    "limits"
  )
  return (
    <Fragment>
      <PageHeading title="Key limits" />
      <p class="lede">
        At most the limit's number of runs with the same concurrency key run at once, across every worker. A key's runs
        beyond it wait for a slot, the oldest first.
      </p>
      <Loading loaded={loaded}>
        {({ limits, rateLimits }) => (
          <Fragment>
            {limits.length === 0 ? <p class="empty">No key limit is declared.</p> : limits.map((limit) => {
              const id = `limit-${limit.scope}-${limit.name}`.replace(/[^A-Za-z0-9_-]/g, "_")
              return (
                <section
                  aria-labelledby={id}
                  class="limit"
                  key={`${limit.scope}/${limit.name}`}
                  data-limit={`${limit.scope}:${limit.name}`}
                >
                  <h2 id={id}>{`${limit.scope === "kind" ? "Kind" : "Queue"} ${limit.name}`}</h2>
                  <dl class="facts">
                    <dt>Limit per key</dt>
                    <dd>{String(limit.perKey)}</dd>
                    <dt>Keys running now</dt>
                    <dd>{String(limit.keysRunning)}</dd>
                    <dt>Keyed runs due</dt>
                    <dd>{String(limit.keyedDue)}</dd>
                  </dl>
                  <Table
                    caption={`Keys of ${limit.scope} ${limit.name}, waiting longest first`}
                    count={limit.keys.length}
                    headers={["Key", "Slots held", "Waiting", "Oldest waiting for"]}
                    empty="No key holds a slot or waits."
                  >
                    {limit.keys.map((k) => (
                      <tr key={k.key} data-key={k.key}>
                        <td class="mono">
                          <a href={`#/runs?key=${encodeURIComponent(k.key)}`}>{k.key}</a>
                        </td>
                        <td class="num">{`${k.held} of ${limit.perKey}`}</td>
                        <td class="num">{String(k.waiting)}</td>
                        <td class="num nowrap">
                          {k.oldestWaitingSeconds === null ? "—" : duration(k.oldestWaitingSeconds * 1000)}
                        </td>
                      </tr>
                    ))}
                  </Table>
                </section>
              )
            })}
            <h2 id="rate-limits">Rate limits</h2>
            <Table
              caption="Rate limits: runs started per interval, across every worker"
              count={rateLimits.length}
              headers={["Limit", "Starts", "Per", "Per key", "Started in the last interval", "Due, not started"]}
              empty="No rate limit is declared."
            >
              {rateLimits.map((r) => (
                <tr key={`${r.scope}/${r.name}`} data-rate-limit={`${r.scope}:${r.name}`}>
                  <td>{`${r.scope === "kind" ? "Kind" : "Queue"} ${r.name}`}</td>
                  <td class="num">{String(r.limit)}</td>
                  <td class="num nowrap">{duration(r.intervalMs)}</td>
                  <td>{r.perKey ? "yes" : "no"}</td>
                  <td class="num">{String(r.startedInWindow)}</td>
                  <td class="num">{String(r.due)}</td>
                </tr>
              ))}
            </Table>
          </Fragment>
        )}
      </Loading>
    </Fragment>
  )
}
