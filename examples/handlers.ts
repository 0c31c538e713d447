/**
 * Handlers, as the handlers guide shows them: what a handler reads from the worker (`Fence`,
 * `CurrentRun`), a checkpoint that survives a retry, a result schema, and a result that cannot be
 * stored failing its own run with `UnstorableValue`, a handler that snoozes (`Run.snooze`), one
 * with its own retry policy (an Effect `Schedule`) whose log lines are kept with each failed
 * attempt, one that keeps its completed attempts' lines too (`keepLogs: "always"`); an attempt
 * timeout that stops a handler that hangs, and a run deadline across attempts.
 *
 * Run it from the clone's root: `node examples/handlers.ts`. It uses `DATABASE_URL`, or starts an
 * embedded PostgreSQL in a temporary folder, and exits 0 once every run ended as it should.
 */
import { AttemptLogs, Client, CurrentRun, Fence, Handler, Run, RunStore, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Layer, Schedule, Schema } from "effect"

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

// Not ready yet: try again in a while, without failing. A snooze does not count as an attempt.
const poll = Handler.make({
  kind: "poll-export",
  payload: Schema.Struct({ exportId: Schema.String }),
  maxAttempts: 1,
  handle: ({ exportId }) =>
    Effect.gen(function*() {
      const run = yield* CurrentRun
      if (run.checkpoint === null) {
        yield* Run.checkpoint({ asked: exportId })
        return yield* Run.snooze("300 millis") // due again at the database's now() + 300 ms
      }
      return { exportId, ready: true, attempt: run.attempt }
    })
})

// This kind's own retry policy, instead of the worker's backoff: two retries, 200 ms apart.
const charge = Handler.make({
  kind: "charge",
  payload: Schema.Struct({ card: Schema.String }),
  maxAttempts: 10,
  retry: Schedule.spaced("200 millis").pipe(Schedule.upTo({ times: 2 })),
  handle: ({ card }) =>
    Effect.logWarning("the bank said no").pipe(
      Effect.annotateLogs({ card }), // a failed attempt's log lines are kept with it (AttemptLogs)
      Effect.andThen(Effect.fail(`card ${card} declined`)) // fails after 3 attempts: the schedule ended
    )
})

// A completed attempt's log lines are kept too: up to its last 100 lines and 16 KiB of text.
const audit = Handler.make({
  kind: "audit",
  payload: Schema.Struct({ account: Schema.String }),
  keepLogs: "always", // default "failed": only a failed attempt's; "never": none
  handle: ({ account }) => Effect.logInfo(`audited ${account}`)
})

// An attempt that runs past 300 ms is interrupted, heartbeats or not, and fails with AttemptTimedOut:
// retried under the retry policy (here the worker's backoff) until maxAttempts.
const lookup = Handler.make({
  kind: "lookup-address",
  payload: Schema.Struct({ postcode: Schema.String }),
  maxAttempts: 2,
  attemptTimeout: "300 millis", // counted by the worker's own monotonic clock from the handler's start
  handle: () => Effect.never // a call that hangs
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
    handlers: [resize, quote, unstorable, poll, charge, audit, lookup],
    retry: { base: "200 millis", max: "1 second" } // the backoff between attempts
  }))
  const resized = yield* Client.enqueue(resize, { url: "https://example.com/cat.png", width: 640 })
  const quoted = yield* Client.enqueue(quote, { sku: "BOOK-1" })
  const refused = yield* Client.enqueue(unstorable, {})
  const polled = yield* Client.enqueue(poll, { exportId: "e-7" })
  const charged = yield* Client.enqueue(charge, { card: "4242" })
  const audited = yield* Client.enqueue(audit, { account: "acme" })
  const looked = yield* Client.enqueue(lookup, { postcode: "N1 9GU" })
  // A deadline across attempts, counted from the database's now(): past it the run fails for good,
  // its running attempt interrupted. An enqueue can also set its own attemptTimeoutMs.
  const late = yield* Client.enqueue(lookup, { postcode: "EC1A" }, { deadlineAfterMs: 500, attemptTimeoutMs: 5_000 })
  const runs = {
    resized: yield* ended(resized.id),
    quoted: yield* ended(quoted.id),
    refused: yield* ended(refused.id),
    polled: yield* ended(polled.id),
    charged: yield* ended(charged.id),
    audited: yield* ended(audited.id),
    looked: yield* ended(looked.id),
    late: yield* ended(late.id)
  }
  yield* Fiber.interrupt(worker)
  // Each attempt's kept lines, oldest claim first (what `leasehold runs show` and the console show).
  const logs = {
    charged: yield* RunStore.use((store) => store.attemptLogs(charged.id)),
    audited: yield* RunStore.use((store) => store.attemptLogs(audited.id))
  }
  return { ...runs, logs }
})

if (import.meta.main) {
  Effect.runPromise(program.pipe(Effect.provide(StoreLive))).then(
    ({ audited, charged, late, logs, looked, polled, quoted, refused, resized }) => {
      console.log(
        `resize-image: ${resized.state}, attempt ${resized.attempt}, result ${JSON.stringify(resized.result)}`
      )
      console.log(`quote: ${quoted.state}, stored result ${JSON.stringify(quoted.result)}`)
      console.log(`unstorable: ${refused.state}, attempt ${refused.attempt}: ${JSON.stringify(refused.error)}`)
      console.log(
        `poll-export: ${polled.state}, attempt ${polled.attempt} of ${polled.maxAttempts}, fence ${polled.fence}`
      )
      console.log(`charge: ${charged.state} after ${charged.attempt} of ${charged.maxAttempts} attempts`)
      for (const log of logs.charged) {
        console.log(`charge attempt ${log.attempt} (${log.outcome}): ${log.lines.map(AttemptLogs.lineText).join("; ")}`)
      }
      console.log(`audit: ${audited.state}, kept ${logs.audited.map((l) => l.lines.map((x) => x.message)).join()}`)
      const tagOf = (error: unknown) => (error as { tag?: string } | null)?.tag
      console.log(`lookup-address: ${looked.state} after ${looked.attempt} attempts, ${tagOf(looked.error)}`)
      console.log(
        `lookup-address with a deadline: ${late.state} after ${late.attempt} attempt, ${tagOf(late.error)}`
      )
      const ok = resized.state === "completed" && resized.attempt === 2 && quoted.state === "completed" &&
        JSON.stringify(quoted.result) === `{"cents":"1999"}` && refused.state === "failed" && refused.attempt === 1 &&
        polled.state === "completed" && polled.attempt === 1 && polled.fence === 2 &&
        charged.state === "failed" && charged.attempt === 3 && logs.charged.length === 3 &&
        logs.audited[0]?.outcome === "completed" && looked.state === "failed" && looked.attempt === 2 &&
        tagOf(looked.error) === "AttemptTimedOut" && late.state === "failed" && late.attempt === 1 &&
        tagOf(late.error) === "RunDeadlinePassed"
      if (!ok) process.exitCode = 1
    },
    (error) => {
      console.error(`handlers example failed: ${error instanceof Error ? error.message : String(error)}`)
      process.exitCode = 1
    }
  )
}
