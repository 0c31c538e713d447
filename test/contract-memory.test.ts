/**
 * The RunStore contract (`contract/RunStoreContract.ts`) against `MemoryRunStore` under
 * `TestClock` (time passes by `TestClock.adjust`): no database. `contract.test.ts` runs the same
 * contract against `PgRunStore`.
 */
import { MemoryRunStore } from "@leasehold/core"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import { type ContractTarget, runStoreContract } from "./contract/RunStoreContract.js"

const memory: ContractTarget = {
  name: "MemoryRunStore",
  clock: "test",
  completedRuns: "keep",
  make: Effect.map(MemoryRunStore.make, (store) => ({
    store,
    passTime: (duration) => TestClock.adjust(duration),
    settle: Effect.yieldNow,
    sealHistory: Effect.void
  }))
}

runStoreContract(memory)
