/**
 * What an operator reads: the worker's log lines through Effect's `Logger` (start, stop, each
 * failed attempt with its error; an application's own logger receives them), the CLI worker's
 * text output (no line per empty poll, a failed attempt's error shown), the attempt a suspended
 * run's handler saw as `runs list` and `runs show` print it, and a worker stopped (SIGSTOP) past
 * its leases' TTL stopping them as deadline losses instead of a renewal bounded at 1 ms.
 */
import { assert, describe, it } from "@effect/vitest"
import { Handler, MemoryRunStore, RunStore, Worker, WorkerEvents } from "@leasehold/core"
import * as WorkerProcess from "@leasehold/testing/WorkerProcess"
import { Clock, Effect, Fiber, Logger, Schema } from "effect"
import { TestClock } from "effect/testing"
import { fileURLToPath } from "node:url"
import { background, connection, leasehold } from "./support/cli.js"
import { databaseUrl } from "./support/db.js"
import { readRun, twoStores } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

class Declined extends Schema.TaggedError<Declined>()("Declined", { reason: Schema.String }) {}

const charge = Handler.make({
  kind: "charge",
  payload: Schema.Struct({ order: Schema.String }),
  handle: ({ order }) => Effect.fail(new Declined({ reason: `no funds for ${order}` }))
})

const failingTasks = fileURLToPath(new URL("./fixtures/failing-tasks.ts", import.meta.url))

describe("worker logs", () => {
  it.live("Worker.run logs one line at start (owner, queues, concurrency), one per failed attempt with its error, one at stop, to the application's Logger", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const lines: Array<{ level: string; text: string }> = []
      const capture = Logger.make(({ logLevel, message }) => {
        const parts = Array.isArray(message) ? message : [message]
        lines.push({ level: logLevel, text: parts.map(String).join(" ") })
      })
      const [run] = yield* stores.a.enqueue([{ kind: "charge", payload: { order: "o-7" }, maxAttempts: 2 }])
      yield* Effect.scoped(Effect.gen(function*() {
        yield* startWorker(stores.a, stores.sql, {
          handlers: [charge],
          owner: "logger-test",
          queues: ["default", "other"],
          concurrency: 3,
          pollInterval: "50 millis",
          retry: { base: "10 millis", max: "10 millis" }
        })
        yield* eventually("the run failed for good", Effect.map(readRun(stores, run!.id), (r) => r.state === "failed"))
      })).pipe(Effect.provide(Logger.layer([capture])))

      assert.deepStrictEqual(lines[0], {
        level: "Info",
        text: "leasehold worker logger-test started: queues default, other, concurrency 3"
      })
      const failures = lines.filter((l) => l.text.startsWith(`run ${run!.id} `))
      assert.strictEqual(failures.length, 2, JSON.stringify(lines))
      assert.strictEqual(failures[0]!.level, "Warn")
      assert.match(
        failures[0]!.text,
        new RegExp(
          `^run ${
            run!.id
          } \\(charge\\) attempt 1/2 failed: Declined: \\{"reason":"no funds for o-7"\\}; retry in \\d+ms$`
        )
      )
      assert.strictEqual(failures[1]!.level, "Error")
      assert.match(
        failures[1]!.text,
        new RegExp(
          `^run ${
            run!.id
          } \\(charge\\) attempt 2/2 failed: Declined: \\{"reason":"no funds for o-7"\\}; the run has failed$`
        )
      )
      assert.deepStrictEqual(lines.at(-1), { level: "Info", text: "leasehold worker logger-test stopped" })
    }))

  it.live("the CLI worker's text output: no line for an empty poll, each failed attempt with its error, start and stop; --json stays one JSON object per line", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const args = ["--tasks", failingTasks, ...connection(stores.schema)]
      const enqueued = yield* leasehold([
        "enqueue",
        "charge",
        "--payload",
        `{"order":"o-1"}`,
        "--max-attempts",
        "2",
        ...args
      ])
      assert.strictEqual(enqueued.code, 0, enqueued.stderr)
      const id = /enqueued run (\d+)/.exec(enqueued.stdout)![1]!
      const text = yield* background(["worker", ...args])
      yield* eventually("failed", Effect.map(readRun(stores, id), (r) => r.state === "failed"), "20 seconds")
      // Idle polls for a while: each one a claim that took nothing.
      yield* Effect.sleep("2500 millis")
      text.child.kill("SIGTERM")
      const out = (yield* Effect.promise(() => text.exited)).stdout
      assert.notMatch(out, /ClaimBatch \{"count":0/, "no line per empty poll")
      assert.match(out, /^INFO leasehold worker \S+ started: queues default, concurrency 10$/m)
      assert.match(
        out,
        new RegExp(
          `^WARN run ${id} \\(charge\\) attempt 1/2 failed: CardDeclined: card declined: insufficient funds for o-1; retry in .+$`,
          "m"
        )
      )
      assert.match(
        out,
        new RegExp(
          `^ERROR run ${id} \\(charge\\) attempt 2/2 failed: CardDeclined: card declined: insufficient funds for o-1; the run has failed$`,
          "m"
        )
      )
      assert.match(out, /^INFO leasehold worker \S+ stopped\n$/m)

      const json = yield* background(["worker", "--json", ...args])
      let seen = ""
      json.child.stdout!.on("data", (chunk) => void (seen += String(chunk)))
      yield* eventually(
        "a claim after the start line",
        Effect.sync(() => seen.includes(`"_tag":"ClaimBatch"`)),
        "20 seconds"
      )
      json.child.kill("SIGTERM")
      const lines = (yield* Effect.promise(() => json.exited)).stdout.trim().split("\n")
      const parsed = lines.map((l) => JSON.parse(l) as { _tag: string; level?: string; message?: string })
      assert.deepInclude(parsed[0], { _tag: "Log", level: "Info" })
      assert.match(parsed[0]!.message!, /^leasehold worker \S+ started/)
      assert.isTrue(parsed.some((e) => e._tag === "ClaimBatch"), "--json keeps every event")
    }))

  it.live("a suspended run shows the attempt its handler saw (1 of 5) in runs list and runs show, not the attempt given back while it waits", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const args = connection(stores.schema)
      const enqueued = yield* leasehold([
        "enqueue",
        "approve-refund",
        "--payload",
        `{"order":"A-1","amount":5}`,
        ...args
      ])
      const id = /enqueued run (\d+)/.exec(enqueued.stdout)![1]!
      const worker = yield* background(["worker", "--json", ...args])
      yield* eventually("suspended", Effect.map(readRun(stores, id), (r) => r.state === "suspended"), "20 seconds")
      worker.child.kill("SIGTERM")
      const events = (yield* Effect.promise(() => worker.exited)).stdout.trim().split("\n").map((l) => JSON.parse(l))
      const claimed = events.find((e) => e._tag === "Claimed" && e.runId === id)
      assert.strictEqual(claimed.attempt, 1, "the attempt the handler ran as")

      const list = (yield* leasehold(["runs", "list", ...args])).stdout
      assert.match(list, new RegExp(`^${id}\\s+approve-refund\\s+default\\s+suspended\\s+1\\s+1/5\\s`, "m"))
      const shown = (yield* leasehold(["runs", "show", id, ...args])).stdout
      assert.match(shown, /^attempt\s+1 of 5$/m)
      const json = JSON.parse((yield* leasehold(["runs", "show", id, "--json", ...args])).stdout)
      assert.strictEqual(json.run.attempt, 1)
    }))

  it.effect("a heartbeat that wakes after its lease's local deadline (the process was stopped longer than the TTL) stops the run as a deadline loss and sends no renewal for it", () =>
    Effect.gen(function*() {
      const store = yield* MemoryRunStore.make
      const events: Array<WorkerEvents.WorkerEvent> = []
      // The worker's clock, whose monotonic time can skip ahead as a stopped process's does when
      // it continues (the store's wall clock, which decides the lease, does not move).
      const base = yield* Clock.Clock
      let skipped = 0n
      const stoppable: Clock.Clock = {
        currentTimeMillisUnsafe: () => base.currentTimeMillisUnsafe(),
        currentTimeMillis: Effect.sync(() => base.currentTimeMillisUnsafe()),
        currentTimeNanosUnsafe: () => base.currentTimeNanosUnsafe(),
        currentTimeNanos: Effect.sync(() => base.currentTimeNanosUnsafe()),
        monotonicTimeNanosUnsafe: () => base.monotonicTimeNanosUnsafe() + skipped,
        monotonicTimeNanos: Effect.sync(() => base.monotonicTimeNanosUnsafe() + skipped),
        sleep: (duration) => base.sleep(duration)
      }
      const forever = Handler.make({ kind: "forever", payload: Schema.Unknown, handle: () => Effect.never })
      const [run] = yield* store.enqueue([{ kind: "forever", payload: null }])
      const fiber = yield* Worker.run({ handlers: [forever], owner: "w", ttl: "3 seconds", heartbeat: "1 second" })
        .pipe(
          Effect.provideService(RunStore, store),
          Effect.provideService(WorkerEvents.WorkerEvents, {
            emit: (event) => Effect.sync(() => void events.push(event))
          }),
          Effect.provideService(Clock.Clock, stoppable),
          Effect.forkDetach
        )
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow
      assert.isTrue(events.some((e) => e._tag === "Claimed" && e.runId === run!.id))
      // 10 seconds pass unseen; then the heartbeat's timer, due first, fires.
      const stoppedAt = events.length
      skipped = 10_000_000_000n
      yield* TestClock.adjust("1 second")
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow
      const after = events.slice(stoppedAt)
      const lost = after.filter((e) => e._tag === "LeaseLost")
      assert.deepStrictEqual(lost.map((e) => [e.runId, e.reason]), [[run!.id, "deadline"]])
      assert.deepStrictEqual(
        after.filter((e) => e._tag === "HeartbeatSent" || e._tag === "HeartbeatFailed").map((e) => e._tag),
        []
      )
      yield* Fiber.interrupt(fiber).pipe(Effect.forkDetach)
    }))

  it.live("a worker stopped (SIGSTOP) past its lease's TTL stops the run as a deadline loss on waking; no renewal is sent for it", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* stores.sql.unsafe(WorkerProcess.createEffectsTable(`"${stores.schema}".effects`))
      const [run] = yield* stores.a.enqueue([{ kind: "long-step", payload: {} }])
      const worker = yield* Effect.acquireRelease(
        Effect.promise(() =>
          WorkerProcess.start({
            owner: "stopped",
            databaseUrl: databaseUrl(),
            schema: stores.schema,
            ttl: "1 second",
            heartbeat: "300 millis"
          })
        ),
        (w) => Effect.promise(() => w.kill())
      )
      yield* Effect.promise(() => worker.waitFor("claimed", (r) => r._tag === "Claimed" && r.runId === run!.id, 20_000))
      yield* Effect.promise(() =>
        worker.waitFor("a renewal confirmed", (r) => r._tag === "HeartbeatConfirmed" && r.renewed.length > 0)
      )
      worker.signal("SIGSTOP")
      yield* Effect.sleep("2500 millis")
      const before = worker.reports.length
      worker.signal("SIGCONT")
      const lost = yield* Effect.promise(() =>
        worker.waitFor("the lease lost", (r) => r._tag === "LeaseLost" && r.runId === run!.id)
      )
      assert.strictEqual(lost.reason, "deadline")
      // Give the heartbeat a round after waking.
      yield* Effect.sleep("700 millis")
      const after = worker.reports.slice(before)
      assert.deepStrictEqual(
        after.filter((r) => r._tag === "HeartbeatFailed"),
        [],
        "no renewal failed (none bounded at 1 ms)"
      )
      assert.isFalse(
        after.some((r) =>
          r._tag === "HeartbeatSent" &&
          r.leases.some((l: { runId: string; fence: number }) => l.runId === run!.id && l.fence === lost.fence)
        ),
        "no renewal sent for a lease past its deadline"
      )
    }))
})
