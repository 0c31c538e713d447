/**
 * A real PgBouncer (Debian's package) in transaction pooling mode, in front of the test
 * PostgreSQL, on a free loopback port, for the duration of a test's scope. Clients authenticate to
 * it by trust; it logs in to PostgreSQL with the test URL's user and password. As root it runs as
 * the `postgres` OS user (PgBouncer refuses to run as root).
 */
import { Effect } from "effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "./ports.js"

const binary = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"].find((candidate) => fs.existsSync(candidate))

/** Whether PgBouncer is installed (`apt-get install -y pgbouncer`; npm test installs it). */
export const available = binary !== undefined

const reachable = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

export interface Pooler {
  /** The test URL, through PgBouncer. */
  readonly url: string
  /** How many server connections PgBouncer keeps per database and user. */
  readonly poolSize: number
}

/** Scoped: PgBouncer in transaction mode in front of `databaseUrl`, with `poolSize` server connections. */
export const start = (databaseUrl: string, poolSize = 4) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      if (binary === undefined) {
        throw new Error("PgBouncer is not installed: `apt-get install -y pgbouncer` (npm test installs it)")
      }
      const target = new URL(databaseUrl)
      const user = decodeURIComponent(target.username || "postgres")
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-pgbouncer-"))
      const port = await freePort()
      const backend = [
        `host=${target.hostname}`,
        `port=${target.port || "5432"}`,
        `user=${user}`,
        ...(target.password === "" ? [] : [`password=${decodeURIComponent(target.password)}`])
      ].join(" ")
      fs.writeFileSync(path.join(dir, "userlist.txt"), `"${user}" ""\n`)
      fs.writeFileSync(
        path.join(dir, "pgbouncer.ini"),
        [
          "[databases]",
          `* = ${backend}`,
          "[pgbouncer]",
          "listen_addr = 127.0.0.1",
          `listen_port = ${port}`,
          "auth_type = trust",
          `auth_file = ${path.join(dir, "userlist.txt")}`,
          "pool_mode = transaction",
          `default_pool_size = ${poolSize}`,
          "max_client_conn = 500",
          // The client's driver asks for these at startup; PgBouncer would refuse the connection.
          "ignore_startup_parameters = extra_float_digits,options",
          `logfile = ${path.join(dir, "pgbouncer.log")}`,
          `pidfile = ${path.join(dir, "pgbouncer.pid")}`,
          `unix_socket_dir = ${dir}`
        ].join("\n") + "\n"
      )
      const asRoot = process.getuid?.() === 0
      if (asRoot) execFileSync("chown", ["-R", "postgres", dir])
      const child: ChildProcess = spawn(binary, [
        ...(asRoot ? ["-u", "postgres"] : []),
        path.join(dir, "pgbouncer.ini")
      ], {
        stdio: ["ignore", "ignore", "pipe"]
      })
      let stderr = ""
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => void (stderr += chunk))
      const deadline = Date.now() + 10_000
      while (!(await reachable(port))) {
        if (child.exitCode !== null || Date.now() > deadline) {
          const log = fs.existsSync(path.join(dir, "pgbouncer.log"))
            ? fs.readFileSync(path.join(dir, "pgbouncer.log"), "utf8")
            : ""
          child.kill("SIGKILL")
          throw new Error(`PgBouncer did not start: ${stderr}\n${log}`)
        }
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      const url = new URL(databaseUrl)
      url.hostname = "127.0.0.1"
      url.port = String(port)
      return { child, dir, pooler: { url: url.toString(), poolSize } satisfies Pooler }
    }),
    ({ child, dir }) =>
      Effect.promise(async () => {
        child.kill("SIGTERM")
        await new Promise((resolve) => child.exitCode !== null ? resolve(undefined) : child.once("exit", resolve))
        fs.rmSync(dir, { recursive: true, force: true })
      })
  ).pipe(Effect.map(({ pooler }) => pooler))
