/**
 * The README's Effect code compiles against the packages as they are: every TypeScript block of
 * "Using it from Effect code" is type-checked together (strict, NodeNext), so an API change that
 * the README does not follow fails here.
 */
import { assert, describe, it } from "@effect/vitest"
import { Database } from "@leasehold/sql"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { databaseUrl } from "./support/db.js"

const root = fileURLToPath(new URL("..", import.meta.url))

const tsBlocks = (markdown: string, from: string, to: string): Array<string> => {
  const section = markdown.slice(markdown.indexOf(from), markdown.indexOf(to))
  return [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!)
}

describe("README", () => {
  it.live("the Effect examples type-check against the current packages", () =>
    Effect.sync(() => {
      const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
      const blocks = [
        ...tsBlocks(readme, "## Using it from Effect code", "## The `leasehold` command"),
        ...tsBlocks(readme, "## Over HTTP", "## Observability")
      ]
      assert.isAtLeast(blocks.length, 4)
      // Each block after the first is a fragment of the same program: imports that repeat a name
      // already imported are dropped, and a second `worker` is renamed.
      const [main, ...rest] = blocks
      const imported = new Set([...main!.matchAll(/import \{([^}]*)\}/g)].flatMap((m) => m[1]!.split(",").map((n) => n.trim())))
      const fragments = rest.map((block, i) =>
        block
          .replace(/import \{([^}]*)\} from ("[^"]+")/g, (_, names: string, from: string) => {
            const fresh = names.split(",").map((n) => n.trim()).filter((n) => n !== "" && !imported.has(n))
            return fresh.length === 0 ? "" : `import { ${fresh.join(", ")} } from ${from}`
          })
          .replace(/\bconst worker\b/g, `const worker${i + 1}`)
      )
      const dir = path.join(root, ".scratch", "readme-check")
      fs.mkdirSync(dir, { recursive: true })
      fs.writeFileSync(path.join(dir, "readme.ts"), [main, ...fragments].join("\n"))
      fs.writeFileSync(
        path.join(dir, "tsconfig.json"),
        JSON.stringify({
          extends: "../../tsconfig.base.json",
          compilerOptions: { noEmit: true, composite: false, declaration: false, declarationMap: false, noUnusedLocals: false },
          files: ["readme.ts"]
        })
      )
      const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc")
      try {
        execFileSync(process.execPath, [tsc, "-p", dir], { encoding: "utf8", stdio: "pipe" })
      } catch (error) {
        assert.fail(`the README's code does not compile:\n${(error as { stdout?: string }).stdout ?? String(error)}`)
      }
    }))

  it.live("each published package's README has its own example, and it type-checks against the current packages", () =>
    Effect.sync(() => {
      const dir = path.join(root, ".scratch", "package-readme-check")
      fs.rmSync(dir, { recursive: true, force: true })
      fs.mkdirSync(dir, { recursive: true })
      const files: Array<string> = []
      for (const pkg of ["core", "embedded", "sql", "http", "workflow", "cli"]) {
        const readme = fs.readFileSync(path.join(root, "packages", pkg, "README.md"), "utf8")
        assert.match(readme, new RegExp(`^# @leasehold/${pkg}\n`), `packages/${pkg}/README.md names its package`)
        if (pkg === "http") continue // its blocks are fragments of an application, shown in the repository's README too
        assert.match(readme, /## Install\n\n```sh\nnpm install /, `packages/${pkg}/README.md says how to install it`)
        const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!)
        assert.isAtLeast(blocks.length, 1, `packages/${pkg}/README.md has an example`)
        // Each package's example is one program (one module).
        fs.writeFileSync(path.join(dir, `${pkg}.ts`), blocks.join("\n"))
        files.push(`${pkg}.ts`)
      }
      fs.writeFileSync(
        path.join(dir, "tsconfig.json"),
        JSON.stringify({
          extends: "../../tsconfig.base.json",
          compilerOptions: { noEmit: true, composite: false, declaration: false, declarationMap: false, noUnusedLocals: false },
          files
        })
      )
      const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc")
      try {
        execFileSync(process.execPath, [tsc, "-p", dir], { encoding: "utf8", stdio: "pipe" })
      } catch (error) {
        assert.fail(`a package README's code does not compile:\n${(error as { stdout?: string }).stdout ?? String(error)}`)
      }
    }))

  it.live("the leasehold commands it shows run as written, in order, from the repository", () =>
    Effect.gen(function*() {
      const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
      const section = readme.slice(readme.indexOf("## The `leasehold` command"))
      const commands = section.slice(section.indexOf("```sh\n") + 6, section.indexOf("```", section.indexOf("```sh\n") + 6))
        .split("\n").filter((line) => line.startsWith("npx leasehold"))
      assert.isAtLeast(commands.length, 7)
      // A database of its own, so the commands' default schema is fresh.
      const name = `readme_${Math.random().toString(36).slice(2, 8)}`
      const server = yield* Layer.build(Database.layerFromUrl(databaseUrl(), { maxConnections: 1 }))
      yield* Context.get(server, SqlClient.SqlClient).unsafe(`CREATE DATABASE ${name}`)
      const url = new URL(databaseUrl())
      url.pathname = `/${name}`
      const env = { ...process.env, DATABASE_URL: url.href, PATH: `${path.join(root, "node_modules", ".bin")}:${process.env.PATH}` }
      const sh = (line: string) => execFileSync("sh", ["-c", line], { cwd: root, env, encoding: "utf8", stdio: "pipe" })
      let worker: ReturnType<typeof spawn> | undefined
      try {
        for (const line of commands) {
          if (line.startsWith("npx leasehold worker")) {
            // The worker runs until stopped: until the refund it was given has suspended.
            // A process group of its own: npx starts the worker as its child, and both must stop.
            worker = spawn("sh", ["-c", `exec ${line.split("#")[0]}`], { cwd: root, env, stdio: "ignore", detached: true })
            const deadline = Date.now() + 30_000
            while (!sh("npx leasehold runs list --state suspended --json").includes("approve-refund")) {
              if (Date.now() > deadline) assert.fail("the refund never suspended")
              yield* Effect.sleep("200 millis")
            }
            continue
          }
          sh(line)
        }
        // The worker still runs: the resumed refund completes, under the fence of its second claim.
        const deadline = Date.now() + 30_000
        let shown = JSON.parse(sh("npx leasehold runs show 1 --json"))
        while (shown.run.state !== "completed" && Date.now() < deadline) {
          yield* Effect.sleep("200 millis")
          shown = JSON.parse(sh("npx leasehold runs show 1 --json"))
        }
        assert.deepInclude(shown.run, { id: "1", kind: "approve-refund", state: "completed", fence: 2 })
      } finally {
        if (worker?.pid !== undefined) process.kill(-worker.pid, "SIGTERM")
      }
      yield* Effect.sleep("500 millis")
      yield* Context.get(server, SqlClient.SqlClient).unsafe(`DROP DATABASE ${name} WITH (FORCE)`)
    }))
})
