/** Time-series chart of the pinned-horizon measure: dead tuples and table + index size per second. */
import type { PinnedResult, PinnedSample } from "./measures/pinned.js"

const palette = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#dc2626"]
const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

export const pinnedChart = (
  results: ReadonlyArray<PinnedResult>,
  labels: Record<string, string>,
  subtitle: string
): string => {
  // The last repeat of each variant.
  const byVariant = new Map(results.map((r) => [r.variant, r]))
  const panels: ReadonlyArray<{ title: string; unit: string; value: (s: PinnedSample) => number }> = [
    { title: "Dead tuples", unit: "", value: (s) => s.deadTuples },
    { title: "Tables and indexes", unit: "MB", value: (s) => s.totalBytes / 1e6 }
  ]
  const W = 560
  const H = 260
  const pad = { l: 60, r: 14, t: 30, b: 30 }
  const tMax = Math.max(
    1,
    ...[...byVariant.values()].flatMap((r) => [...r.pinnedSeries, ...r.cleanSeries].map((s) => s.t))
  )
  const body = panels.map((panel, p) => {
    const x0 = p * (W + 20)
    const y0 = 46
    const vMax = Math.max(
      1,
      ...[...byVariant.values()].flatMap((r) => [...r.pinnedSeries, ...r.cleanSeries].map(panel.value))
    )
    const px = (t: number) => x0 + pad.l + (t / tMax) * (W - pad.l - pad.r)
    const py = (v: number) => y0 + H - pad.b - (v / vMax) * (H - pad.t - pad.b)
    const lines = [...byVariant.values()].map((r, k) => {
      const color = palette[k % palette.length]!
      const path = (series: ReadonlyArray<PinnedSample>, dash: string) =>
        `<polyline fill="none" stroke="${color}" stroke-width="1.8"${dash} points="${
          series.map((s) => `${px(s.t).toFixed(1)},${py(panel.value(s)).toFixed(1)}`).join(" ")
        }"/>`
      return path(r.pinnedSeries, "") + path(r.cleanSeries, ` stroke-dasharray="4 3"`)
    }).join("")
    return `<rect x="${x0}" y="${y0}" width="${W}" height="${H}" fill="#fff" stroke="#e5e7eb"/>` +
      `<text x="${x0 + 10}" y="${y0 + 20}" font-size="13" font-weight="600">${esc(panel.title)}${
        panel.unit ? ` (${panel.unit})` : ""
      }</text>` +
      `<text x="${x0 + 6}" y="${py(vMax) + 4}" font-size="10" fill="#6b7280">${
        vMax >= 100 ? Math.round(vMax).toLocaleString("en-US") : vMax.toFixed(1)
      }</text>` +
      `<text x="${x0 + 6}" y="${py(0) + 4}" font-size="10" fill="#6b7280">0</text>` +
      `<text x="${px(tMax) - 30}" y="${py(0) + 16}" font-size="10" fill="#6b7280">${tMax.toFixed(0)} s</text>` +
      `<line x1="${px(0)}" y1="${py(0)}" x2="${px(tMax)}" y2="${py(0)}" stroke="#9ca3af"/>` + lines
  }).join("")
  const legend = [...byVariant.keys()].map((id, k) =>
    `<rect x="${10 + k * 200}" y="${H + 60}" width="10" height="10" fill="${palette[k % palette.length]}"/>` +
    `<text x="${24 + k * 200}" y="${H + 69}" font-size="11">${esc(labels[id] ?? id)}</text>`
  ).join("")
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W + 20}" height="${
    H + 100
  }" font-family="system-ui, sans-serif">` +
    `<rect width="100%" height="100%" fill="#f9fafb"/>` +
    `<text x="10" y="22" font-size="15" font-weight="700">Pinned MVCC horizon: solid under the readers, dashed without them</text>` +
    `<text x="10" y="38" font-size="11" fill="#4b5563">${esc(subtitle)}</text>${body}${legend}</svg>\n`
}
