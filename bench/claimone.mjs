import { RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Duration, Effect, Layer } from "effect"
const url = "postgres://postgres@127.0.0.1:5432/bench_leasehold_keyed_drain_18073_1"
const layer = PgRunStore.layer({ schema: "leasehold", migrate: false }).pipe(
  Layer.provideMerge(Database.clientLayer(url, { maxConnections: 2 }))
)
const prog = Effect.gen(function*() {
  const store = yield* RunStore
  const t = Date.now()
  const runs = yield* store.claim({
    owner: "x",
    queues: ["default"],
    kinds: ["noop"],
    limit: 2000,
    ttl: Duration.seconds(30),
    dueOnly: process.argv[2] === "due"
  })
  console.log(runs.length, Date.now() - t, "ms")
})
await Effect.runPromise(Effect.provide(prog, layer).pipe(Effect.timeout("20 seconds")))
