/**
 * No silent skips: vitest on fixture files (test/fixtures/skips), with the suite's skips reporter.
 * Every skipped test is listed after the summary with its reason, or "no reason given"; with
 * `CI=true` a skip fails the run, and a run with nothing skipped still passes.
 */
import { spawnSync } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "vitest"

const repo = fileURLToPath(new URL("..", import.meta.url))
const fixtures = path.join(repo, "test", "fixtures", "skips")

const vitest = (fixture: string, ci: boolean) => {
  const env: NodeJS.ProcessEnv = { ...process.env, SKIPS_FIXTURE: fixture, NO_COLOR: "1", CI: ci ? "true" : "" }
  delete env.VITEST
  delete env.VITEST_WORKER_ID
  delete env.VITEST_POOL_ID
  const result = spawnSync(process.execPath, [path.join(repo, "node_modules", "vitest", "vitest.mjs"), "run"], {
    cwd: fixtures,
    env,
    encoding: "utf8",
    timeout: 60_000
  })
  return { status: result.status, out: `${result.stdout}${result.stderr}` }
}

describe("the skips reporter", () => {
  it("lists each skipped test with its reason after the summary; a skip alone does not fail the run", () => {
    const { out, status } = vitest("skipping.fixture.ts", false)
    assert.strictEqual(status, 0, out)
    const listing = out.slice(out.indexOf("2 tests skipped:"))
    assert.isAbove(out.indexOf("2 tests skipped:"), out.indexOf("Tests "), `the listing follows the summary:\n${out}`)
    assert.include(listing, "skipping.fixture.ts > skips with its reason: needs something this machine lacks")
    assert.include(listing, "skipping.fixture.ts > skips without a word: no reason given")
  })

  it("with CI=true a skipped test fails the run, and says so", () => {
    const { out, status } = vitest("skipping.fixture.ts", true)
    assert.strictEqual(status, 1, out)
    assert.include(out, "2 tests skipped (CI=true: a skip fails the run):")
  })

  it("with CI=true and nothing skipped the run passes, with no listing", () => {
    const { out, status } = vitest("passing.fixture.ts", true)
    assert.strictEqual(status, 0, out)
    assert.notInclude(out, "skipped")
  })
})
