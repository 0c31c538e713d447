/**
 * The engine of the control columns of `scripts/workflow-conformance.mjs`: Effect's own, as the test
 * wrote it (`WorkflowEngine.layerMemory`, or the test's cluster engine layer), each build logged like
 * the Leasehold column's (`leasehold.ts`).
 */
import type { Layer as L } from "effect"
import { Effect, Layer } from "effect"
import { Sharding } from "effect/cluster"
import { WorkflowEngine } from "effect/workflow"
import { appendFileSync } from "node:fs"
import { expect } from "vitest"

const record = (kind: string) => {
  const log = process.env.CONFORMANCE_ENGINE_LOG
  if (log !== undefined) {
    const { currentTestName, testPath } = expect.getState()
    appendFileSync(log, JSON.stringify({ file: testPath, test: currentTestName, kind }) + "\n")
  }
}

export const memory = Layer.unwrap(Effect.sync(() => {
  record("memory")
  return WorkflowEngine.layerMemory
}))

// oxlint-disable-next-line typescript/no-explicit-any -- the cluster layer's requirements differ per test file
export const cluster = (clusterEngine: L.Layer<any, any, any>): L.Layer<any, any, any> =>
  Layer.unwrap(Effect.sync(() => {
    record("cluster")
    return clusterEngine
  }))

export const sharding = Sharding.Sharding
