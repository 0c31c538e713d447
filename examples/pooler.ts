/**
 * A worker behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`), as
 * docs/DEPLOYMENT.md shows it: the client prepares no named statements, the runtime pool sends no
 * session settings, and LISTEN goes straight to the server.
 *
 * Run it from the clone's root: `POOLED_URL=postgres://…@pgbouncer:6432/db DATABASE_URL=postgres://…@server:5432/db
 * node examples/pooler.ts`. Without `POOLED_URL` both URLs are `DATABASE_URL` (the options work on a
 * direct connection too); without either, an embedded PostgreSQL is started. It exits 0 once a run
 * has completed through the pooled client.
 */
import { Client, Handler, RunStore, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Layer, Schema } from "effect"

const job = Handler.make({
  kind: "job",
  payload: Schema.Struct({ n: Schema.Number }),
  handle: ({ n }) => Effect.succeed(n * 2)
})

/** The store and its client for a pooled URL, with LISTEN on a direct one. */
export const pooledStore = (pooledUrl: string, directUrl: string) => {
  const client = Database.layerFromUrl(pooledUrl, { pooler: "transaction" }) // no named prepared statements
  const store = PgRunStore.layer({ pooler: { listenUrl: directUrl } }) // see below
  return store.pipe(Layer.provideMerge(client))
}

export const program = Effect.gen(function*() {
  const running = yield* Effect.forkChild(Worker.run({ handlers: [job] }))
  const { id } = yield* Client.enqueue(job, { n: 21 })
  const store = yield* RunStore
  let run = yield* store.get(id)
  while (run.state !== "completed") run = yield* Effect.andThen(Effect.sleep("100 millis"), store.get(id))
  yield* Fiber.interrupt(running)
  return run
}).pipe(Effect.timeout("30 seconds"))

if (import.meta.main) {
  const direct = Effect.map(
    Database.resolveUrl({ fallback: EmbeddedPostgres.url() }),
    (url) => ({ direct: url, pooled: process.env.POOLED_URL || url })
  )
  const main = Effect.flatMap(direct, ({ direct, pooled }) => program.pipe(Effect.provide(pooledStore(pooled, direct))))
  Effect.runPromise(Effect.scoped(main)).then((run) => {
    console.log(`run ${run.id} ${run.state} through the pooled client, result ${JSON.stringify(run.result)}`)
    if (run.result !== 42) process.exitCode = 1
  }, (error) => {
    console.error(`pooler example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
