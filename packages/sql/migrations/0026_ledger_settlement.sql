-- The batch ledger's settlement counted by distinct runs, and the batches that counting by rows
-- left wrong set right (issue 39, docs/adr/0022-ledger-writers-ordered-by-lock.md).
--
-- Completions and renewals now lock their batches before they decide (ledger.ts), so two
-- completions of one batch no longer both insert; `hold` settles a batch only when each of its
-- runs is closed or completed, whatever completion rows repeat.

CREATE OR REPLACE FUNCTION "{{schema}}".hold(wanted bigint[], lease_until timestamptz DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  locked bigint[];
  moved integer;
  slot_ids bigint[];
  slot_nos integer[];
BEGIN
  PERFORM 1 FROM "{{schema}}".ready WHERE id = ANY(wanted) AND ledger ORDER BY id FOR UPDATE;
  PERFORM 1 FROM "{{schema}}".waiting WHERE id = ANY(wanted) ORDER BY id FOR UPDATE;
  SELECT array_agg(batch ORDER BY batch) INTO locked FROM (
    SELECT c.batch FROM "{{schema}}".claim_batches c
    WHERE c.span && (SELECT range_agg(int8range(w, w + 1)) FROM unnest(wanted) w) AND c.settled_at IS NULL
    ORDER BY c.batch FOR UPDATE
  ) b;
  -- The slots the wanted runs hold in the ledger (their batches locked: no completion gives one
  -- back meanwhile), taken out of key_holds for their rows to hold.
  WITH gone AS (
    DELETE FROM "{{schema}}".key_holds h USING "{{schema}}".runs r
    WHERE r.id = ANY(wanted) AND r.state = 'ledger' AND r.key_scope IS NOT NULL AND h.scope = r.key_scope
      AND h.name = CASE r.key_scope WHEN 'kind' THEN r.kind ELSE r.queue END AND h.key = r.concurrency_key AND h.run_id = r.id
    RETURNING h.run_id, h.slot
  )
  SELECT array_agg(run_id), array_agg(slot) INTO slot_ids, slot_nos FROM gone;
  UPDATE "{{schema}}".runs r SET state = 'pending', updated_at = now(),
      key_slot = slot_nos[array_position(slot_ids, r.id)]
    WHERE r.id = ANY(wanted) AND r.state = 'ledger' AND (EXISTS (SELECT 1 FROM "{{schema}}".ready y WHERE y.id = r.id)
      OR EXISTS (SELECT 1 FROM "{{schema}}".waiting w WHERE w.id = r.id));
  IF locked IS NULL THEN RETURN 0; END IF;
  WITH open AS MATERIALIZED (
    SELECT c.batch, u.id, u.fence, u.attempt, c.owner, coalesce(lease_until, c.expires_at) AS expires_at, c.claimed_at
    FROM "{{schema}}".claim_batches c, unnest(c.ids, c.fences, c.attempts) AS u(id, fence, attempt)
    WHERE c.batch = ANY(locked) AND u.id = ANY(wanted) AND u.id <> ALL(c.closed)
      AND NOT EXISTS (SELECT 1 FROM "{{schema}}".completion_batches d WHERE d.claim_batch = c.batch AND u.id = ANY(d.ids))
  ), moved_runs AS (
    UPDATE "{{schema}}".runs r SET state = 'running', fence = o.fence, attempt = o.attempt, lease_owner = o.owner,
      lease_expires_at = o.expires_at, claimed_by = o.owner, claimed_at = o.claimed_at, claimed_fence = o.fence,
      claimed_attempt = o.attempt, updated_at = now(), key_slot = slot_nos[array_position(slot_ids, r.id)]
    FROM open o WHERE r.id = o.id AND r.state = 'ledger'
    RETURNING r.id
  ), closing AS (
    UPDATE "{{schema}}".claim_batches c SET closed = c.closed || o.ids
    FROM (SELECT batch, array_agg(id) AS ids FROM open GROUP BY batch) o
    WHERE c.batch = o.batch
  )
  SELECT count(*) INTO moved FROM moved_runs;
  -- Counted by distinct runs: every run of the batch closed or completed.
  UPDATE "{{schema}}".claim_batches c SET settled_at = now()
    WHERE c.batch = ANY(locked) AND c.settled_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM unnest(c.ids) AS u(id) WHERE u.id <> ALL(c.closed)
        AND NOT EXISTS (SELECT 1 FROM "{{schema}}".completion_batches d WHERE d.claim_batch = c.batch AND u.id = ANY(d.ids)));
  RETURN moved;
END $fn$;

-- A batch settled while a run of it was still open (two completions of one batch, each deciding
-- from its own snapshot) is unsettled: the sweep and the holder's renewal reach that run again.
UPDATE "{{schema}}".claim_batches c SET settled_at = NULL
  WHERE c.settled_at IS NOT NULL
    AND EXISTS (SELECT 1 FROM unnest(c.ids) AS u(id) WHERE u.id <> ALL(c.closed)
      AND NOT EXISTS (SELECT 1 FROM "{{schema}}".completion_batches d WHERE d.claim_batch = c.batch AND u.id = ANY(d.ids)));
-- A batch every run of which ended, but never settled (the same race), is settled.
UPDATE "{{schema}}".claim_batches c SET settled_at = now()
  WHERE c.settled_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM unnest(c.ids) AS u(id) WHERE u.id <> ALL(c.closed)
      AND NOT EXISTS (SELECT 1 FROM "{{schema}}".completion_batches d WHERE d.claim_batch = c.batch AND u.id = ANY(d.ids)));
