/**
 * Pausing and resuming queues. A paused queue has a row in `paused_queues`; every claim leaves its
 * queues out (`claim.ts` › `activeQueues`), so from the pause's commit on nothing in it is
 * claimed. Resuming deletes the row and wakes idle workers on that queue.
 */
import { checkQueueName, type PausedQueue } from "@leasehold/core"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../StoreSchema.js"
import { toDate } from "./rows.js"

export const pause = (sql: SqlClient.SqlClient, s: StoreSchema, queue: string) =>
  Effect.andThen(
    checkQueueName(queue),
    Effect.map(
      sql<{ queue: string }>`
        INSERT INTO ${s.pausedQueues(sql)} (queue) VALUES (${queue}) ON CONFLICT (queue) DO NOTHING RETURNING queue`,
      (rows) => rows.length > 0
    )
  )

export const resume = (sql: SqlClient.SqlClient, s: StoreSchema, queue: string) =>
  Effect.andThen(
    checkQueueName(queue),
    Effect.map(
      sql<{ queue: string }>`
        WITH resumed AS (DELETE FROM ${s.pausedQueues(sql)} WHERE queue = ${queue} RETURNING queue)
        SELECT queue, pg_notify(${s.channel}, 'q:' || queue) FROM resumed`,
      (rows) => rows.length > 0
    )
  )

export const paused = (sql: SqlClient.SqlClient, s: StoreSchema) =>
  Effect.map(
    sql<{ queue: string; since: Date | string }>`SELECT queue, since FROM ${s.pausedQueues(sql)} ORDER BY queue COLLATE "C"`,
    (rows) => rows.map((r): PausedQueue => ({ queue: r.queue, since: toDate(r.since) }))
  )
