/**
 * The fault suite's short profile: three worker processes (one with its wall clock seven minutes
 * ahead), 2,000 runs, and a seeded nemesis — kill -9, SIGSTOP past the TTL, partitions, connection
 * resets and restarts of the PostgreSQL server — then the checker reads the history. The seed is
 * printed; `npm run chaos -- --seed N` (or `CHAOS_SEED=N` here) replays the schedule. The harness
 * lives in the private `harness/` workspace, outside the shipped packages. `chaos-plan.test.ts`
 * checks the plan itself.
 */
import * as Chaos from "@leasehold/harness/Chaos"
import * as Plan from "@leasehold/harness/Plan"
import { Effect } from "effect"
import { assert, describe, it } from "vitest"

describe("fault suite (short profile)", () => {
  it("nothing lost, nothing done twice, no stale write committed, no worker crashed", async () => {
    const seed = Number(process.env.CHAOS_SEED ?? Effect.runSync(Plan.freshSeed))
    const lines: Array<string> = []
    const result = await Chaos.run({
      seed,
      runs: 2000,
      workers: 3,
      faultSeconds: 25,
      skew: "+7m",
      log: (line) => void lines.push(line)
    })
    const report = [...lines, ...Chaos.describe(result)].join("\n")
    console.log(report)
    for (const kind of Plan.faults) {
      assert.isAtLeast(result.faults[kind], 1, `a ${kind} fault was injected (seed ${seed})`)
    }
    for (const check of result.checks) assert.isTrue(check.ok, `${check.name}: ${check.detail} (seed ${seed})`)
    assert.isAbove(result.states.completed ?? 0, 1800)
  }, 240_000)
})
