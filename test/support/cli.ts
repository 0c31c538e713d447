/**
 * Runs the real, built `leasehold` binary (packages/cli/dist/bin.js) as a child process under the
 * same Node as the tests, and collects what it prints and how it exits.
 */
import { Effect, type Scope } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import { fileURLToPath } from "node:url"
import { databaseUrl } from "./db.js"

export const binPath = fileURLToPath(new URL("../../packages/cli/dist/bin.js", import.meta.url))

export interface CliResult {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

export interface CliOptions {
  /** Extra environment; DATABASE_URL is removed unless given here, so only flags pick the server. */
  readonly env?: Readonly<Record<string, string>> | undefined
  readonly cwd?: string | undefined
}

const environment = (options: CliOptions): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env, ...options.env }
  if (options.env?.DATABASE_URL === undefined) delete env.DATABASE_URL
  return env
}

const assertBuilt = () => {
  if (!fs.existsSync(binPath)) throw new Error(`${binPath} is missing: build first (npm run build)`)
}

/** Starts the binary with `args`; the caller collects its output. */
export const start = (args: ReadonlyArray<string>, options: CliOptions = {}): ChildProcess => {
  assertBuilt()
  return spawn(process.execPath, [binPath, ...args], {
    env: environment(options),
    cwd: options.cwd,
    stdio: ["ignore", "pipe", "pipe"]
  })
}

/** Waits for a started binary to exit. */
export const completion = (child: ChildProcess): Promise<CliResult> =>
  new Promise((resolve, reject) => {
    let stdout = ""
    let stderr = ""
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => void (stdout += chunk))
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => void (stderr += chunk))
    child.once("error", reject)
    child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
  })

/** Runs `leasehold ...args` to completion. */
export const leasehold = (args: ReadonlyArray<string>, options: CliOptions = {}): Effect.Effect<CliResult> =>
  Effect.promise(() => completion(start(args, options)))

/** Starts a long-running command (a worker) in the current scope; SIGKILLed if still alive when the scope closes. */
export const background = (args: ReadonlyArray<string>, options: CliOptions = {}) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child = start(args, options)
      return { child, exited: completion(child) }
    }),
    ({ child }) =>
      Effect.sync(() => void (child.exitCode === null && child.signalCode === null && child.kill("SIGKILL")))
  ) satisfies Effect.Effect<unknown, never, Scope.Scope>

/** `--database-url <test server> --schema <schema>`. */
export const connection = (
  schema: string
): ReadonlyArray<string> => ["--database-url", databaseUrl(), "--schema", schema]
