/**
 * Rate limits, as the per-key limits guide shows them: at most 3 calls a second per tenant to a
 * partner's API, across every worker, however quickly each call returns.
 *
 * Run it from the clone's root: `node examples/rate-limits.ts`. It uses `DATABASE_URL`, or starts an
 * embedded PostgreSQL in a temporary folder. Two workers drain six syncs of each of two tenants;
 * the program exits 0 once every sync completed and no second saw more than 3 starts of a tenant,
 * by the claim times the database recorded.
 */
import { Client, Handler, RateLimits, RunStore, Worker } from "@leasehold/core"
import { EmbeddedPostgres } from "@leasehold/embedded"
import { Database, PgRunStore } from "@leasehold/sql"
import { Effect, Fiber, Layer, Schema } from "effect"

const sync = Handler.make({
  kind: "sync-tenant",
  payload: Schema.Struct({ tenant: Schema.String, page: Schema.Number }),
  handle: ({ page, tenant }) => Effect.succeed({ tenant, page }) // a fast call: only the limit spaces them
})

// At most 3 syncs started per second per tenant, across every worker; other tenants have their own.
const syncs = Worker.run({
  handlers: [sync],
  rateLimits: [RateLimits.perKind("sync-tenant", 3, "1 second", { perKey: true })]
})
const syncTenant = (tenant: string, page: number) => Client.enqueue(sync, { tenant, page }, { concurrencyKey: tenant })

export const program = Effect.gen(function*() {
  const workers = [yield* Effect.forkChild(syncs), yield* Effect.forkChild(syncs)]
  const store = yield* RunStore
  // A worker declares its limits before its first claim; this program waits for that to enqueue.
  while ((yield* store.rateLimits).length === 0) yield* Effect.sleep("50 millis")
  const ids: Array<{ id: string; tenant: string }> = []
  for (let page = 0; page < 6; page++) {
    for (const tenant of ["tenant-0", "tenant-1"]) ids.push({ id: (yield* syncTenant(tenant, page)).id, tenant })
  }
  while (!(yield* Effect.forEach(ids, ({ id }) => store.get(id))).every((run) => run.state === "completed")) {
    yield* Effect.sleep("100 millis")
  }
  const limits = yield* store.rateLimits // what `leasehold limits list` shows
  yield* Effect.forEach(workers, Fiber.interrupt)
  // Each run's start, as the database recorded its claim.
  const starts = yield* Effect.forEach(
    ids,
    ({ id, tenant }) =>
      Effect.map(store.history(id), (events) => ({
        tenant,
        at: events.find((e) => e.kind === "claimed")!.at.getTime()
      }))
  )
  const busiest = Math.max(
    ...starts.map((s) => starts.filter((o) => o.tenant === s.tenant && o.at >= s.at && o.at < s.at + 1000).length)
  )
  return { limits, busiest }
}).pipe(Effect.timeout("60 seconds"))

if (import.meta.main) {
  const StoreLive = PgRunStore.layer({ schema: "leasehold" }).pipe(
    Layer.provideMerge(Database.layer({ fallback: EmbeddedPostgres.url() }))
  )
  Effect.runPromise(program.pipe(Effect.provide(StoreLive))).then(({ busiest, limits }) => {
    const limit = limits.map((l) =>
      `${l.scope} ${l.name}: ${l.limit} per ${l.intervalMs} ms${l.perKey ? " per key" : ""}`
    ).join(", ")
    console.log(`rate limit ${limit}; at most ${busiest} starts of a tenant in any second`)
    if (busiest !== 3) process.exitCode = 1
  }, (error) => {
    console.error(`rate-limits example failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
