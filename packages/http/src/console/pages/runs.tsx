// Runs: search (id, state, kind, queue, key, error text, creation time, two payload fields), newest
// first by cursor pages, an error column, and multi-select bulk retry / cancel with a confirmation
// that says how many runs it touches; delete of the selected runs that are not running, confirmed
// with their count (the server deletes only that many).
import { get, post, type Run, runsPath, STATES } from "../api.js"
import { errorLine } from "../format.js"
import * as Live from "../live.js"
import { ConfirmButton, ErrorBox, Loading, PageHeading, RunLink, StateBadge, Table, Time, useLoad } from "../ui.js"
import { useState } from "../vendor/hooks.js"
import { Fragment, h } from "../vendor/preact.js"

const FIELDS = [
  "id",
  "state",
  "kind",
  "queue",
  "key",
  "error",
  "from",
  "to",
  "field",
  "value",
  "field2",
  "value2",
  "limit",
  "before",
  "after"
] as const
const PAGE_SIZES = [50, 100, 200]

/** A `datetime-local` value (the browser's time zone) as an instant for the API. */
const instant = (local: string) => {
  if (local === "") return ""
  const date = new Date(local)
  return Number.isNaN(date.getTime()) ? local : date.toISOString()
}

const attemptSeen = (run: Run) => (run.state === "suspended" ? run.attempt + 1 : run.attempt)

export const Runs = ({ params }: { readonly params: URLSearchParams }) => {
  const filter = Object.fromEntries(FIELDS.map((f) => [f, params.get(f) ?? ""])) as Record<
    (typeof FIELDS)[number],
    string
  >
  const pageSize = PAGE_SIZES.includes(Number(filter.limit)) ? Number(filter.limit) : 50
  const query = { ...filter, from: instant(filter.from), to: instant(filter.to), limit: pageSize + 1 }
  const loaded = useLoad(
    () => get<{ runs: ReadonlyArray<Run>; createdFrom: string | null }>(runsPath(query)),
    params.toString()
  )
  const [selected, setSelected] = useState<ReadonlySet<string>>(new Set())
  const [outcome, setOutcome] = useState<string>("")
  const [failure, setFailure] = useState<unknown>(undefined)

  const submit = (event: Event) => {
    event.preventDefault()
    const data = new FormData(event.currentTarget as HTMLFormElement)
    const next = new URLSearchParams()
    for (const [key, value] of data.entries()) {
      if (String(value) !== "" && key !== "limit-default") next.set(key, String(value))
    }
    location.hash = `#/runs${next.size > 0 ? `?${next}` : ""}`
  }
  const pageLink = (cursor: "before" | "after", id: string, text: string) => {
    const next = new URLSearchParams(params)
    next.delete("before")
    next.delete("after")
    next.set(cursor, id)
    return <a href={`#/runs?${next}`} class="button secondary">{text}</a>
  }
  const bulk = async (action: "retry" | "cancel" | "delete", ids: ReadonlyArray<string>) => {
    try {
      const n = action === "delete"
        ? (await post<{ deleted: number }>("/api/runs/bulk/delete", { ids, expected: ids.length }))?.deleted ?? 0
        : (await post<{ affected: ReadonlyArray<string> }>(`/api/runs/bulk/${action}`, { ids }))?.affected.length ?? 0
      const done = action === "retry" ? "Retried" : action === "cancel" ? "Cancelled" : "Deleted"
      const text = `${done} ${n} run${n === 1 ? "" : "s"}${n < ids.length ? ` (${ids.length - n} could not be)` : ""}.`
      setOutcome(text)
      setFailure(undefined)
      Live.announce(text)
      setSelected(new Set())
    } catch (error) {
      setFailure(error)
    }
    await loaded.reload()
  }
  // The fields start from the page's link and are then the operator's: `defaultValue` and an
  // option's `selected`, not `value`, which Preact writes back on every render (each live reload)
  // over what is being typed.
  const input = (name: (typeof FIELDS)[number], label: string, attrs: Record<string, string> = {}) => (
    <div class="field">
      <label for={`filter-${name}`}>{label}</label>
      <input id={`filter-${name}`} name={name} defaultValue={filter[name]} autoComplete="off" {...attrs} />
    </div>
  )
  return (
    <Fragment>
      <PageHeading title="Runs" />
      <form class="filters" role="search" aria-label="Search runs" onSubmit={submit}>
        {input("id", "Run id", { inputMode: "numeric", size: "8" })}
        <div class="field">
          <label for="filter-state">State</label>
          <select id="filter-state" name="state">
            <option value="" selected={filter.state === ""}>any</option>
            {STATES.map((s) => <option key={s} value={s} selected={s === filter.state}>{s}</option>)}
          </select>
        </div>
        {input("kind", "Kind")}
        {input("queue", "Queue")}
        {input("key", "Concurrency key")}
        {input("error", "Error text", { placeholder: "e.g. timeout" })}
        {input("from", "Created from", { type: "datetime-local", step: "1" })}
        {input("to", "Created before", { type: "datetime-local", step: "1" })}
        {input("field", "Payload field", { placeholder: "e.g. order" })}
        {input("value", "Payload value", { placeholder: "e.g. A-1" })}
        {input("field2", "Second payload field", { placeholder: "e.g. customer" })}
        {input("value2", "Second payload value")}
        <div class="field">
          <label for="filter-limit">Per page</label>
          <select id="filter-limit" name="limit">
            {PAGE_SIZES.map((n) => <option key={n} value={String(n)} selected={n === pageSize}>{String(n)}</option>)}
          </select>
        </div>
        <div class="field buttons">
          <button type="submit">Search</button>
          <button type="button" class="secondary" onClick={() => (location.hash = "#/runs")}>Clear</button>
        </div>
      </form>
      {failure !== undefined ? <ErrorBox error={failure} /> : null}
      {outcome !== "" ? <p class="form-message" role="status">{outcome}</p> : null}
      <Loading loaded={loaded}>
        {({ createdFrom, runs }) => {
          const newer = filter.after !== "" ? runs.length > pageSize : filter.before !== ""
          const older = filter.after !== "" ? runs.length > 0 : runs.length > pageSize
          const shown = filter.after !== "" ? runs.slice(Math.max(0, runs.length - pageSize)) : runs.slice(0, pageSize)
          const chosen = shown.filter((r) => selected.has(r.id))
          const retryable = chosen.filter((r) => r.state === "failed" || r.state === "cancelled")
          const cancellable = chosen.filter((r) =>
            r.state !== "completed" && r.state !== "failed" && r.state !== "cancelled"
          )
          const deletable = chosen.filter((r) => r.state !== "running")
          const all = shown.length > 0 && chosen.length === shown.length
          const toggle = (id: string) => {
            const next = new Set(selected)
            if (next.has(id)) next.delete(id)
            else next.add(id)
            setSelected(next)
          }
          const plural = (n: number) => `${n} run${n === 1 ? "" : "s"}`
          return (
            <Fragment>
              {filter.from === "" && createdFrom !== null
                ? (
                  // The server's default window for a search by error text or payload (ADR 0030).
                  <p class="muted" id="search-window">
                    Searching the runs created since <Time at={createdFrom} />{" "}
                    (the last hour): set Created from to look further back.
                  </p>
                )
                : null}
              <div class="bulk" role="group" aria-label="Selected runs">
                <span class="muted">{`${chosen.length} selected`}</span>
                <ConfirmButton
                  label="Retry selected"
                  disabled={retryable.length === 0}
                  question={`Retry ${plural(retryable.length)}? Each goes back to pending under a higher fence.`}
                  yes={`Yes, retry ${plural(retryable.length)}`}
                  onConfirm={() => bulk("retry", retryable.map((r) => r.id))}
                />
                <ConfirmButton
                  label="Cancel selected"
                  class="danger"
                  disabled={cancellable.length === 0}
                  question={`Cancel ${plural(cancellable.length)}? A worker still holding one is refused by its fence.`}
                  yes={`Yes, cancel ${plural(cancellable.length)}`}
                  onConfirm={() => bulk("cancel", cancellable.map((r) => r.id))}
                />
                <ConfirmButton
                  label="Delete selected"
                  class="danger"
                  disabled={deletable.length === 0}
                  question={`Delete ${
                    plural(deletable.length)
                  } for good? Their payloads, results and history go; their idempotency keys are free again. Running runs are left (cancel them first).`}
                  yes={`Yes, delete ${plural(deletable.length)}`}
                  onConfirm={() => bulk("delete", deletable.map((r) => r.id))}
                />
              </div>
              <Table
                caption={`${newer ? "Runs" : "Newest runs"}, newest first${older ? " (more on the next page)" : ""}`}
                count={shown.length}
                empty="No runs match."
                headers={[
                  <input
                    type="checkbox"
                    aria-label="Select every run on this page"
                    checked={all}
                    onChange={() => setSelected(all ? new Set() : new Set(shown.map((r) => r.id)))}
                  />,
                  "Run",
                  "Kind",
                  "Queue",
                  "State",
                  "Fence",
                  "Attempt",
                  "Lease owner",
                  "Error",
                  "Created",
                  "Updated"
                ]}
              >
                {shown.map((run) => (
                  <tr key={run.id} data-run-id={run.id} class={selected.has(run.id) ? "selected" : undefined}>
                    <td>
                      <input
                        type="checkbox"
                        aria-label={`Select run ${run.id}`}
                        checked={selected.has(run.id)}
                        onChange={() =>
                          toggle(run.id)}
                      />
                    </td>
                    <td>
                      <RunLink id={run.id} />
                    </td>
                    <td>{run.kind}</td>
                    <td>{run.queue}</td>
                    <td>
                      <StateBadge state={run.state} />
                    </td>
                    <td class="num">{String(run.fence)}</td>
                    <td class="num">{`${attemptSeen(run)}/${run.maxAttempts}`}</td>
                    <td class="mono">{run.leaseOwner ?? ""}</td>
                    <td class="error-cell" title={errorLine(run.error)}>{errorLine(run.error)}</td>
                    <td>
                      <Time at={run.createdAt} />
                    </td>
                    <td>
                      <Time at={run.updatedAt} />
                    </td>
                  </tr>
                ))}
              </Table>
              <nav class="pager" aria-label="Pages">
                {newer && shown.length > 0 ? pageLink("after", shown[0]!.id, "Previous") : null}
                {older && shown.length > 0 ? pageLink("before", shown.at(-1)!.id, "Next") : null}
              </nav>
            </Fragment>
          )
        }}
      </Loading>
    </Fragment>
  )
}
