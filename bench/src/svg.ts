/** The chart: one panel per measure, a bar per system (median) with a min–max whisker over repeats. */
import { fmt, spreadScale } from "./report.js"
import type { Spread } from "./stats.js"
import type { Summary } from "./summary.js"
import type { Variant } from "./variants.js"

interface Bar {
  readonly label: string
  readonly color: string
  readonly value: Spread
}

interface Panel {
  readonly title: string
  readonly bars: ReadonlyArray<Bar>
  readonly refs?: ReadonlyArray<{ readonly value: number; readonly label: string }>
}

const colors: Record<string, string> = {
  "leasehold": "#2563eb",
  "leasehold-delete": "#93c5fd",
  "leasehold-keyed": "#1e3a8a",
  "leasehold-rated": "#0e7490",
  "leasehold-unique": "#7c2d12",
  "leasehold-idempotent": "#9a3412",
  "leasehold-metrics": "#6366f1",
  "leasehold-traces": "#a5b4fc",
  "leasehold-traces-sampled": "#c7d2fe",
  "graphile-batched": "#ea580c",
  "graphile-default": "#fdba74",
  "pgboss-tuned": "#16a34a",
  "pgboss-default": "#86efac"
}

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

const PANEL_W = 500
const LABEL_W = 205
const BAR_W = 210
const ROW_H = 22
const TITLE_H = 30

const panelHeight = (p: Panel) => TITLE_H + p.bars.length * ROW_H + 16

const drawPanel = (p: Panel, x: number, y: number): string => {
  const parts: Array<string> = []
  const max = Math.max(...p.bars.map((b) => b.value.max), ...(p.refs ?? []).map((r) => r.value), 1e-9) * 1.05
  const scale = (v: number) => (v / max) * BAR_W
  parts.push(`<text x="${x}" y="${y + 18}" class="title">${esc(p.title)}</text>`)
  p.bars.forEach((b, k) => {
    const top = y + TITLE_H + k * ROW_H
    const bx = x + LABEL_W
    parts.push(`<text x="${bx - 8}" y="${top + 14}" class="label" text-anchor="end">${esc(b.label)}</text>`)
    parts.push(
      `<rect x="${bx}" y="${top + 3}" width="${
        Math.max(1, scale(b.value.median)).toFixed(1)
      }" height="14" fill="${b.color}"/>`
    )
    if (b.value.values.length > 1) {
      const x1 = bx + scale(b.value.min)
      const x2 = bx + scale(b.value.max)
      const cy = top + 10
      parts.push(`<line x1="${x1.toFixed(1)}" y1="${cy}" x2="${x2.toFixed(1)}" y2="${cy}" class="whisker"/>`)
      parts.push(`<line x1="${x1.toFixed(1)}" y1="${cy - 5}" x2="${x1.toFixed(1)}" y2="${cy + 5}" class="whisker"/>`)
      parts.push(`<line x1="${x2.toFixed(1)}" y1="${cy - 5}" x2="${x2.toFixed(1)}" y2="${cy + 5}" class="whisker"/>`)
    }
    const textX = bx + Math.max(scale(b.value.max), scale(b.value.median)) + 6
    parts.push(`<text x="${textX.toFixed(1)}" y="${top + 14}" class="value">${esc(fmt(b.value.median))}</text>`)
  })
  ;(p.refs ?? []).forEach((ref, k) => {
    const rx = x + LABEL_W + scale(ref.value)
    const y1 = y + TITLE_H - 4
    const y2 = y + TITLE_H + p.bars.length * ROW_H
    parts.push(`<line x1="${rx.toFixed(1)}" y1="${y1}" x2="${rx.toFixed(1)}" y2="${y2}" class="ref"/>`)
    // Labels of neighbouring reference lines go left and right of their line so they never overlap.
    const anchor = (p.refs ?? []).length > 1 ? (k % 2 === 0 ? "end" : "start") : "middle"
    const dx = anchor === "end" ? -3 : anchor === "start" ? 3 : 0
    parts.push(
      `<text x="${(rx + dx).toFixed(1)}" y="${y2 + 12}" class="reflabel" text-anchor="${anchor}">${
        esc(ref.label)
      }</text>`
    )
  })
  return parts.join("\n")
}

export const renderSvg = (summary: Summary, variants: ReadonlyArray<Variant>, subtitle: string): string => {
  const panels: Array<Panel> = []
  for (const m of summary.compared) {
    const bars = variants.flatMap((v) => {
      const s = m.byVariant[v.id]
      const label = m.id === "throughput" && summary.capped.includes(v.id) ? `${v.label} (capped)` : v.label
      return s == null ? [] : [{ label, color: colors[v.id] ?? "#888", value: s }]
    })
    if (bars.length === 0) continue
    panels.push({ title: `${m.short ?? m.title} (${m.unit}, ${m.better} is better)`, bars })
  }
  if (summary.heartbeat !== null) {
    const h = summary.heartbeat
    panels.push({
      title: `Leasehold heartbeat: renewing ${h.leases.toLocaleString("en-US")} leases (ms)`,
      bars: [
        { label: "renewal, median", color: colors["leasehold"]!, value: h.renewMs },
        { label: "renewal, worst", color: "#93c5fd", value: h.renewMaxMs }
      ],
      refs: [{ value: h.intervalMs / 10, label: `interval/10 = ${h.intervalMs / 10} ms` }]
    })
  }
  if (summary.reclaim !== null) {
    const r = summary.reclaim
    panels.push({
      title: `Leasehold reclaim after kill -9, ${r.leases.toLocaleString("en-US")} leases (s)`,
      bars: [
        { label: "kill → all reclaimed", color: colors["leasehold"]!, value: spreadScale(r.reclaimMs, 1 / 1000) },
        { label: "lease left at kill", color: "#93c5fd", value: spreadScale(r.leaseLeftMs, 1 / 1000) }
      ],
      refs: [{ value: r.ttlMs / 1000, label: `TTL ${r.ttlMs / 1000} s` }, { value: r.ttlMs / 1000 + 1, label: "+1 s" }]
    })
  }
  if (summary.fence !== null) {
    const f = summary.fence
    panels.push({
      title: `Leasehold completion of ${f.batchSize} runs (ms per batch)`,
      bars: [
        { label: "with fence (real)", color: colors["leasehold"]!, value: f.fencedMs },
        { label: "without fence (bench)", color: "#93c5fd", value: f.unfencedMs }
      ]
    })
  }
  const columns = 2
  const gap = 20
  const top = 56
  const colHeights = [top, top]
  const placed: Array<string> = []
  for (const p of panels) {
    const c = colHeights[0]! <= colHeights[1]! ? 0 : 1
    placed.push(drawPanel(p, 16 + c * (PANEL_W + gap), colHeights[c]!))
    colHeights[c] = colHeights[c]! + panelHeight(p) + gap
  }
  const width = 16 * 2 + columns * PANEL_W + gap
  const height = Math.max(...colHeights) + 8
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif">`,
    `<style>.title{font-size:13px;font-weight:600;fill:#111}.label{font-size:12px;fill:#333}.value{font-size:11px;fill:#111}` +
    `.whisker{stroke:#111;stroke-width:1.2}.ref{stroke:#dc2626;stroke-width:1;stroke-dasharray:4 3}.reflabel{font-size:10px;fill:#dc2626}` +
    `.h1{font-size:16px;font-weight:700;fill:#111}.sub{font-size:11px;fill:#555}</style>`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="16" y="24" class="h1">Leasehold vs graphile-worker vs pg-boss</text>`,
    `<text x="16" y="42" class="sub">${esc(subtitle)}</text>`,
    ...placed,
    `</svg>`
  ].join("\n")
}
