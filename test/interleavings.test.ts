/**
 * The batch ledger under every interleaving (issue 39): for each pair of statements that can touch
 * one claim batch (claim and sweep, renewal, batched completion and its retry, fenced transaction,
 * every exceptional write that moves a run to its row, an operator's cancel, a signal), every order
 * of their statements that PostgreSQL's locks allow, on a real server (test/support/interleavings.ts).
 * The pairs that lost completions were found with are run again beside a third session holding the
 * batch's row, as a stalled transaction does. After each schedule the invariants of item 2 are read
 * from the database, and then every lease still held is expired and swept: each such run must be
 * claimable by another worker. With unique windows on the batch's runs, a second enqueue of one's
 * key beside each of those statements: the window answers from the ledger's state in every order.
 */
import { assert, describe, it } from "@effect/vitest"
import { type LeaseKey, RunStore } from "@leasehold/core"
import { ClaimPosition } from "@leasehold/core/store"
import { StoreSchema } from "@leasehold/sql"
import { Cause, Context, Duration, Effect, Exit, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as admin from "../packages/sql/dist/internal/statements/admin.js"
import * as claimStatement from "../packages/sql/dist/internal/statements/claim.js"
import * as enqueueStatement from "../packages/sql/dist/internal/statements/enqueue.js"
import * as guarded from "../packages/sql/dist/internal/statements/guarded.js"
import * as ledger from "../packages/sql/dist/internal/statements/ledger.js"
import { renewHeld } from "../packages/sql/dist/internal/statements/renewHeld.js"
import * as signals from "../packages/sql/dist/internal/statements/signals.js"
import { databaseUrl, freshSchema, layerStore } from "./support/db.js"
import { everySchedule, type Operation, type Outcome, sessionClient } from "./support/interleavings.js"

const ttl = Duration.seconds(30)
const renewedTtl = Duration.minutes(10)
const owner = "w-a"

/** What each schedule starts from: three runs claimed by `w-a` in one claim batch. */
interface Ctx {
  /** A queue of this schedule's own: what earlier schedules left is never claimed in it. */
  readonly queue: string
  readonly leases: ReadonlyArray<LeaseKey>
  readonly refs: ledger.LedgerRefs
  /** What the holder's renewal answered as still held, once it has answered. */
  renewed?: ReadonlyArray<LeaseKey>
  /** What the completions answered, by run. */
  readonly finalized: Array<LeaseKey>
  /** The holder's writes refused (a completion rejected, a fenced transaction refused). */
  readonly refused: Array<LeaseKey>
  /** With unique windows (each run its own key): what a second enqueue of r2's key answered. */
  again?: { readonly id: string; readonly created: boolean }
}

/** r_i's unique window: a key of its own, held while it is pending, running or suspended (the default). */
const uniqueOf = (queue: string, i: number) => ({
  kind: "job",
  queue,
  payload: { i },
  unique: { key: `${queue}-${i}` }
})

const item = (lease: LeaseKey) => ({ runId: lease.runId, fence: lease.fence, result: null, keyed: false })

/** The operations, each as one session runs it; `r1`..`r3` are the batch's runs. */
const operations = (s: StoreSchema.StoreSchema): Record<string, Operation<Ctx>> => {
  const complete = (name: string, which: ReadonlyArray<number>): Operation<Ctx> => ({
    name,
    run: (sql, ctx) =>
      Effect.tap(
        guarded.completeBatch(sql, s, which.map((i) => item(ctx.leases[i]!)), "keep", undefined, ctx.refs),
        (outcomes) =>
          Effect.sync(() =>
            outcomes.forEach((o, k) =>
              (o._tag === "Finalized" ? ctx.finalized : ctx.refused).push({
                runId: ctx.leases[which[k]!]!.runId,
                fence: ctx.leases[which[k]!]!.fence
              })
            )
          )
      )
  })
  return {
    complete: complete("complete(r1,r2)", [0, 1]),
    retry: complete("retry(r1,r2)", [0, 1]),
    completeOther: complete("complete(r3)", [2]),
    renew: {
      name: "renew",
      // A longer TTL than the claim's: a lease answered renewed shows it.
      run: (sql, ctx) =>
        Effect.tap(
          renewHeld(sql, s, owner, ctx.leases, renewedTtl, ctx.refs),
          (held) => Effect.sync(() => ctx.renewed = held)
        )
    },
    transaction: {
      name: "transaction(r1)",
      run: (sql, ctx) =>
        guarded.completeInTransaction(
          sql,
          s,
          ctx.leases[0]!,
          sql`INSERT INTO ${sql.literal(`"${s.schema}".app_writes`)} (run_id, fence) VALUES (${
            ctx.leases[0]!.runId
          }::bigint, ${ctx.leases[0]!.fence})`,
          () => Exit.succeed("null"),
          "keep",
          ctx.refs,
          ttl
        ).pipe(Effect.tapError(() => Effect.sync(() => ctx.refused.push(ctx.leases[0]!))))
    },
    fail: {
      name: "fail(r2)",
      run: (sql, ctx) => guarded.fail(sql, s, { ...ctx.leases[1]!, error: { message: "x" }, retryDelayMs: 0 }, ctx.refs)
    },
    release: { name: "release(r2)", run: (sql, ctx) => guarded.release(sql, s, ctx.leases[1]!, ctx.refs) },
    snooze: {
      name: "snooze(r2)",
      run: (sql, ctx) => guarded.snooze(sql, s, { ...ctx.leases[1]!, delayMs: 0 }, ctx.refs)
    },
    checkpoint: {
      name: "checkpoint(r2)",
      run: (sql, ctx) => guarded.checkpoint(sql, s, ctx.leases[1]!, { step: 1 }, ctx.refs)
    },
    suspend: {
      name: "suspend(r2)",
      run: (sql, ctx) =>
        guarded.suspend(sql, s, {
          ...ctx.leases[1]!,
          signal: "go",
          token: `t-${ctx.leases[1]!.runId}`,
          timeout: undefined
        }, ctx.refs)
    },
    cancel: { name: "cancel(r2)", run: (sql, ctx) => admin.cancel(sql, s, ctx.leases[1]!.runId) },
    signal: {
      name: "signal(r2)",
      run: (sql, ctx) => signals.deliverSignal(sql, s, { runId: ctx.leases[1]!.runId, signal: "go", payload: 1 })
    },
    again: {
      // A second enqueue of r2's unique key: its window must answer from the ledger's state.
      name: "again(r2)",
      run: (sql, ctx) =>
        Effect.tap(
          enqueueStatement.enqueue(sql, s, [uniqueOf(ctx.queue, 2)], "ledger"),
          ([answer]) => Effect.sync(() => ctx.again = answer!)
        )
    },
    sweep: {
      name: "sweep",
      run: (sql, ctx) =>
        claimStatement.claim(sql, s, new ClaimPosition.Positions(), {
          owner: "w-b",
          queues: [ctx.queue],
          kinds: ["job"],
          limit: 10,
          ttl
        })
    },
    stall: {
      // A transaction holding the batch's row, as one stalled mid-statement does.
      name: "stall",
      startsAtOnce: true,
      // On a REPEATABLE READ session, a batch row changed while its lock waited ends the stall's
      // transaction (a serialization failure): it then holds nothing, which is no error of the store's.
      run: (sql, ctx) =>
        Effect.catchIf(
          sql.withTransaction(Effect.andThen(
            sql`SELECT 1 FROM ${sql.literal(`"${s.schema}".claim_batches`)} WHERE ids && ${
              ctx.leases.map((l) => l.runId)
            }::bigint[] FOR UPDATE`,
            sql`SELECT 'commit'`
          )),
          (error) => error.reason._tag === "SerializationError",
          () => Effect.void
        )
    }
  }
}

/** The store's own errors a session may answer with; anything else (a deadlock, a defect) fails the schedule. */
const expected = new Set(["FenceRejected", "LeaseNotHeld", "RunNotFound", "RunNotSuspended", "InvalidTransition"])

const rows = <A extends object>(sql: SqlClient.SqlClient, text: string) => sql.unsafe<A>(text)

/** The invariants of issue 39's item 2, read from the database after a schedule. */
const check = (sql: SqlClient.SqlClient, s: StoreSchema.StoreSchema, ctx: Ctx, outcome: Outcome) =>
  Effect.gen(function*() {
    const q = `"${s.schema}"`
    // This schedule's runs (each schedule starts from runs of its own) and the batches that claimed them.
    const ids = `ARRAY[${ctx.leases.map((l) => Number(l.runId)).join(",")}]::bigint[]`
    const batches = `(SELECT batch FROM ${q}.claim_batches WHERE ids && ${ids})`
    outcome.exits.forEach((exit, i) => {
      if (Exit.isSuccess(exit)) return
      const failure = Cause.findErrorOption(exit.cause)
      const tag = failure._tag === "Some" ? (failure.value as { _tag?: string })._tag : undefined
      if (tag === undefined || !expected.has(tag)) {
        const reason = failure._tag === "Some"
          ? (failure.value as { reason?: { _tag?: string } }).reason?._tag
          : undefined
        throw new Error(`session ${i} ended with ${reason ?? Cause.pretty(exit.cause).split("\n")[0]}`)
      }
    })
    const twice = yield* rows<{ id: string; fence: string; n: string }>(
      sql,
      `
      SELECT id::text, fence::text, count(*)::text AS n FROM (
        SELECT u.id, u.fence FROM ${q}.completion_batches d, unnest(d.ids, d.fences) AS u(id, fence) WHERE d.ids && ${ids}
        UNION ALL SELECT id, fence FROM ${q}.runs WHERE state = 'completed' AND id = ANY (${ids})
      ) x WHERE id = ANY (${ids}) GROUP BY id, fence HAVING count(*) > 1`
    )
    assert.deepStrictEqual(twice, [], "a (run, fence) completed more than once")
    const history = yield* rows<{ run_id: string }>(
      sql,
      `
      SELECT run_id::text FROM ${q}.run_history WHERE kind = 'completed' AND run_id = ANY (${ids}) GROUP BY run_id, fence HAVING count(*) > 1`
    )
    assert.deepStrictEqual(history, [], "a completion recorded twice in the history")
    const openInSettled = yield* rows<{ batch: string; id: string }>(
      sql,
      `
      SELECT c.batch::text, u.id::text FROM ${q}.claim_batches c, unnest(c.ids) AS u(id)
      WHERE c.batch IN ${batches} AND c.settled_at IS NOT NULL AND u.id <> ALL (c.closed)
        AND NOT EXISTS (SELECT 1 FROM ${q}.completion_batches d WHERE d.claim_batch = c.batch AND u.id = ANY (d.ids))`
    )
    assert.deepStrictEqual(openInSettled, [], "a run open in a settled batch")
    const endedUnsettled = yield* rows<{ batch: string }>(
      sql,
      `
      SELECT c.batch::text FROM ${q}.claim_batches c WHERE c.batch IN ${batches} AND c.settled_at IS NULL AND NOT EXISTS (
        SELECT 1 FROM unnest(c.ids) AS u(id) WHERE u.id <> ALL (c.closed)
          AND NOT EXISTS (SELECT 1 FROM ${q}.completion_batches d WHERE d.claim_batch = c.batch AND u.id = ANY (d.ids)))`
    )
    assert.deepStrictEqual(endedUnsettled, [], "a batch whose runs all ended is not settled")
    const now = yield* rows<
      { id: string; state: string; fence: string; lease_owner: string | null; lease_expires_at: Date | null }
    >(
      sql,
      `SELECT id::text, state, fence::text, lease_owner, lease_expires_at FROM ${q}.runs_now WHERE id = ANY (${ids}) ORDER BY id`
    )
    const stateOf = (lease: LeaseKey) => now.find((r) => r.id === lease.runId)!
    for (const lease of ctx.finalized) {
      const run = stateOf(lease)
      assert.deepStrictEqual(
        [run.state, run.fence],
        ["completed", String(lease.fence)],
        `run ${lease.runId} answered completed`
      )
    }
    for (const lease of ctx.refused) {
      const run = stateOf(lease)
      const stillHeld = run.state === "running" && run.fence === String(lease.fence) && run.lease_owner === owner
      assert.isFalse(stillHeld, `run ${lease.runId}: its holder's write was refused while it still held the lease`)
    }
    if (ctx.renewed !== undefined) {
      for (const lease of ctx.leases) {
        const run = stateOf(lease)
        const stillHeld = run.state === "running" && run.fence === String(lease.fence) && run.lease_owner === owner
        const answered = ctx.renewed.some((l) => l.runId === lease.runId)
        if (stillHeld) assert.isTrue(answered, `run ${lease.runId} held but answered lost by its renewal`)
        if (stillHeld && answered) {
          assert.isAbove(
            run.lease_expires_at!.getTime(),
            Date.now() + 5 * 60_000,
            `run ${lease.runId} answered renewed, its lease not extended`
          )
        }
      }
    }
    const writes = yield* rows<{ run_id: string; fence: string }>(
      sql,
      `SELECT run_id::text, fence::text FROM ${q}.app_writes WHERE run_id = ANY (${ids})`
    )
    for (const w of writes) {
      const run = now.find((r) => r.id === w.run_id)!
      assert.deepStrictEqual(
        [run.state, run.fence],
        ["completed", w.fence],
        "a fenced transaction's write committed without its completion"
      )
    }
    if (ctx.again !== undefined) {
      // r2's window: at most one run of its key pending, running or suspended; a duplicate is r2.
      const r2 = ctx.leases[1]!.runId
      const holding = yield* rows<{ id: string }>(
        sql,
        `SELECT id::text FROM ${q}.runs_now WHERE queue = '${ctx.queue}' AND payload = '{"i": 2}'
           AND state IN ('pending', 'running', 'suspended')`
      )
      assert.isAtMost(holding.length, 1, "two runs of r2's unique key in its window")
      if (!ctx.again.created) assert.strictEqual(ctx.again.id, r2, "the duplicate yields r2")
      // r2 still in its window at the end (nothing completed or cancelled it): it was in it all along.
      if (holding.some((r) => r.id === r2)) assert.isFalse(ctx.again.created, "a run created while r2 held its key")
    }
    // Every lease still held is expired; another worker's sweep must take each such run.
    const held = now.filter((r) => r.state === "running").map((r) => r.id)
    yield* rows(
      sql,
      `UPDATE ${q}.claim_batches SET expires_at = now() - interval '1 second' WHERE batch IN ${batches} AND settled_at IS NULL`
    )
    yield* rows(
      sql,
      `UPDATE ${q}.runs SET lease_expires_at = now() - interval '1 second' WHERE id = ANY (${ids}) AND state = 'running'`
    )
    // Held for an hour: what the sweep takes here never expires during the test.
    const taken = yield* claimStatement.claim(sql, s, new ClaimPosition.Positions(), {
      owner: "w-c",
      queues: [ctx.queue],
      kinds: ["job"],
      limit: 10,
      ttl: Duration.hours(1)
    })
    const reclaimed = taken.filter((r) => r.via === "expired").map((r) => r.id)
    assert.sameMembers(reclaimed, held, "every run whose lease expired is reclaimed by another worker's sweep")
  })

/** Every schedule of each combination of sessions, on one schema; the first broken schedule of each told. */
const everyCombination = (
  combinations: (names: ReadonlyArray<string>) => Array<ReadonlyArray<string>>,
  settings: Record<string, string> = {},
  unique = false
) =>
  Effect.scoped(Effect.gen(function*() {
    const schema = freshSchema("iso")
    const context = yield* Layer.build(layerStore(schema, 2))
    const store = Context.get(context, RunStore)
    const monitor = Context.get(context, SqlClient.SqlClient)
    const s = StoreSchema.make(schema)
    yield* monitor.unsafe(`CREATE TABLE "${schema}".app_writes (run_id bigint NOT NULL, fence bigint NOT NULL)`)
    const sessions = yield* Effect.forEach(["iso-1", "iso-2", "iso-3"], (name) =>
      sessionClient(databaseUrl(), name, settings))
    const ops = operations(s)
    let scheduleNo = 0
    const setup = (expired: boolean) =>
      Effect.gen(function*() {
        const queue = `q${++scheduleNo}`
        yield* store.enqueue([1, 2, 3].map((i) =>
          unique ? uniqueOf(queue, i) : { kind: "job", queue, payload: { i } }
        ))
        const refs = new ledger.LedgerRefs()
        const claimed = yield* claimStatement.claim(
          monitor,
          s,
          new ClaimPosition.Positions(),
          { owner, queues: [queue], kinds: ["job"], limit: 3, ttl },
          new Map(),
          refs
        )
        assert.strictEqual(claimed.length, 3)
        if (expired) {
          yield* monitor.unsafe(`UPDATE "${schema}".claim_batches SET expires_at = now() - interval '1 second'
            WHERE ids && ARRAY[${claimed.map((r) => Number(r.id)).join(",")}]::bigint[]`)
        }
        return {
          queue,
          leases: claimed.map((r) => ({ runId: r.id, fence: r.fence })),
          refs,
          finalized: [],
          refused: []
        } satisfies Ctx
      })
    // ISO_ONLY="a,b" runs that combination alone (for a closer look at one).
    const only = process.env.ISO_ONLY?.split(",")
    const chosenCombinations = only !== undefined
      ? [only]
      : combinations(Object.keys(ops).filter((n) => n !== "stall" && n !== "again"))
    let schedules = 0
    let withLockWaits = 0
    // Every combination is run, and each one's first broken schedule told.
    const broken: Array<string> = []
    for (const combination of chosenCombinations) {
      const result = yield* everySchedule({
        monitor,
        sessions,
        operations: combination.map((n) => ops[n]!),
        setup: setup(combination.includes("sweep")),
        check: (ctx, outcome) => check(monitor, s, ctx, outcome)
      }).pipe(Effect.catch((failure) =>
        Effect.sync(() => (broken.push(`${combination.join(" + ")}: ${(failure as Error).message}`), undefined))
      ))
      if (result === undefined) {
        continue
      }
      // A schedule whose replay went another way five times over (seen only inside the whole suite,
      // on a loaded machine) is told: its runs were checked, the order it stood for was not run.
      console.log(
        `${combination.join(" + ")}: ${result.schedules} schedules, ${result.withLockWaits} with a lock wait` +
          (result.diverged > 0 ? `, ${result.diverged} not replayed as planned` : "")
      )
      assert.isTrue(result.exhausted)
      schedules += result.schedules
      withLockWaits += result.withLockWaits
    }
    console.log(
      `interleavings: ${chosenCombinations.length} combinations of sessions, ${schedules} schedules (${withLockWaits} with a lock wait)`
    )
    assert.deepStrictEqual(broken, [])
  }))

// Exhaustive, so long: half an hour at most on a loaded 2-core machine.
const timeout = 1_800_000

describe("the batch ledger under every interleaving", () => {
  it.live(
    "each pair of statements touching one claim batch, in every order the locks allow: no (run, fence) completed twice, no run open in a settled batch, no ended batch unsettled, no held lease answered lost, every expired lease reclaimable",
    () => everyCombination((names) => names.flatMap((a, i) => names.slice(i).map((b) => [a, b]))),
    timeout
  )

  it.live(
    "the completion's and the renewal's pairs beside a transaction holding the batch's row, in every order the locks allow: the same invariants",
    () =>
      everyCombination(() =>
        [["complete", "retry"], ["complete", "completeOther"], ["complete", "renew"], ["renew", "checkpoint"]]
          .map((pair) => ["stall", ...pair])
      ),
    timeout
  )

  it.live(
    "a second enqueue of a unique key held by a run in the claim batch, beside each statement touching the batch, in every order the locks allow: at most one run of the key in its window, a duplicate yields the holder, and the same invariants",
    () =>
      everyCombination(
        (names) => names.filter((n) => n !== "retry").map((n) => ["again", n]),
        {},
        true
      ),
    timeout
  )

  it.live(
    "the completion's pairs beside a stalled holder, on sessions whose transactions default to REPEATABLE READ: the store's own are READ COMMITTED, and the invariants hold",
    () =>
      everyCombination(
        () => [["stall", "complete", "retry"], ["stall", "complete", "completeOther"]],
        { default_transaction_isolation: "repeatable read" }
      ),
    timeout
  )
})
