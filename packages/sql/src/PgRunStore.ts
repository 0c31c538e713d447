/**
 * The Postgres implementation of `RunStore`. Each operation is one statement from `statements/`
 * (a stale write costs a second one, to say why it was rejected).
 *
 * @since 0.1.0
 */
import { RunStore, type StoreNotification } from "@leasehold/core"
import { PgClient, PgConnection } from "@effect/sql-pg"
import { Cause, Effect, Layer, Queue } from "effect"
import * as Migrations from "./Migrations.js"
import * as admin from "./statements/admin.js"
import * as claimStatement from "./statements/claim.js"
import * as enqueueStatement from "./statements/enqueue.js"
import * as guarded from "./statements/guarded.js"
import * as read from "./statements/read.js"
import * as renewStatement from "./statements/renew.js"
import * as StoreSchema from "./StoreSchema.js"

/** @category models */
export interface PgRunStoreOptions {
  /** Postgres schema holding the tables. Default `leasehold`. */
  readonly schema?: string | undefined
  /** Run migrations when the layer is built. Default true. */
  readonly migrate?: boolean | undefined
}

const parseNotification = (payload: string): StoreNotification | undefined =>
  payload.startsWith("q:")
    ? { _tag: "RunsAvailable", queue: payload.slice(2) }
    : payload.startsWith("c:")
    ? { _tag: "RunCancelled", runId: payload.slice(2) }
    : undefined

/** Builds the store over the PgClient in context. @category constructors */
export const make = Effect.fnUntraced(function*(options: PgRunStoreOptions = {}) {
  const sql = yield* PgClient.PgClient
  const s = StoreSchema.make(options.schema)
  if (options.migrate ?? true) yield* Migrations.run(s)

  const notifications = Effect.gen(function*() {
    // A connection of its own, outside the pool: a listener holds its connection for as long as it
    // listens, and a pooled one would starve a small pool (a pool of one would deadlock).
    const connection = yield* PgConnection.make(sql.config)
    const source = yield* connection.listen(s.channel)
    const out = yield* Queue.unbounded<StoreNotification, any>()
    yield* Effect.forkScoped(
      Effect.forever(Effect.gen(function*() {
        const note = parseNotification((yield* Queue.take(source)).payload)
        if (note !== undefined) yield* Queue.offer(out, note)
      })).pipe(
        // A lost listening connection fails the queue; closing the scope just stops the pump.
        Effect.catchCause((cause) => Cause.hasInterruptsOnly(cause) ? Effect.void : Queue.failCause(out, cause as Cause.Cause<any>))
      )
    )
    return out as Queue.Dequeue<StoreNotification, any>
  })

  return RunStore.of({
    enqueue: (requests) => enqueueStatement.enqueue(sql, s, requests).pipe(Effect.withSpan("PgRunStore.enqueue")),
    claim: (request) => claimStatement.claim(sql, s, request),
    renew: (owner, leases, ttl) => renewStatement.renew(sql, s, owner, leases, ttl),
    completeBatch: (items) => guarded.completeBatch(sql, s, items),
    fail: (request) => guarded.fail(sql, s, request),
    release: (lease) => guarded.release(sql, s, lease),
    checkpoint: (lease, value) => guarded.checkpoint(sql, s, lease, value),
    suspend: (request) => guarded.suspend(sql, s, request),
    completeInTransaction: (lease, effect, encode) => guarded.completeInTransaction(sql, s, lease, effect, encode),
    resume: (idOrToken, payload) => admin.resume(sql, s, idOrToken, payload),
    cancel: (runId) => admin.cancel(sql, s, runId),
    retry: (runId) => admin.retry(sql, s, runId),
    get: (runId) => read.get(sql, s, runId),
    list: (filter) => read.list(sql, s, filter),
    history: (runId) => read.history(sql, s, runId),
    stats: read.stats(sql, s),
    notifications
  })
})

/** The store as a layer over a PgClient (see `Database.layer`). @category layers */
export const layer = (options: PgRunStoreOptions = {}) => Layer.effect(RunStore, make(options))
