/**
 * BENCH ONLY — never use this to complete runs. Leasehold's batched completion
 * (`packages/sql/src/internal/statements/guarded.ts` › `completeBatch`) with the fence predicate
 * (`r.fence = i.fence`) removed and nothing else changed (kept in step with it by hand): still one statement, still guarded on
 * `state = 'running'`, no history row (the real one writes none either: the run row records the
 * completion). It exists to show what the fence costs.
 */
import type { CompleteItem } from "@leasehold/core"
import type { StoreSchema } from "@leasehold/sql"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"

const json = (value: unknown): string | null => value === undefined ? null : JSON.stringify(value)

export const completeBatchWithoutFence = (
  sql: SqlClient.SqlClient,
  s: StoreSchema.StoreSchema,
  items: ReadonlyArray<CompleteItem>
) =>
  Effect.gen(function*() {
    if (items.length === 0) return [] as ReadonlyArray<{ runId: string; ok: boolean }>
    const ids = items.map((i) => i.runId)
    const results = items.some((i) => i.result !== undefined && i.result !== null)
      ? items.map((i) => json(i.result) ?? "null")
      : null
    const missed = yield* sql<{ ord: number }>`
      WITH input AS MATERIALIZED (
        SELECT t.*, 'running'::text AS held FROM unnest(
          ${ids}::bigint[],
          ${items.map((i) => i.fence)}::bigint[],
          ${results}::jsonb[]
        ) WITH ORDINALITY AS t(id, fence, result, ord)
      ), done AS (
        UPDATE ${s.runs(sql)} r SET
          state = 'completed', result = coalesce(i.result, 'null'::jsonb), lease_owner = NULL, lease_expires_at = NULL,
          finished_at = now(), updated_at = now()
        FROM input i
        WHERE r.id = ANY(${ids}::bigint[]) AND r.id = i.id AND r.state = i.held
        RETURNING r.id
      )
      SELECT i.ord::int - 1 AS ord FROM input i WHERE NOT EXISTS (SELECT 1 FROM done d WHERE d.id = i.id)`
    const failed = new Set(missed.map((r) => Number(r.ord)))
    return items.map((i, k) => ({ runId: i.runId, ok: !failed.has(k) }))
  })
