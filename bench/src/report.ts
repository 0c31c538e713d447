/** The printed tables (stdout, and reused verbatim in RESULTS.md). */
import type { Spread } from "./stats.js"
import type { Summary } from "./summary.js"
import type { Variant } from "./variants.js"

const group = (x: number, digits: number) =>
  x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })

/** A sensible number of decimals for a value of this size. */
export const fmt = (x: number | null | undefined): string => {
  if (x === null || x === undefined || Number.isNaN(x)) return "n/a"
  const a = Math.abs(x)
  return a >= 1000 ? group(x, 0) : a >= 100 ? group(x, 0) : a >= 10 ? group(x, 1) : a >= 1 ? group(x, 2) : group(x, 3)
}

const fmtSpread = (s: Spread | null): [string, string] =>
  s === null ? ["n/a", ""] : [fmt(s.median), s.values.length > 1 ? `${fmt(s.min)}–${fmt(s.max)}` : ""]

const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>, rightFrom = 1): string => {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((cell, c) => (c >= rightFrom ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!))).join("  ").trimEnd()
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

export const render = (
  summary: Summary,
  variants: ReadonlyArray<Variant>,
  params: { runs: number; workers: number; repeats: number }
): string => {
  const out: Array<string> = []
  out.push(
    `Medians over ${params.repeats} repeat(s), min–max in the second column; ratio = Leasehold / system (from the medians).`
  )
  for (const m of summary.compared) {
    const rows = variants.map((v) => {
      const [median, range] = fmtSpread(m.byVariant[v.id] ?? null)
      const ratio = m.ratio[v.id]
      return [v.label, median, range, ratio == null ? "n/a" : `${ratio.toFixed(2)}×`]
    })
    const about = m.id === "throughput"
      ? ` (${params.runs.toLocaleString("en-US")} no-op runs, ${params.workers} worker processes)`
      : m.id.startsWith("pickup")
      ? " (sequential enqueue → handler start, LISTEN/NOTIFY on)"
      : ""
    out.push("")
    out.push(`${m.title}${about}, ${m.unit}, ${m.better} is better`)
    out.push(table(["system", "median", "min–max", "Leasehold / system"], rows))
    if (m.note !== undefined) out.push(m.note)
  }
  if (summary.timeProfile.length > 0) {
    out.push("")
    out.push(
      "Where the drain's time goes: CPU per completed run (µs, medians); budget = drain wall time × cores / runs"
    )
    out.push(
      table(
        ["system", "worker processes", "server backends", "sum", "budget", "busy"],
        summary.timeProfile.map((p) => {
          const worker = p.workerCpuUs?.median ?? null
          const server = p.serverCpuUs?.median ?? null
          const sum = worker === null || server === null ? null : worker + server
          return [
            variants.find((v) => v.id === p.variant)?.label ?? p.variant,
            fmt(worker),
            fmt(server),
            fmt(sum),
            fmt(p.budgetUs.median),
            sum === null ? "n/a" : `${Math.round((100 * sum) / p.budgetUs.median)}%`
          ]
        })
      )
    )
    for (const p of summary.timeProfile) {
      if (p.store === null) continue
      const calls = Object.entries(p.store).map(([op, e]) =>
        `${op} ${e.calls.toLocaleString("en-US")} calls × ${fmt(e.itemsPerCall)} runs, ${fmt(e.msPerCall)} ms each`
      )
      out.push(
        `${variants.find((v) => v.id === p.variant)?.label ?? p.variant} store calls (all processes, all repeats): ${
          calls.join("; ")
        }`
      )
    }
  }
  if (summary.heartbeat !== null) {
    const h = summary.heartbeat
    out.push("")
    out.push(
      `Heartbeat (Leasehold): one worker holding ${
        h.leases.toLocaleString("en-US")
      } leases, interval ${h.intervalMs} ms, TTL ${h.ttlMs} ms`
    )
    out.push(table(["measure", "median", "min–max"], [
      ["renew statements per heartbeat round", ...fmtSpread(h.statementsPerRound)],
      ["renew statements per interval of wall time", ...fmtSpread(h.statementsPerInterval)],
      ["leases carried by each renew statement", ...fmtSpread(h.leasesPerStatement)],
      ["database commits per round", ...fmtSpread(h.dbCommitsPerRound)],
      ["renewal statement time, median of rounds (ms)", ...fmtSpread(h.renewMs)],
      ["renewal statement time, worst round (ms)", ...fmtSpread(h.renewMaxMs)]
    ]))
  }
  if (summary.reclaim !== null) {
    const r = summary.reclaim
    out.push("")
    out.push(
      `Reclaim after kill -9: ${r.leases.toLocaleString("en-US")} leases, TTL ${
        r.ttlMs / 1000
      } s, reclaiming worker polls every ${r.pollIntervalMs / 1000} s${
        r.backlog === 0
          ? ""
          : `; A's runs claimed one per claim batch, B draining a backlog of ${
            r.backlog.toLocaleString("en-US")
          } runs (median ${r.backlogLeft.median.toLocaleString("en-US")} left at the reclaim)`
      }`
    )
    out.push(table(["measure", "median", "min–max"], [
      [
        `Leasehold: kill → all reclaimed (s; TTL ${r.ttlMs / 1000} s)`,
        ...fmtSpread(spreadScale(r.reclaimMs, 1 / 1000))
      ],
      ["Leasehold: lease left at the kill (s)", ...fmtSpread(spreadScale(r.leaseLeftMs, 1 / 1000))],
      ["Leasehold: expiry → reclaimed (s)", ...fmtSpread(spreadScale(r.afterExpiryMs, 1 / 1000))]
    ]))
    for (const p of r.peers) out.push(`${p.system} (documented default, not measured): ${p.window}`)
  }
  if (summary.fence !== null) {
    const f = summary.fence
    out.push("")
    out.push(
      `Fence overhead (Leasehold): batched completion of ${f.batchSize} runs, with and without the fence predicate`
    )
    out.push(table(["statement", "median", "min–max"], [
      ["completeBatch, id + fence + running (ms)", ...fmtSpread(f.fencedMs)],
      ["bench variant, id + running (ms)", ...fmtSpread(f.unfencedMs)],
      ["paired difference (ms)", ...fmtSpread(f.pairedDiffMs)],
      ["overhead (%)", ...fmtSpread(spreadScale(f.overhead, 100))]
    ]))
  }
  out.push("")
  out.push("Checks")
  out.push(table(["check", "passed"], Object.entries(summary.checks).map(([k, v]) => [k, v ? "yes" : "NO"])))
  out.push("")
  out.push("Targets")
  out.push(
    table(["target", "met", "measured"], summary.targets.map((t) => [t.name, t.met ? "yes" : "NO", t.detail]), 99)
  )
  return out.join("\n")
}

export const spreadScale = (s: Spread, k: number): Spread => ({
  median: s.median * k,
  min: s.min * k,
  max: s.max * k,
  values: s.values.map((v) => v * k)
})

export const renderOptions = (variants: ReadonlyArray<Variant>): string =>
  variants.map((v) => {
    const lines = [`${v.label} [${v.mode}] — ${v.source}`, `  options: ${JSON.stringify(v.options)}`]
    if (v.latencyOptions !== undefined) lines.push(`  pickup-latency options: ${JSON.stringify(v.latencyOptions)}`)
    return lines.join("\n")
  }).join("\n")
