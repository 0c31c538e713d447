/** Worker processes as the bench sees them: spawn, wait for ready, go, stop, or kill -9. */
import { type ChildProcess, fork } from "node:child_process"
import { fileURLToPath } from "node:url"
import type { ChildConfig, ChildMessage, ProcessProfile } from "./protocol.js"

const workerScript = fileURLToPath(new URL("./worker.js", import.meta.url))

export interface WorkerProcess {
  readonly pid: number
  readonly config: ChildConfig
  /** Handler executions and claims reported so far. */
  readonly executed: () => number
  readonly claimed: () => number
  readonly ready: Promise<void>
  readonly exited: Promise<number | null>
  readonly onMessage: (listener: (message: ChildMessage) => void) => void
  readonly go: () => void
  /** Graceful stop; resolves with every run index the handler executed and what the process spent. */
  readonly stop: (timeoutMs?: number) => Promise<Stopped>
  readonly kill9: () => void
  /** Errors and anomalies the process reported. */
  readonly problems: Array<string>
}

export interface Stopped {
  readonly executed: ReadonlyArray<number>
  readonly profile: ProcessProfile | undefined
}

export const spawnWorker = (config: ChildConfig): WorkerProcess => {
  const proc: ChildProcess = fork(workerScript, [JSON.stringify(config)], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    // graphile-worker's own perf test switches per-job success logging off the same way.
    env: { ...process.env, NO_LOG_SUCCESS: "1" },
    // BENCH_CPU_PROF=<dir> profiles every worker process (node --cpu-prof), for finding where time goes;
    // BENCH_CPU_PROF_INTERVAL=<µs> samples more often than node's default of 1,000 µs.
    execArgv: process.env.BENCH_CPU_PROF
      ? [
        "--cpu-prof",
        `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`,
        ...(process.env.BENCH_CPU_PROF_INTERVAL ? [`--cpu-prof-interval=${process.env.BENCH_CPU_PROF_INTERVAL}`] : [])
      ]
      : []
  })
  const listeners: Array<(message: ChildMessage) => void> = []
  const problems: Array<string> = []
  let executed = 0
  let claimed = 0
  let resolveReady!: () => void
  let rejectReady!: (error: Error) => void
  const ready = new Promise<void>((resolve, reject) => {
    resolveReady = resolve
    rejectReady = reject
  })
  let resolveDone: ((stopped: Stopped) => void) | undefined
  const exited = new Promise<number | null>((resolve) => {
    proc.on("exit", (code) => {
      rejectReady(new Error(`worker process ${proc.pid} exited (${code}) before it was ready`))
      resolve(code)
    })
  })
  proc.on("message", (message: ChildMessage) => {
    switch (message.t) {
      case "ready":
        resolveReady()
        break
      case "progress":
        executed = message.executed
        claimed = message.claimed
        break
      case "done":
        executed = message.executed.length
        resolveDone?.({ executed: message.executed, profile: message.profile })
        break
      case "error":
        problems.push(message.message)
        process.stderr.write(`[worker ${proc.pid}] ${message.message}\n`)
        break
      case "anomaly":
        problems.push(message.event)
        break
    }
    for (const listener of listeners) listener(message)
  })
  return {
    pid: proc.pid!,
    config,
    executed: () => executed,
    claimed: () => claimed,
    ready,
    exited,
    onMessage: (listener) => void listeners.push(listener),
    go: () => void proc.send({ t: "go" }),
    stop: (timeoutMs = 60_000) =>
      new Promise<Stopped>((resolve, reject) => {
        const timer = setTimeout(() => {
          proc.kill("SIGKILL")
          reject(new Error(`worker process ${proc.pid} did not stop within ${timeoutMs} ms`))
        }, timeoutMs)
        resolveDone = (stopped) => {
          clearTimeout(timer)
          resolve(stopped)
        }
        // A process that died without reporting leaves nothing to count.
        proc.once("close", () => {
          clearTimeout(timer)
          resolve({ executed: [], profile: undefined })
        })
        if (proc.connected) proc.send({ t: "stop" })
      }),
    kill9: () => void proc.kill("SIGKILL"),
    problems
  }
}
