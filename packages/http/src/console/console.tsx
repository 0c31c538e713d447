// Leasehold console: the entry module. Hash routes, one page mounted at a time under <main>; after
// a navigation focus moves to the new page's heading; the header's approvals count and the "Live"
// indicator stay up to date.
import * as Live from "./live.js"
import { Approvals, loadDecisions } from "./pages/approvals.js"
import { Audit } from "./pages/audit.js"
import { Limits } from "./pages/limits.js"
import { Overview } from "./pages/overview.js"
import { Queues } from "./pages/queues.js"
import { RunPage } from "./pages/run.js"
import { Runs } from "./pages/runs.js"
import { Schedules } from "./pages/schedules.js"
import { Workers } from "./pages/workers.js"
import { useEffect, useState } from "./vendor/hooks.js"
import { h, render } from "./vendor/preact.js"

// A hash part with broken percent-encoding (a truncated or hand-edited link) is kept as typed.
const decodePart = (part: string) => {
  try {
    return decodeURIComponent(part)
  } catch {
    return part
  }
}

interface Route {
  readonly name: string
  readonly title: string
  readonly key: string
  readonly page: () => preactNode
}
type preactNode = ReturnType<typeof h>

const route = (): Route => {
  const hash = location.hash.startsWith("#/") ? location.hash.slice(1) : "/"
  const [path = "/", query = ""] = hash.split("?")
  const params = new URLSearchParams(query)
  const parts = path.split("/").filter(Boolean).map(decodePart)
  const at = (name: string, title: string, page: () => preactNode): Route => ({ name, title, key: hash, page })
  switch (parts[0]) {
    case "runs":
      return parts[1] !== undefined
        ? at("runs", `Run ${parts[1]}`, () => <RunPage id={parts[1]!} />)
        : at("runs", "Runs", () => <Runs params={params} />)
    case "queues":
      return at("queues", "Queues", () => <Queues />)
    case "schedules":
      return at("schedules", "Schedules", () => <Schedules />)
    case "limits":
      return at("limits", "Key limits", () => <Limits />)
    case "approvals":
      return at("approvals", "Approvals", () => <Approvals />)
    case "workers":
      return at("workers", "Workers", () => <Workers />)
    case "audit":
      return at("audit", "Audit", () => <Audit />)
    default:
      return at("overview", "Overview", () => <Overview />)
  }
}

const App = () => {
  const [current, setCurrent] = useState(route)
  const [navigated, setNavigated] = useState(false)
  useEffect(() => {
    const onHash = () => {
      if (location.hash === "" || location.hash.startsWith("#/")) {
        setCurrent(route())
        setNavigated(true)
      }
    }
    window.addEventListener("hashchange", onHash)
    return () => window.removeEventListener("hashchange", onHash)
  }, [])
  useEffect(() => {
    document.title = `${current.title} · Leasehold console`
    for (const link of document.querySelectorAll<HTMLAnchorElement>("nav a[data-route]")) {
      if (link.dataset.route === current.name) link.setAttribute("aria-current", "page")
      else link.removeAttribute("aria-current")
    }
    // As a page load would, for screen readers and the keyboard.
    if (navigated) document.getElementById("page-title")?.focus()
  }, [current.key])
  return <div key={current.key}>{current.page()}</div>
}

const refreshApprovalsCount = async () => {
  try {
    const n = (await loadDecisions()).length
    const el = document.getElementById("approvals-count")
    if (el !== null) el.textContent = n > 0 ? String(n) : ""
  } catch {
    // The approvals page shows the error; the count stays as it was.
  }
}

const start = () => {
  document.getElementById("skip-link")?.addEventListener("click", (event) => {
    event.preventDefault()
    document.getElementById("main")?.focus()
  })
  Live.subscribe(() => void refreshApprovalsCount())
  Live.start()
  void refreshApprovalsCount()
  render(<App />, document.getElementById("main")!)
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start)
else start()
