/**
 * Starts `InstrumentedWorker` as a real OS process behind its own TCP proxy, and reads what it
 * reports. Optionally under Debian's `faketime`, to skew the process's wall clock.
 *
 * @since 0.1.0
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import * as readline from "node:readline"
import { fileURLToPath } from "node:url"
import * as TcpProxy from "./TcpProxy.js"

/** One JSON line from a worker process; `receivedAt` is this process's clock when it arrived. */
export type Report = Record<string, any> & {
  readonly type: string
  readonly owner: string
  readonly mono: number
  readonly wall: number
  readonly receivedAt: number
}

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
  readonly pid: number
  /** Resolves when the process has exited, with its exit code or signal. */
  readonly exited: Promise<{ readonly code: number | null; readonly signal: string | null }>
  readonly signal: (signal: NodeJS.Signals) => void
  /** Heals the proxy, asks the worker to shut down (SIGTERM), kills it if it lingers. */
  readonly stop: () => Promise<void>
  readonly kill: () => Promise<void>
}

export interface WorkerSettings {
  readonly owner: string
  readonly databaseUrl: string
  readonly schema: string
  /** Qualified effects table; default `"<schema>".effects`. */
  readonly effects?: string | undefined
  /** A faketime offset such as "-10m": the process's wall clock runs that far off. */
  readonly skew?: string | undefined
  readonly ttl?: string
  readonly heartbeat?: string
  readonly pollInterval?: string
  readonly concurrency?: number
  readonly maxConnections?: number
  readonly retryBase?: string
  /** More environment for the process (e.g. `OTEL_*` to export its traces). */
  readonly env?: Readonly<Record<string, string>> | undefined
}

/**
 * The effects table the instrumented worker writes, one row per completion (its side effect), in the fenced
 * transaction that completes the run. Its columns match the worker's INSERT.
 */
export const createEffectsTable = (qualifiedName: string): string =>
  `CREATE TABLE ${qualifiedName} (run_id bigint NOT NULL, fence bigint NOT NULL, owner text NOT NULL, at timestamptz NOT NULL DEFAULT now())`

const script = path.join(path.dirname(fileURLToPath(import.meta.url)), "InstrumentedWorker.js")

const libfaketime = [
  "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
  "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
  "/usr/lib/faketime/libfaketimeMT.so.1"
].find((candidate) => fs.existsSync(candidate))

/** Whether this machine can skew a process's wall clock (Debian's faketime). */
export const canSkewClocks = libfaketime !== undefined

/**
 * libfaketime preloaded into the worker itself rather than through the `faketime` wrapper, which
 * would stay the parent: signals (SIGSTOP, SIGKILL) must reach the worker process, not a shell.
 * Only the wall clock is skewed; the monotonic clock is left alone, as on a real machine.
 */
export const skewedClock = (offset: string): Record<string, string> => {
  if (libfaketime === undefined) throw new Error("libfaketime is not installed (Debian package faketime)")
  return { LD_PRELOAD: libfaketime, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: "1", FAKETIME_NO_CACHE: "1" }
}

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
    effects: settings.effects ?? `"${settings.schema}".effects`,
    owner: settings.owner,
    ttl: settings.ttl ?? "2 seconds",
    heartbeat: settings.heartbeat ?? "400 millis",
    pollInterval: settings.pollInterval ?? "100 millis",
    concurrency: settings.concurrency ?? 4,
    maxConnections: settings.maxConnections ?? 4,
    retryBase: settings.retryBase ?? "50 millis"
  }
  const env = {
    ...process.env,
    ...settings.env,
    LEASEHOLD_WORKER_CONFIG: JSON.stringify(config),
    NODE_NO_WARNINGS: "1"
  }
  const child: ChildProcess = spawn(process.execPath, [script], {
    env: settings.skew === undefined ? env : { ...env, ...skewedClock(settings.skew) },
    stdio: ["pipe", "pipe", "pipe"]
  })

  const reports: Array<Report> = []
  const stderr: Array<string> = []
  const waiters = new Set<(r: Report) => void>()
  readline.createInterface({ input: child.stdout! }).on("line", (line) => {
    let report: Report
    try {
      report = { ...JSON.parse(line), receivedAt: Date.now() }
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
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      process.removeListener("exit", killOnExit)
      resolve({ code, signal })
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
    pid: child.pid!,
    exited,
    signal: (signal) => void child.kill(signal),
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
