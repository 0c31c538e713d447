/** Runs workers inside a test's scope and records what they do. */
import { RunStore, Worker, type WorkerEvents, WorkerEvents as Events } from "@leasehold/core"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { SqlClient as SqlClientService } from "effect/sql"

export type Event = WorkerEvents.WorkerEvent

/** Starts a worker in the current scope (interrupted, gracefully, when the scope closes). */
export const startWorker = <R>(
  store: RunStore["Service"],
  sql: SqlClient.SqlClient,
  options: Worker.WorkerOptions<R>,
  events: Array<Event> = []
) =>
  Worker.run(options).pipe(
    Effect.provideService(RunStore, store),
    Effect.provideService(SqlClientService.SqlClient, sql),
    Effect.provideService(Events.WorkerEvents, { emit: (event) => Effect.sync(() => void events.push(event)) }),
    (effect) => effect as Effect.Effect<never>,
    Effect.forkScoped,
    Effect.as(events)
  )

/** A store that records every renewal the worker sends, before sending it. */
export const spyOnRenewals = (store: RunStore["Service"]) => {
  const renewals: Array<ReadonlyArray<{ runId: string; fence: number }>> = []
  let failing = false
  const spy: RunStore["Service"] = {
    ...store,
    renew: (owner, leases, ttl) =>
      Effect.suspend(() => {
        renewals.push(leases)
        return failing ? Effect.die(new Error("renewal refused by the test")) : store.renew(owner, leases, ttl)
      })
  }
  return { spy, renewals, failRenewals: () => void (failing = true) }
}

/**
 * Polls until `check` holds, on the real clock. On timeout the error carries what `detail` reads
 * then (the run's row and history, the worker's last events), so a failure seen only in a CI log
 * says where things stood.
 */
export const eventually = <A>(
  what: string,
  check: Effect.Effect<A | undefined | false, any>,
  timeout: Duration.Input = "10 seconds",
  detail?: Effect.Effect<string, any>
): Effect.Effect<A> =>
  Effect.gen(function*() {
    const deadline = Date.now() + Duration.toMillis(Duration.fromInputUnsafe(timeout))
    while (true) {
      const value = yield* Effect.orDie(check)
      if (value !== undefined && value !== false) return value as A
      if (Date.now() > deadline) {
        const seen = detail === undefined
          ? ""
          : `\n${yield* Effect.orElseSucceed(detail, () => "(the detail could not be read)")}`
        return yield* Effect.die(new Error(`timed out waiting for: ${what}${seen}`))
      }
      yield* Effect.sleep("20 millis")
    }
  })

/**
 * Expires a run's lease and claims it for `owner` through `store`, again until the claim wins:
 * a holder that heartbeats may renew between the expiry and the claim.
 */
export const takeOver = (
  store: RunStore["Service"],
  expire: Effect.Effect<unknown, any>,
  claim: { readonly owner: string; readonly kind: string; readonly queue?: string }
) =>
  eventually(
    `reclaimed by ${claim.owner}`,
    Effect.gen(function*() {
      yield* Effect.orDie(expire)
      const [claimed] = yield* store.claim({
        owner: claim.owner,
        queues: [claim.queue ?? "default"],
        kinds: [claim.kind],
        limit: 1,
        ttl: Duration.minutes(1)
      })
      return claimed
    })
  )
