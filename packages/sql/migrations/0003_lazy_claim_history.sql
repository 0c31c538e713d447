-- The routine path writes no history row (docs/adr/0003-lazy-claim-history.md). Upgrade to it with
-- the workers stopped: a worker of the previous version still writes 'completed' rows.

ALTER TABLE "{{schema}}".runs
  ADD COLUMN claimed_by text,
  ADD COLUMN claimed_at timestamptz,
  ADD COLUMN claimed_fence bigint,
  ADD COLUMN claimed_attempt integer,
  ADD CONSTRAINT runs_claim_recorded CHECK ((claimed_at IS NULL) = (claimed_fence IS NULL));
-- Completions are now read off the run row; their stored copies would show twice.
DELETE FROM "{{schema}}".run_events WHERE kind = 'completed';
CREATE VIEW "{{schema}}".run_history AS
  SELECT e.id::text AS id, e.id AS seq, e.run_id, e.fence, e.kind, e.owner, e.detail, e.at
  FROM "{{schema}}".run_events e
  UNION ALL
  SELECT r.id || '/claimed/' || r.claimed_fence, NULL, r.id, r.claimed_fence, 'claimed', r.claimed_by,
    jsonb_build_object('attempt', r.claimed_attempt), r.claimed_at
  FROM "{{schema}}".runs r WHERE r.claimed_at IS NOT NULL
  UNION ALL
  SELECT r.id || '/completed', NULL, r.id, r.fence, 'completed', NULL, NULL, r.finished_at
  FROM "{{schema}}".runs r WHERE r.state = 'completed';
