/**
 * A store's history written directly, shaped as the routine path leaves it: completed runs of the
 * ledger (a row in state `ledger`, written once at enqueue; a settled claim batch and its
 * completion batch, 500 runs each), and a share of failed and cancelled runs in their rows with
 * their errors. Much faster than draining N runs through workers, so a test or a measure can hold
 * hundreds of thousands to millions of completed runs. `bench --history N` and `test/plans.test.ts`
 * both fill their stores with it.
 */

/** The shape of the history written. */
export interface HistoryShape {
  /** Completed and ended runs written, ids 1..runs. */
  readonly runs: number
  /** The span of time the runs are spread over, ending now (created, claimed and finished in it). */
  readonly days: number
  /** Runs per claim and completion batch. */
  readonly batch?: number
  /** One run in `failEvery` failed with an error (in its row); one in `cancelEvery` cancelled. */
  readonly failEvery?: number
  readonly cancelEvery?: number
  /**
   * Each day's runs in a partition of its own (ADR 0028's ranges), quiet since its last run ended,
   * as `maintain_history` leaves a store it has kept for `days` days; then the ranges ahead for the
   * runs enqueued next. Without it, the history lands in the fresh store's first range and its
   * default partition.
   */
  readonly dayRanges?: boolean
}

/**
 * The statements that write `shape` into a freshly migrated, empty store in `schema` (run in
 * order). The runs' sequence is moved past the history, so runs enqueued afterwards follow it.
 */
export const statements = (schema: string, shape: HistoryShape): ReadonlyArray<string> => {
  const batch = shape.batch ?? 500
  const fail = shape.failEvery ?? 200
  const cancel = shape.cancelEvery ?? 1_000
  const n = shape.runs
  // Run i was created at now() - span * (1 - i/n): evenly spread, the newest at about now().
  const at = (i: string) => `now() - make_interval(secs => ${shape.days * 86_400} * (1 - (${i})::float8 / ${n}))`
  const ended = `(i % ${fail} = 0 OR i % ${cancel} = 0)`
  // Ended runs are never ready: the insert's statement triggers (which would queue them) are off
  // while it runs (the store is not in use yet).
  const triggers = (how: string) =>
    `ALTER TABLE "${schema}".runs ${how} TRIGGER ready_on_insert, ${how} TRIGGER zz_rate_govern_inserted`
  const batches = Math.ceil(n / batch)
  return [
    ...(shape.dayRanges === true ? dayRanges(schema, shape.days, n, batches, at) : []),
    triggers("DISABLE"),
    `INSERT INTO "${schema}".runs (id, queue, kind, payload, run_at, state, attempt, max_attempts, fence, error,
       created_at, updated_at, finished_at, claimed_by, claimed_at, claimed_fence, claimed_attempt)
     SELECT i, 'q' || (i % 4), 'k' || (i % 8),
       jsonb_build_object('order', i, 'customer', 'c' || (i % 100000), 'sku', 'sku-' || (i % 5000), 'note', 'history run'),
       ${at("i")}, CASE WHEN i % ${fail} = 0 THEN 'failed' WHEN i % ${cancel} = 0 THEN 'cancelled' ELSE 'ledger' END,
       CASE WHEN ${ended} THEN 1 ELSE 0 END, 1, CASE WHEN ${ended} THEN 1 ELSE 0 END,
       CASE WHEN i % ${fail} = 0 THEN jsonb_build_object('message', 'timeout talking to upstream ' || (i % 97)) END,
       ${at("i")}, ${at("i")}, CASE WHEN ${ended} THEN ${at("i")} + interval '50 milliseconds' END,
       CASE WHEN ${ended} THEN 'history-worker' END, CASE WHEN ${ended} THEN ${
      at("i")
    } + interval '10 milliseconds' END,
       CASE WHEN ${ended} THEN 1 END, CASE WHEN ${ended} THEN 1 END
     FROM generate_series(1, ${n}) AS i`,
    triggers("ENABLE"),
    // One claim batch per `batch` ids (the ended runs closed in it: their rows took them over).
    `INSERT INTO "${schema}".claim_batches (batch, owner, claimed_at, expires_at, ids, fences, attempts, span, closed, settled_at)
     OVERRIDING SYSTEM VALUE
     SELECT b, 'history-worker', ${at(`(b - 1) * ${batch} + 1`)} + interval '10 milliseconds',
       ${at(`(b - 1) * ${batch} + 1`)} + interval '30 seconds', ids, array_fill(1::bigint, ARRAY[cardinality(ids)]),
       array_fill(1, ARRAY[cardinality(ids)]), int8multirange(int8range(ids[1], ids[cardinality(ids)], '[]')),
       ARRAY(SELECT x FROM unnest(ids) AS x WHERE x % ${fail} = 0 OR x % ${cancel} = 0),
       ${at(`(b - 1) * ${batch} + 1`)} + interval '60 milliseconds'
     FROM (
       SELECT b, ARRAY(SELECT g FROM generate_series((b - 1) * ${batch} + 1, least(b * ${batch}, ${n})) AS g) AS ids
       FROM generate_series(1, ${batches}) AS b
     ) c`,
    `INSERT INTO "${schema}".completion_batches (claim_batch, at, ids, fences)
     SELECT batch, claimed_at + interval '50 milliseconds', done, array_fill(1::bigint, ARRAY[cardinality(done)])
     FROM (SELECT batch, claimed_at, ARRAY(SELECT x FROM unnest(ids) AS x WHERE x <> ALL (closed)) AS done
       FROM "${schema}".claim_batches) c`,
    `SELECT setval(pg_get_serial_sequence('"${schema}".runs', 'id'), ${n})`,
    `SELECT setval(pg_get_serial_sequence('"${schema}".claim_batches', 'batch'), ${batches})`,
    ...(shape.dayRanges === true
      ? [`SELECT count(*) FROM "${schema}".maintain_history('100 years', '100 years', ${Math.max(100_000, batch)})`]
      : []),
    `VACUUM (ANALYZE) "${schema}".runs`,
    `VACUUM (ANALYZE) "${schema}".claim_batches`,
    `VACUUM (ANALYZE) "${schema}".completion_batches`
  ]
}

/**
 * A fresh store's first ranges (empty) replaced by one range a day: runs `[lo, hi)` created when
 * their first run was, quiet since their last one; claim batches cut at the same days.
 */
const dayRanges = (
  schema: string,
  days: number,
  runs: number,
  batches: number,
  at: (i: string) => string
): ReadonlyArray<string> => {
  const cut = (total: number, d: number) => Math.floor((d * total) / days) + 1
  const range = (parent: string, child: string, lo: number, hi: number) => [
    `CREATE TABLE "${schema}".${parent}_from_${lo} PARTITION OF "${schema}".${parent} FOR VALUES FROM (${lo}) TO (${hi}) WITH (fillfactor = 100)`,
    `CREATE TABLE "${schema}".${child}_from_${lo} PARTITION OF "${schema}".${child} FOR VALUES FROM (${lo}) TO (${hi}) WITH (fillfactor = 100)`
  ]
  const out: Array<string> = [
    `DROP TABLE "${schema}".runs_from_1, "${schema}".run_events_from_1, "${schema}".claim_batches_from_1, "${schema}".completion_batches_from_1`,
    `DELETE FROM "${schema}".history_ranges WHERE lo = 1`
  ]
  for (let d = 0; d < days; d++) {
    const [lo, hi] = [cut(runs, d), cut(runs, d + 1)]
    const [blo, bhi] = [cut(batches, d), cut(batches, d + 1)]
    if (hi > lo) {
      out.push(...range("runs", "run_events", lo, hi))
      out.push(
        `INSERT INTO "${schema}".history_ranges (tbl, lo, hi, created_at, quiet_since) VALUES ('runs', ${lo}, ${hi}, ${
          at(String(lo))
        }, ${at(String(hi - 1))} + interval '1 minute')`
      )
    }
    if (bhi > blo) {
      out.push(...range("claim_batches", "completion_batches", blo, bhi))
      out.push(
        `INSERT INTO "${schema}".history_ranges (tbl, lo, hi, created_at) VALUES ('claim_batches', ${blo}, ${bhi}, ${
          at(String(lo))
        })`
      )
    }
  }
  return out
}
