/**
 * Signal delivery from outside (callback URLs, webhooks) and the callback expiries behind them.
 * The first outcome of a signal stands: a delivery resumes a run suspended on it, is kept for a
 * run that has not suspended yet, and otherwise writes nothing and says why (docs/adr/0010).
 */
import {
  type DeliverSignalRequest,
  Json,
  type LeaseKey,
  RunNotFound,
  type RunState,
  type SignalDelivery,
  type SignalOutcome,
  terminalStates
} from "@leasehold/core"
import { RunStorage } from "@leasehold/core/store"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { StoreSchema } from "../../StoreSchema.js"
import { resumeWhere } from "./admin.js"
import { diagnose, inRow, toError } from "./guarded.js"
import * as ledger from "./ledger.js"
import { isRunId } from "./rows.js"

/** Delivers a signal's outcome to a run, in one transaction holding the run's row. */
export const deliverSignal = (sql: SqlClient.SqlClient, s: StoreSchema, request: DeliverSignalRequest) =>
  Effect.gen(function*() {
    yield* RunStorage.checkSignalDelivery(request)
    if (!isRunId(request.runId)) return yield* Effect.fail(new RunNotFound({ runId: request.runId }))
    const payload = yield* Json.encode(request.payload ?? null, "signal payload", request.runId)
    // From here on the row says where the run stands: a run still in state ledger is completed.
    yield* ledger.hold(sql, s, [request.runId])
    return yield* sql.withTransaction(Effect.gen(function*() {
      const [run] = yield* sql<
        {
          id: string
          state: RunState
          signal_name: string | null
          delivered: SignalOutcome | null
          same: boolean | null
        }
      >`
        SELECT id::text AS id, CASE WHEN state = 'ledger' THEN 'completed' ELSE state END AS state, signal_name,
          signals -> ${request.signal}::text AS delivered,
          (signals -> ${request.signal}::text -> 'payload') = ${payload}::jsonb AS same
        FROM ${s.runs(sql)} WHERE id = ${request.runId}::bigint FOR UPDATE`
      if (run === undefined) return yield* Effect.fail(new RunNotFound({ runId: request.runId }))
      const runId = run.id
      const answer = (delivery: SignalDelivery) => Effect.succeed(delivery)
      if (request.deliveryId !== undefined) {
        const seen = yield* sql`SELECT 1 FROM ${s.deliveries(sql)} WHERE id = ${request.deliveryId}`
        if (seen.length > 0) return yield* answer({ _tag: "Replayed", runId })
      }
      if (run.delivered !== null) {
        if (run.delivered._tag === "TimedOut") return yield* answer({ _tag: "Gone", runId, reason: "timed-out" })
        return yield* answer({ _tag: run.same === true ? "Duplicate" : "Conflict", runId })
      }
      if (terminalStates.includes(run.state)) return yield* answer({ _tag: "Gone", runId, reason: "finished" })
      if (request.deliveryId !== undefined) {
        yield* sql`INSERT INTO ${s.deliveries(sql)} (id, run_id, signal)
          VALUES (${request.deliveryId}, ${runId}::bigint, ${request.signal})`
      }
      if (run.state === "suspended" && run.signal_name === request.signal) {
        yield* resumeWhere(sql, s, sql`id = ${runId}::bigint`, payload, request.actor)
        return { _tag: "Resumed", runId } satisfies SignalDelivery as SignalDelivery
      }
      // Not suspended on it yet: kept, and the run's `awaitSignal` returns it without suspending.
      const outcome = `{"_tag":"Signalled","payload":${payload}}`
      yield* sql`
        WITH kept AS (
          UPDATE ${s.runs(sql)} SET signals = signals || jsonb_build_object(${request.signal}::text, ${outcome}::jsonb),
            updated_at = now()
          WHERE id = ${runId}::bigint
          RETURNING id, fence
        )
        INSERT INTO ${s.events(sql)} (run_id, fence, kind, detail)
        SELECT id, fence, 'signal_recorded', jsonb_build_object('signal', ${request.signal}::text, 'payload', ${payload}::jsonb)
        FROM kept`
      return { _tag: "Recorded", runId } satisfies SignalDelivery as SignalDelivery
    }))
  })

/** The callback expiry of a held run's signal: fixed by the first request, under the fence. */
export const callbackExpiry = (
  sql: SqlClient.SqlClient,
  s: StoreSchema,
  lease: LeaseKey,
  signal: string,
  expiresIn: Duration.Duration
) =>
  Effect.gen(function*() {
    const rows = yield* inRow(
      sql,
      s,
      lease,
      sql<{ expires_at: Date }>`
      WITH holder AS (
        SELECT id FROM ${s.runs(sql)}
        WHERE id = ${lease.runId}::bigint AND fence = ${lease.fence}::bigint AND state = 'running' COLLATE "C"
      ), fixed AS (
        INSERT INTO ${s.callbacks(sql)} (run_id, signal, expires_at)
        SELECT id, ${signal}, now() + ${Duration.toMillis(expiresIn)}::float8 * interval '1 millisecond' FROM holder
        ON CONFLICT (run_id, signal) DO NOTHING
        RETURNING expires_at
      )
      SELECT expires_at FROM fixed
      UNION ALL
      SELECT c.expires_at FROM ${s.callbacks(sql)} c JOIN holder h ON c.run_id = h.id WHERE c.signal = ${signal}`
    )
    if (rows.length > 0) return new Date(rows[0]!.expires_at)
    const [diagnosis] = yield* diagnose(sql, s, "callback", [lease])
    return yield* Effect.fail(toError("callback", diagnosis!))
  })
