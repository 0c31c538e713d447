/**
 * The embedded PostgreSQL is UTF-8 whatever the environment: started from a process with no `LANG`
 * or `LC_*` (a `su -` login, a systemd unit, a container), `initdb` would otherwise pick SQL_ASCII
 * and refuse Unicode escapes.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { spawn } from "node:child_process"
import * as path from "node:path"
import { createInterface } from "node:readline"
import { pathToFileURL } from "node:url"

const builtModule = path.resolve(import.meta.dirname, "../packages/embedded/dist/EmbeddedPostgres.js")

// Starts a server, prints its URL, stops it when its stdin closes.
const script = `
const { startUnscoped } = await import(${JSON.stringify(pathToFileURL(builtModule).href)})
const pg = await startUnscoped()
process.stdout.write(pg.url + "\\n")
process.stdin.resume()
process.stdin.on("end", () => pg.stop().then(() => process.exit(0)))
`

/** A server started by a child process whose environment has no locale at all. */
const scrubbedServer = Effect.acquireRelease(
  Effect.promise(() =>
    new Promise<{ url: string; stop: () => Promise<void> }>((resolve, reject) => {
      const env = Object.fromEntries(
        Object.entries(process.env).filter(([name]) =>
          name !== "LANG" && name !== "LANGUAGE" && !name.startsWith("LC_")
        )
      )
      const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
        env,
        stdio: ["pipe", "pipe", "pipe"]
      })
      let stderr = ""
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => void (stderr += chunk))
      child.once("exit", (code) => reject(new Error(`the child exited with ${code}: ${stderr}`)))
      const exited = new Promise<void>((done) => child.once("exit", () => done()))
      createInterface({ input: child.stdout }).once("line", (url) =>
        resolve({
          url,
          stop: () => {
            child.stdin.end()
            return exited
          }
        }))
    })
  ),
  (server) => Effect.promise(() => server.stop())
)

describe("embedded PostgreSQL's encoding", () => {
  it.live(
    "started with no LANG or LC_* in the environment, the server is UTF8 with a C-compatible locale and takes Unicode escapes",
    () =>
      Effect.gen(function*() {
        const server = yield* scrubbedServer
        const rows = yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          return yield* sql.unsafe<{ encoding: string; collate: string; text: string }>(
            "SELECT current_setting('server_encoding') AS encoding, datcollate AS collate, U&'caf\\00e9' AS text FROM pg_database WHERE datname = current_database()"
          )
        }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(server.url), maxConnections: 1 })), Effect.scoped)
        assert.deepStrictEqual(rows, [{ encoding: "UTF8", collate: "C", text: "café" }])
      }),
    60_000
  )
})
