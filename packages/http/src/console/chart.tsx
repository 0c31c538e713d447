// Charts of the store's throughput (GET /api/throughput): finished runs per minute (completed and
// failed, stacked bars), and wait and run time percentiles per minute (lines). SVG with a title per
// bar and point, and an aria-label saying what the chart shows in words.
import type { Percentiles, Throughput } from "./api.js"
import { duration } from "./format.js"
import { Fragment, h } from "./vendor/preact.js"

// The drawing's units: about the pixels of a chart in a two-column grid at 1,280 px, so its 12-unit
// labels read at about their size. The plot sits inside margins that hold the y scale (left) and
// the x labels (below), so no label is cut at the drawing's edge.
const width = 600
const plotTop = 10
const plotLeft = 60
const plotRight = width - 20
const plotBottom = 200
const height = plotBottom + 26
const plotWidth = plotRight - plotLeft
const plotHeight = plotBottom - plotTop
const minuteMs = 60_000

interface Minute {
  readonly at: Date
  readonly completed: number
  readonly failed: number
  readonly wait: Percentiles | null
  readonly run: Percentiles | null
}

const highest = (a: Percentiles | null, b: Percentiles | null): Percentiles | null =>
  a === null
    ? b
    : b === null
    ? a
    : { p50: Math.max(a.p50, b.p50), p95: Math.max(a.p95, b.p95), p99: Math.max(a.p99, b.p99) }

/**
 * One slot per minute of the window, for `queue` or all queues. Across queues the counts add up;
 * the percentiles shown are the highest queue's (percentiles of different queues do not add).
 */
export const minutes = (throughput: Throughput, queue: string | null): Array<Minute> => {
  const since = new Date(throughput.since).getTime()
  const slots: Array<Minute> = Array.from({ length: throughput.minutes }, (_, i) => ({
    at: new Date(since + i * minuteMs),
    completed: 0,
    failed: 0,
    wait: null,
    run: null
  }))
  for (const m of throughput.series) {
    if (queue !== null && m.queue !== queue) continue
    const i = Math.floor((new Date(m.minute).getTime() - since) / minuteMs)
    const slot = slots[i]
    if (slot === undefined) continue
    slots[i] = {
      at: slot.at,
      completed: slot.completed + m.completed,
      failed: slot.failed + m.failed,
      wait: highest(slot.wait, m.waitMs),
      run: highest(slot.run, m.runMs)
    }
  }
  return slots
}

const hhmm = (date: Date) => date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" })

/** The middle of slot `i` of `slot` units. */
const center = (i: number, slot: number) => plotLeft + i * slot + slot / 2

/** Labels under about six slots, the first one's included. */
const axis = (slots: ReadonlyArray<Minute>, slot: number) => {
  const every = Math.max(1, Math.ceil(slots.length / 6))
  return slots.map((m, i) =>
    i % every === 0
      ? <text key={`t${i}`} x={center(i, slot)} y={height - 8} text-anchor="middle" class="axis">{hhmm(m.at)}</text>
      : null
  )
}

/** The y scale: 0, the middle and the top of the plot, each with its grid line; `label` writes a value. */
const yScale = (max: number, label: (value: number) => string) =>
  [0, max / 2, max].map((value, i) => {
    const y = plotBottom - (value / max) * plotHeight
    return (
      <Fragment key={`y${i}`}>
        <line x1={plotLeft} x2={plotRight} y1={y} y2={y} class="grid" />
        <text x={plotLeft - 6} y={y + 4} text-anchor="end" class="axis axis-y">{label(value)}</text>
      </Fragment>
    )
  })

/** A time for the y scale, short enough for its margin: one unit, at most one decimal. */
const short = (ms: number) => {
  const [value, unit] = ms < 1000
    ? [ms, "ms"]
    : ms < 60_000
    ? [ms / 1000, "s"]
    : ms < 3_600_000
    ? [ms / 60_000, "min"]
    : [ms / 3_600_000, "h"]
  return `${Number(value.toFixed(value < 10 && unit !== "ms" ? 1 : 0))} ${unit}`
}

/** A count for the y scale: whole numbers, a half shown as such. */
const count = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1))

export const FinishedChart = ({ slots, note }: { readonly slots: ReadonlyArray<Minute>; readonly note: string }) => {
  const max = Math.max(1, ...slots.map((b) => b.completed + b.failed))
  const slot = plotWidth / Math.max(1, slots.length)
  const total = slots.reduce((sum, b) => sum + b.completed + b.failed, 0)
  const failed = slots.reduce((sum, b) => sum + b.failed, 0)
  return (
    <figure class="chart-box">
      <svg
        viewBox={`0 0 ${width} ${height}`}
        role="img"
        class="chart"
        data-chart="finished"
        aria-label={`${total} runs finished in the last ${slots.length} minutes`}
      >
        {yScale(max, count)}
        {slots.map((b, i) => {
          const ch = (b.completed / max) * plotHeight
          const fh = (b.failed / max) * plotHeight
          const x = plotLeft + i * slot + slot * 0.1
          const label = `${hhmm(b.at)}: ${b.completed} completed, ${b.failed} failed`
          return (
            <g key={i}>
              <rect x={x} y={plotBottom - ch} width={slot * 0.8} height={ch} class="bar-completed">
                <title>{label}</title>
              </rect>
              <rect x={x} y={plotBottom - ch - fh} width={slot * 0.8} height={fh} class="bar-failed">
                <title>{label}</title>
              </rect>
            </g>
          )
        })}
        {axis(slots, slot)}
      </svg>
      <figcaption class="muted">
        {note} {total} finished, {failed} failed. <span class="legend completed">completed</span>{" "}
        <span class="legend failed">failed</span>
      </figcaption>
    </figure>
  )
}

/** p50 and p95 lines of wait or run time; minutes with no finished run leave a gap. */
export const LatencyChart = ({ slots, pick, what }: {
  readonly slots: ReadonlyArray<Minute>
  readonly pick: (m: Minute) => Percentiles | null
  readonly what: string
}) => {
  const values = slots.map(pick)
  const max = Math.max(1, ...values.map((v) => v?.p95 ?? 0))
  const slot = plotWidth / Math.max(1, slots.length)
  const y = (ms: number) => plotBottom - (ms / max) * plotHeight
  const line = (key: "p50" | "p95") => {
    const parts: Array<string> = []
    values.forEach((v, i) => {
      if (v === null) return
      const prev = i > 0 ? values[i - 1] : null
      parts.push(
        `${prev === null || prev === undefined ? "M" : "L"}${center(i, slot).toFixed(1)},${y(v[key]).toFixed(1)}`
      )
    })
    return parts.join(" ")
  }
  const latest = [...values].reverse().find((v) => v !== null) ?? null
  return (
    <figure class="chart-box">
      <svg
        viewBox={`0 0 ${width} ${height}`}
        role="img"
        class="chart"
        data-chart={what}
        aria-label={latest === null
          ? `No ${what} in the window`
          : `${what}: latest p50 ${duration(latest.p50)}, p95 ${duration(latest.p95)}; highest p95 ${duration(max)}`}
      >
        {yScale(max, short)}
        <path d={line("p95")} class="line-p95" />
        <path d={line("p50")} class="line-p50" />
        {values.map((v, i) =>
          v === null ? null : (
            <Fragment key={i}>
              <circle cx={center(i, slot)} cy={y(v.p95)} r={2.5} class="dot-p95">
                <title>
                  {`${hhmm(slots[i]!.at)}: p50 ${duration(v.p50)}, p95 ${duration(v.p95)}, p99 ${duration(v.p99)}`}
                </title>
              </circle>
            </Fragment>
          )
        )}
        {axis(slots, slot)}
      </svg>
      <figcaption class="muted">
        {what} per minute: <span class="legend p50">p50</span> <span class="legend p95">p95</span>
      </figcaption>
    </figure>
  )
}
