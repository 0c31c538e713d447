/**
 * Enqueueing in bulk, as the handlers guide shows it: `Client.enqueueMany` checks every payload
 * against the handler's schema, then writes the batch in one statement, inside the application's
 * own transaction when there is one (the import's row and its runs commit together, or neither).
 * One bad payload refuses the whole batch before anything is written.
 *
 * Run it from the clone's root: `node examples/bulk-enqueue.ts`. It uses `DATABASE_URL`, or starts
 * an embedded PostgreSQL in a temporary folder, and exits 0 once it showed both.
 */
import { Client, Handler } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"

const welcome = Handler.make({
  kind: "welcome-email",
  payload: Schema.Struct({ to: Schema.String, name: Schema.String }),
  handle: ({ to }) => Effect.log(`welcome mail to ${to}`)
})

const StoreLive = PgRunStore.layer({ schema: "leasehold" }).pipe(
  Layer.provideMerge(Database.layer({ fallback: EmbeddedPostgres.url() }))
)

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS imports (id serial PRIMARY KEY, customers int NOT NULL)`
  const customers = [
    { to: "ana@example.com", name: "Ana" },
    { to: "bo@example.com", name: "Bo" },
    { to: "cy@example.com", name: "Cy" }
  ]
  // The import's row and its runs in one transaction: one statement writes the three runs.
  const enqueued = yield* sql.withTransaction(Effect.gen(function*() {
    yield* sql`INSERT INTO imports (customers) VALUES (${customers.length})`
    return yield* Client.enqueueMany(welcome, customers, { queue: "mail" })
  }))

  // One payload that does not match the schema: the whole batch is refused, nothing written.
  const refused = yield* Effect.flip(Client.enqueueMany(welcome, [customers[0]!, { to: "dee@example.com" } as never]))

  const [{ n }] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM leasehold.runs WHERE kind = 'welcome-email'`
  return { enqueued, refused, stored: n! }
})

if (import.meta.main) {
  Effect.runPromise(program.pipe(Effect.provide(StoreLive))).then(({ enqueued, refused, stored }) => {
    console.log(`enqueued ${enqueued.length} runs in one batch: ${enqueued.map((e) => e.id).join(", ")}`)
    console.log(`refused: ${refused.message}`)
    console.log(`runs stored: ${stored}`)
    if (enqueued.length !== 3 || refused._tag !== "InvalidPayload" || stored !== 3) process.exitCode = 1
  }, (error) => {
    console.error(`bulk-enqueue example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
