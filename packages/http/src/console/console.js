// Leasehold console: one ES module, no dependencies, no build step.
//
// Every piece of user data (payloads, results, errors, kinds, queues, owners, notes) reaches the
// page through text nodes (`textContent` / `document.createTextNode`), never through `innerHTML`:
// a payload holding `<script>` shows as those characters. No inline script or style either, so
// the server's Content-Security-Policy (`default-src 'self'`) holds.

// ---------------------------------------------------------------------------------------------
// DOM helpers
// ---------------------------------------------------------------------------------------------

/**
 * Builds an element. `attrs`: `class`, `text` (textContent), `on` ({ event: listener }), `dataset`,
 * a boolean or string for anything else (set as an attribute; `on*` attribute strings refused).
 * Children: nodes, strings (as text nodes), arrays, null/undefined/false (skipped).
 */
const h = (tag, attrs = {}, ...children) => {
  const el = tag.startsWith("svg:")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag)
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue
    if (name === "text") el.textContent = String(value)
    else if (name === "on") for (const [event, listener] of Object.entries(value)) el.addEventListener(event, listener)
    else if (name === "dataset") Object.assign(el.dataset, value)
    else if (name.toLowerCase().startsWith("on")) throw new Error(`refusing inline handler attribute ${name}`)
    else el.setAttribute(name, value === true ? "" : String(value))
  }
  append(el, children)
  return el
}

const append = (parent, children) => {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue
    if (Array.isArray(child)) append(parent, child)
    else if (child instanceof Node) parent.appendChild(child)
    else parent.appendChild(document.createTextNode(String(child)))
  }
}

/** Replaces a container's children, keeping keyboard focus on the element with the same focus key. */
const replaceKeepingFocus = (container, ...children) => {
  const active = document.activeElement
  const key = active && container.contains(active) ? active.getAttribute("data-focus-key") : null
  container.replaceChildren()
  append(container, children)
  if (key !== null) {
    const again = [...container.querySelectorAll("[data-focus-key]")].find(
      (el) => el.getAttribute("data-focus-key") === key
    )
    if (again) again.focus()
  }
}

/** A JSON value as text in a <pre>. */
const json = (value, label) =>
  h(
    "pre",
    { class: "json", tabindex: "0", "aria-label": label },
    value === undefined ? "null" : JSON.stringify(value, null, 2)
  )

const time = (iso) => {
  if (iso === null || iso === undefined) return h("span", { class: "muted" }, "—")
  const date = new Date(iso)
  if (Number.isNaN(date.getTime())) return h("span", {}, String(iso))
  // Today: the time of day; another day: the date as well.
  const today = date.toDateString() === new Date().toDateString()
  return h(
    "time",
    { datetime: date.toISOString(), title: date.toISOString() },
    today ? date.toLocaleTimeString() : date.toLocaleString()
  )
}

const seconds = (ms) => {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—"
  const s = Math.round(ms / 1000)
  if (Math.abs(s) < 120) return `${s} s`
  const m = Math.round(s / 60)
  return Math.abs(m) < 120 ? `${m} min` : `${Math.round(m / 60)} h`
}

const stateBadge = (state) =>
  h("span", { class: `badge state-${String(state).replace(/[^a-z_-]/g, "")}` }, String(state))

const shortId = (id) => {
  const text = String(id)
  return text.length > 13 ? `${text.slice(0, 8)}…${text.slice(-4)}` : `#${text}`
}

const runLink = (id, focusKey) =>
  h(
    "a",
    {
      href: `#/runs/${encodeURIComponent(id)}`,
      class: "mono",
      title: String(id),
      "data-focus-key": focusKey ?? `run-${id}`
    },
    shortId(id)
  )

const table = (caption, headers, rows, empty = "Nothing to show.") =>
  rows.length === 0
    ? h("p", { class: "empty" }, empty)
    : h(
        "table",
        {},
        h("caption", { class: caption.hidden ? "visually-hidden" : undefined }, caption.text ?? caption),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            headers.map((header) => h("th", { scope: "col" }, header))
          )
        ),
        h("tbody", {}, rows)
      )

const announce = (message) => {
  const announcer = document.getElementById("announcer")
  announcer.textContent = ""
  // A new text node each time, so screen readers announce a repeated message too.
  setTimeout(() => (announcer.textContent = message), 30)
}

// ---------------------------------------------------------------------------------------------
// API client
// ---------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message)
    this.status = status
  }
}

const readError = async (response) => {
  try {
    const body = await response.json()
    const message = body?.message ?? body?.error?.message ?? body?.error ?? body?._tag
    return typeof message === "string" ? message : JSON.stringify(body)
  } catch {
    return response.statusText || `HTTP ${response.status}`
  }
}

const get = async (path) => {
  const response = await fetch(path, { headers: { accept: "application/json" }, credentials: "same-origin" })
  if (!response.ok) throw new ApiError(response.status, await readError(response))
  return response.json()
}

let csrfToken
/** The CSRF token: from the page's meta tag when the server filled it in, else from GET /api/session. */
const csrf = async () => {
  if (csrfToken !== undefined) return csrfToken
  const meta = document.querySelector('meta[name="leasehold-csrf"]')?.getAttribute("content")
  if (meta) return (csrfToken = meta)
  const session = await get("/api/session")
  const token = session?.csrfToken ?? session?.csrf ?? session?.token
  if (typeof token !== "string") throw new ApiError(0, "the server did not hand out a CSRF token")
  return (csrfToken = token)
}

const post = async (path, body) => {
  const headers = { accept: "application/json", "content-type": "application/json", "x-leasehold-csrf": await csrf() }
  const response = await fetch(path, {
    method: "POST",
    headers,
    credentials: "same-origin",
    body: JSON.stringify(body ?? {})
  })
  if (!response.ok) throw new ApiError(response.status, await readError(response))
  return response.status === 204 ? null : response.json().catch(() => null)
}

/** Lists tolerate `[...]` and `{ runs | workers | items: [...] }`. */
const listOf = (body, key) =>
  Array.isArray(body) ? body : Array.isArray(body?.[key]) ? body[key] : Array.isArray(body?.items) ? body.items : []

const runsQuery = (filter) => {
  const params = new URLSearchParams()
  for (const name of ["state", "kind", "queue", "limit", "before", "after"]) {
    if (filter[name] !== undefined && filter[name] !== "") params.set(name, String(filter[name]))
  }
  if (filter.field && filter.value !== undefined && filter.value !== "")
    params.set(`payload.${filter.field}`, filter.value)
  return `/api/runs?${params}`
}

/**
 * A run's history as the API sends it: already read into attempts, suspensions, refused stale
 * writes and operator actions (by the same code as `leasehold runs show`), with the raw events.
 */
const historyOf = (detail) => {
  const history = detail?.history ?? {}
  return {
    attempts: history.attempts ?? [],
    suspensions: history.suspensions ?? [],
    rejectedWrites: history.rejectedWrites ?? [],
    adminActions: history.adminActions ?? [],
    events: history.events ?? []
  }
}

// ---------------------------------------------------------------------------------------------
// The attempt the handler saw, as the CLI shows it (@leasehold/core RunRecord.attemptSeen): a
// suspension gives its attempt back while it waits, and the resume continues under that number.
const attemptSeen = (run) => run.state === "suspended" ? run.attempt + 1 : run.attempt

// A workflow execution's run (@leasehold/core isWorkflowRun): while suspended it waits on its
// journal (a deferred, a durable clock), so it is not a decision to offer, and its `wake/<fence>`
// signal is not what it waits for.
const isWorkflowRun = (run) =>
  run.kind.startsWith("workflow/") && typeof run.idempotencyKey === "string" && run.idempotencyKey.startsWith(`${run.kind}/`)

// A suspended workflow's deferred meant for a person (named `person/...`, @leasehold/core
// isForPerson): the server sends it in `run.workflow.awaiting`, and Approve completes it.
const personDeferred = (run) => (run.workflow?.awaiting ?? []).find((a) => a.forPerson)

/** Whether the run is a decision to offer: a suspended run awaiting a signal, or a workflow awaiting a person. */
const isDecision = (run) => run.state === "suspended" && (!isWorkflowRun(run) || personDeferred(run) !== undefined)

/** What a suspended workflow waits on, as text. */
const workflowWaits = (run) => {
  const awaiting = run.workflow?.awaiting ?? []
  if (awaiting.length === 0) return `its workflow journal (execution ${run.idempotencyKey})`
  return awaiting
    .map((a) => (a.wakeAt ? `clock "${a.name}" until ${new Date(a.wakeAt).toISOString()}` : `deferred "${a.name}"${a.forPerson ? " (for a person)" : ""}`))
    .join(", ")
}

// Live updates: one EventSource for the page; views refresh (debounced) when runs change, and on
// a slow timer for changes the store does not announce (a lease running out).
// ---------------------------------------------------------------------------------------------

const live = {
  listeners: new Set(),
  source: undefined,
  timer: undefined,
  connected: false,
  lastEventAt: undefined,
  subscribe(listener) {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  },
  changed(event) {
    this.lastEventAt = Date.now()
    clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      for (const listener of [...this.listeners]) listener(event)
    }, 150)
  },
  status(text, ok) {
    const el = document.getElementById("live")
    el.textContent = text
    el.classList.toggle("ok", ok)
    el.classList.toggle("down", !ok)
  },
  start() {
    if (typeof EventSource === "undefined") return this.status("Polling", false)
    const source = new EventSource("/api/events")
    this.source = source
    const onEvent = (event) => {
      let data = null
      try {
        data = event.data ? JSON.parse(event.data) : null
      } catch {
        data = event.data
      }
      if (data?._tag === "Subscribed" || event.type === "ready") return
      // How many changes the stream has brought, and when the last came (shown as a tooltip).
      const indicator = document.getElementById("live")
      indicator.dataset.events = String(Number(indicator.dataset.events ?? 0) + 1)
      indicator.title = `Last change announced at ${new Date().toLocaleTimeString()}`
      this.changed({ type: event.type, data })
    }
    source.addEventListener("open", () => {
      this.connected = true
      this.status("Live", true)
      // Whatever changed while the stream was down.
      this.changed({ type: "reconnected", data: null })
    })
    source.addEventListener("error", () => {
      this.connected = false
      this.status(source.readyState === EventSource.CLOSED ? "Disconnected" : "Reconnecting…", false)
    })
    source.addEventListener("message", onEvent)
    // The server names its events after the store's notifications (`ready` is the subscription itself).
    for (const name of ["runs-available", "run-cancelled", "run-changed", "run", "runs", "change", "stats"]) {
      source.addEventListener(name, onEvent)
    }
  }
}

// Poll every few seconds as well: a lease running out or a deadline passing is not an event.
setInterval(() => {
  if (document.visibilityState === "visible") live.changed({ type: "tick", data: null })
}, 5000)

// ---------------------------------------------------------------------------------------------
// Views. Each mounts into <main> and returns { refresh, unmount }.
// ---------------------------------------------------------------------------------------------

const STATES = ["pending", "running", "suspended", "completed", "failed", "cancelled"]

const pageHeading = (text, ...extra) =>
  h("div", { class: "page-head" }, h("h1", { tabindex: "-1", id: "page-title" }, text), ...extra)

const errorBox = (error) =>
  h(
    "p",
    { class: "error", role: "alert" },
    error instanceof ApiError && error.status ? `${error.status}: ${error.message}` : String(error?.message ?? error)
  )

/** Runs a view's loader, showing failures in the view instead of throwing them away. */
const guarded = (region, load) => async () => {
  try {
    await load()
  } catch (error) {
    replaceKeepingFocus(region, errorBox(error))
  }
}

// Overview ------------------------------------------------------------------------------------

/** How many of the latest completed (and failed) runs the throughput chart reads. */
const RECENT = 500
const MINUTES = 10
/** Live leases listed on the overview. */
const LIVE_SHOWN = 10

const overviewView = (main) => {
  const region = h("div", { class: "stack" }, h("p", { class: "muted" }, "Loading…"))
  main.append(pageHeading("Overview"), region)

  const refresh = guarded(region, async () => {
    const [stats, workers, completed, failed] = await Promise.all([
      get("/api/stats"),
      get("/api/workers").then((body) => listOf(body, "workers")),
      get(runsQuery({ state: "completed", limit: RECENT })).then((body) => listOf(body, "runs")),
      get(runsQuery({ state: "failed", limit: RECENT })).then((body) => listOf(body, "runs"))
    ])
    const fetchedAt = Date.now()
    const leases = allLeases(workers).sort(
      (a, b) => (leaseTiming(a, fetchedAt).left ?? Infinity) - (leaseTiming(b, fetchedAt).left ?? Infinity)
    )
    const rows = stats?.byStateAndQueue ?? []
    const totals = Object.fromEntries(STATES.map((s) => [s, 0]))
    const queues = new Map()
    for (const { queue, state, count } of rows) {
      totals[state] = (totals[state] ?? 0) + Number(count)
      if (!queues.has(queue)) queues.set(queue, Object.fromEntries(STATES.map((s) => [s, 0])))
      queues.get(queue)[state] = Number(count)
    }

    const cards = h(
      "ul",
      { class: "cards", "aria-label": "Runs by state" },
      STATES.map((state) =>
        h(
          "li",
          { class: `card state-${state}` },
          h(
            "a",
            { href: `#/runs?state=${state}`, "data-focus-key": `card-${state}` },
            h("span", { class: "card-value" }, String(totals[state])),
            h("span", { class: "card-label" }, state)
          )
        )
      ),
      h(
        "li",
        { class: "card" },
        h(
          "a",
          { href: "#/workers", "data-focus-key": "card-leases" },
          h("span", { class: "card-value" }, String(stats?.liveLeases ?? 0)),
          h("span", { class: "card-label" }, "live leases")
        )
      )
    )

    const facts = h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Oldest pending run waiting"),
      h(
        "dd",
        {},
        stats?.oldestPendingSeconds === null || stats?.oldestPendingSeconds === undefined
          ? "—"
          : seconds(stats.oldestPendingSeconds * 1000)
      ),
      h("dt", {}, "Stale writes refused by the fence"),
      h("dd", {}, String(stats?.fenceRejections ?? 0)),
      h("dt", {}, "Runs reclaimed after a lease ran out"),
      h("dd", {}, String(stats?.reclaims ?? 0))
    )

    const queueRows = [...queues.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([queue, counts]) =>
        h(
          "tr",
          {},
          h(
            "th",
            { scope: "row" },
            h("a", { href: `#/runs?queue=${encodeURIComponent(queue)}`, "data-focus-key": `queue-${queue}` }, queue)
          ),
          STATES.map((state) => h("td", { class: counts[state] === 0 ? "num muted" : "num" }, String(counts[state])))
        )
      )

    replaceKeepingFocus(
      region,
      h("section", { "aria-labelledby": "by-state" }, h("h2", { id: "by-state" }, "Runs by state"), cards, facts),
      h(
        "section",
        { "aria-labelledby": "throughput" },
        h("h2", { id: "throughput" }, "Throughput"),
        throughputChart(stats, completed, failed)
      ),
      h(
        "section",
        { "aria-labelledby": "by-queue" },
        h("h2", { id: "by-queue" }, "By queue"),
        table({ text: "Runs by queue and state", hidden: true }, ["Queue", ...STATES], queueRows, "No runs yet.")
      ),
      h(
        "section",
        { "aria-labelledby": "live-leases" },
        h("h2", { id: "live-leases" }, "Live leases"),
        table(
          {
            text:
              leases.length > LIVE_SHOWN
                ? `The ${LIVE_SHOWN} closest to running out, of ${leases.length}`
                : "Closest to running out first",
            hidden: leases.length <= LIVE_SHOWN
          },
          ["Run", "Owner", ...LEASE_HEADERS.slice(1)],
          leases.slice(0, LIVE_SHOWN).map((l) => leaseRow(l, fetchedAt, true)),
          "No run is leased right now."
        ),
        leases.length > 0
          ? h("p", {}, h("a", { href: "#/workers", "data-focus-key": "all-workers" }, "All workers and their leases"))
          : null
      )
    )
  })

  return { refresh, unmount() {} }
}

/**
 * Runs finished per minute over the last minutes: the server's `throughput`
 * ([{ at, completed, failed }] per minute) when /api/stats has it, else counted from the
 * `finishedAt` of the latest finished runs.
 */
const throughputChart = (stats, completed, failed) => {
  let buckets
  let note
  if (Array.isArray(stats?.throughput)) {
    buckets = stats.throughput.map((b) => ({
      at: new Date(b.at ?? b.minute ?? b.start),
      completed: Number(b.completed ?? 0),
      failed: Number(b.failed ?? 0)
    }))
    note = "Runs finished per minute."
  } else {
    const minute = 60_000
    const end = Math.ceil(Date.now() / minute) * minute
    buckets = Array.from({ length: MINUTES }, (_, i) => ({
      at: new Date(end - (MINUTES - i) * minute),
      completed: 0,
      failed: 0
    }))
    const count = (runs, key) => {
      for (const run of runs) {
        const at = new Date(run.finishedAt ?? run.updatedAt).getTime()
        const i = Math.floor((at - (end - MINUTES * minute)) / minute)
        if (i >= 0 && i < MINUTES) buckets[i][key] += 1
      }
    }
    count(completed, "completed")
    count(failed, "failed")
    const capped = completed.length >= RECENT || failed.length >= RECENT
    note = `Runs finished per minute, last ${MINUTES} minutes${capped ? ` (counted from the latest ${RECENT} completed and ${RECENT} failed runs)` : ""}.`
  }
  const width = 600
  const height = 120
  const max = Math.max(1, ...buckets.map((b) => b.completed + b.failed))
  const slot = width / Math.max(1, buckets.length)
  const total = buckets.reduce((sum, b) => sum + b.completed + b.failed, 0)
  const svg = h("svg:svg", {
    viewBox: `0 0 ${width} ${height + 20}`,
    role: "img",
    "aria-label": `${total} runs finished in the last ${buckets.length} minutes`,
    class: "chart"
  })
  buckets.forEach((b, i) => {
    const completedHeight = (b.completed / max) * (height - 16)
    const failedHeight = (b.failed / max) * (height - 16)
    const x = i * slot + slot * 0.15
    const label = `${b.at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}: ${b.completed} completed, ${b.failed} failed`
    svg.append(
      h(
        "svg:rect",
        { x, y: height - completedHeight, width: slot * 0.7, height: completedHeight, class: "bar-completed" },
        h("svg:title", {}, label)
      ),
      h(
        "svg:rect",
        { x, y: height - completedHeight - failedHeight, width: slot * 0.7, height: failedHeight, class: "bar-failed" },
        h("svg:title", {}, label)
      ),
      h(
        "svg:text",
        { x: x + slot * 0.35, y: height + 15, "text-anchor": "middle", class: "axis" },
        b.at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
      ),
      b.completed + b.failed > 0
        ? h(
            "svg:text",
            {
              x: x + slot * 0.35,
              y: Math.max(12, height - completedHeight - failedHeight - 4),
              "text-anchor": "middle",
              class: "bar-label"
            },
            String(b.completed + b.failed)
          )
        : null
    )
  })
  return h(
    "figure",
    { class: "throughput" },
    svg,
    h(
      "figcaption",
      { class: "muted" },
      note,
      " ",
      h("span", { class: "legend completed" }, "completed"),
      " ",
      h("span", { class: "legend failed" }, "failed")
    )
  )
}

// Runs ----------------------------------------------------------------------------------------

const PAGE = 50

const runsView = (main, params) => {
  const filter = {
    state: params.get("state") ?? "",
    kind: params.get("kind") ?? "",
    queue: params.get("queue") ?? "",
    field: params.get("field") ?? "",
    value: params.get("value") ?? "",
    // Keyset cursors (run ids): the page older than `before`, or newer than `after`.
    before: params.get("before") ?? "",
    after: params.get("after") ?? ""
  }
  const input = (name, label, attrs = {}) =>
    h(
      "div",
      { class: "field" },
      h("label", { for: `filter-${name}` }, label),
      h("input", { id: `filter-${name}`, name, value: filter[name], autocomplete: "off", ...attrs })
    )
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter runs" },
    h(
      "div",
      { class: "field" },
      h("label", { for: "filter-state" }, "State"),
      h(
        "select",
        { id: "filter-state", name: "state" },
        h("option", { value: "" }, "any"),
        STATES.map((s) => h("option", { value: s, selected: s === filter.state }, s))
      )
    ),
    input("kind", "Kind"),
    input("queue", "Queue"),
    input("field", "Payload field", { placeholder: "e.g. order" }),
    input("value", "Payload value", { placeholder: "e.g. A-1" }),
    h(
      "div",
      { class: "field buttons" },
      h("button", { type: "submit" }, "Apply"),
      h("button", { type: "button", class: "secondary", on: { click: () => (location.hash = "#/runs") } }, "Clear")
    )
  )
  form.addEventListener("submit", (event) => {
    event.preventDefault()
    const data = new FormData(form)
    const next = new URLSearchParams()
    for (const [key, value] of data.entries()) if (String(value) !== "") next.set(key, String(value))
    location.hash = `#/runs${next.size > 0 ? `?${next}` : ""}`
  })
  const region = h("div", { "aria-live": "off" }, h("p", { class: "muted" }, "Loading…"))
  main.append(pageHeading("Runs"), form, region)

  const pageLink = (cursor, id, text) => {
    const next = new URLSearchParams(params)
    next.delete("before")
    next.delete("after")
    next.set(cursor, id)
    return h("a", { href: `#/runs?${next}`, class: "button secondary", "data-focus-key": `page-${text}` }, text)
  }

  const refresh = guarded(region, async () => {
    // One run more than a page says whether there is more beyond it: older ones, or, after a
    // cursor, newer ones (that page is the runs nearest above it, newest first).
    const runs = listOf(await get(runsQuery({ ...filter, limit: PAGE + 1 })), "runs")
    const newer = filter.after !== "" ? runs.length > PAGE : filter.before !== ""
    const older = filter.after !== "" ? runs.length > 0 : runs.length > PAGE
    const shown = filter.after !== "" ? runs.slice(Math.max(0, runs.length - PAGE)) : runs.slice(0, PAGE)
    const rows = shown.map((run) =>
      h(
        "tr",
        { dataset: { runId: run.id } },
        h("td", {}, runLink(run.id)),
        h("td", {}, run.kind),
        h("td", {}, run.queue),
        h("td", {}, stateBadge(run.state)),
        h("td", { class: "num" }, String(run.fence)),
        h("td", { class: "num" }, `${attemptSeen(run)}/${run.maxAttempts}`),
        h("td", { class: "mono" }, run.leaseOwner ?? ""),
        h("td", {}, time(run.updatedAt))
      )
    )
    replaceKeepingFocus(
      region,
      table(
        {
          text: `${newer ? "Runs" : "Newest runs"}, newest first${older ? " (more on the next page)" : ""}`
        },
        ["Run", "Kind", "Queue", "State", "Fence", "Attempt", "Lease owner", "Updated"],
        rows,
        "No runs match."
      ),
      h(
        "nav",
        { class: "pager", "aria-label": "Pages" },
        newer && shown.length > 0 ? pageLink("after", shown[0].id, "Previous") : null,
        older && shown.length > 0 ? pageLink("before", shown.at(-1).id, "Next") : null
      )
    )
  })
  return { refresh, unmount() {} }
}

// Run detail ----------------------------------------------------------------------------------

const TERMINAL = ["completed", "failed", "cancelled"]

const runDetailView = (main, _params, id) => {
  const actions = h("div", { class: "actions" })
  const region = h("div", { class: "stack" }, h("p", { class: "muted" }, "Loading…"))
  main.append(pageHeading(`Run ${shortId(id)}`, actions), region)
  let lastState

  let lastRun
  let confirming = false

  const perform = async (label, path, button) => {
    button.disabled = true
    try {
      await post(path, {})
      announce(`${label}: done`)
    } catch (error) {
      region.prepend(errorBox(error))
    } finally {
      button.disabled = false
      confirming = false
      await refresh()
    }
  }

  /** An action button; one with `confirmText` asks in the page first (focus moves to the answer). */
  const act = (label, path, confirmText, cls) =>
    h(
      "button",
      {
        type: "button",
        class: cls,
        "data-focus-key": `action-${label}`,
        on: {
          click: (event) => {
            if (!confirmText) return perform(label, path, event.currentTarget)
            confirming = true
            const keep = () => {
              confirming = false
              renderActions()
              actions.querySelector(`[data-focus-key="action-${label}"]`)?.focus()
            }
            const yes = h(
              "button",
              { type: "button", class: "danger", on: { click: (e) => perform(label, path, e.currentTarget) } },
              `Yes, ${label.toLowerCase()}`
            )
            const no = h("button", { type: "button", class: "secondary", on: { click: keep } }, "Keep it")
            const group = h(
              "div",
              {
                role: "group",
                "aria-label": `Confirm: ${label}`,
                class: "confirm",
                on: { keydown: (e) => e.key === "Escape" && keep() }
              },
              h("span", {}, confirmText),
              yes,
              no
            )
            actions.replaceChildren(group)
            yes.focus()
          }
        }
      },
      label
    )

  const renderActions = () => {
    const run = lastRun
    const buttons = []
    if (run && !TERMINAL.includes(run.state))
      buttons.push(
        act(
          "Cancel run",
          `/api/runs/${encodeURIComponent(id)}/cancel`,
          "Cancel this run? Its fence advances, so a worker still holding it is refused.",
          "danger"
        )
      )
    if (run && (run.state === "failed" || run.state === "cancelled"))
      buttons.push(act("Retry run", `/api/runs/${encodeURIComponent(id)}/retry`))
    replaceKeepingFocus(actions, buttons)
  }

  const refresh = guarded(region, async () => {
    const detail = await get(`/api/runs/${encodeURIComponent(id)}`)
    const run = detail?.run ?? detail
    const history = historyOf(detail)
    if (lastState !== undefined && lastState !== run.state) announce(`Run is now ${run.state}`)
    lastState = run.state

    lastRun = run
    if (!confirming) renderActions()

    const signal =
      run.signal ??
      (run.signalName ? { name: run.signalName, token: run.signalToken, deadline: run.suspendDeadline } : null)
    const summary = h(
      "dl",
      { class: "summary" },
      [
        ["Id", h("span", { class: "mono" }, run.id)],
        ["State", stateBadge(run.state)],
        ["Kind", run.kind],
        ["Queue", run.queue],
        ["Fence", h("strong", { class: "fence" }, String(run.fence))],
        ["Attempt", `${attemptSeen(run)} of ${run.maxAttempts}`],
        ["Lease owner", run.leaseOwner ?? "—"],
        ["Lease expires", time(run.leaseExpiresAt)],
        ["Priority", String(run.priority ?? 0)],
        ["Due", time(run.runAt)],
        ["Created", time(run.createdAt)],
        ["Updated", time(run.updatedAt)],
        ["Finished", time(run.finishedAt)],
        ["Idempotency key", run.idempotencyKey ?? "—"],
        [
          "Waiting for",
          run.state === "suspended" && isWorkflowRun(run)
            ? workflowWaits(run)
            : signal
            ? h(
                "span",
                {},
                `signal "${signal.name}", token `,
                h("code", {}, signal.token ?? "—"),
                ", deadline ",
                time(signal.deadline)
              )
            : "—"
        ]
      ].map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value)))
    )

    const attemptRows = history.attempts.map((a) =>
      h(
        "tr",
        {},
        h("td", { class: "num" }, h("strong", {}, String(a.fence))),
        h("td", { class: "mono" }, a.owner ?? "—"),
        h("td", {}, a.via),
        h("td", {}, time(a.start)),
        h("td", {}, time(a.end)),
        h(
          "td",
          {},
          h(
            "span",
            { class: `outcome outcome-${String(a.outcome).replace(/[^a-z_]/g, "")}` },
            String(a.outcome).replace(/_/g, " ")
          )
        ),
        h("td", {}, a.detail ?? "")
      )
    )
    const suspensionRows = history.suspensions.map((s) =>
      h(
        "tr",
        {},
        h("td", { class: "num" }, String(s.fence)),
        h("td", {}, s.signal ?? "—"),
        h("td", {}, time(s.suspendedAt)),
        h("td", {}, time(s.deadline)),
        h("td", {}, time(s.endedAt)),
        h("td", {}, String(s.outcome).replace(/_/g, " ")),
        h(
          "td",
          {},
          s.payload === null || s.payload === undefined
            ? ""
            : h("code", { class: "inline-json" }, JSON.stringify(s.payload))
        )
      )
    )
    const rejectedRows = history.rejectedWrites.map((r) =>
      h(
        "tr",
        {},
        h("td", {}, time(r.at)),
        h("td", {}, r.operation),
        h("td", { class: "num" }, String(r.presentedFence)),
        h("td", { class: "num" }, r.storedFence === null ? "—" : String(r.storedFence))
      )
    )
    const adminRows = history.adminActions.map((a) =>
      h("tr", {}, h("td", {}, time(a.at)), h("td", {}, a.action), h("td", { class: "num" }, String(a.fence)))
    )
    const eventRows = history.events.map((e) =>
      h(
        "tr",
        {},
        h("td", {}, time(e.at)),
        h("td", {}, e.kind),
        h("td", { class: "num" }, String(e.fence)),
        h("td", { class: "mono" }, e.owner ?? ""),
        h(
          "td",
          {},
          e.detail === null || e.detail === undefined
            ? ""
            : h("code", { class: "inline-json" }, JSON.stringify(e.detail))
        )
      )
    )

    const section = (id, title, ...content) =>
      h("section", { "aria-labelledby": id }, h("h2", { id }, title), ...content)
    replaceKeepingFocus(
      region,
      summary,
      isDecision(run)
        ? section(
            "decide",
            "Decision",
            approvalForm(run, () => refresh())
          )
        : null,
      section(
        "attempts",
        "Attempts",
        table(
          { text: "Each claim, under its own fence", hidden: true },
          ["Fence", "Owner", "Taken", "Started", "Ended", "Outcome", "Detail"],
          attemptRows,
          "Not claimed yet."
        )
      ),
      section(
        "suspensions",
        "Suspensions",
        table(
          { text: "Waits for a signal", hidden: true },
          ["Fence", "Signal", "Suspended", "Deadline", "Ended", "Outcome", "Resumed with"],
          suspensionRows,
          "Never suspended."
        )
      ),
      section(
        "stale",
        "Stale writes refused",
        table(
          { text: "Writes refused because their fence was superseded", hidden: true },
          ["At", "Operation", "Presented fence", "Stored fence"],
          rejectedRows,
          "None: no superseded holder tried to write."
        )
      ),
      adminRows.length > 0
        ? section(
            "admin",
            "Operator actions",
            table({ text: "Cancel and retry", hidden: true }, ["At", "Action", "Fence"], adminRows)
          )
        : null,
      section("checkpoint", "Checkpoint", json(run.checkpoint, "Checkpoint")),
      section("payload", "Payload", json(run.payload, "Payload")),
      run.error !== null && run.error !== undefined
        ? section("error", "Error", json(run.error, "Error"))
        : section("result", "Result", json(run.result, "Result")),
      h(
        "details",
        { class: "events" },
        h("summary", {}, `History events (${history.events.length})`),
        table(
          { text: "Stored history", hidden: true },
          ["At", "Event", "Fence", "Owner", "Detail"],
          eventRows,
          "No events."
        )
      )
    )
  })
  return { refresh, unmount() {} }
}

// Approvals -----------------------------------------------------------------------------------

/** Approve / reject with a note: POST /api/runs/:id/resume { payload: { approved, note } }. */
const approvalForm = (run, done) => {
  const noteId = `note-${run.id}`
  const note = h("textarea", { id: noteId, name: "note", rows: "2", "data-focus-key": `note-${run.id}` })
  const message = h("p", { class: "form-message", role: "status" })
  const form = h(
    "form",
    { class: "decision", "aria-label": `Decision on run ${run.id}` },
    h("div", { class: "field" }, h("label", { for: noteId }, "Note (optional)"), note),
    h(
      "div",
      { class: "buttons" },
      h(
        "button",
        { type: "submit", name: "decision", value: "approve", class: "approve", "data-focus-key": `approve-${run.id}` },
        "Approve"
      ),
      h(
        "button",
        { type: "submit", name: "decision", value: "reject", class: "danger", "data-focus-key": `reject-${run.id}` },
        "Reject"
      )
    ),
    message
  )
  form.addEventListener("submit", async (event) => {
    event.preventDefault()
    const approved = event.submitter?.value !== "reject"
    const buttons = [...form.querySelectorAll("button")]
    buttons.forEach((b) => (b.disabled = true))
    message.textContent = approved ? "Approving…" : "Rejecting…"
    try {
      await post(`/api/runs/${encodeURIComponent(run.id)}/resume`, { payload: { approved, note: note.value } })
      message.textContent = approved
        ? "Approved: the run is resuming."
        : "Rejected: the run is resuming with the rejection."
      announce(`${approved ? "Approved" : "Rejected"} run ${shortId(run.id)}`)
      form.dataset.decided = approved ? "approved" : "rejected"
      await done(approved)
    } catch (error) {
      buttons.forEach((b) => (b.disabled = false))
      message.textContent = ""
      form.append(errorBox(error))
    }
  })
  return form
}

const KEEP_DECIDED_MS = 5000

const approvalsView = (main) => {
  const list = h("div", { class: "inbox" })
  const status = h("p", { class: "muted" }, "Loading…")
  main.append(
    pageHeading("Approvals"),
    h(
      "p",
      { class: "lede" },
      "Runs suspended until someone decides. A decision resumes the run under a new, higher fence."
    ),
    status,
    list
  )
  const cards = new Map()
  const decidedAt = new Map()

  const card = (run) => {
    const titleId = `approval-${run.id}`
    const signal =
      run.signal ??
      (run.signalName ? { name: run.signalName, token: run.signalToken, deadline: run.suspendDeadline } : null)
    const article = h(
      "article",
      { class: "approval", "aria-labelledby": titleId, dataset: { runId: run.id } },
      h("h2", { id: titleId }, h("span", {}, run.kind), " ", runLink(run.id, `approval-link-${run.id}`)),
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Queue"),
        h("dd", {}, run.queue),
        h("dt", {}, "Waiting for"),
        h(
          "dd",
          {},
          isWorkflowRun(run) ? workflowWaits(run) : signal ? `${signal.name}` : "—",
          !isWorkflowRun(run) && signal?.token ? [" (token ", h("code", {}, signal.token), ")"] : null
        ),
        h("dt", {}, "Deadline"),
        h("dd", {}, time(signal?.deadline)),
        h("dt", {}, "Suspended under fence"),
        h("dd", {}, String(run.fence))
      ),
      h("h3", {}, "Payload"),
      json(run.payload, `Payload of run ${run.id}`),
      run.checkpoint !== null && run.checkpoint !== undefined
        ? [h("h3", {}, "Checkpoint"), json(run.checkpoint, `Checkpoint of run ${run.id}`)]
        : null,
      approvalForm(run, async () => {
        // The decided card stays a few seconds, with its message, before a refresh drops it.
        article.classList.add("decided")
        decidedAt.set(run.id, Date.now())
        setTimeout(() => refresh(), KEEP_DECIDED_MS + 100)
      })
    )
    return article
  }

  const refresh = guarded(list, async () => {
    // A workflow's run waits on its journal, not on a decision: not offered here.
    const runs = listOf(await get(runsQuery({ state: "suspended", limit: 200 })), "runs").filter(isDecision)
    const ids = new Set(runs.map((r) => r.id))
    for (const [id, article] of cards) {
      if (!ids.has(id) && !(Date.now() - (decidedAt.get(id) ?? -Infinity) < KEEP_DECIDED_MS)) {
        const hadFocus = article.contains(document.activeElement)
        article.remove()
        cards.delete(id)
        if (hadFocus) document.getElementById("page-title")?.focus()
      }
    }
    for (const run of runs) {
      if (!cards.has(run.id)) {
        const article = card(run)
        cards.set(run.id, article)
        list.append(article)
      }
    }
    const undecided = runs.filter((r) => !decidedAt.has(r.id)).length
    status.textContent = undecided === 0 ? "Nothing is waiting for a decision." : `${undecided} waiting for a decision.`
    setApprovalsCount(runs.length)
  })
  return { refresh, unmount() {} }
}

const setApprovalsCount = (n) => {
  const el = document.getElementById("approvals-count")
  el.textContent = n > 0 ? String(n) : ""
}

// Workers -------------------------------------------------------------------------------------

/**
 * A lease's time left as the server counted it (by the database's clock, so a skewed browser
 * clock does not matter), counted down since it was fetched; else from its expiry.
 */
const leaseTiming = (l, fetchedAt) => {
  const served =
    typeof l.expiresInMs === "number"
      ? l.expiresInMs
      : typeof l.secondsLeft === "number"
        ? l.secondsLeft * 1000
        : typeof l.timeLeftMs === "number"
          ? l.timeLeftMs
          : undefined
  const expiresAt = l.expiresAt ?? l.leaseExpiresAt
  const left =
    served !== undefined
      ? served - (Date.now() - fetchedAt)
      : expiresAt
        ? new Date(expiresAt).getTime() - Date.now()
        : null
  const expires = expiresAt ?? (served !== undefined ? new Date(fetchedAt + served).toISOString() : null)
  return { left, expires }
}

/** All leases of a `/api/workers` answer, each with its owner. */
const allLeases = (workers) =>
  workers.flatMap((w) => (w.leases ?? w.runs ?? []).map((l) => ({ ...l, owner: l.owner ?? w.owner ?? w.id ?? "" })))

const LEASE_HEADERS = ["Run", "Kind", "Queue", "Fence", "Lease expires", "Time left"]

const leaseRow = (l, fetchedAt, withOwner) => {
  const { left, expires } = leaseTiming(l, fetchedAt)
  const id = l.runId ?? l.id
  return h(
    "tr",
    { dataset: { runId: id } },
    h("td", {}, runLink(id, `lease-${id}`)),
    withOwner ? h("td", { class: "mono" }, l.owner ?? "") : null,
    h("td", {}, l.kind ?? ""),
    h("td", {}, l.queue ?? ""),
    h("td", { class: "num" }, String(l.fence ?? "")),
    h("td", {}, time(expires)),
    h(
      "td",
      { class: left !== null && left < 0 ? "num expired" : "num" },
      left !== null && left < 0 ? `expired ${seconds(-left)} ago` : seconds(left)
    )
  )
}

const workersView = (main) => {
  const region = h("div", { class: "stack" }, h("p", { class: "muted" }, "Loading…"))
  main.append(
    pageHeading("Workers"),
    h(
      "p",
      { class: "lede" },
      "Owners holding leases now, and how long each lease has left before another worker may reclaim its run."
    ),
    region
  )
  let fetchedAt = Date.now()
  let workers = []

  const render = () => {
    const sections = workers.map((w) => {
      const owner = w.owner ?? w.id ?? "unknown"
      const leases = w.leases ?? w.runs ?? []
      const rows = leases.map((l) => leaseRow(l, fetchedAt, false))
      return h(
        "section",
        { class: "worker", "aria-label": `Worker ${owner}` },
        h("h2", { class: "mono" }, owner),
        h(
          "p",
          { class: "muted" },
          `${w.liveLeases ?? leases.length} live lease${(w.liveLeases ?? leases.length) === 1 ? "" : "s"}`
        ),
        table(
          { text: `Leases held by ${owner}`, hidden: true },
          LEASE_HEADERS,
          rows,
          "No leases."
        )
      )
    })
    replaceKeepingFocus(
      region,
      sections.length === 0 ? h("p", { class: "empty" }, "No worker holds a lease right now.") : sections
    )
  }
  const refresh = guarded(region, async () => {
    workers = listOf(await get("/api/workers"), "workers")
    fetchedAt = Date.now()
    render()
  })
  // Time left counts down between refreshes.
  const ticker = setInterval(() => workers.length > 0 && render(), 1000)
  return { refresh, unmount: () => clearInterval(ticker) }
}

// ---------------------------------------------------------------------------------------------
// Router
// ---------------------------------------------------------------------------------------------

// A hash part with broken percent-encoding (a truncated or hand-edited link) is kept as typed:
// decodeURIComponent would throw and leave the page blank.
const decodePart = (part) => {
  try {
    return decodeURIComponent(part)
  } catch {
    return part
  }
}

const route = () => {
  const hash = location.hash.startsWith("#/") ? location.hash.slice(1) : "/"
  const [path, query = ""] = hash.split("?")
  const params = new URLSearchParams(query)
  const parts = path.split("/").filter(Boolean).map(decodePart)
  if (parts[0] === "runs" && parts[1])
    return { name: "runs", make: (main) => runDetailView(main, params, parts[1]), title: `Run ${parts[1]}` }
  if (parts[0] === "runs") return { name: "runs", make: (main) => runsView(main, params), title: "Runs" }
  if (parts[0] === "approvals") return { name: "approvals", make: approvalsView, title: "Approvals" }
  if (parts[0] === "workers") return { name: "workers", make: workersView, title: "Workers" }
  return { name: "overview", make: overviewView, title: "Overview" }
}

let current
let unsubscribe

const show = (focus) => {
  const main = document.getElementById("main")
  current?.unmount()
  unsubscribe?.()
  main.replaceChildren()
  const next = route()
  for (const link of document.querySelectorAll("nav a[data-route]")) {
    if (link.dataset.route === next.name) link.setAttribute("aria-current", "page")
    else link.removeAttribute("aria-current")
  }
  document.title = `${next.title} · Leasehold console`
  current = next.make(main)
  unsubscribe = live.subscribe(() => current.refresh())
  current.refresh()
  // After a navigation, move focus to the new page's heading (as a page load would, for screen readers).
  if (focus) document.getElementById("page-title")?.focus()
}

const refreshApprovalsCount = async () => {
  try {
    setApprovalsCount(listOf(await get(runsQuery({ state: "suspended", limit: 200 })), "runs").filter(isDecision).length)
  } catch {
    // The approvals page shows the error; the badge just stays as it was.
  }
}

const start = () => {
  document.getElementById("skip-link").addEventListener("click", (event) => {
    event.preventDefault()
    document.getElementById("main").focus()
  })
  window.addEventListener("hashchange", () => {
    if (location.hash === "" || location.hash.startsWith("#/")) show(true)
  })
  live.subscribe(() => refreshApprovalsCount())
  live.start()
  show(false)
  refreshApprovalsCount()
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start)
else start()
