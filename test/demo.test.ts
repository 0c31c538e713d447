/**
 * The demo (what `npm start` runs), as a user runs it: the built program, two worker processes,
 * one partition. It must check itself against the database, exit 0, and leave no process behind.
 */
import { execFileSync, spawn } from "node:child_process"
import * as path from "node:path"
import { assert, describe, it } from "vitest"
import { databaseUrl } from "./support/db.js"

const main = path.resolve(import.meta.dirname, "../demo/dist/main.js")

const workerProcesses = () => {
  try {
    return execFileSync("pgrep", ["-f", "InstrumentedWorker.js"]).toString().trim().split("\n").filter(Boolean).map(
      Number
    )
  } catch {
    return []
  }
}

describe("the demo (npm start)", () => {
  it(
    "shows the partition, the reclaim under a higher fence and the rejected stale writes, then checks itself",
    async () => {
      const child = spawn(process.execPath, [main, "--database-url", databaseUrl()], {
        stdio: ["ignore", "pipe", "pipe"]
      })
      const ours = new Set<number>()
      const watch = setInterval(() => {
        for (const pid of workerProcesses()) {
          try {
            if (execFileSync("ps", ["-o", "ppid=", "-p", String(pid)]).toString().trim() === String(child.pid)) {
              ours.add(pid)
            }
          } catch {
            // gone already
          }
        }
      }, 200)
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (chunk) => (stdout += chunk))
      child.stderr.on("data", (chunk) => (stderr += chunk))
      const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)))
      clearInterval(watch)
      assert.strictEqual(code, 0, `demo failed:\n${stdout}\n${stderr}`)
      assert.match(stdout, /worker-a is cut off from PostgreSQL/)
      assert.match(stdout, /worker-b claims run \d+ under fence 2/)
      assert.match(stdout, /under fence 1 → FenceRejected \(presented 1, stored 2\); nothing written/)
      assert.match(stdout, /refunds are suspended for approval: no lease owner/)
      assert.match(stdout, /✔ 28\/28 runs completed/)
      assert.match(stdout, /✔ effects: 28 runs with exactly one effect row/)
      assert.match(stdout, /✔ [1-9]\d* stale writes rejected by the fence/)
      assert.notMatch(stdout, /✘/)
      assert.strictEqual(ours.size, 2, "the demo ran two worker processes")
      for (const pid of ours) assert.notInclude(workerProcesses(), pid, `worker process ${pid} left behind`)
    },
    90_000
  )

  it("a flag it does not know is one line on stderr and exit 2, before anything starts", async () => {
    const child = spawn(process.execPath, [main, "--databse-url", databaseUrl()], { stdio: ["ignore", "pipe", "pipe"] })
    let stderr = ""
    child.stderr.on("data", (chunk) => (stderr += chunk))
    const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)))
    assert.strictEqual(code, 2)
    assert.match(stderr, /^demo: Unknown option '--databse-url'/)
    assert.strictEqual(stderr.trim().split("\n").length, 1, stderr)
  })
})
