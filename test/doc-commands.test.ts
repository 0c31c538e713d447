/**
 * The commands the documents show, run exactly as written: the CLI guide's commands in order, the
 * HTTP guide's callback flow as one shell script, the README's `npm start` from a folder of the
 * clone, each against a database of its own. And each published package's README: its own example
 * type-checks against the packages as they are. Which shell blocks are run, and why the others
 * are not, is listed in test/support/docs.ts (`shellBlocks`), which test/docs.test.ts keeps true.
 */
import { assert, describe, it } from "@effect/vitest"
import { Database } from "@leasehold/sql"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { databaseUrl } from "./support/db.js"
import { codeBlocks, repo as root, shellBlocks } from "./support/docs.js"

/** The body of the shell block `shellBlocks` lists for `file` as run. */
const shellBlock = (file: string): string => {
  const listed = shellBlocks.find((b) => b.file === file && "run" in b)
  assert.isDefined(listed, `${file} has a shell block listed as run`)
  const block = codeBlocks(file).find((b) => b.lang === "sh" && b.body.split("\n")[0] === listed!.firstLine)
  assert.isDefined(block, `${file} still shows the block starting ${listed!.firstLine}`)
  return block!.body
}

/** A database of its own for one test (so the commands' default schema is fresh), dropped after. */
const withDatabase = <A, E>(prefix: string, use: (url: string) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const server = yield* Layer.build(Database.layerFromUrl(databaseUrl(), { maxConnections: 1 }))
    const sql = Context.get(server, SqlClient.SqlClient)
    const name = `${prefix}_${Math.random().toString(36).slice(2, 8)}`
    yield* sql.unsafe(`CREATE DATABASE ${name}`)
    const url = new URL(databaseUrl())
    url.pathname = `/${name}`
    return yield* use(url.href).pipe(
      Effect.ensuring(
        Effect.andThen(Effect.sleep("500 millis"), Effect.orDie(sql.unsafe(`DROP DATABASE ${name} WITH (FORCE)`)))
      )
    )
  })

/** The environment of a command: the project's bin first on PATH (where `npx` finds `leasehold` and Node 24). */
const envWith = (url: string): NodeJS.ProcessEnv => ({
  ...process.env,
  DATABASE_URL: url,
  PATH: `${path.join(root, "node_modules", ".bin")}:${process.env.PATH}`
})

const runShow = (env: NodeJS.ProcessEnv, id: string) =>
  JSON.parse(
    execFileSync("sh", ["-c", `npx leasehold runs show ${id} --json`], {
      cwd: root,
      env,
      encoding: "utf8",
      stdio: "pipe"
    })
  )

/** Polls `leasehold runs show <id>` until the run is completed, or fails after 30 s. */
const untilCompleted = (env: NodeJS.ProcessEnv, id: string) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 30_000
    let shown = runShow(env, id)
    while (shown.run.state !== "completed" && Date.now() < deadline) {
      yield* Effect.sleep("200 millis")
      shown = runShow(env, id)
    }
    return shown
  })

/** Stops a detached process group (`sh` and what it started in the background). */
const stopGroup = (pid: number | undefined) => {
  if (pid === undefined) return
  try {
    process.kill(-pid, "SIGTERM")
  } catch {
    // already gone
  }
}

describe("the commands the documents show", () => {
  it.live("docs/guides/cli.md: the leasehold commands run as written, in order, from the clone's root", () =>
    withDatabase("doc_cli", (url) =>
      Effect.gen(function*() {
        const commands = shellBlock("docs/guides/cli.md").split("\n").filter((line) => line.startsWith("npx leasehold"))
        assert.isAtLeast(commands.length, 7)
        const env = envWith(url)
        const sh = (line: string) =>
          execFileSync("sh", ["-c", line], { cwd: root, env, encoding: "utf8", stdio: "pipe" })
        let worker: ReturnType<typeof spawn> | undefined
        try {
          for (const line of commands) {
            if (line.startsWith("npx leasehold worker")) {
              // The worker runs until stopped: until the refund it was given has suspended.
              // A process group of its own: npx starts the worker as its child, and both must stop.
              worker = spawn("sh", ["-c", `exec ${line.split("#")[0]}`], {
                cwd: root,
                env,
                stdio: "ignore",
                detached: true
              })
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
          const shown = yield* untilCompleted(env, "1")
          assert.deepInclude(shown.run, { id: "1", kind: "approve-refund", state: "completed", fence: 2 })
        } finally {
          stopGroup(worker?.pid)
        }
      })))

  it.live("docs/guides/http.md: the callback flow runs as written: the signed URL resumes the run and it completes under fence 2", () =>
    withDatabase("doc_http", (url) =>
      Effect.gen(function*() {
        const script = shellBlock("docs/guides/http.md")
        const env = envWith(url)
        // One shell runs the block, as a reader pastes it; its background processes share its group.
        const shell = spawn("sh", ["-c", script], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"], detached: true })
        let out = ""
        shell.stdout.on("data", (chunk) => (out += chunk))
        shell.stderr.on("data", (chunk) => (out += chunk))
        try {
          const code = yield* Effect.promise(() => new Promise<number | null>((resolve) => shell.on("exit", resolve)))
          assert.strictEqual(code, 0, out)
          assert.include(out, `{"status":"resumed","runId":"1"}`, `the POST to the signed URL resumed the run:\n${out}`)
          // The worker started in the background goes on: the run completes under its second claim.
          const shown = yield* untilCompleted(env, "1")
          assert.deepInclude(shown.run, {
            kind: "approve-payout",
            state: "completed",
            fence: 2,
            result: { _tag: "Signalled", payload: { approved: true } }
          })
          // The URL went to the approver only: nothing a reader of runs sees holds it (the console, `runs show`).
          assert.notInclude(JSON.stringify(shown), "sig=", "the run keeps no signed URL")
        } finally {
          stopGroup(shell.pid)
        }
      })))

  it.live("docs/guides/enqueue-from-sql.md: psql and the trigger run as written; the rolled-back order enqueued nothing", () =>
    withDatabase("doc_sql", (url) =>
      Effect.gen(function*() {
        const file = "docs/guides/enqueue-from-sql.md"
        const env = envWith(url)
        execFileSync("sh", ["-c", shellBlock(file)], { cwd: root, env, encoding: "utf8", stdio: "pipe" })
        // The trigger's block, pasted into psql as a reader would (the first sql block is the signature).
        const trigger = codeBlocks(file).filter((b) => b.lang === "sql")[1]!.body
        execFileSync("psql", [url, "-v", "ON_ERROR_STOP=1", "-q"], {
          env,
          input: trigger,
          encoding: "utf8",
          stdio: "pipe"
        })
        const runs = execFileSync("psql", [
          url,
          "-At",
          "-c",
          "SELECT kind, queue, priority, payload::text, idempotency_key FROM leasehold.runs ORDER BY id"
        ], {
          env,
          encoding: "utf8"
        }).trim().split("\n")
        assert.deepStrictEqual(runs, [
          `send-email|mail|5|{"to": "ana@example.com"}|`,
          `send-email|mail|0|{"to": "ana@example.com"}|welcome-ana`,
          `ship|shipping|0|{"order": 2, "total": 25.5}|`
        ])
        // The uniqueness window's call, twice: the second yields the first's run.
        const unique = codeBlocks(file).filter((b) => b.lang === "sql")[2]!.body
        const twice = [0, 1].map(() =>
          execFileSync("psql", [url, "-v", "ON_ERROR_STOP=1", "-At"], {
            env,
            input: unique,
            encoding: "utf8",
            stdio: "pipe"
          }).trim()
        )
        const [id] = twice[0]!.split("|")
        assert.deepStrictEqual(twice, [`${id}|t`, `${id}|f`])
      })))

  it.live("the README's npm start runs the demo from a folder of the clone", () =>
    withDatabase("doc_start", (url) =>
      Effect.gen(function*() {
        // `npm start` as written, from docs/ rather than the root: npm finds the root's package.json.
        // The child must not see the enclosing `npm test`'s own variables.
        const env: NodeJS.ProcessEnv = {}
        for (const [key, value] of Object.entries(envWith(url))) {
          if (!key.toLowerCase().startsWith("npm_")) env[key] = value
        }
        const started = spawn("sh", ["-c", "npm start"], {
          cwd: path.join(root, "docs"),
          env,
          stdio: ["ignore", "pipe", "pipe"],
          detached: true
        })
        let out = ""
        started.stdout.on("data", (chunk) => (out += chunk))
        started.stderr.on("data", (chunk) => (out += chunk))
        try {
          const code = yield* Effect.promise(() => new Promise<number | null>((resolve) => started.on("exit", resolve)))
          assert.strictEqual(code, 0, `npm start failed:\n${out}`)
          assert.match(out, /FenceRejected/, "the demo shows the stale worker's writes refused by the fence")
        } finally {
          stopGroup(started.pid)
        }
      })))
})

describe("the published packages' READMEs", () => {
  it.live("each has its own example, and it type-checks against the current packages", () =>
    Effect.sync(() => {
      const dir = path.join(root, ".scratch", "package-readme-check")
      fs.rmSync(dir, { recursive: true, force: true })
      fs.mkdirSync(dir, { recursive: true })
      const files: Array<string> = []
      for (const pkg of ["core", "embedded", "sql", "http", "workflow", "cli"]) {
        const readme = fs.readFileSync(path.join(root, "packages", pkg, "README.md"), "utf8")
        assert.match(readme, new RegExp(`^# @leasehold/${pkg}\n`), `packages/${pkg}/README.md names its package`)
        if (pkg === "http") continue // its blocks are fragments of an application, the HTTP guide's program
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
          compilerOptions: {
            noEmit: true,
            composite: false,
            declaration: false,
            declarationMap: false,
            noUnusedLocals: false
          },
          files
        })
      )
      const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc")
      try {
        execFileSync(process.execPath, [tsc, "-p", dir], { encoding: "utf8", stdio: "pipe" })
      } catch (error) {
        assert.fail(
          `a package README's code does not compile:\n${(error as { stdout?: string }).stdout ?? String(error)}`
        )
      }
    }))
})
