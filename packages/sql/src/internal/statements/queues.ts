/**
 * Pausing and resuming queues. A paused queue has a row in `paused_queues`; every claim leaves its
 * queues out (`claim.ts` › `activeQueues`), so from the pause's commit on nothing in it is
 * claimed. Resuming deletes the row and wakes idle workers on that queue.
 */
import type { PausedQueue } from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { admitOnApplicationPool, admitted } from "./admit.js"
import { toDate } from "./rows.js"

/**
 * Pauses a queue. Its admitted keyed runs give their key slots back (a paused queue's runs hold
 * none: a kind's limit counts across queues, and a slot held while paused would hold the key back
 * in every queue), and those keys' slots go to their waiting runs elsewhere. They are admitted
 * again by the sweeps after the queue resumes.
 */
export const pause = (sql: SqlClient.SqlClient, s: StoreSchema, queue: string) =>
  Effect.andThen(
    RunStorage.checkQueueName(queue),
    sql.withTransaction(Effect.gen(function*() {
      const paused = yield* sql<{ queue: string }>`
        INSERT INTO ${s.pausedQueues(sql)} (queue) VALUES (${queue}) ON CONFLICT (queue) DO NOTHING RETURNING queue`
      if (paused.length === 0) return false
      // The queue's admitted keyed runs in the ledger move to their rows first (ledger.ts › hold),
      // where the update below gives their slots back.
      yield* sql`SELECT ${sql.literal(`"${s.schema}".hold`)}(ARRAY(
          SELECT y.id FROM ${s.ready(sql)} y JOIN ${s.runs(sql)} r ON r.id = y.id
          WHERE y.queue = ${queue} AND y.ledger AND r.key_scope IS NOT NULL), NULL)`
      const freed = yield* sql<{ concurrency_key: string }>`
        UPDATE ${s.runs(sql)} SET key_slot = NULL
        WHERE queue = ${queue} AND state = 'pending' AND key_slot IS NOT NULL
        RETURNING concurrency_key`
      if (freed.length > 0) {
        yield* admitted(admitOnApplicationPool(sql, s, { every: true, keys: freed.map((f) => f.concurrency_key) }))
      }
      return true
    }))
  )

export const resume = (sql: SqlClient.SqlClient, s: StoreSchema, queue: string) =>
  Effect.andThen(
    RunStorage.checkQueueName(queue),
    Effect.map(
      sql<{ queue: string }>`
        WITH resumed AS (DELETE FROM ${s.pausedQueues(sql)} WHERE queue = ${queue} RETURNING queue)
        SELECT queue, pg_notify(${s.channel}, 'q:' || queue) FROM resumed`,
      (rows) => rows.length > 0
    )
  )

export const paused = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  Effect.map(
    sql<{ queue: string; since: Date | string }>`SELECT queue, since FROM ${
      s.pausedQueues(sql)
    } ORDER BY queue COLLATE "C"`,
    (rows) => rows.map((r): PausedQueue => ({ queue: r.queue, since: toDate(r.since) }))
  )
