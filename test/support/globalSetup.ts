/**
 * One PostgreSQL for the whole test run: `DATABASE_URL` when set, otherwise an embedded server in
 * a temporary folder. Each test file then works in its own schema. Every project that needs a
 * database runs this setup; they share one server (started by the first, stopped after the last).
 */
import { EmbeddedPostgres } from "@leasehold/embedded"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { TestProject } from "vitest/node"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
  }
}

interface Shared {
  readonly server: Promise<{ readonly url: string; readonly stop: () => Promise<void> }>
  users: number
}

// On globalThis: each project may load this module afresh, but they all run in vitest's one process.
const sharedKey = Symbol.for("leasehold.test.embeddedPostgres")
const cacheKey = Symbol.for("leasehold.test.compileCache")
const registry = globalThis as { [sharedKey]?: Shared; [cacheKey]?: { readonly dir: string; users: number } }

/** A project is done with the compile cache: the last one removes it. */
const removeCache = () => {
  const cache = registry[cacheKey]
  if (cache !== undefined && --cache.users === 0) {
    delete registry[cacheKey]
    fs.rmSync(cache.dir, { recursive: true, force: true })
  }
}

export default async function setup(project: TestProject) {
  // Node's on-disk compile cache for every process the tests start (the CLI, worker processes, the
  // benchmark), as the installed launcher enables it: each would otherwise compile the same modules.
  // A folder of this run's own: a fixed name in the shared temporary folder may be another user's.
  // Made by the first project, removed after the last one's teardown (or at exit).
  if (process.env.NODE_COMPILE_CACHE === undefined) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-compile-cache-"))
    process.env.NODE_COMPILE_CACHE = dir
    registry[cacheKey] = { dir, users: 0 }
    process.once("exit", () => fs.rmSync(dir, { recursive: true, force: true }))
  }
  const cache = registry[cacheKey]
  if (cache !== undefined) cache.users++
  const configured = process.env.DATABASE_URL
  if (configured !== undefined && configured !== "") {
    project.provide("databaseUrl", configured)
    return removeCache
  }
  const shared = registry[sharedKey] ??= {
    server: EmbeddedPostgres.startUnscoped({ settings: { max_connections: "300" } }),
    users: 0
  }
  shared.users++
  const pg = await shared.server
  project.provide("databaseUrl", pg.url)
  return async () => {
    removeCache()
    if (--shared.users > 0) return
    delete registry[sharedKey]
    await pg.stop()
  }
}
