// Live updates: one EventSource for the page. Any store notification (and a 5-second tick while
// the page is visible, for changes the store does not announce, such as a lease running out)
// asks the open page to reload what it shows, debounced.

type Listener = () => void

const listeners = new Set<Listener>()
let timer: ReturnType<typeof setTimeout> | undefined

const changed = () => {
  clearTimeout(timer)
  timer = setTimeout(() => {
    for (const listener of [...listeners]) listener()
  }, 150)
}

export const subscribe = (listener: Listener): () => void => {
  listeners.add(listener)
  return () => void listeners.delete(listener)
}

const status = (text: string, ok: boolean) => {
  const el = document.getElementById("live")
  if (el === null) return
  el.textContent = text
  el.classList.toggle("ok", ok)
  el.classList.toggle("down", !ok)
}

// The server names its events after the store's notifications; `ready` is only the subscription.
const named = ["runs-available", "run-cancelled", "schedules-changed"]

export const start = () => {
  setInterval(() => {
    if (document.visibilityState === "visible") changed()
  }, 5000)
  if (typeof EventSource === "undefined") return status("Polling", false)
  const source = new EventSource("/api/events")
  const onEvent = () => {
    // How many changes the stream has brought, and when the last came.
    const indicator = document.getElementById("live")
    if (indicator !== null) {
      indicator.dataset.events = String(Number(indicator.dataset.events ?? 0) + 1)
      indicator.title = `Last change announced at ${new Date().toLocaleTimeString()}`
    }
    changed()
  }
  source.addEventListener("open", () => {
    status("Live", true)
    // Whatever changed while the stream was down.
    changed()
  })
  source.addEventListener(
    "error",
    () => status(source.readyState === EventSource.CLOSED ? "Disconnected" : "Reconnecting…", false)
  )
  source.addEventListener("message", onEvent)
  for (const name of named) source.addEventListener(name, onEvent)
}

/** Says something to screen readers through the polite live region (a repeated message too). */
export const announce = (message: string) => {
  const announcer = document.getElementById("announcer")
  if (announcer === null) return
  announcer.textContent = ""
  setTimeout(() => (announcer.textContent = message), 30)
}
