/**
 * Handlers, as the handlers guide shows them: what a handler reads from the worker (`Fence`,
 * `CurrentRun`), a checkpoint that survives a retry, a result schema, and a result that cannot be
 * stored failing its own run with `UnstorableValue`.
 *
 * Run it from the clone's root: `node examples/handlers.ts`. It uses `DATABASE_URL`, or starts an
 * embedded PostgreSQL in a temporary folder, and exits 0 once every run ended as it should.
 */
import { Client, CurrentRun, Fence, Handler, Run, RunStore, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Layer, Schema } from "effect"

// What a handler can read: the claim it runs under, and the run as it was claimed.
const resize = Handler.make({
  kind: "resize-image",
  payload: Schema.Struct({ url: Schema.String, width: Schema.Number }),
  handle: ({ url, width }) =>
    Effect.gen(function*() {
      const { fence, runId } = yield* Fence
      const run = yield* CurrentRun // kind, queue, attempt, maxAttempts, last checkpoint, signals
      if (run.checkpoint === null) {
        yield* Run.checkpoint({ downloaded: url }) // fenced: refused once another claim supersedes this one
        if (run.attempt === 1) return yield* Effect.fail("the image server timed out") // retried with backoff
      }
      return { runId, fence, attempt: run.attempt, width }
    })
})

// A result schema: the result is stored encoded, as Effect's workflow activities store theirs.
const quote = Handler.make({
  kind: "quote",
  payload: Schema.Struct({ sku: Schema.String }),
  result: Schema.Struct({ cents: Schema.BigIntFromString }), // stored as {"cents":"1999"}
  handle: ({ sku }) => Effect.succeed({ cents: sku.length > 3 ? 1999n : 999n })
})

// No schema for a BigInt: JSON cannot hold it, so this run alone fails, at once, with UnstorableValue.
const unstorable = Handler.make({
  kind: "unstorable",
  payload: Schema.Struct({}),
  handle: () => Effect.succeed({ cents: 1999n })
})

const StoreLive = PgRunStore.layer({ schema: "leasehold" }).pipe(
  Layer.provideMerge(Database.layer({ fallback: EmbeddedPostgres.url() }))
)

const ended = (runId: string) =>
  RunStore.use((store) =>
    Effect.gen(function*() {
      while (true) {
        const run = yield* store.get(runId)
        if (run.state === "completed" || run.state === "failed") return run
        yield* Effect.sleep("100 millis")
      }
    })
  ).pipe(Effect.timeout("30 seconds"))

export const program = Effect.gen(function*() {
  const worker = yield* Effect.forkChild(Worker.run({
    handlers: [resize, quote, unstorable],
    retry: { base: "200 millis", max: "1 second" } // the backoff between attempts
  }))
  const resized = yield* Client.enqueue(resize, { url: "https://example.com/cat.png", width: 640 })
  const quoted = yield* Client.enqueue(quote, { sku: "BOOK-1" })
  const refused = yield* Client.enqueue(unstorable, {})
  const runs = {
    resized: yield* ended(resized.id),
    quoted: yield* ended(quoted.id),
    refused: yield* ended(refused.id)
  }
  yield* Fiber.interrupt(worker)
  return runs
})

if (import.meta.main) {
  Effect.runPromise(program.pipe(Effect.provide(StoreLive))).then(({ quoted, refused, resized }) => {
    console.log(`resize-image: ${resized.state}, attempt ${resized.attempt}, result ${JSON.stringify(resized.result)}`)
    console.log(`quote: ${quoted.state}, stored result ${JSON.stringify(quoted.result)}`)
    console.log(`unstorable: ${refused.state}, attempt ${refused.attempt}: ${JSON.stringify(refused.error)}`)
    const ok = resized.state === "completed" && resized.attempt === 2 && quoted.state === "completed" &&
      JSON.stringify(quoted.result) === `{"cents":"1999"}` && refused.state === "failed" && refused.attempt === 1
    if (!ok) process.exitCode = 1
  }, (error) => {
    console.error(`handlers example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
