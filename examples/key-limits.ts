/**
 * Per-key concurrency, as the per-key limits guide shows it: at most one refund per customer at a
 * time, across every worker, while other customers' refunds go on.
 *
 * Run it from the clone's root: `node examples/key-limits.ts`. It uses `DATABASE_URL`, or starts an
 * embedded PostgreSQL in a temporary folder. Two workers drain twelve refunds of three customers;
 * the program exits 0 once every refund completed, no customer ever had two running at once, and
 * more than one customer's refund ran at the same time.
 */
import { Client, Handler, KeyLimits, RunStore, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Layer, Schema } from "effect"

const running = new Map<string, number>()
let mostAtOnce = 0
let mostCustomersAtOnce = 0

const refund = Handler.make({
  kind: "refund",
  payload: Schema.Struct({ order: Schema.String, customer: Schema.String }),
  handle: ({ customer }) =>
    Effect.gen(function*() {
      running.set(customer, (running.get(customer) ?? 0) + 1)
      mostAtOnce = Math.max(mostAtOnce, running.get(customer)!)
      mostCustomersAtOnce = Math.max(mostCustomersAtOnce, [...running.values()].filter((n) => n > 0).length)
      yield* Effect.sleep("150 millis")
    }).pipe(Effect.ensuring(Effect.sync(() => running.set(customer, running.get(customer)! - 1))))
})

// At most one refund per customer at a time, across every worker; other customers' refunds go on.
const refunds = Worker.run({ handlers: [refund], keyLimits: [KeyLimits.perKind("refund", 1)] })
const refundForCustomer = (order: string, customer: string) =>
  Client.enqueue(refund, { order, customer }, { concurrencyKey: customer })

export const program = Effect.gen(function*() {
  const workers = [yield* Effect.forkChild(refunds), yield* Effect.forkChild(refunds)]
  const store = yield* RunStore
  // A worker declares its limits before its first claim; this program waits for that to enqueue.
  let limits = yield* store.keyLimits // what `leasehold limits list` shows
  while (limits.length === 0) limits = yield* Effect.andThen(Effect.sleep("50 millis"), store.keyLimits)
  const ids: Array<string> = []
  for (let i = 0; i < 12; i++) ids.push((yield* refundForCustomer(`A-${i}`, `customer-${i % 3}`)).id)
  while (true) {
    const runs = yield* Effect.forEach(ids, (id) => store.get(id))
    if (runs.every((run) => run.state === "completed")) break
    yield* Effect.sleep("100 millis")
  }
  yield* Effect.forEach(workers, Fiber.interrupt)
  return { limits, mostAtOnce, mostCustomersAtOnce }
}).pipe(Effect.timeout("60 seconds"))

if (import.meta.main) {
  const StoreLive = PgRunStore.layer({ schema: "leasehold" }).pipe(
    Layer.provideMerge(Database.layer({ fallback: EmbeddedPostgres.url() }))
  )
  Effect.runPromise(program.pipe(Effect.provide(StoreLive))).then(({ limits, mostAtOnce, mostCustomersAtOnce }) => {
    const limit = limits.map((l) => `${l.scope} ${l.name}: ${l.perKey} per key`).join(", ")
    console.log(
      `limit ${limit}; at most ${mostAtOnce} refund per customer at once, ${mostCustomersAtOnce} customers at once`
    )
    if (mostAtOnce !== 1 || mostCustomersAtOnce < 2) process.exitCode = 1
  }, (error) => {
    console.error(`key-limits example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
