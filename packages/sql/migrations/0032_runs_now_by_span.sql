-- runs_now's claim-batch lookup always by the span index (issue 41: `runs show` of an old run).
--
-- 0018 found a ledger run's latest claim batch with `WHERE span @> id ORDER BY batch DESC LIMIT 1`.
-- Once claim_batches holds tens of thousands of batches, the planner guesses that many batches
-- contain any id and reads the primary key backwards until one does: every batch claimed since
-- the run's own, which for an old run is most of the table. The span index's matches (the run's
-- own batch, and any batch that reclaimed it) are now read first and sorted. The view is
-- otherwise as 0027 made it.

CREATE OR REPLACE VIEW "{{schema}}".runs_now AS
  SELECT r.id, r.queue, r.kind, r.payload, r.priority, r.run_at,
    coalesce(l.state, r.state) AS state,
    coalesce(l.attempt, r.attempt) AS attempt, r.max_attempts,
    coalesce(l.fence, r.fence) AS fence,
    CASE WHEN r.state <> 'ledger' THEN r.lease_owner WHEN l.state = 'running' THEN l.owner END AS lease_owner,
    CASE WHEN r.state <> 'ledger' THEN r.lease_expires_at WHEN l.state = 'running' THEN l.expires_at END AS lease_expires_at,
    r.checkpoint,
    CASE WHEN l.state = 'completed' THEN l.result ELSE r.result END AS result,
    r.error, r.signal_name, r.signal_token, r.suspend_deadline, r.signals, r.idempotency_key, r.created_at,
    coalesce(l.finished_at, l.claimed_at, r.updated_at) AS updated_at,
    coalesce(l.finished_at, r.finished_at) AS finished_at,
    coalesce(l.owner, r.claimed_by) AS claimed_by, coalesce(l.claimed_at, r.claimed_at) AS claimed_at,
    coalesce(l.fence, r.claimed_fence) AS claimed_fence, coalesce(l.attempt, r.claimed_attempt) AS claimed_attempt,
    r.trace_parent, r.concurrency_key, r.key_scope, coalesce(r.key_slot, l.key_slot) AS key_slot, l.batch AS claim_batch,
    r.attempt_timeout_ms, r.deadline
  FROM "{{schema}}".runs r
  LEFT JOIN LATERAL (
    SELECT CASE WHEN y.id IS NOT NULL OR wt.id IS NOT NULL THEN 'pending' WHEN d.at IS NOT NULL THEN 'completed'
        WHEN c.batch IS NOT NULL THEN 'running' END AS state,
      c.batch, c.owner, c.expires_at, c.claimed_at, c.fences[c.pos] AS fence, c.attempts[c.pos] AS attempt,
      d.at AS finished_at, d.result, kh.slot AS key_slot
    FROM (SELECT r.id AS id) x
    LEFT JOIN "{{schema}}".ready y ON y.id = x.id
    LEFT JOIN "{{schema}}".waiting wt ON wt.id = x.id
    LEFT JOIN LATERAL (
      SELECT f.batch, f.owner, f.expires_at, f.claimed_at, f.fences, f.attempts, array_position(f.ids, x.id) AS pos
      FROM (
        -- OFFSET 0: the batches holding the run are found by the span index first (one to a few),
        -- then sorted; never the primary key read backwards until one holds it.
        SELECT b.batch, b.owner, b.expires_at, b.claimed_at, b.fences, b.attempts, b.ids
        FROM "{{schema}}".claim_batches b WHERE b.span @> x.id AND y.id IS NULL AND wt.id IS NULL OFFSET 0
      ) f ORDER BY f.batch DESC LIMIT 1
    ) c ON true
    LEFT JOIN LATERAL (
      SELECT e.at, e.results[array_position(e.ids, x.id)] AS result
      FROM "{{schema}}".completion_batches e WHERE e.claim_batch = c.batch AND x.id = ANY(e.ids) LIMIT 1
    ) d ON true
    LEFT JOIN "{{schema}}".key_holds kh ON r.key_scope IS NOT NULL AND kh.scope = r.key_scope
      AND kh.name = CASE r.key_scope WHEN 'kind' THEN r.kind ELSE r.queue END AND kh.key = r.concurrency_key AND kh.run_id = x.id
    WHERE r.state = 'ledger'
  ) l ON true;
