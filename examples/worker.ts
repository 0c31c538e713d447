/**
 * A worker's options and the store's, as the worker guide shows them: timings, retries, a paused
 * queue, a run's history, and a store that deletes completed runs.
 *
 * Run it from the clone's root: `node examples/worker.ts`. It uses `DATABASE_URL`, or starts an
 * embedded PostgreSQL in a temporary folder, and exits 0 once everything it shows held.
 */
import { Client, Handler, RunStore, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Schema } from "effect"

const sendEmail = Handler.make({
  kind: "send-email",
  payload: Schema.Struct({ to: Schema.String }),
  handle: ({ to }) => Effect.log(`sending to ${to}`)
})

// Every option has a default; these are the ones a deployment usually sets.
const worker = Worker.run({
  handlers: [sendEmail],
  queues: ["email", "default"], // the queues it claims from
  concurrency: 50, // runs at once
  ttl: "30 seconds", // a lease not renewed for this long may be reclaimed
  heartbeat: "10 seconds", // at most ttl / 2
  pollInterval: "1 second", // the sweep for expired leases and passed deadlines
  shutdownGrace: "10 seconds", // in-flight runs may finish before they are released
  retry: { base: "1 second", max: "5 minutes" }, // exponential backoff with jitter
  maxCompletionBatch: 500 // completions written per statement
})

// The store: `completedRuns: "delete"` deletes each completed run and its history in the
// completion's own statement (runs with an idempotency key, failed and cancelled runs are kept).
const LeanStore = PgRunStore.layer({ schema: "leasehold_lean", completedRuns: "delete", runtimeConnections: 4 })

const stateOf = (runId: string) => RunStore.use((store) => Effect.map(store.get(runId), (run) => run.state))

const until = <A>(check: Effect.Effect<A, unknown, RunStore>, done: (a: A) => boolean) =>
  Effect.gen(function*() {
    while (true) {
      const value = yield* check
      if (done(value)) return value
      yield* Effect.sleep("100 millis")
    }
  }).pipe(Effect.timeout("30 seconds"))

/** A paused queue holds its runs back; resumed, they run; the history shows the claim and completion. */
export const pausing = Effect.gen(function*() {
  yield* Client.pauseQueue("email") // no claim takes anything from it until resumed
  const running = yield* Effect.forkChild(worker)
  const { id } = yield* Client.enqueue(sendEmail, { to: "ana@example.com" }, { queue: "email" })
  yield* Effect.sleep("1500 millis")
  const whilePaused = yield* stateOf(id)
  yield* Client.resumeQueue("email") // wakes idle workers at once
  yield* until(stateOf(id), (state) => state === "completed")
  const history = yield* RunStore.use((store) => store.history(id))
  yield* Fiber.interrupt(running)
  return { whilePaused, history: history.map((event) => `${event.kind}@${event.fence}`) }
})

/** With completed runs deleted, a completed run is gone: reading it is RunNotFound. */
export const deleting = Effect.gen(function*() {
  const running = yield* Effect.forkChild(worker)
  const { id } = yield* Client.enqueue(sendEmail, { to: "sam@example.com" })
  const gone = yield* until(
    RunStore.use((store) => Effect.match(store.get(id), { onFailure: (e) => e._tag, onSuccess: (run) => run.state })),
    (state) => state === "RunNotFound"
  )
  yield* Fiber.interrupt(running)
  return gone
})

if (import.meta.main) {
  const database = Database.layer({ fallback: EmbeddedPostgres.url() })
  const program = Effect.gen(function*() {
    const paused = yield* pausing.pipe(Effect.provide(PgRunStore.layer({ schema: "leasehold" })))
    const deleted = yield* deleting.pipe(Effect.provide(LeanStore))
    return { paused, deleted }
  })
  Effect.runPromise(program.pipe(Effect.provide(database))).then(({ deleted, paused }) => {
    console.log(`while its queue was paused the run was ${paused.whilePaused}; history ${paused.history.join(", ")}`)
    console.log(`with completed runs deleted, reading a completed run is ${deleted}`)
    if (
      paused.whilePaused !== "pending" || paused.history.join(" ") !== "claimed@1 completed@1" ||
      deleted !== "RunNotFound"
    ) {
      process.exitCode = 1
    }
  }, (error) => {
    console.error(`worker example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
