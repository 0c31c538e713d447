/**
 * `npm start [-- --database-url URL]`: the demo (`Demo.ts`) on the PostgreSQL at `--database-url`,
 * else `DATABASE_URL`, else an embedded one with its data in `.leasehold/pgdata`. Exits 0 only if
 * the demo's checks against the database pass; otherwise one line on stderr and exit 1 (2 for a
 * mistake in the command line). Ctrl-C stops the worker processes at once.
 */
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database } from "@leasehold/sql"
import { Cause, Effect, Exit } from "effect"
import * as path from "node:path"
import { parseArgs } from "node:util"
import * as Demo from "./Demo.js"

let databaseUrl: string | undefined
try {
  databaseUrl = parseArgs({ options: { "database-url": { type: "string" } } }).values["database-url"]
} catch (error) {
  process.stderr.write(`demo: ${(error as Error).message}\n`)
  process.exit(2)
}

const dataDir = path.resolve(process.env.LEASEHOLD_DATA_DIR ?? ".leasehold/pgdata")

const main = Effect.scoped(Effect.gen(function*() {
  const url = yield* Database.resolveUrl({ url: databaseUrl, fallback: EmbeddedPostgres.url({ dataDir }) })
  yield* Demo.run(url)
}))

const fiber = Effect.runFork(main)
fiber.addObserver((exit) => {
  if (Exit.isSuccess(exit)) process.exit(0)
  if (Cause.hasInterruptsOnly(exit.cause)) process.exit(130)
  const error = Cause.squash(exit.cause)
  process.stderr.write(`demo: ${error instanceof Error ? error.message : String(error)}\n`)
  process.exit(1)
})
const stop = () => fiber.interruptUnsafe()
process.on("SIGINT", stop)
process.on("SIGTERM", stop)
