/**
 * One PostgreSQL for the whole test run: `DATABASE_URL` when set, otherwise an embedded server in
 * a temporary folder. Each test file then works in its own schema.
 */
import { EmbeddedPostgres } from "@leasehold/sql"
import * as os from "node:os"
import * as path from "node:path"
import type { TestProject } from "vitest/node"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
  }
}

export default async function setup(project: TestProject) {
  // Node's on-disk compile cache for every process the tests start (the CLI, worker processes, the
  // benchmark), as the installed launcher enables it: each would otherwise compile the same modules.
  process.env.NODE_COMPILE_CACHE ??= path.join(os.tmpdir(), "leasehold-test-compile-cache")
  const configured = process.env.DATABASE_URL
  if (configured !== undefined && configured !== "") {
    project.provide("databaseUrl", configured)
    return
  }
  const pg = await EmbeddedPostgres.startUnscoped({ settings: { max_connections: "300" } })
  project.provide("databaseUrl", pg.url)
  return async () => {
    await pg.stop()
  }
}
