// Times, durations and ids as the console writes them.

const pad = (n: number) => String(n).padStart(2, "0")

/** A moment as local date and time: `2026-01-05 14:03:22`. */
export const dateTime = (date: Date): string =>
  `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${
    pad(date.getMinutes())
  }:${pad(date.getSeconds())}`

/** A span of milliseconds, short: `850 ms`, `42 s`, `3 min 5 s`, `2 h 10 min`, `3 d 4 h`. */
export const duration = (ms: number | null | undefined): string => {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—"
  const sign = ms < 0 ? "-" : ""
  const abs = Math.abs(ms)
  if (abs < 1000) return `${sign}${Math.round(abs)} ms`
  const s = Math.round(abs / 1000)
  if (s < 120) return `${sign}${s} s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${sign}${m} min ${s % 60} s`
  const h = Math.floor(m / 60)
  if (h < 48) return `${sign}${h} h ${m % 60} min`
  return `${sign}${Math.floor(h / 24)} d ${h % 24} h`
}

/** How long ago (or from now) a moment is, relative to `now`: `3 min ago`, `in 20 s`. */
export const relative = (date: Date, now: number = Date.now()): string => {
  const ms = date.getTime() - now
  const text = duration(Math.abs(ms)).replace(/ \d+ (s|min)$/, "")
  return ms <= 0 ? `${text} ago` : `in ${text}`
}

export const parseDate = (value: string | null | undefined): Date | null => {
  if (value === null || value === undefined) return null
  const date = new Date(value)
  return Number.isNaN(date.getTime()) ? null : date
}

/** Milliseconds from `from` to `to`, or null when either is missing. */
export const between = (from: string | null | undefined, to: string | null | undefined): number | null => {
  const a = parseDate(from)
  const b = parseDate(to)
  return a === null || b === null ? null : b.getTime() - a.getTime()
}

export const shortId = (id: string): string => (id.length > 13 ? `${id.slice(0, 8)}…${id.slice(-4)}` : `#${id}`)

/** A W3C traceparent's trace and span ids, or null when it is not one. */
export const traceIds = (traceParent: string | null): { readonly traceId: string; readonly spanId: string } | null => {
  const match = traceParent === null
    ? null
    : /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(traceParent)
  return match === null ? null : { traceId: match[1]!, spanId: match[2]! }
}

/**
 * The trace viewer's URL for a trace: the configured template with `{traceId}` and `{spanId}`
 * filled in (hex ids, nothing to escape); only http(s) URLs are linked.
 */
export const traceLink = (
  template: string | null,
  ids: { readonly traceId: string; readonly spanId: string }
): string | null => {
  if (template === null || !/^https?:\/\//i.test(template)) return null
  return template.replaceAll("{traceId}", ids.traceId).replaceAll("{spanId}", ids.spanId)
}

/** The first line of a stored error, for a table cell. */
export const errorLine = (error: unknown): string => {
  if (error === null || error === undefined) return ""
  if (typeof error === "string") return error
  const message = (error as { message?: unknown }).message
  return typeof message === "string" ? message : JSON.stringify(error)
}

/** A JSON value as compact text. */
export const compact = (value: unknown): string => (value === undefined ? "null" : JSON.stringify(value))
