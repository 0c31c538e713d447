/**
 * The store's own server cost per run, without a worker: one connection (or one per chain) drives
 * the completion statements in a loop, keyed and unkeyed alternately, and the server processes'
 * CPU counters say what each run cost the server. Keyed: 1,000 keys at a limit of 1, each completion batch handing
 * its slots on and claiming the successors it returns (as the worker's batches do); unkeyed: a
 * claim of a batch, then its completion. What it isolates is the SQL (the drain measure adds the
 * worker, the pipeline and a second writer). Not a test and not part of `npm run bench`:
 *
 *   npm run build && node bench/dist/storeLoop.js [runs] [batch] [repeats] [chains]
 *
 * With `layouts` first, it runs candidate storage layouts instead, each on a database of its own,
 * next to graphile-worker's own statements (layouts/main.ts says how):
 *
 *   node bench/dist/storeLoop.js layouts [runs] [rounds] [layout,...]
 *
 * `DATABASE_URL` names the server (an embedded one is started without it). The server must run on
 * this machine: CPU is read from /proc. docs/adr/0014-per-key-concurrency.md and
 * docs/adr/0017-batch-ledger-storage.md read its figures.
 */
import type { ClaimedRun, RunStore } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Duration, Effect } from "effect"
import { layoutsMain } from "./layouts/main.js"
import * as Pg from "./pg.js"
import { spread } from "./stats.js"
import { KEYS, KIND, openStore, SCHEMA } from "./systems/leasehold.js"
import { variants } from "./variants.js"

const layoutsMode = process.argv[2] === "layouts"

const count = (position: number, name: string, fallback: number, least = 1): number => {
  const given = process.argv[position]
  const value = given === undefined ? fallback : Number(given)
  if (!Number.isInteger(value) || value < least) {
    console.error(
      `storeLoop: ${name} must be a whole number of at least ${least.toLocaleString("en-US")} (got ${given})`
    )
    process.exit(2)
  }
  return value
}
// The bench drain's shape by default: 100 runs per key (a keyed run costs more on a larger table).
// The layouts mode reads its own arguments (layouts/main.ts).
const runs = layoutsMode ? 0 : count(2, "runs", 100_000, KEYS + 1)
const batch = layoutsMode ? 0 : count(3, "batch", 500)
const repeats = layoutsMode ? 0 : count(4, "repeats", 3)
const chains = layoutsMode ? 0 : count(5, "chains", 1)

interface Reading {
  readonly serverUs: number
  readonly wallUs: number
}

const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> => Effect.runPromise(effect)

const loop = async (serverUrl: string, keyed: boolean): Promise<Reading> => {
  const database = await Pg.createDatabase(serverUrl, keyed ? "loop_keyed" : "loop_unkeyed")
  const url = Pg.databaseUrl(serverUrl, database)
  // The drain's own runs, enqueued as the drain enqueues them (the keyed variant declares the limit
  // first), then the store this loop measures with.
  const variant = variants.find((v) => v.id === (keyed ? "leasehold-keyed" : "leasehold"))!
  try {
    const session = await variant.system.enqueueSession(url, variant.options)
    try {
      for (let from = 0; from < runs; from += 5_000) {
        await session.enqueueMany(Array.from({ length: Math.min(5_000, runs - from) }, (_, j) => from + j))
      }
    } finally {
      await session.close()
    }
    const { store, close } = await openStore(url, { maxConnections: chains, migrate: false })
    try {
      return await measure(serverUrl, database, url, store, keyed)
    } finally {
      await close()
    }
  } finally {
    await Pg.dropDatabase(serverUrl, database)
  }
}

/** The loop itself, on a store holding the drain's runs. */
const measure = async (
  serverUrl: string,
  database: string,
  url: string,
  store: RunStore["Service"],
  keyed: boolean
): Promise<Reading> => {
  // Steady conditions for every repeat: statistics taken once the runs are in, and no
  // autovacuum starting (or its CPU counted) partway through a loop.
  await Pg.query(url, `ANALYZE "${SCHEMA}".runs`)
  await Pg.query(url, `ALTER TABLE "${SCHEMA}".runs SET (autovacuum_enabled = false)`)
  const owner = "store-loop"
  const ttl = Duration.seconds(30)
  const claim = (limit: number) => run(store.claim({ owner, queues: ["default"], kinds: [KIND], limit, ttl }))
  const next = { owner, ttl, queues: ["default"], kinds: [KIND] }
  // Keyed: the first claim takes each key's first run; every later run comes back as a `next`.
  // With several chains (one connection each, as the worker's two completion writers), the
  // first runs are dealt out among them and each key stays with its chain.
  const first = await claim(keyed ? KEYS : batch * chains)
  // The loop stops where a keyed drain would run out of successors (the last run of each key).
  const measured = runs - KEYS
  const cpuBefore = await Pg.backendCpu(serverUrl, database, true)
  const startedAt = performance.now()
  let done = 0
  const chain = async (own: Array<ClaimedRun>) => {
    let inFlight = own
    while (inFlight.length > 0 && done < measured) {
      const taken = inFlight.slice(0, batch)
      inFlight = inFlight.slice(batch)
      const outcomes = await run(store.completeBatch(
        taken.map((r) => ({ runId: r.id, fence: r.fence, result: null, keyed })),
        keyed ? next : undefined
      ))
      done += taken.length
      if (keyed) {
        for (const o of outcomes) if (o._tag === "Finalized" && o.next !== undefined) inFlight.push(o.next)
      } else if (inFlight.length === 0) {
        inFlight = [...await claim(batch)]
      }
    }
  }
  await Promise.all(Array.from({ length: chains }, (_, c) => chain(first.filter((_, i) => i % chains === c))))
  // A lost successor or a completion that did not go through would end a chain early.
  if (done < measured) {
    throw new Error(`the loop completed ${done} runs of ${measured}: a completion or a successor went missing`)
  }
  const wallMs = performance.now() - startedAt
  const cpuMs = Pg.cpuBetween(cpuBefore, await Pg.backendCpu(serverUrl, database, true))
  if (cpuMs === null) {
    throw new Error("cannot read the server processes' CPU from /proc: run the server on this machine")
  }
  return { serverUs: (cpuMs * 1000) / done, wallUs: (wallMs * 1000) / done }
}

const main = async () => {
  if (layoutsMode) return layoutsMain(process.argv.slice(3))
  const embedded = process.env.DATABASE_URL ? undefined : await EmbeddedPostgres.startUnscoped()
  const serverUrl = process.env.DATABASE_URL || embedded!.url
  try {
    console.log(
      `${await Pg.serverVersion(serverUrl)}; ${
        runs.toLocaleString("en-US")
      } runs, batches of ${batch}, ${chains} chain(s), ${repeats} repeat(s), keyed and unkeyed alternately`
    )
    const readings: Record<"keyed" | "unkeyed", Array<Reading>> = { keyed: [], unkeyed: [] }
    for (let i = 1; i <= repeats; i++) {
      for (const keyed of [false, true]) {
        const reading = await loop(serverUrl, keyed)
        readings[keyed ? "keyed" : "unkeyed"].push(reading)
        console.log(
          `  [${i}/${repeats}] ${keyed ? "keyed  " : "unkeyed"}: server ${reading.serverUs.toFixed(1)} µs/run, wall ${
            reading.wallUs.toFixed(1)
          } µs/run`
        )
      }
    }
    const summary = (label: "keyed" | "unkeyed") => {
      const server = spread(readings[label].map((r) => r.serverUs))
      return `${label}: server ${server.median.toFixed(1)} µs/run (${server.min.toFixed(1)}–${
        server.max.toFixed(1)
      }), wall ${spread(readings[label].map((r) => r.wallUs)).median.toFixed(1)} µs/run`
    }
    console.log(`medians: ${summary("unkeyed")}; ${summary("keyed")}`)
  } finally {
    await embedded?.stop()
  }
}

main().catch((error) => {
  console.error(error instanceof Error ? error.message : error)
  process.exitCode = 1
})
