/**
 * `leasehold demo`: a worker processes sample runs on the configured database (the embedded one by
 * default), including an agent-style run that suspends for approval, holds no worker while it
 * waits, and is approved. Exits 0 only if every run completed exactly once.
 */
import { Client, RunStore, Worker } from "@leasehold/core"
import { Duration, Effect } from "effect"
import { Command } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, DemoFailed } from "../Flags.js"
import { approveRefund, handlers, resize } from "../SampleTasks.js"

const line = (text: string) => Effect.sync(() => process.stdout.write(text + "\n"))

const waitFor = <A, E>(what: string, check: Effect.Effect<A | undefined, E, RunStore>) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 30_000
    while (Date.now() < deadline) {
      const value = yield* check
      if (value !== undefined) return value
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.fail(new DemoFailed({ message: `timed out waiting for ${what}` }))
  })

export const demo = Command.make("demo", connectionFlags, (flags) =>
  Connection.withStore(
    { ...flags, schema: flags.schema === "leasehold" ? `demo_${Date.now().toString(36)}` : flags.schema },
    Effect.gen(function*() {
      const store = yield* RunStore
      yield* line("Leasehold demo: leased, fenced runs on PostgreSQL")
      const jobs = yield* Effect.forEach(
        ["cat.png", "dog.png", "owl.png", "fox.png", "elk.png"],
        (image, i) => Client.enqueue(resize, { image, width: 320 + i * 10 })
      )
      const refund = yield* Client.enqueue(approveRefund, { order: "A-1001", amount: 42 })
      yield* line(`enqueued ${jobs.length} image jobs and 1 refund that needs approval (run ${refund.id})`)

      yield* Effect.forkScoped(Worker.run({ handlers, concurrency: 2, ttl: "5 seconds", pollInterval: "100 millis" }))
      const suspended = yield* waitFor("the refund to suspend", Effect.map(store.get(refund.id), (r) => r.state === "suspended" ? r : undefined))
      yield* line(`run ${refund.id} suspended for "${suspended.signalName}": owner=${suspended.leaseOwner ?? "none"}, fence=${suspended.fence} (it holds no worker slot while it waits)`)
      yield* Effect.sleep(Duration.millis(300))
      yield* Client.resume(`refund-${"A-1001"}`, { approved: true, by: "ana@example.com" })
      yield* line(`a person approved it (token refund-A-1001)`)
      const done = yield* waitFor("all runs to complete", Effect.map(store.list({ limit: 100, offset: 0 }), (runs) => runs.every((r) => r.state === "completed") ? runs : undefined))

      yield* line("")
      yield* line("run  kind            state      fence  attempt")
      for (const run of [...done].reverse()) {
        yield* line(`${run.id.padEnd(4)} ${run.kind.padEnd(15)} ${run.state.padEnd(10)} ${String(run.fence).padEnd(6)} ${run.attempt}`)
      }
      const history = yield* store.history(refund.id)
      yield* line("")
      yield* line(`history of run ${refund.id}: ${history.map((e) => `${e.kind}@${e.fence}`).join(" -> ")}`)
      const refundRecord = yield* store.get(refund.id)
      if (refundRecord.fence !== 2) return yield* Effect.fail(new DemoFailed({ message: `expected the resumed run under fence 2, got ${refundRecord.fence}` }))
      const completions = history.filter((e) => e.kind === "completed").length
      if (completions !== 1) return yield* Effect.fail(new DemoFailed({ message: `run ${refund.id} completed ${completions} times` }))
      yield* line(`all ${done.length} runs completed exactly once; the resumed run was re-claimed under a higher fence (1 -> 2)`)
    })
  )).pipe(Command.withDescription("Show leases, suspension and fences at work on sample runs"))
