/**
 * Issue 29, a silent holder: a fenced transaction (`Run.transaction`) whose client falls silent
 * mid-transaction (its socket dropped through a TCP proxy the test owns, never reset). The server
 * sees a session idle in its transaction, holding what the transaction locked: the run's claim
 * batch row (FOR KEY SHARE, from the check) when the run was claimed in the batch ledger, its run
 * row once the completion has run when it was claimed in its row. The transaction bounds its own
 * idle time to the lease TTL (guarded.ts › idleBound), so the server ends it about one TTL after
 * its last statement, its locks go, and another worker reclaims the runs (fence 2) and completes
 * them once. What the holder wrote inside the transaction is never committed; its commit, sent
 * once its socket comes back, fails with a StoreError. Without the bound the runs stay held
 * (bounded only by TCP keepalives, hours) and each reclaim below times out.
 *
 * Each scenario runs straight to PostgreSQL and through a real PgBouncer in transaction mode
 * (the proxy between the holder and PgBouncer: its server connection is the one left idle).
 */
import { assert, describe, it } from "@effect/vitest"
import { type ClaimedRun, Fence, Handler, Run, RunStore, StoreError } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import * as TcpProxy from "@leasehold/testing/TcpProxy"
import { Cause, Context, Deferred, Duration, Effect, Exit, Fiber, Layer, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { databaseUrl, freshSchema } from "./support/db.js"
import * as PgBouncer from "./support/pgbouncer.js"
import { type Event, eventually, startWorker } from "./support/workers.js"

/** The lease TTL of both workers, and so the silent transaction's idle bound. */
const TTL = "2 seconds"
const ttl = Duration.seconds(2)
/** A few TTLs: the bound (one TTL), the lease's expiry, the next sweep, under this machine's load. */
const RECLAIM_WITHIN = "12 seconds"

const fast = {
  ttl: TTL,
  pollInterval: "100 millis",
  finalizeTimeout: "500 millis",
  shutdownGrace: "200 millis"
} as const

type Through = "direct" | "PgBouncer"

const at = (url: string, port: number): string => {
  const parsed = new URL(url)
  parsed.hostname = "127.0.0.1"
  parsed.port = String(port)
  return parsed.toString()
}

const storeAt = (url: string, schema: string, storage: PgRunStore.Storage, through: Through) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      PgRunStore.layer({ schema, storage, ...(through === "PgBouncer" ? { pooler: {} } : {}) }).pipe(
        Layer.provideMerge(
          Database.layerFromUrl(url, {
            maxConnections: 4,
            ...(through === "PgBouncer" ? { pooler: "transaction" } : {})
          })
        )
      )
    )
    return { store: Context.get(context, RunStore), sql: Context.get(context, SqlClient.SqlClient) }
  })

/**
 * Scoped: a fresh schema with the application's table `app`, the silent side's store through the
 * proxy, and the other side's store (the other worker, and the test's view) outside it.
 */
const setup = (through: Through, storage: PgRunStore.Storage) =>
  Effect.gen(function*() {
    const schema = freshSchema("holder")
    const server = through === "direct" ? databaseUrl() : (yield* PgBouncer.start(databaseUrl(), 12)).url
    const target = new URL(server)
    const proxy = yield* Effect.acquireRelease(
      Effect.promise(() => TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) })),
      (p) => Effect.promise(() => (p.heal(), p.close()))
    )
    const outside = yield* storeAt(server, schema, storage, through)
    const [version] = yield* outside.sql<{ v: string }>`SELECT current_setting('server_version') AS v`
    yield* Effect.logInfo(`PostgreSQL ${version!.v}`)
    const silent = yield* storeAt(at(server, proxy.port), schema, storage, through)
    yield* outside.sql.unsafe(
      `CREATE TABLE "${schema}".app (run_id bigint NOT NULL, fence bigint NOT NULL, note text NOT NULL)`
    )
    return { schema, proxy, outside, silent }
  })
type Setup = Effect.Success<ReturnType<typeof setup>>

/** The application's write inside the fenced transaction, under the holder's fence. */
const writeApp = (schema: string, runId: string, fence: number, note: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`INSERT INTO ${sql(schema)}.app (run_id, fence, note) VALUES (${runId}::bigint, ${fence}, ${note})`
  })

/** The other worker: its handler writes its `app` row and completes in one fenced transaction. */
const startOutside = (env: Setup) =>
  startWorker(env.outside.store, env.outside.sql, {
    ...fast,
    owner: "outside",
    handlers: [Handler.make({
      kind: "job",
      payload: Schema.Null,
      handle: () =>
        Run.transaction(Effect.gen(function*() {
          const fence = yield* Fence
          yield* writeApp(env.schema, fence.runId, fence.fence, "outside")
          return "outside"
        }))
    })]
  })

const appRows = (env: Setup) =>
  env.outside.sql.unsafe<{ run_id: string; fence: string; note: string }>(
    `SELECT run_id::text, fence::text, note FROM "${env.schema}".app ORDER BY run_id, fence`
  ).pipe(Effect.map((rows) => rows.map((r) => [r.run_id, Number(r.fence), r.note])))

/**
 * Every run completed by the other worker under fence 2, each once: its result, its one `app`
 * row, and nothing of the silent holder (fence 1) in `app`.
 */
const completedOnceOutside = (env: Setup, runIds: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    for (const runId of runIds) {
      const record = yield* env.outside.store.get(runId)
      assert.deepStrictEqual([record.state, record.fence, record.result], ["completed", 2, "outside"], `run ${runId}`)
    }
    assert.deepStrictEqual(
      yield* appRows(env),
      [...runIds].sort((a, b) => Number(a) - Number(b)).map((id) => [id, 2, "outside"])
    )
  })

/** Polls until every run is completed; the time it took from `from`, in milliseconds. */
const reclaimedAndCompleted = (env: Setup, runIds: ReadonlyArray<string>, from: number) =>
  Effect.gen(function*() {
    yield* eventually(
      "the silent holder's runs reclaimed and completed by the other worker",
      Effect.map(
        Effect.forEach(runIds, (id) => env.outside.store.get(id)),
        (records) => records.every((r) => r.state === "completed")
      ),
      RECLAIM_WITHIN
    )
    return Date.now() - from
  })

/**
 * Cuts the silent side off; the cut heals when the test's scope closes, before the workers started
 * so far stop (a worker stopping behind the cut would wait on it for good).
 */
const partition = (env: Setup, cut?: TcpProxy.Cut) =>
  Effect.gen(function*() {
    env.proxy.partition(cut)
    yield* Effect.addFinalizer(() => Effect.sync(() => env.proxy.heal()))
    return Date.now()
  })

const enqueueJobs = (env: Setup, n: number) =>
  Effect.map(
    env.outside.store.enqueue(Array.from({ length: n }, () => ({ kind: "job", payload: null }))),
    (runs) => runs.map((r) => r.id)
  )

const claimSilently = (env: Setup, n: number) =>
  env.silent.store.claim({ owner: "silent", queues: ["default"], kinds: ["job"], limit: n, ttl })

/** The open claim batches and their sizes: the runs a claim put in the ledger. */
const openBatches = (env: Setup) =>
  Effect.map(
    env.outside.sql.unsafe<{ n: number }>(
      `SELECT cardinality(ids) AS n FROM "${env.schema}".claim_batches WHERE settled_at IS NULL`
    ),
    (rows) => rows.map((r) => r.n)
  )

/**
 * A fenced transaction of the silent store on a claimed run, by a direct store call: it writes its
 * `app` row, says so, and waits for `go` before its completion. Forked; its fiber is returned.
 */
const forkTransaction = (env: Setup, run: ClaimedRun, written: Deferred.Deferred<void>, go: Deferred.Deferred<void>) =>
  Effect.forkScoped(env.silent.store.completeInTransaction(
    { runId: run.id, fence: run.fence },
    Effect.gen(function*() {
      yield* writeApp(env.schema, run.id, run.fence, "silent")
      yield* Deferred.succeed(written, undefined)
      yield* Deferred.await(go)
      return "silent"
    }).pipe(Effect.provideService(SqlClient.SqlClient, env.silent.sql)),
    (value) => Exit.succeed(JSON.stringify(value)),
    ttl
  ))

/**
 * The holder's answer once its transaction was ended: a StoreError of the transaction, never a
 * success. A silent holder finds its connection gone (`ConnectionError`); a client that was
 * listening when the server ended its transaction is told why (`TransactionIdleTimeout`).
 */
const endedTransaction = (fiber: Fiber.Fiber<string, unknown>, reason: "ConnectionError" | "TransactionIdleTimeout") =>
  Effect.gen(function*() {
    const exit = yield* Fiber.await(fiber).pipe(Effect.timeout("30 seconds"))
    if (Exit.isSuccess(exit)) return assert.fail(`the silent holder's transaction succeeded: ${exit.value}`)
    const failure = Cause.findError(exit.cause)
    if (Result.isFailure(failure)) return assert.fail(`a typed failure, not ${Cause.pretty(exit.cause)}`)
    assert.instanceOf(failure.success, StoreError, Cause.pretty(exit.cause))
    const error = failure.success as StoreError
    assert.deepStrictEqual([error.operation, error.reason], ["transaction", reason], error.message)
    return error
  })

const scenarios = (through: Through) => {
  describe(`a silent holder of a fenced transaction (${through})`, () => {
    it.live("a worker's transaction on ledger-claimed runs, gone silent mid-transaction: ended by the server, the batch's runs reclaimed and completed once under fence 2, nothing of it committed", () =>
      Effect.gen(function*() {
        const env = yield* setup(through, "ledger")
        const runIds = yield* enqueueJobs(env, 3)
        let written = 0
        const silentEvents: Array<Event> = []
        // The silent worker: its handler writes its `app` row in its fenced transaction, then waits there.
        yield* startWorker(env.silent.store, env.silent.sql, {
          ...fast,
          owner: "silent",
          concurrency: 3,
          handlers: [Handler.make({
            kind: "job",
            payload: Schema.Null,
            handle: () =>
              Run.transaction(Effect.gen(function*() {
                const fence = yield* Fence
                yield* writeApp(env.schema, fence.runId, fence.fence, "silent")
                written++
                return yield* Effect.never
              }))
          })]
        }, silentEvents)
        yield* eventually("the three transactions open, each with its row written", Effect.sync(() => written === 3))
        // One claim took the three runs: one batch row, which each transaction holds FOR KEY SHARE.
        assert.deepStrictEqual(yield* openBatches(env), [3])

        const from = yield* partition(env)
        yield* startOutside(env)
        const took = yield* reclaimedAndCompleted(env, runIds, from)
        assert.isTrue(env.proxy.isPartitioned(), "reclaimed while the holder is still silent")
        yield* completedOnceOutside(env, runIds)
        yield* Effect.logInfo(
          `silent holder (worker, ledger, ${through}): reclaimed and completed ${took} ms after the partition`
        )

        // The socket comes back: what the silent worker sent or still sends lands nowhere.
        env.proxy.heal()
        yield* eventually(
          "the silent worker settles its three runs",
          Effect.sync(() => silentEvents.filter((e) => e._tag === "RunSettled").length === 3),
          "30 seconds"
        )
        yield* completedOnceOutside(env, runIds)
      }))

    it.live("a direct store call on a ledger-claimed run, gone silent mid-transaction: reclaimed by the other worker, its completion once back rejected with a StoreError, its row not committed", () =>
      Effect.gen(function*() {
        const env = yield* setup(through, "ledger")
        const runIds = yield* enqueueJobs(env, 3)
        const claimed = yield* claimSilently(env, 3)
        assert.deepStrictEqual(claimed.map((r) => r.fence), [1, 1, 1])
        assert.deepStrictEqual(yield* openBatches(env), [3])
        const written = yield* Deferred.make<void>()
        const go = yield* Deferred.make<void>()
        const fiber = yield* forkTransaction(env, claimed[0]!, written, go)
        yield* Deferred.await(written)

        const from = yield* partition(env)
        yield* startOutside(env)
        const took = yield* reclaimedAndCompleted(env, runIds, from)
        assert.isTrue(env.proxy.isPartitioned())
        yield* completedOnceOutside(env, runIds)
        yield* Effect.logInfo(
          `silent holder (store call, ledger, ${through}): reclaimed and completed ${took} ms after the partition`
        )

        env.proxy.heal()
        yield* Deferred.succeed(go, undefined)
        yield* endedTransaction(fiber, "ConnectionError")
        yield* completedOnceOutside(env, runIds)
      }))

    it.live("a direct store call on a row-claimed run whose completion ran but whose answer never came back: the run row let go, reclaimed, its commit rejected", () =>
      Effect.gen(function*() {
        const env = yield* setup(through, "rows")
        const runIds = yield* enqueueJobs(env, 1)
        const [run] = yield* claimSilently(env, 1)
        assert.deepStrictEqual(yield* openBatches(env), [])
        const written = yield* Deferred.make<void>()
        const go = yield* Deferred.make<void>()
        const fiber = yield* forkTransaction(env, run!, written, go)
        yield* Deferred.await(written)

        // The completion reaches the server and locks the run's row; its answer is held, so the
        // client waits and never commits.
        const from = yield* partition(env, "answers")
        yield* Deferred.succeed(go, undefined)
        yield* startOutside(env)
        const took = yield* reclaimedAndCompleted(env, runIds, from)
        assert.isTrue(env.proxy.isPartitioned())
        yield* completedOnceOutside(env, runIds)
        yield* Effect.logInfo(
          `silent holder (store call, row, ${through}): reclaimed and completed ${took} ms after the partition`
        )

        env.proxy.heal()
        yield* endedTransaction(fiber, "ConnectionError")
        yield* completedOnceOutside(env, runIds)
      }))

    it.live("an effect that sits idle in the transaction longer than the TTL: the server ends the transaction, the call fails with a StoreError, nothing of it committed, the run still held and completed afterwards", () =>
      Effect.gen(function*() {
        const env = yield* setup(through, "ledger")
        const [runId] = yield* enqueueJobs(env, 1)
        // A lease far longer than the idle bound: only the bound ends the transaction.
        const [run] = yield* env.silent.store.claim({
          owner: "silent",
          queues: ["default"],
          kinds: ["job"],
          limit: 1,
          ttl: Duration.minutes(1)
        })
        const lease = { runId: run!.id, fence: run!.fence }
        const idle = Effect.gen(function*() {
          yield* writeApp(env.schema, run!.id, run!.fence, "idle")
          yield* Effect.sleep(Duration.sum(ttl, Duration.seconds(1)))
          return "idle"
        }).pipe(Effect.provideService(SqlClient.SqlClient, env.silent.sql))
        const fiber = yield* Effect.forkScoped(
          env.silent.store.completeInTransaction(lease, idle, (v) => Exit.succeed(JSON.stringify(v)), ttl)
        )
        yield* endedTransaction(fiber, "TransactionIdleTimeout")
        assert.deepStrictEqual(yield* appRows(env), [])
        assert.deepInclude(yield* env.outside.store.get(runId!), { state: "running", fence: 1 })
        // Its holder still holds the run, and completes it in a transaction that does not sit idle.
        const done = yield* env.silent.store.completeInTransaction(
          lease,
          Effect.as(writeApp(env.schema, run!.id, run!.fence, "prompt"), "prompt").pipe(
            Effect.provideService(SqlClient.SqlClient, env.silent.sql)
          ),
          (v) => Exit.succeed(JSON.stringify(v)),
          ttl
        )
        assert.strictEqual(done, "prompt")
        assert.deepStrictEqual(yield* appRows(env), [[runId!, 1, "prompt"]])
        assert.deepInclude(yield* env.outside.store.get(runId!), { state: "completed", fence: 1, result: "prompt" })
      }))
  })
}

scenarios("direct")
scenarios("PgBouncer")
