/**
 * The fault suite's short profile: three worker processes (one with its wall clock seven minutes
 * ahead), 2,000 runs, and a seeded nemesis — kill -9, SIGSTOP past the TTL, partitions, connection
 * resets and restarts of the PostgreSQL server — then the checker reads the history. The seed is
 * printed; `npm run chaos -- --seed N` replays the schedule.
 */
import * as Chaos from "@leasehold/cli/chaos/Chaos"
import * as Random from "@leasehold/cli/chaos/Random"
import { assert, describe, it } from "vitest"

describe("fault suite (short profile)", () => {
  it("nothing lost, nothing done twice, no stale write committed, no worker crashed", async () => {
    const seed = Number(process.env.CHAOS_SEED ?? Random.freshSeed())
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
    for (const kind of ["kill", "pause", "partition", "reset", "restart-db"] as const) {
      assert.isAtLeast(result.faults[kind], 1, `a ${kind} fault was injected (seed ${seed})`)
    }
    for (const check of result.checks) assert.isTrue(check.ok, `${check.name}: ${check.detail} (seed ${seed})`)
    assert.isAbove(result.states.completed ?? 0, 1800)
  }, 240_000)
})
