/**
 * The worker's metrics over a real run, drawn as an SVG (docs/metrics.svg): what the Grafana
 * dashboard (docs/grafana/leasehold.json) shows, from the same series, without a Grafana.
 *
 * A worker with metrics on runs against PostgreSQL (DATABASE_URL, else the embedded server) for
 * 30 s while a producer enqueues steady work, some of it failing once; twice a run is taken from the
 * worker mid-attempt (its lease moved into the past and the run claimed elsewhere), so its write is
 * rejected by the fence; once a worker elsewhere claims runs and dies, and this one reclaims them
 * when their leases expire. The registry is read every 500 ms.
 *
 *   node bench/dist/metricsChart.js [seconds] [out.svg]
 */
import { Client, CurrentRun, Handler, RunStore, Worker } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Deferred, Duration, Effect, Layer, Metric, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"

const seconds = Number(process.argv[2] ?? 30)
const out = process.argv[3] ?? "docs/metrics.svg"
const schema = `metrics_chart_${Date.now().toString(36)}`

interface Sample {
  readonly t: number
  readonly values: ReadonlyMap<string, number>
}

/** Every series' current value: counters' counts, gauges' values, histograms' counts. */
const read = Effect.map(Metric.snapshot, (snapshots) => {
  const values = new Map<string, number>()
  for (const s of snapshots) {
    if (!s.id.startsWith("leasehold_")) continue
    const labels = Object.entries(s.attributes ?? {}).map(([k, v]) => `${k}=${v}`).sort().join(",")
    const state = s.state as { count?: number; value?: number }
    const value = typeof state.count === "number" ? state.count : typeof state.value === "number" ? state.value : 0
    values.set(`${s.id}{${labels}}`, (values.get(`${s.id}{${labels}}`) ?? 0) + value)
  }
  return values
})

const sum = (sample: Sample, prefix: string, label?: string) =>
  [...sample.values.entries()].filter(([k]) => k.startsWith(`${prefix}{`) && (label === undefined || k.includes(label)))
    .reduce((n, [, v]) => n + v, 0)

const main = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const store = yield* RunStore
  const gate = new Map<number, Deferred.Deferred<void>>()
  const work = Handler.make({
    kind: "work",
    payload: Schema.Struct({
      i: Schema.Number,
      held: Schema.optional(Schema.Boolean),
      flaky: Schema.optional(Schema.Boolean)
    }),
    handle: ({ flaky, held, i }) =>
      Effect.gen(function*() {
        if (held === true) {
          const d = yield* Deferred.make<void>()
          gate.set(i, d)
          yield* Deferred.await(d)
        } else yield* Effect.sleep(Duration.millis(5 + (i % 40)))
        if (flaky === true && (yield* CurrentRun).attempt === 1) return yield* Effect.fail(new Error("fails once"))
      })
  })
  yield* Effect.forkScoped(
    Worker.run({
      handlers: [work],
      metrics: true,
      concurrency: 50,
      ttl: "30 seconds",
      pollInterval: "1 second",
      retry: { base: "2 seconds", max: "5 seconds" }
    })
  )

  const samples: Array<Sample> = []
  const started = Date.now()
  let i = 0
  while (Date.now() - started < seconds * 1000) {
    const t = (Date.now() - started) / 1000
    // A steady producer (about 60 runs a second), some of them failing once.
    for (let k = 0; k < 30; k++) yield* Client.enqueue(work, { i: ++i, flaky: i % 10 === 0 })
    // Twice, a run is taken from the worker mid-attempt: its completion is rejected by the fence.
    if (samples.length === Math.floor(seconds * 2 / 3) || samples.length === Math.floor(seconds * 4 / 3)) {
      const held = ++i
      const { id } = yield* Client.enqueue(work, { i: held, held: true })
      while (!gate.has(held)) yield* Effect.sleep("20 millis")
      yield* sql.unsafe(
        `UPDATE "${schema}".runs SET lease_expires_at = now() - interval '1 second' WHERE id = ${Number(id)}`
      )
      yield* store.claim({
        owner: "elsewhere",
        queues: ["default"],
        kinds: ["work"],
        limit: 1,
        ttl: Duration.minutes(5)
      })
      yield* Deferred.succeed(gate.get(held)!, undefined)
    }
    // Once, a worker elsewhere claims a few runs and dies: their leases expire and this worker
    // reclaims them.
    if (samples.length === Math.floor(seconds)) {
      // Parked an hour ahead, then made due and claimed at once, before this worker's next poll.
      const parked = yield* store.enqueue(
        Array.from({ length: 5 }, () => ({ kind: "work", payload: { i: ++i }, delayMs: 3_600_000 }))
      )
      yield* sql.unsafe(
        `UPDATE "${schema}".runs SET run_at = now() WHERE id IN (${parked.map((r) => Number(r.id)).join(",")})`
      )
      yield* store.claim({
        owner: "dies",
        queues: ["default"],
        kinds: ["work"],
        limit: 5,
        ttl: Duration.seconds(2),
        dueOnly: true
      })
    }
    samples.push({ t, values: yield* read })
    yield* Effect.sleep("500 millis")
  }
  yield* Effect.sleep("2 seconds")
  samples.push({ t: (Date.now() - started) / 1000, values: yield* read })
  fs.writeFileSync(out, chart(samples))
  console.log(
    `wrote ${out}: ${samples.length} samples over ${seconds} s, ${
      sum(samples.at(-1)!, "leasehold_runs_settled_total")
    } runs settled`
  )
})

/** Rates from counter samples: per second between consecutive samples. */
const rate = (samples: ReadonlyArray<Sample>, pick: (s: Sample) => number) =>
  samples.slice(1).map((s, k) => ({
    t: s.t,
    v: Math.max(0, pick(s) - pick(samples[k]!)) / Math.max(0.001, s.t - samples[k]!.t)
  }))
const level = (samples: ReadonlyArray<Sample>, pick: (s: Sample) => number) =>
  samples.map((s) => ({ t: s.t, v: pick(s) }))

const chart = (samples: ReadonlyArray<Sample>): string => {
  const panels: Array<
    { title: string; lines: Array<{ label: string; color: string; points: Array<{ t: number; v: number }> }> }
  > = [
    {
      title: "Runs settled per second, by outcome",
      lines: [
        {
          label: "completed",
          color: "#16a34a",
          points: rate(samples, (s) => sum(s, "leasehold_runs_settled_total", "outcome=completed"))
        },
        {
          label: "retry scheduled",
          color: "#ea580c",
          points: rate(samples, (s) => sum(s, "leasehold_runs_settled_total", "outcome=retry-scheduled"))
        },
        {
          label: "abandoned (fence)",
          color: "#dc2626",
          points: rate(samples, (s) => sum(s, "leasehold_runs_settled_total", "outcome=abandoned"))
        }
      ]
    },
    {
      title: "Claims per second: due, reclaimed",
      lines: [
        {
          label: "due",
          color: "#2563eb",
          points: rate(samples, (s) => sum(s, "leasehold_runs_claimed_total", "via=due"))
        },
        {
          label: "expired (reclaim)",
          color: "#9333ea",
          points: rate(samples, (s) => sum(s, "leasehold_runs_claimed_total", "via=expired"))
        }
      ]
    },
    {
      title: "Writes rejected by the fence (total)",
      lines: [{
        label: "rejections",
        color: "#dc2626",
        points: level(samples, (s) => sum(s, "leasehold_fence_rejections_total"))
      }]
    },
    {
      title: "Runs in flight on this worker",
      lines: [{
        label: "in flight",
        color: "#0891b2",
        points: level(samples, (s) => sum(s, "leasehold_runs_in_flight"))
      }]
    }
  ]
  const W = 520
  const H = 200
  const pad = { l: 46, r: 12, t: 28, b: 34 }
  const tMax = Math.max(...samples.map((s) => s.t))
  const esc = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  const body = panels.map((panel, p) => {
    const x0 = (p % 2) * (W + 20)
    const y0 = Math.floor(p / 2) * (H + 20) + 40
    const vMax = Math.max(1, ...panel.lines.flatMap((l) => l.points.map((pt) => pt.v)))
    const px = (t: number) => x0 + pad.l + (t / tMax) * (W - pad.l - pad.r)
    const py = (v: number) => y0 + H - pad.b - (v / vMax) * (H - pad.t - pad.b)
    const paths = panel.lines.map((l) =>
      `<polyline fill="none" stroke="${l.color}" stroke-width="1.8" points="${
        l.points.map((pt) => `${px(pt.t).toFixed(1)},${py(pt.v).toFixed(1)}`).join(" ")
      }"/>`
    ).join("")
    const legend = panel.lines.map((l, k) =>
      `<rect x="${x0 + pad.l + k * 130}" y="${y0 + H - 14}" width="10" height="10" fill="${l.color}"/><text x="${
        x0 + pad.l + 14 + k * 130
      }" y="${y0 + H - 5}" font-size="11">${esc(l.label)}</text>`
    ).join("")
    return `<rect x="${x0}" y="${y0}" width="${W}" height="${H}" fill="#fff" stroke="#e5e7eb"/>` +
      `<text x="${x0 + 10}" y="${y0 + 18}" font-size="13" font-weight="600">${esc(panel.title)}</text>` +
      `<line x1="${px(0)}" y1="${py(0)}" x2="${px(tMax)}" y2="${py(0)}" stroke="#9ca3af"/>` +
      `<text x="${x0 + 6}" y="${py(vMax) + 4}" font-size="10" fill="#6b7280">${
        vMax.toFixed(vMax < 10 ? 1 : 0)
      }</text>` +
      `<text x="${x0 + 6}" y="${py(0) + 4}" font-size="10" fill="#6b7280">0</text>` +
      `<text x="${px(tMax) - 24}" y="${py(0) + 14}" font-size="10" fill="#6b7280">${tMax.toFixed(0)} s</text>` +
      paths + legend
  }).join("")
  const height = Math.ceil(panels.length / 2) * (H + 20) + 40
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${
    2 * W + 20
  }" height="${height}" font-family="system-ui, sans-serif">` +
    `<rect width="100%" height="100%" fill="#f9fafb"/>` +
    `<text x="10" y="24" font-size="15" font-weight="700">Leasehold worker metrics over a ${seconds} s run (the dashboard's series)</text>${body}</svg>\n`
}

const layer = PgRunStore.layer({ schema }).pipe(Layer.provideMerge(Database.layer({ maxConnections: 10 })))

Effect.runPromise(Effect.scoped(Effect.gen(function*() {
  const context = yield* Layer.build(layer)
  yield* Effect.scoped(Effect.provideContext(main, context))
  yield* Context.get(context, SqlClient.SqlClient).unsafe(`DROP SCHEMA "${schema}" CASCADE`)
}))).then(() => process.exit(0)).catch((error) => {
  console.error(error)
  process.exit(1)
})
