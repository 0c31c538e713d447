/**
 * A keyed completion's batch locks in one order (issue 39, docs/adr/0022): a completion that claims
 * its keys' next runs is one transaction, whose ledger statement locks the claim batches of all its
 * leases at once, in batch order, those without a claim reference found by their batches' span. A
 * second ledger statement for what the rows' statement missed, as there was, locked more batches
 * after the first's: two such transactions, each holding a lease of the other's batch, locked the
 * two batches in opposite orders, and PostgreSQL ended one of them (deadlock). Here every order of
 * the two transactions' statements is run (test/support/interleavings.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import type { LeaseKey } from "@leasehold/core"
import { RunStore } from "@leasehold/core"
import { ClaimPosition } from "@leasehold/core/store"
import { StoreSchema } from "@leasehold/sql"
import { Cause, Context, Duration, Effect, Exit, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as claimStatement from "../packages/sql/dist/internal/statements/claim.js"
import * as guarded from "../packages/sql/dist/internal/statements/guarded.js"
import * as ledger from "../packages/sql/dist/internal/statements/ledger.js"
import { databaseUrl, freshSchema, layerStore } from "./support/db.js"
import { everySchedule, type Operation, sessionClient } from "./support/interleavings.js"

const ttl = Duration.seconds(30)

/** Two claim batches, one per worker's store: `a` claimed r1, r2 (the lower batch), `b` r3, r4. */
interface Ctx {
  readonly queue: string
  readonly batches: readonly [string, string]
  readonly a: { readonly refs: ledger.LedgerRefs; readonly leases: ReadonlyArray<LeaseKey> }
  readonly b: { readonly refs: ledger.LedgerRefs; readonly leases: ReadonlyArray<LeaseKey> }
  readonly finalized: Array<string>
}

/**
 * A keyed completion that claims next runs, by the worker whose claim references `side` holds: one
 * lease of its own batch and one of the other's, which it has no reference for.
 */
const completing = (s: StoreSchema.StoreSchema, side: "a" | "b"): Operation<Ctx> => ({
  name: side === "a" ? "complete(r1,r3)" : "complete(r4,r2)",
  run: (sql, ctx) => {
    const own = side === "a" ? ctx.a.leases[0]! : ctx.b.leases[1]!
    const other = side === "a" ? ctx.b.leases[0]! : ctx.a.leases[1]!
    const items = [own, other].map((l) => ({ runId: l.runId, fence: l.fence, result: null, keyed: true }))
    const next = { owner: `w-${side}`, ttl, queues: [ctx.queue], kinds: ["job"] }
    return Effect.tap(
      guarded.completeBatch(sql, s, items, "keep", next, ctx[side].refs),
      (outcomes) =>
        Effect.sync(() => {
          for (const o of outcomes) if (o._tag === "Finalized") ctx.finalized.push(o.runId)
        })
    )
  }
})

describe("a keyed completion's batch locks", () => {
  it.live(
    "two keyed completions, each holding a lease of the other's claim batch, in every order of their statements: no deadlock, every run completed once",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const schema = freshSchema("order")
        const context = yield* Layer.build(layerStore(schema, 2))
        const store = Context.get(context, RunStore)
        const monitor = Context.get(context, SqlClient.SqlClient)
        const s = StoreSchema.make(schema)
        const sessions = yield* Effect.forEach(["order-1", "order-2"], (name) => sessionClient(databaseUrl(), name))
        let scheduleNo = 0
        const claimFor = (owner: string, queue: string) =>
          Effect.gen(function*() {
            const refs = new ledger.LedgerRefs()
            const claimed = yield* claimStatement.claim(
              monitor,
              s,
              new ClaimPosition.Positions(),
              { owner, queues: [queue], kinds: ["job"], limit: 2, ttl },
              new Map(),
              refs
            )
            assert.strictEqual(claimed.length, 2)
            return { refs, leases: claimed.map((r) => ({ runId: r.id, fence: r.fence })) }
          })
        const setup = Effect.gen(function*() {
          const queue = `q${++scheduleNo}`
          yield* store.enqueue([1, 2, 3, 4].map((i) => ({ kind: "job", queue, payload: { i } })))
          const a = yield* claimFor("w-a", queue)
          const b = yield* claimFor("w-b", queue)
          const batches = yield* monitor.unsafe<{ batch: string }>(
            `SELECT c.batch::text AS batch FROM "${schema}".claim_batches c
            WHERE c.ids && ARRAY[${
              [...a.leases, ...b.leases].map((l) => l.runId).join(",")
            }]::bigint[] ORDER BY c.batch`
          )
          assert.strictEqual(batches.length, 2, "each worker's claim is a batch of its own")
          return { queue, batches: [batches[0]!.batch, batches[1]!.batch] as const, a, b, finalized: [] } satisfies Ctx
        })
        const result = yield* everySchedule<Ctx>({
          monitor,
          sessions,
          operations: [completing(s, "a"), completing(s, "b")],
          setup,
          check: (ctx, outcome) =>
            Effect.gen(function*() {
              outcome.exits.forEach((exit, i) => {
                if (Exit.isFailure(exit)) {
                  // A SqlError says why in its reason (DeadlockError: PostgreSQL ended the transaction).
                  const error = Cause.squash(exit.cause) as { reason?: { _tag?: string } }
                  assert.fail(
                    `session ${i + 1} failed: ${error.reason?._tag ?? Cause.pretty(exit.cause).split("\n")[0]}`
                  )
                }
              })
              const runs = [...ctx.a.leases, ...ctx.b.leases].map((l) => l.runId)
              assert.sameMembers(ctx.finalized, runs, "every run answered completed")
              const ids = `ARRAY[${runs.join(",")}]::bigint[]`
              const states = yield* monitor.unsafe<{ id: string; state: string }>(
                `SELECT id::text AS id, state FROM "${schema}".runs_now WHERE id = ANY (${ids}) ORDER BY id`
              )
              assert.deepStrictEqual(states.map((r) => r.state), ["completed", "completed", "completed", "completed"])
              const twice = yield* monitor.unsafe<{ id: string }>(
                `SELECT u.id::text AS id FROM "${schema}".completion_batches d, unnest(d.ids) AS u(id)
                WHERE u.id = ANY (${ids}) GROUP BY u.id HAVING count(*) > 1`
              )
              assert.deepStrictEqual(twice, [], "a run completed twice")
            })
        })
        console.log(
          `two keyed completions across two batches: ${result.schedules} schedules, ${result.withLockWaits} with a lock wait`
        )
        assert.isTrue(result.exhausted)
        // The two transactions met on a batch's lock in some orders: the ordering was exercised.
        assert.isAbove(result.withLockWaits, 0)
      })),
    600_000
  )
})
