/**
 * A test failing with a database error prints the error's message, with the server's own words,
 * in one line: not the whole serialized `SqlError`, its reason and the driver's error with every
 * field. Runs vitest itself, with the repository's configuration, on a fixture that fails.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"

const repo = fileURLToPath(new URL("..", import.meta.url))
const vitest = fileURLToPath(new URL("../node_modules/vitest/vitest.mjs", import.meta.url))
const config = fileURLToPath(new URL("./fixtures/failure-output/vitest.config.mjs", import.meta.url))

const runFixture = Effect.promise(() =>
  new Promise<{ code: number | null; output: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [vitest, "run", "--config", config], {
      cwd: repo,
      env: { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => void (output += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => void (output += chunk))
    child.once("error", reject)
    child.once("close", (code) => resolve({ code, output }))
  })
)

describe("a failing test's output", () => {
  it.live(
    "a database error is one line with the server's message and SQLSTATE, not the serialized error",
    () =>
      Effect.gen(function*() {
        const { code, output } = yield* runFixture
        assert.strictEqual(code, 1, output)
        assert.match(
          output,
          /SqlSyntaxError: PgConnection: Query failed: relation "nowhere" does not exist \(SQLSTATE 42P01\)/,
          output
        )
        for (const field of ["severityUnlocalized", "parserOpenTable", "Serialized Error", "~effect/sql/SqlError"]) {
          assert.notInclude(output, field, output)
        }
      }),
    120_000
  )
})
