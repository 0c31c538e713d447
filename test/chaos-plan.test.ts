/**
 * The fault suite's plan, without running it: the seed decides the runs and the nemesis schedule
 * (`chaos.test.ts` runs the short profile against worker processes and PostgreSQL).
 */
import * as Plan from "@leasehold/harness/Plan"
import { Effect } from "effect"
import { assert, describe, it } from "vitest"

describe("fault suite plan", () => {
  it("the seed decides the plan: the same seed gives the same runs and nemesis schedule", () => {
    const options = { runs: 300, workers: 3, faultSeconds: 25 }
    const plan = (seed: number) => Effect.runSync(Plan.make({ ...options, seed }))
    const first = plan(4242)
    assert.deepStrictEqual(plan(4242), first)
    assert.notDeepEqual(plan(4243).steps, first.steps)
    // The schedule depends on the seed and the workers only: a longer run with more runs replays it first.
    const longer = Effect.runSync(Plan.make({ ...options, seed: 4242, runs: 5000, faultSeconds: 600 }))
    assert.deepStrictEqual(longer.steps.slice(0, first.steps.length), first.steps)
    assert.strictEqual(first.requests.length, options.runs)
    // Every kind of fault comes once first, then the schedule outlasts the fault window.
    assert.sameMembers(first.steps.slice(0, Plan.faults.length).map((s) => s.fault), [...Plan.faults])
    assert.isAbove(first.steps.length * Plan.minWaitMs, options.faultSeconds * 1000)
    for (const step of first.steps) assert.isTrue(step.slot >= 0 && step.slot < options.workers)
  })
})
