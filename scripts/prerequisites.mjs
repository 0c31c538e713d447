#!/usr/bin/env node
/**
 * The machine's part of `npm test`: the Debian programs the tests drive for real (Chromium for the
 * console's browser test, faketime for skewed worker clocks, PgBouncer for the pooler tests,
 * PostgreSQL's server binaries for the standby and failover tests, jq for the README's commands,
 * Spin and gcc for the ledger's model: spin preprocesses with gcc and writes a verifier in C).
 *
 * Finds each one; when some are missing and this process is root with apt-get, installs them and
 * says so in one line; otherwise fails at once with one line naming the command that installs them.
 * Plain JavaScript, so it runs before the build.
 *
 * LEASEHOLD_PREREQUISITES_PATH: the folders searched for programs (default: PATH, then /usr/sbin
 * and /sbin, where PgBouncer lives). LEASEHOLD_NO_INSTALL=1: never install, only say what is missing.
 * LEASEHOLD_PREREQUISITES_AS_ROOT=1: install as if root (for the tests, with a stand-in apt-get).
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const searchPath = () =>
  (process.env.LEASEHOLD_PREREQUISITES_PATH ?? `${process.env.PATH ?? ""}:/usr/sbin:/sbin`).split(":").filter((dir) =>
    dir !== ""
  )

const executable = (file) => {
  try {
    fs.accessSync(file, fs.constants.X_OK)
    return fs.statSync(file).isFile()
  } catch {
    return false
  }
}

/** The first executable called `name` in the search path. */
const which = (name) => searchPath().map((dir) => path.join(dir, name)).find(executable)

const libfaketime = () =>
  [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1"
  ].find((file) => fs.existsSync(file))

/** The folder of PostgreSQL's server binaries: `pg_config --bindir`, else the newest /usr/lib/postgresql/N/bin. */
const postgresBinDir = () => {
  const pgConfig = which("pg_config")
  const candidates = []
  if (pgConfig !== undefined) {
    try {
      candidates.push(
        execFileSync(pgConfig, ["--bindir"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim()
      )
    } catch {
      // A broken pg_config: the Debian layout below still counts.
    }
  }
  const root = "/usr/lib/postgresql"
  if (fs.existsSync(root)) {
    candidates.push(
      ...fs.readdirSync(root).sort((a, b) => Number(b) - Number(a)).map((version) => path.join(root, version, "bin"))
    )
  }
  return candidates.find((dir) =>
    ["initdb", "pg_ctl", "pg_basebackup", "postgres"].every((name) => executable(path.join(dir, name)))
  )
}

/** Each prerequisite: the Debian package that provides it and where it was found (undefined: missing). */
export const prerequisites = () => [
  { name: "chromium", package: "chromium", found: process.env.CHROMIUM_PATH || which("chromium") },
  // The tests preload the library itself; Debian's faketime command depends on it.
  {
    name: "faketime",
    package: "faketime",
    found: which("faketime") === undefined ? undefined : libfaketime() ?? which("faketime")
  },
  { name: "pgbouncer", package: "pgbouncer", found: which("pgbouncer") },
  { name: "PostgreSQL server binaries", package: "postgresql", found: postgresBinDir() },
  { name: "jq", package: "jq", found: which("jq") },
  { name: "spin", package: "spin", found: which("spin") },
  { name: "gcc", package: "gcc", found: which("gcc") }
]

export const missing = () => prerequisites().filter((p) => p.found === undefined)

/** The one line that says what is missing and which command installs it. */
export const installLine = (packages) =>
  `npm test needs ${packages.join(", ")}: install ${
    packages.length === 1 ? "it" : "them"
  } with \`sudo apt-get install -y ${packages.join(" ")}\` (as root, npm test installs them itself)`

export class PrerequisitesMissing extends Error {}

/**
 * Makes every prerequisite present, or throws PrerequisitesMissing with the one line. Logs one line
 * when it installs. Answers the prerequisites as found.
 */
export const provision = (log = (line) => console.log(line)) => {
  const absent = missing()
  if (absent.length === 0) return prerequisites()
  const packages = absent.map((p) => p.package)
  const apt = which("apt-get")
  // LEASEHOLD_PREREQUISITES_AS_ROOT=1: taken as root (its tests drive the install with a stand-in
  // apt-get as any user; a real apt-get refuses a normal user anyway).
  const root = process.getuid?.() === 0 || process.env.LEASEHOLD_PREREQUISITES_AS_ROOT === "1"
  const canInstall = root && apt !== undefined && process.env.LEASEHOLD_NO_INSTALL !== "1"
  if (!canInstall) throw new PrerequisitesMissing(installLine(packages))
  const started = Date.now()
  log(`npm test: installing ${packages.join(" ")} with apt-get (running as root; they are missing) ...`)
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" }
  for (const args of [["update", "-qq"], ["install", "-y", "-qq", ...packages]]) {
    const result = spawnSync(apt, args, { env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })
    if (result.status !== 0) {
      const tail = `${result.stdout ?? ""}${result.stderr ?? ""}`.trim().split("\n").slice(-5).join("\n")
      throw new PrerequisitesMissing(`${installLine(packages)}; \`apt-get ${args.join(" ")}\` failed here:\n${tail}`)
    }
  }
  const still = missing().map((p) => p.package)
  if (still.length > 0) throw new PrerequisitesMissing(`${installLine(still)}; apt-get ran but they are still missing`)
  log(`npm test: installed ${packages.join(" ")} in ${Math.round((Date.now() - started) / 1000)} s`)
  return prerequisites()
}

const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href
if (isMain) {
  try {
    const found = provision()
    console.log(`npm test: found ${found.map((p) => `${p.name} (${p.found})`).join(", ")}`)
  } catch (error) {
    if (!(error instanceof PrerequisitesMissing)) throw error
    console.error(error.message)
    process.exit(1)
  }
}
