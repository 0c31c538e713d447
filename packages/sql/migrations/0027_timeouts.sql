-- Attempt timeouts and run deadlines (issue 43; docs/guides/handlers.md).
--
-- attempt_timeout_ms: an enqueue's attempt timeout, overriding its handler's; the worker that holds
-- the attempt counts it on its own monotonic clock. deadline: when the run fails for good if it has
-- not finished, computed by the database at enqueue (now() + the duration, or the time given) and
-- compared with now() by the fail statement and by the claim (which tells the worker how far off
-- it is). Both nullable, no default: adding them rewrites nothing and takes only a brief lock.
-- runs_now carries both (appended, the view otherwise as 0025 made it).

ALTER TABLE "{{schema}}".runs ADD COLUMN attempt_timeout_ms integer CHECK (attempt_timeout_ms > 0),
  ADD COLUMN deadline timestamptz;

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
      SELECT b.batch, b.owner, b.expires_at, b.claimed_at, b.fences, b.attempts, array_position(b.ids, x.id) AS pos
      FROM "{{schema}}".claim_batches b WHERE b.span @> x.id AND y.id IS NULL AND wt.id IS NULL ORDER BY b.batch DESC LIMIT 1
    ) c ON true
    LEFT JOIN LATERAL (
      SELECT e.at, e.results[array_position(e.ids, x.id)] AS result
      FROM "{{schema}}".completion_batches e WHERE e.claim_batch = c.batch AND x.id = ANY(e.ids) LIMIT 1
    ) d ON true
    LEFT JOIN "{{schema}}".key_holds kh ON r.key_scope IS NOT NULL AND kh.scope = r.key_scope
      AND kh.name = CASE r.key_scope WHEN 'kind' THEN r.kind ELSE r.queue END AND kh.key = r.concurrency_key AND kh.run_id = x.id
    WHERE r.state = 'ledger'
  ) l ON true;
