/**
 * Every mutant of scripts/mutation-check.sh still applies to today's code: each is run with
 * `MUTANT_APPLY_ONLY=1`, which makes its edit in a temporary copy, checks that the edit took, and
 * stops before building. A mutant whose pattern no longer matches (the code it patches was
 * reformatted or rewritten) reports "mutation incomplete" and fails here, so it is rewritten while
 * the change is fresh rather than found stale when it is next needed. Whether each mutant is still
 * killed is the script's own run (docs/CONTRIBUTING.md, "Mutation checks"). No database.
 */
import { execFile } from "node:child_process"
import * as path from "node:path"
import { promisify } from "node:util"
import { assert, describe, it } from "vitest"
import { mutantsInBranches, read, repo } from "./support/docs.js"

const run = promisify(execFile)
const script = path.join(repo, "scripts/mutation-check.sh")

/** What the script says of one mutant applied alone: its last line, and whether it exited 0. */
const applyOnly = async (name: string): Promise<{ ok: boolean; last: string }> => {
  try {
    const { stdout } = await run("bash", [script, name], { env: { ...process.env, MUTANT_APPLY_ONLY: "1" } })
    return { ok: true, last: stdout.trim().split("\n").at(-1) ?? "" }
  } catch (error) {
    const failed = error as { stdout?: string; stderr?: string; code?: number }
    const out = `${failed.stdout ?? ""}${failed.stderr ?? ""}`.trim()
    return { ok: false, last: `exit ${failed.code}: ${out.split("\n").at(-1) ?? ""}` }
  }
}

describe("the mutants", () => {
  it("every mutant of scripts/mutation-check.sh still applies to today's code", async () => {
    const names = mutantsInBranches(read("scripts/mutation-check.sh"))
    assert.isAtLeast(names.length, 54)
    const problems: Array<string> = []
    // Two at a time: the machine's two cores.
    const queue = [...names]
    const next = async (): Promise<void> => {
      const name = queue.shift()
      if (name === undefined) return
      const { last, ok } = await applyOnly(name)
      if (!ok || !last.startsWith("mutant applies")) problems.push(`${name}: ${last}`)
      return next()
    }
    await Promise.all([next(), next()])
    assert.deepStrictEqual(problems, [], "rewrite each mutant's edit for today's code, then run it for real")
  })
})
