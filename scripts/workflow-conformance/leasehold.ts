/**
 * The engine of the Leasehold column of `scripts/workflow-conformance.mjs`: every engine layer an
 * adapted Effect test provides (`WorkflowEngine.layerMemory`, the cluster engine) is
 * `leaseholdEngine()` (a fresh schema of the test PostgreSQL, serving). Each build is logged with
 * the running test's name, so the report can mark the tests that never use an engine.
 */
import type { Layer as L } from "effect"
import { Effect, Layer } from "effect"
import { appendFileSync } from "node:fs"
import { expect } from "vitest"
import { leaseholdEngine } from "../../test/support/workflowEngine.ts"

const record = (kind: string) => {
  const log = process.env.CONFORMANCE_ENGINE_LOG
  if (log !== undefined) {
    const { currentTestName, testPath } = expect.getState()
    appendFileSync(log, JSON.stringify({ file: testPath, test: currentTestName, kind }) + "\n")
  }
}

/** In place of `WorkflowEngine.layerMemory`. */
export const memory = Layer.unwrap(Effect.sync(() => {
  record("memory")
  return leaseholdEngine()
}))

/** In place of the test's cluster engine layer (which is not built). */
// oxlint-disable-next-line typescript/no-explicit-any -- the cluster layer's requirements differ per test file
export const cluster = (_clusterEngine: L.Layer<any, any, any>): L.Layer<any, any, any> =>
  Layer.unwrap(Effect.sync(() => {
    record("cluster")
    return leaseholdEngine()
  }))

/** In place of `yield* Sharding.Sharding`: the tests only call `pollStorage`, which Leasehold has no need of. */
export const sharding = Effect.succeed({ pollStorage: Effect.void })
