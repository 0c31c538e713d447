/**
 * A real primary and a streaming standby, made with Debian's PostgreSQL binaries (`initdb`,
 * `pg_basebackup`, `pg_ctl`) in a temporary folder, on free loopback ports, for the duration of a
 * test's scope. Synchronous (the standby confirms every commit before it returns) or asynchronous.
 * As root the servers run as the `postgres` OS user (PostgreSQL refuses root).
 */
import * as TcpProxy from "@leasehold/testing/TcpProxy"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "./ports.js"

const binDir = (() => {
  const root = "/usr/lib/postgresql"
  if (!fs.existsSync(root)) return undefined
  const versions = fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, "bin", "pg_basebackup"))).sort((
    a,
    b
  ) => Number(b) - Number(a))
  return versions.length === 0 ? undefined : path.join(root, versions[0]!, "bin")
})()

/** Whether Debian's PostgreSQL server binaries are installed (`apt-get install -y postgresql`). */
export const available = binDir !== undefined

const serverUser = (() => {
  if (process.getuid?.() !== 0) return undefined
  try {
    return {
      uid: Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" })),
      gid: Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }))
    }
  } catch {
    return undefined
  }
})()

const run = (command: string, args: ReadonlyArray<string>) =>
  execFileSync(path.join(binDir!, command), args, { encoding: "utf8", stdio: "pipe", ...serverUser })

export interface ReplicatedPair {
  readonly primaryPort: number
  readonly standbyPort: number
  readonly url: (port: number) => string
  /** Stops the primary at once (`pg_ctl stop -m immediate`): a crash, for what clients see. */
  readonly stopPrimary: () => void
  /** Promotes the standby and waits until it accepts writes. */
  readonly promote: () => void
  /** The standby's replication link, through a proxy: `partition()` it and the standby falls behind. */
  readonly replication: TcpProxy.TcpProxy
  /** Whether the standby has replayed everything the primary has written so far. */
  readonly caughtUp: () => boolean
}

/** Scoped: a primary and a streaming standby, `sync` or not, both stopped when the scope closes. */
export const start = (options: { readonly sync: boolean }) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      if (binDir === undefined) {
        throw new Error(
          "Debian's PostgreSQL binaries are not installed: `apt-get install -y postgresql` (npm test installs them)"
        )
      }
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-replication-"))
      if (serverUser !== undefined) fs.chownSync(dir, serverUser.uid, serverUser.gid)
      const primary = path.join(dir, "primary")
      const standby = path.join(dir, "standby")
      const [primaryPort, standbyPort] = [await freePort(), await freePort()]
      run("initdb", ["-D", primary, "-U", "postgres", "--auth=trust", "--no-sync"])
      fs.appendFileSync(
        path.join(primary, "postgresql.conf"),
        [
          `port = ${primaryPort}`,
          "listen_addresses = '127.0.0.1'",
          `unix_socket_directories = '${dir}'`,
          "wal_level = replica",
          "max_wal_senders = 4",
          "max_connections = 200",
          "fsync = off",
          `synchronous_standby_names = '${options.sync ? "standby1" : ""}'`,
          "synchronous_commit = on"
        ].join("\n") + "\n"
      )
      fs.appendFileSync(path.join(primary, "pg_hba.conf"), "host replication all 127.0.0.1/32 trust\n")
      run("pg_ctl", ["-D", primary, "-l", path.join(dir, "primary.log"), "-w", "start"])
      // The standby streams through a proxy the test can cut, as a network failure would.
      const replication = await TcpProxy.start({ host: "127.0.0.1", port: primaryPort })
      run("pg_basebackup", [
        "-h",
        "127.0.0.1",
        "-p",
        String(primaryPort),
        "-U",
        "postgres",
        "-D",
        standby,
        "-X",
        "stream",
        "-c",
        "fast"
      ])
      fs.writeFileSync(path.join(standby, "standby.signal"), "")
      fs.appendFileSync(
        path.join(standby, "postgresql.conf"),
        [
          `port = ${standbyPort}`,
          `primary_conninfo = 'host=127.0.0.1 port=${replication.port} user=postgres application_name=standby1'`,
          "synchronous_standby_names = ''"
        ].join("\n") + "\n"
      )
      run("pg_ctl", ["-D", standby, "-l", path.join(dir, "standby.log"), "-w", "start"])
      const psql = (port: number, query: string) =>
        execFileSync(path.join(binDir, "psql"), [
          "-h",
          "127.0.0.1",
          "-p",
          String(port),
          "-U",
          "postgres",
          "-Atc",
          query
        ], { encoding: "utf8" }).trim()
      const deadline = Date.now() + 30_000
      const wanted = options.sync ? "streaming sync" : "streaming async"
      while (
        psql(
          primaryPort,
          "SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name = 'standby1'"
        ) !== wanted
      ) {
        if (Date.now() > deadline) throw new Error(`the standby did not reach "${wanted}"`)
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      const pair: ReplicatedPair = {
        primaryPort,
        standbyPort,
        url: (port) => `postgres://postgres@127.0.0.1:${port}/postgres`,
        stopPrimary: () => void run("pg_ctl", ["-D", primary, "-m", "immediate", "-w", "stop"]),
        promote: () => void run("pg_ctl", ["-D", standby, "-w", "promote"]),
        replication,
        caughtUp: () => {
          const written = psql(primaryPort, "SELECT pg_current_wal_lsn()")
          return psql(standbyPort, `SELECT pg_last_wal_replay_lsn() >= '${written}'::pg_lsn`) === "t"
        }
      }
      return { dir, primary, standby, pair, replication }
    }),
    ({ dir, primary, replication, standby }) =>
      Effect.promise(async () => {
        await replication.close()
        for (const data of [primary, standby]) {
          try {
            run("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"])
          } catch {
            // already stopped
          }
        }
        fs.rmSync(dir, { recursive: true, force: true })
      })
  ).pipe(Effect.map(({ pair }) => pair))
