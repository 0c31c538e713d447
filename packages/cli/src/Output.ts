/**
 * What commands print: lines on stdout, aligned tables for people, JSON for scripts. Everything a
 * command prints goes through here, so human and `--json` output stay consistent.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"

/** One line (or several, joined) on stdout. */
export const line = (text = ""): Effect.Effect<void> => Effect.sync(() => void process.stdout.write(text + "\n"))

export const lines = (texts: ReadonlyArray<string>): Effect.Effect<void> => line(texts.join("\n"))

/** One JSON document on stdout. Callers pass explicit views, so the shape does not drift. */
export const json = (value: unknown): Effect.Effect<void> => line(JSON.stringify(value, null, 2))

/** Rows under their headers, each column padded to its widest cell, two spaces apart. */
export const table = (
  headers: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string>>
): ReadonlyArray<string> => {
  const widths = headers.map((header, i) => Math.max(header.length, ...rows.map((row) => (row[i] ?? "").length)))
  const render = (cells: ReadonlyArray<string>) =>
    cells.map((cell, i) => i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)).join("  ").trimEnd()
  return [render(headers), ...rows.map(render)]
}

/** `label  value` pairs with the labels aligned. */
export const fields = (pairs: ReadonlyArray<readonly [string, string]>): ReadonlyArray<string> => {
  const width = Math.max(...pairs.map(([label]) => label.length))
  return pairs.map(([label, value]) => `${label.padEnd(width)}  ${value}`)
}

/** A database timestamp in UTC, to the second; `-` when absent. */
export const time = (value: Date | string | null | undefined): string =>
  value === null || value === undefined ? "-" : toDate(value).toISOString().replace(/\.\d{3}Z$/, "Z")

/** A timestamp for JSON output: ISO 8601, or null. */
export const isoTime = (value: Date | string | null | undefined): string | null =>
  value === null || value === undefined ? null : toDate(value).toISOString()

const toDate = (value: Date | string): Date => value instanceof Date ? value : new Date(value)

/** A value as compact JSON, cut to `max` characters for a table cell. */
export const brief = (value: unknown, max = 60): string => {
  if (value === null || value === undefined) return "-"
  const text = typeof value === "string" ? value : JSON.stringify(value)
  return text.length > max ? text.slice(0, max - 1) + "…" : text
}

/** Seconds as a short human duration: `42s`, `3m 07s`, `2h 05m`. */
export const age = (seconds: number): string => {
  const s = Math.max(0, Math.floor(seconds))
  if (s < 60) return `${s}s`
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`
}
