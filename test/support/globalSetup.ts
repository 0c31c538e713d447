/**
 * One PostgreSQL for the whole test run: `DATABASE_URL` when set, otherwise an embedded server in
 * a temporary folder. Each test file then works in its own schema.
 */
import { EmbeddedPostgres } from "@leasehold/sql"
import type { TestProject } from "vitest/node"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
  }
}

export default async function setup(project: TestProject) {
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
