/**
 * The RunStore contract (`contract/RunStoreContract.ts`) against `PgRunStore` on a real PostgreSQL
 * (a fresh schema per test; time passes by moving the stored times back).
 * `contract-memory.test.ts` runs the same contract against `MemoryRunStore` under `TestClock`.
 */
import { assert, describe, it } from "@effect/vitest"
import { RateLimits, RunStore } from "@leasehold/core"
import { PgRunStore } from "@leasehold/sql"
import { Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { type ContractTarget, runStoreContract } from "./contract/RunStoreContract.js"
import { freshSchema, layerStore } from "./support/db.js"

/** The store in one of the configurations the package offers. */
const postgres = (name: string, options: PgRunStore.PgRunStoreOptions): ContractTarget => ({
  name,
  clock: "live",
  completedRuns: options.completedRuns ?? "keep",
  make: Effect.gen(function*() {
    const schema = freshSchema("contract")
    const context = yield* Layer.build(layerStore(schema, 4, options))
    const sql = Context.get(context, SqlClient.SqlClient)
    return {
      store: Context.get(context, RunStore),
      // Everything the store compares with now() moves back: as if now() had moved on.
      passTime: (duration) => {
        const shift = `${Duration.toMillis(Duration.fromInputUnsafe(duration))} * interval '1 millisecond'`
        return Effect.gen(function*() {
          yield* sql.unsafe(`UPDATE "${schema}".runs SET run_at = run_at - ${shift},
          lease_expires_at = lease_expires_at - ${shift}, suspend_deadline = suspend_deadline - ${shift},
          deadline = deadline - ${shift}, finished_at = finished_at - ${shift}`)
          // The ledger's times move with the rows': ready runs' due times, claim batches' leases;
          // and the worker registry's, the unique windows' and the history ranges'.
          yield* sql.unsafe(`UPDATE "${schema}".ready SET run_at = run_at - ${shift}`)
          yield* sql.unsafe(
            `UPDATE "${schema}".claim_batches SET expires_at = expires_at - ${shift} WHERE settled_at IS NULL`
          )
          yield* sql.unsafe(`UPDATE "${schema}".rate_starts SET started_at = started_at - ${shift}`)
          yield* sql.unsafe(`UPDATE "${schema}".workers SET expires_at = expires_at - ${shift},
            last_heartbeat_at = last_heartbeat_at - ${shift}`)
          yield* sql.unsafe(`UPDATE "${schema}".unique_holds SET held_until = held_until - ${shift}`)
          yield* sql.unsafe(`UPDATE "${schema}".history_ranges SET quiet_since = quiet_since - ${shift},
            created_at = created_at - ${shift}`)
        })
      },
      settle: Effect.sleep("50 millis"),
      // Each sequence to the start of the next range, which the maintenance then creates.
      sealHistory: Effect.gen(function*() {
        yield* sql.unsafe(`SELECT setval('"${schema}".runs_id_seq',
          (SELECT max(hi) - 1 FROM "${schema}".history_ranges WHERE tbl = 'runs'))`)
        yield* sql.unsafe(`SELECT setval('"${schema}".claim_batches_batch_seq',
          (SELECT max(hi) - 1 FROM "${schema}".history_ranges WHERE tbl = 'claim_batches'))`)
        const year = Duration.days(365)
        yield* Context.get(context, RunStore).maintainHistory({ keep: year, keepFailed: year, dryRun: false })
      })
    }
  })
})

// The store's two layouts: the batch ledger (the default) and every run on its row; and a store
// with completed runs deleted (on rows), which answers for a completed run as for one never
// enqueued (the contract asserts that instead of the run read back; retention.test.ts goes further).
runStoreContract(postgres("PgRunStore", {}))
runStoreContract(postgres("PgRunStore, storage rows", { storage: "rows" }))
runStoreContract(postgres("PgRunStore, completed runs deleted", { completedRuns: "delete" }))

describe("rate limits on PostgreSQL", () => {
  it.live("a run enqueued from SQL (the enqueue function) is governed like a TypeScript enqueue", () =>
    Effect.gen(function*() {
      const schema = freshSchema("ratesql")
      const context = yield* Layer.build(layerStore(schema, 2))
      const sql = Context.get(context, SqlClient.SqlClient)
      const store = Context.get(context, RunStore)
      yield* store.setRateLimits([RateLimits.perKind("job", 1, "1 hour")])
      for (let i = 0; i < 3; i++) yield* sql.unsafe(`SELECT "${schema}".enqueue('job', '{"i": ${i}}')`)
      const first = yield* store.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["job"],
        limit: 10,
        ttl: Duration.minutes(10)
      })
      assert.lengthOf(first, 1, "one start per hour")
      assert.isEmpty(
        yield* store.claim({
          owner: "w",
          queues: ["default"],
          kinds: ["job"],
          limit: 10,
          ttl: Duration.minutes(10),
          dueOnly: true
        })
      )
      assert.deepInclude((yield* store.rateLimits)[0], { startedInWindow: 1, due: 2 })
    }))
})
