/**
 * No silent skips: after vitest's own summary, every test that did not run is listed with its file
 * and the reason it gave (`ctx.skip(reason)`), or "no reason given". Under `CI=true` any skipped
 * test fails the run: what CI checks must have run.
 */
import type { Reporter, TestModule, Vitest } from "vitest/node"

export default class SkipsReporter implements Reporter {
  private filtered = false

  onInit(vitest: Vitest) {
    // A name filter (-t) skips the tests it leaves out on purpose: nothing to report.
    this.filtered = vitest.config.testNamePattern !== undefined
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>) {
    if (this.filtered) return
    const skipped = testModules.flatMap((module) =>
      [...module.children.allTests("skipped")].map((test) => {
        const result = test.result()
        const note = result.state === "skipped" ? result.note : undefined
        const why = note ?? (test.options.mode === "todo" ? "todo" : "no reason given")
        return `  ${module.relativeModuleId} > ${test.fullName}: ${why}`
      })
    )
    if (skipped.length === 0) return
    const ci = process.env.CI === "true" || process.env.CI === "1"
    console.log(
      `\n${skipped.length} test${skipped.length === 1 ? "" : "s"} skipped${
        ci ? " (CI=true: a skip fails the run)" : ""
      }:`
    )
    for (const line of skipped) console.log(line)
    if (ci) process.exitCode = 1
  }
}
