/**
 * Starts `InstrumentedWorker` as a real OS process behind its own TCP proxy, and reads what it
 * reports. Optionally under Debian's `faketime`, to skew the process's wall clock.
 *
 * @since 0.1.0
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import * as readline from "node:readline"
import { fileURLToPath } from "node:url"
import * as TcpProxy from "./TcpProxy.js"

export type Report = Record<string, any> & { readonly type: string; readonly owner: string; readonly mono: number; readonly wall: number }

export interface WorkerProcess {
  readonly owner: string
  readonly proxy: TcpProxy.TcpProxy
  readonly reports: Array<Report>
  readonly stderr: Array<string>
  readonly send: (command: Record<string, unknown>) => void
  /** Calls `listener` with every report from now on. */
  readonly onReport: (listener: (r: Report) => void) => void
  /** Resolves with the first report (past or future) that matches, or rejects after `timeoutMs`. */
  readonly waitFor: (what: string, match: (r: Report) => boolean, timeoutMs?: number) => Promise<Report>
  /** Heals the proxy, asks the worker to shut down (SIGTERM), kills it if it lingers. */
  readonly stop: () => Promise<void>
  readonly kill: () => Promise<void>
}

export interface WorkerSettings {
  readonly owner: string
  readonly databaseUrl: string
  readonly schema: string
  /** Qualified ledger table; default `"<schema>".ledger`. */
  readonly ledger?: string | undefined
  /** A faketime offset such as "-10m": the process's wall clock runs that far off. */
  readonly skew?: string | undefined
  readonly ttl?: string
  readonly heartbeat?: string
  readonly pollInterval?: string
  readonly concurrency?: number
}

const script = path.join(path.dirname(fileURLToPath(import.meta.url)), "InstrumentedWorker.js")

/** The worker's own view of the database URL: through the proxy. */
const viaProxy = (url: string, port: number): string => {
  const parsed = new URL(url)
  parsed.hostname = "127.0.0.1"
  parsed.port = String(port)
  return parsed.toString()
}

export const start = async (settings: WorkerSettings): Promise<WorkerProcess> => {
  const target = new URL(settings.databaseUrl)
  const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) })
  const config = {
    url: viaProxy(settings.databaseUrl, proxy.port),
    schema: settings.schema,
    ledger: settings.ledger ?? `"${settings.schema}".ledger`,
    owner: settings.owner,
    ttl: settings.ttl ?? "2 seconds",
    heartbeat: settings.heartbeat ?? "400 millis",
    pollInterval: settings.pollInterval ?? "100 millis",
    concurrency: settings.concurrency ?? 4
  }
  const env = { ...process.env, LEASEHOLD_WORKER_CONFIG: JSON.stringify(config), NODE_NO_WARNINGS: "1" }
  const child: ChildProcess = settings.skew === undefined
    ? spawn(process.execPath, [script], { env, stdio: ["pipe", "pipe", "pipe"] })
    // Only the wall clock is skewed; the monotonic clock is left alone, as on a real machine.
    : spawn("faketime", ["-f", settings.skew, process.execPath, script], {
      env: { ...env, FAKETIME_DONT_FAKE_MONOTONIC: "1" },
      stdio: ["pipe", "pipe", "pipe"]
    })

  const reports: Array<Report> = []
  const stderr: Array<string> = []
  const waiters = new Set<(r: Report) => void>()
  readline.createInterface({ input: child.stdout! }).on("line", (line) => {
    let report: Report
    try {
      report = JSON.parse(line)
    } catch {
      stderr.push(`stdout: ${line}`)
      return
    }
    reports.push(report)
    for (const waiter of [...waiters]) waiter(report)
  })
  readline.createInterface({ input: child.stderr! }).on("line", (line) => void stderr.push(line))
  // However this process ends, it takes its worker processes with it.
  const killOnExit = () => child.kill("SIGKILL")
  process.on("exit", killOnExit)
  const exited = new Promise<void>((resolve) =>
    child.once("exit", () => {
      process.removeListener("exit", killOnExit)
      resolve()
    })
  )

  const waitFor = (what: string, match: (r: Report) => boolean, timeoutMs = 10_000) =>
    new Promise<Report>((resolve, reject) => {
      const seen = reports.find(match)
      if (seen !== undefined) return resolve(seen)
      const timer = setTimeout(() => {
        waiters.delete(waiter)
        reject(new Error(`${settings.owner}: timed out waiting for ${what}; stderr: ${stderr.slice(-5).join(" | ")}`))
      }, timeoutMs)
      const waiter = (r: Report) => {
        if (!match(r)) return
        clearTimeout(timer)
        waiters.delete(waiter)
        resolve(r)
      }
      waiters.add(waiter)
    })

  return {
    owner: settings.owner,
    proxy,
    reports,
    stderr,
    send: (command) => void child.stdin!.write(JSON.stringify(command) + "\n"),
    onReport: (listener) => void waiters.add(listener),
    waitFor,
    stop: async () => {
      proxy.heal()
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM")
        const timer = setTimeout(() => child.kill("SIGKILL"), 3_000)
        await exited
        clearTimeout(timer)
      }
      await proxy.close()
    },
    kill: async () => {
      proxy.heal()
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL")
        await exited
      }
      await proxy.close()
    }
  }
}

/** Reports of one kind of worker event (`type: "event"`, `_tag`). */
export const events = (worker: WorkerProcess, tag: string): Array<Report> =>
  worker.reports.filter((r) => r.type === "event" && r._tag === tag)
