// The console's shared pieces. Every value reaches the page as a Preact child or attribute, which
// Preact writes as text (a text node, or setAttribute): nothing is parsed as HTML, so a payload
// holding `<script>` shows as those characters.
import { ApiError, type RunState } from "./api.js"
import { dateTime, parseDate, relative, shortId } from "./format.js"
import * as Live from "./live.js"
import { useCallback, useEffect, useRef, useState } from "./vendor/hooks.js"
import { type ComponentChildren, Fragment, h } from "./vendor/preact.js"

export interface Loaded<A> {
  readonly data: A | undefined
  readonly error: unknown
  readonly reload: () => Promise<void>
}

/**
 * Loads on mount, when `key` changes, and on every live change; the last good data stays shown.
 * Only the latest request's answer is shown: an earlier one that answers later (the unfiltered
 * list after the search's, a live reload of the old key) would otherwise overwrite it.
 */
export function useLoad<A>(load: () => Promise<A>, key: string): Loaded<A> {
  const [data, setData] = useState<A | undefined>(undefined)
  const [error, setError] = useState<unknown>(undefined)
  const current = useRef(load)
  current.current = load
  const latest = useRef(0)
  const reload = useCallback(async () => {
    const request = ++latest.current
    try {
      const answer = await current.current()
      if (request !== latest.current) return
      setData(answer)
      setError(undefined)
    } catch (failure) {
      if (request === latest.current) setError(failure)
    }
  }, [])
  useEffect(() => {
    setData(undefined)
    void reload()
    return Live.subscribe(() => void reload())
  }, [key])
  return { data, error, reload }
}

/** Re-renders every `ms` (a countdown, relative times). */
export const useTick = (ms: number) => {
  const [, setTick] = useState(0)
  useEffect(() => {
    const timer = setInterval(() => setTick((n) => n + 1), ms)
    return () => clearInterval(timer)
  }, [ms])
}

export const PageHeading = ({ title, children }: { readonly title: string; readonly children?: ComponentChildren }) => (
  <div class="page-head">
    <h1 tabIndex={-1} id="page-title">{title}</h1>
    {children}
  </div>
)

export const ErrorBox = ({ error }: { readonly error: unknown }) => (
  <p class="error" role="alert">
    {error instanceof ApiError && error.status
      ? `${error.status}: ${error.message}`
      : String((error as Error)?.message ?? error)}
  </p>
)

/** Loading, an error, or the content; a failed reload keeps the last content below its error. */
export function Loading<A>(
  { loaded, children }: { readonly loaded: Loaded<A>; readonly children: (data: A) => ComponentChildren }
) {
  return (
    <Fragment>
      {loaded.error !== undefined ? <ErrorBox error={loaded.error} /> : null}
      {loaded.data === undefined
        ? (loaded.error === undefined ? <p class="muted">Loading…</p> : null)
        : children(loaded.data)}
    </Fragment>
  )
}

/** A moment: local date and time, and how long ago, with the exact instant as its title. */
export const Time = ({ at, now }: { readonly at: string | null | undefined; readonly now?: number }) => {
  const date = parseDate(at)
  if (date === null) return <span class="muted">—</span>
  const [day, clock] = dateTime(date).split(" ")
  return (
    <time dateTime={date.toISOString()} title={date.toISOString()}>
      <span class="abs">
        <span class="day">{day}</span> <span class="clock">{clock}</span>
      </span>{" "}
      <span class="rel">({relative(date, now)})</span>
    </time>
  )
}

export const StateBadge = ({ state }: { readonly state: RunState | string }) => (
  <span class={`badge state-${String(state).replace(/[^a-z_-]/g, "")}`}>{String(state)}</span>
)

export const RunLink = ({ id }: { readonly id: string }) => (
  <a href={`#/runs/${encodeURIComponent(id)}`} class="mono" title={id}>
    {shortId(id)}
  </a>
)

/** A table in a horizontally scrollable box: cells never break a word to fit. */
export const Table = ({ caption, hiddenCaption, headers, empty, children, count, dense }: {
  readonly caption: string
  readonly hiddenCaption?: boolean
  /** Many narrow columns (counts): tighter cells and headings in their own case. */
  readonly dense?: boolean
  readonly headers: ReadonlyArray<ComponentChildren>
  readonly empty?: string
  readonly count: number
  readonly children: ComponentChildren
}) =>
  count === 0 ? <p class="empty">{empty ?? "Nothing to show."}</p> : (
    <div class="table-wrap">
      <table class={dense ? "dense" : undefined}>
        <caption class={hiddenCaption ? "visually-hidden" : undefined}>{caption}</caption>
        <thead>
          <tr>{headers.map((header, i) => <th scope="col" key={i}>{header}</th>)}</tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </div>
  )

export const Section = (
  { id, title, children }: { readonly id: string; readonly title: string; readonly children: ComponentChildren }
) => (
  <section aria-labelledby={id}>
    <h2 id={id}>{title}</h2>
    {children}
  </section>
)

export const Json = ({ value, label }: { readonly value: unknown; readonly label: string }) => (
  <pre
    class="json"
    tabIndex={0}
    aria-label={label}
  >{value === undefined ? "null" : JSON.stringify(value, null, 2)}</pre>
)

/**
 * A button that asks in the page before it acts: Enter asks, focus moves to "Yes"; Escape or
 * "Keep it" gives focus back to the button.
 */
export const ConfirmButton = ({ label, question, yes, onConfirm, disabled, class: cls }: {
  readonly label: string
  readonly question: string
  readonly yes?: string
  readonly onConfirm: () => Promise<void>
  readonly disabled?: boolean
  readonly class?: string
}) => {
  const [asking, setAsking] = useState(false)
  const [busy, setBusy] = useState(false)
  const yesRef = useRef<HTMLButtonElement>(null)
  const askRef = useRef<HTMLButtonElement>(null)
  const returnFocus = useRef(false)
  useEffect(() => {
    if (asking) yesRef.current?.focus()
    else if (returnFocus.current) {
      returnFocus.current = false
      askRef.current?.focus()
    }
  }, [asking])
  const keep = () => {
    returnFocus.current = true
    setAsking(false)
  }
  if (!asking) {
    return (
      <button
        type="button"
        class={cls}
        ref={askRef}
        disabled={disabled === true || busy}
        onClick={() => setAsking(true)}
      >
        {label}
      </button>
    )
  }
  return (
    <div
      role="group"
      aria-label={`Confirm: ${label}`}
      class="confirm"
      onKeyDown={(e) => e.key === "Escape" && keep()}
    >
      <span>{question}</span>
      <button
        type="button"
        class="danger"
        ref={yesRef}
        disabled={busy}
        onClick={async () => {
          setBusy(true)
          try {
            await onConfirm()
          } finally {
            setBusy(false)
            returnFocus.current = true
            setAsking(false)
          }
        }}
      >
        {yes ?? `Yes, ${label.toLowerCase()}`}
      </button>
      <button type="button" class="secondary" onClick={keep}>Keep it</button>
    </div>
  )
}
