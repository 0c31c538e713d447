/**
 * Recurring runs, as the schedules guide shows them: a daily report at 06:00 in Paris, and a
 * per-second tick to watch one run per tick happen.
 *
 * Run it from the clone's root: `node examples/schedules.ts`. It uses `DATABASE_URL`, or starts an
 * embedded PostgreSQL in a temporary folder. A worker registers both schedules and ticks them for
 * about three seconds; the program exits 0 once each per-second tick it saw yielded exactly one run
 * and the daily report's next tick is 06:00 Paris time.
 */
import { Handler, RunStore, Schedules, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Layer, Schema } from "effect"

// The run's payload is the schedule's, with the tick it is for: { format, tick: { schedule, at, backfilled } }.
const dailyReport = Handler.make({
  kind: "daily-report",
  payload: Schema.Struct({
    format: Schema.String,
    tick: Schema.Struct({ at: Schema.String, backfilled: Schema.Boolean })
  }),
  handle: ({ format, tick }) => Effect.log(`report (${format}) for ${tick.at}${tick.backfilled ? ", late" : ""}`)
})

const reports = Worker.run({
  handlers: [dailyReport],
  schedules: [{
    name: "daily-report",
    cron: "0 6 * * *",
    timeZone: "Europe/Paris",
    kind: "daily-report",
    payload: { format: "pdf" },
    missed: "once"
  }]
})

// Six fields: seconds first. Every second, one run, however many workers tick.
const pulse = Handler.make({
  kind: "pulse",
  payload: Schema.Struct({ tick: Schema.Struct({ at: Schema.String }) }),
  handle: ({ tick }) => Effect.log(`pulse for ${tick.at}`)
})
const pulses: Schedules.ScheduleDefinition = { name: "pulse", cron: "* * * * * *", kind: "pulse" }

export const program = Effect.gen(function*() {
  const running = yield* Effect.forkChild(reports)
  // A second worker, ticking the same store: a tick is one run whoever fires it.
  const ticking = yield* Effect.forkChild(Worker.run({ handlers: [dailyReport, pulse], schedules: [pulses] }))
  yield* Effect.sleep("3500 millis")
  yield* Fiber.interrupt(ticking)
  yield* Fiber.interrupt(running)
  const store = yield* RunStore
  const runs = yield* store.list({ kind: "pulse", limit: 100 })
  const schedules = yield* store.schedules
  return {
    pulseRuns: runs.length,
    pulseTicks: new Set(runs.map((run) => JSON.stringify((run.payload as { tick: unknown }).tick))).size,
    daily: schedules.find((s) => s.name === "daily-report")!
  }
})

if (import.meta.main) {
  const StoreLive = PgRunStore.layer({ schema: "leasehold" }).pipe(
    Layer.provideMerge(Database.layer({ fallback: EmbeddedPostgres.url() }))
  )
  Effect.runPromise(program.pipe(Effect.provide(StoreLive))).then(({ daily, pulseRuns, pulseTicks }) => {
    const paris = daily.nextTick.toLocaleTimeString("en-GB", { timeZone: "Europe/Paris" })
    console.log(
      `pulse: ${pulseRuns} runs for ${pulseTicks} ticks; daily-report's next tick ${daily.nextTick.toISOString()} (${paris} in Paris)`
    )
    if (pulseRuns < 2 || pulseRuns !== pulseTicks || paris !== "06:00:00") process.exitCode = 1
  }, (error) => {
    console.error(`schedules example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
