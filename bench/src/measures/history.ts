/**
 * `--history N`: the operator reads (stats, the live sample behind /metrics, throughput, the console
 * overview's refresh, the queues page, `runs show` of an old run, the runs list, a default search
 * by error text and by a payload field) on a store holding N completed runs (bench/src/history.ts),
 * side by side with an empty store in the same run; both stores hold the same live runs. Each
 * read is timed (median of its repeats, client wall time) and its statements run again under
 * EXPLAIN (ANALYZE, BUFFERS) for their pages and server time. The drain, pickup and retention on
 * top of history: `longHaul.ts`.
 */
import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Duration, Effect, Layer } from "effect"
import { SqlClient, Statement } from "effect/sql"
import * as History from "../history.js"
import * as Pg from "../pg.js"
import { log } from "../progress.js"
import { monotonicMs } from "../stats.js"
import { DAYS } from "./longHaul.js"

export interface HistoryRead {
  readonly read: string
  readonly emptyMs: number
  readonly historyMs: number
  readonly emptyBuffers: number
  readonly historyBuffers: number
  /** Server time of the read's statements under EXPLAIN ANALYZE, summed. */
  readonly emptyServerMs: number
  readonly historyServerMs: number
}

export interface HistoryResult {
  readonly history: number
  readonly fillSeconds: number
  readonly runsBytes: number
  readonly databaseBytes: number
  readonly reads: ReadonlyArray<HistoryRead>
}

const repeats = 7

interface Measured {
  readonly ms: number
  readonly buffers: number
  readonly serverMs: number
}

/** Median wall time of `repeats` runs of the read (after one), then its statements explained. */
const measure = (sql: SqlClient.SqlClient, read: Effect.Effect<unknown, unknown>) =>
  Effect.gen(function*() {
    yield* read
    const times: Array<number> = []
    for (let i = 0; i < repeats; i++) {
      const start = monotonicMs()
      yield* read
      times.push(monotonicMs() - start)
    }
    times.sort((a, b) => a - b)
    const sent: Array<readonly [string, ReadonlyArray<unknown>]> = []
    const record: Statement.Transformer = (self) =>
      Effect.sync(() => {
        sent.push(self.compile())
        return self
      })
    yield* read.pipe(Effect.provideService(Statement.CurrentTransformer, record))
    let buffers = 0
    let serverMs = 0
    yield* sql.withTransaction(Effect.gen(function*() {
      for (const [text, params] of sent) {
        if (/^\s*SET\b/i.test(text)) {
          yield* sql.unsafe(text, params as Array<never>)
          continue
        }
        const rows = yield* sql.unsafe<{ "QUERY PLAN": ReadonlyArray<{ Plan: Record<string, number> }> }>(
          `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`,
          params as Array<never>
        )
        const plan = rows[0]!["QUERY PLAN"][0]!.Plan
        buffers += (plan["Shared Hit Blocks"] ?? 0) + (plan["Shared Read Blocks"] ?? 0)
        serverMs += plan["Actual Total Time"] ?? 0
      }
      return yield* Effect.fail("roll back" as const)
    })).pipe(Effect.catch((e) => e === "roll back" ? Effect.void : Effect.fail(e)))
    return { ms: times[Math.floor(repeats / 2)]!, buffers, serverMs } satisfies Measured
  })

/** The same live runs in each store: pending, running, completed and one failed a moment ago. */
const liveLoad = (store: RunStore["Service"]) =>
  Effect.gen(function*() {
    yield* store.enqueue(
      Array.from({ length: 2_000 }, (_, i) => ({ kind: "live", payload: { i }, queue: "q1", maxAttempts: 1 }))
    )
    const claimed = yield* store.claim({
      owner: "bench",
      queues: ["q1"],
      kinds: ["live"],
      limit: 200,
      ttl: Duration.minutes(10)
    })
    yield* store.completeBatch(claimed.slice(0, 100).map((r) => ({ runId: r.id, fence: r.fence, result: null })))
    yield* store.fail({
      runId: claimed[100]!.id,
      fence: claimed[100]!.fence,
      error: { message: "upstream refused the card" },
      retryDelayMs: undefined
    })
  })

const reads = (store: RunStore["Service"], hourAgo: Date) => {
  const overview = Effect.all([store.stats, store.workers, store.throughput({ minutes: 60 })], { concurrency: 3 })
  const queues = Effect.all([store.stats, store.pausedQueues, store.workers, store.throughput({ minutes: 5 })], {
    concurrency: 4
  })
  return [
    ["stats (/api/stats, leasehold stats)", store.stats],
    ["sample (/metrics)", store.sample],
    ["console overview refresh (stats, workers, throughput 60 min)", overview],
    ["/api/queues (stats, paused, workers, throughput 5 min)", queues],
    ["runs show of an old run (get + history)", Effect.all([store.get("1234"), store.history("1234")])],
    ["runs list, first page", store.list({ limit: 50 })],
    ["search by error text, default window (1 h)", store.list({ limit: 50, errorText: "card", createdFrom: hourAgo })],
    [
      "search by a payload field, default window (1 h)",
      store.list({ limit: 50, payload: [{ path: ["customer"], value: "c7" }], createdFrom: hourAgo })
    ]
  ] as const
}

const onDatabase = (url: string, history: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const store = yield* PgRunStore.make({ schema: "leasehold" })
    const start = monotonicMs()
    if (history > 0) {
      log(`writing ${history.toLocaleString("en-US")} completed runs of history…`)
      for (const text of History.statements("leasehold", { runs: history, days: DAYS, dayRanges: true })) {
        yield* sql.unsafe(text)
      }
    }
    const fillSeconds = (monotonicMs() - start) / 1000
    yield* liveLoad(store)
    const [sizes] = yield* sql<{ runs: string; db: string }>`
      SELECT (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('leasehold.runs'))::text AS runs, pg_database_size(current_database())::text AS db`
    const [clock] = yield* sql<{ now: Date }>`SELECT now() AS now`
    const hourAgo = new Date(new Date(clock!.now).getTime() - 3_600_000)
    const measured: Array<readonly [string, Measured]> = []
    for (const [name, read] of reads(store, hourAgo)) {
      measured.push([name, yield* measure(sql, read as Effect.Effect<unknown, unknown>)])
    }
    return { fillSeconds, runsBytes: Number(sizes!.runs), databaseBytes: Number(sizes!.db), measured }
  }).pipe(
    Effect.scoped,
    Effect.provide(Layer.orDie(Database.layerFromUrl(url, { maxConnections: 4 })))
  )

export const historyReads = async (serverUrl: string, history: number, keep: boolean): Promise<HistoryResult> => {
  const empty = await Pg.createDatabase(serverUrl, "history_empty")
  const full = await Pg.createDatabase(serverUrl, "history_full")
  try {
    log("operator reads on an empty store…")
    const a = await Effect.runPromise(onDatabase(Pg.databaseUrl(serverUrl, empty), 0))
    const b = await Effect.runPromise(onDatabase(Pg.databaseUrl(serverUrl, full), history))
    log(
      `operator reads on ${history.toLocaleString("en-US")} runs of history in ${DAYS} day ranges (written in ${
        b.fillSeconds.toFixed(0)
      } s)`
    )
    return {
      history,
      fillSeconds: b.fillSeconds,
      runsBytes: b.runsBytes,
      databaseBytes: b.databaseBytes,
      reads: a.measured.map(([read, e], i) => {
        const h = b.measured[i]![1]
        return {
          read,
          emptyMs: e.ms,
          historyMs: h.ms,
          emptyBuffers: e.buffers,
          historyBuffers: h.buffers,
          emptyServerMs: e.serverMs,
          historyServerMs: h.serverMs
        }
      })
    }
  } finally {
    if (!keep) {
      await Pg.dropDatabase(serverUrl, empty)
      await Pg.dropDatabase(serverUrl, full)
    }
  }
}

/** The result as a Markdown table. */
export const render = (r: HistoryResult): string =>
  [
    `Operator reads: an empty store beside one holding ${r.history.toLocaleString("en-US")} completed runs ` +
    `(written in ${r.fillSeconds.toFixed(0)} s; runs ${(r.runsBytes / 1e6).toFixed(0)} MB, database ${
      (r.databaseBytes / 1e6).toFixed(0)
    } MB). Median of ${repeats} (client ms); buffers and server ms from EXPLAIN (ANALYZE, BUFFERS).`,
    "",
    "| read | empty ms | history ms | empty buffers | history buffers | empty server ms | history server ms |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...r.reads.map((x) =>
      `| ${x.read} | ${x.emptyMs.toFixed(1)} | ${x.historyMs.toFixed(1)} | ${x.emptyBuffers} | ${x.historyBuffers} | ${
        x.emptyServerMs.toFixed(1)
      } | ${x.historyServerMs.toFixed(1)} |`
    )
  ].join("\n")
