-- The batch ledger (issue 29, docs/adr/0017-batch-ledger-storage.md). A run enqueued in state
-- `ledger` is described by the ledger until it is moved to its row: pending while it has a `ready`
-- row, running while it is open in its claim batch, completed once a completion batch names it. A
-- claim deletes the ready row and appends one claim batch per statement; a completion appends one
-- completion batch; the run row is not written on that path. Anything else (a failure, release,
-- suspension, checkpoint, cancel, reclaim) first moves the run to its row (`hold`), and from then
-- on the row's own statements decide, as before: a run is claimed in the ledger at most once.

ALTER TABLE "{{schema}}".runs DROP CONSTRAINT runs_state_check;
ALTER TABLE "{{schema}}".runs ADD CONSTRAINT runs_state_check
  CHECK (state IN ('pending', 'running', 'suspended', 'completed', 'failed', 'cancelled', 'ledger')) NOT VALID;
-- The runs a claim may take, pending in their row or in the ledger; the only due index.
CREATE TABLE "{{schema}}".ready (
  id bigint PRIMARY KEY,
  queue text NOT NULL,
  kind text NOT NULL,
  priority integer NOT NULL,
  run_at timestamptz NOT NULL,
  ledger boolean NOT NULL
);
CREATE INDEX ready_due ON "{{schema}}".ready (queue, priority DESC, run_at, id);
INSERT INTO "{{schema}}".ready (id, queue, kind, priority, run_at, ledger)
  SELECT id, queue, kind, priority, run_at, false FROM "{{schema}}".runs
  WHERE state = 'pending' AND (key_scope IS NULL OR key_slot IS NOT NULL);
DROP INDEX "{{schema}}".runs_due;
-- Rows enter and leave the ready set with their state, whatever statement moves them. An
-- update that keeps a run ready changes its ready row but never creates one: a run the ledger
-- has claimed is in state ledger without a ready row, and must not become claimable again.
CREATE FUNCTION "{{schema}}".ready_on_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO "{{schema}}".ready (id, queue, kind, priority, run_at, ledger)
    SELECT id, queue, kind, priority, run_at, state = 'ledger' FROM added
    WHERE state IN ('pending', 'ledger') AND (key_scope IS NULL OR key_slot IS NOT NULL);
  RETURN NULL;
END $fn$;
CREATE TRIGGER ready_on_insert AFTER INSERT ON "{{schema}}".runs REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION "{{schema}}".ready_on_insert();
CREATE FUNCTION "{{schema}}".ready_on_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  was boolean := OLD.state IN ('pending', 'ledger') AND (OLD.key_scope IS NULL OR OLD.key_slot IS NOT NULL);
  is_now boolean := NEW.state IN ('pending', 'ledger') AND (NEW.key_scope IS NULL OR NEW.key_slot IS NOT NULL);
BEGIN
  IF was AND is_now THEN
    UPDATE "{{schema}}".ready SET queue = NEW.queue, kind = NEW.kind, priority = NEW.priority, run_at = NEW.run_at,
      ledger = NEW.state = 'ledger'
    WHERE id = NEW.id;
  ELSIF was THEN
    DELETE FROM "{{schema}}".ready WHERE id = OLD.id;
  ELSIF is_now THEN
    INSERT INTO "{{schema}}".ready (id, queue, kind, priority, run_at, ledger)
      VALUES (NEW.id, NEW.queue, NEW.kind, NEW.priority, NEW.run_at, NEW.state = 'ledger');
  END IF;
  RETURN NULL;
END $fn$;
CREATE TRIGGER ready_on_update AFTER UPDATE OF state, key_scope, key_slot, queue, kind, priority, run_at ON "{{schema}}".runs
  FOR EACH ROW WHEN (OLD.state IN ('pending', 'ledger') OR NEW.state IN ('pending', 'ledger'))
  EXECUTE FUNCTION "{{schema}}".ready_on_update();
CREATE TRIGGER ready_on_delete AFTER DELETE ON "{{schema}}".runs
  FOR EACH ROW WHEN (OLD.state IN ('pending', 'ledger')) EXECUTE FUNCTION "{{schema}}".ready_on_update();
-- One row per claim statement: its runs (by place), their fences and attempts, one expiry.
CREATE TABLE "{{schema}}".claim_batches (
  batch bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  owner text NOT NULL,
  claimed_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  ids bigint[] NOT NULL,
  fences bigint[] NOT NULL,
  attempts integer[] NOT NULL,
  span int8multirange NOT NULL,
  closed bigint[] NOT NULL DEFAULT '{}',
  settled_at timestamptz
);
CREATE INDEX claim_batches_open ON "{{schema}}".claim_batches (expires_at) WHERE settled_at IS NULL;
CREATE INDEX claim_batches_span ON "{{schema}}".claim_batches USING gist (span);
-- One row per completion statement and claim batch: the runs, their fences, results if any.
CREATE TABLE "{{schema}}".completion_batches (
  claim_batch bigint NOT NULL,
  at timestamptz NOT NULL DEFAULT now(),
  ids bigint[] NOT NULL,
  fences bigint[] NOT NULL,
  results jsonb[]
);
CREATE INDEX completion_batches_claim ON "{{schema}}".completion_batches (claim_batch);
-- What finished in the last minutes (the console's charts, operators.ts › activity).
CREATE INDEX completion_batches_at ON "{{schema}}".completion_batches (at);
-- Moves runs from the ledger to their rows: pending ones stay pending (in their row), open ones
-- become running with their batch's lease (or until lease_until), each closed in its batch.
-- Claims of them are waited for (their ready rows locked), and completions too (the batch rows
-- locked FOR UPDATE, which their FOR KEY SHARE holds off), so what was completed stays so.
CREATE FUNCTION "{{schema}}".hold(wanted bigint[], lease_until timestamptz DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  locked bigint[];
  moved integer;
BEGIN
  PERFORM 1 FROM "{{schema}}".ready WHERE id = ANY(wanted) AND ledger ORDER BY id FOR UPDATE;
  UPDATE "{{schema}}".runs r SET state = 'pending', updated_at = now()
    WHERE r.id = ANY(wanted) AND r.state = 'ledger' AND EXISTS (SELECT 1 FROM "{{schema}}".ready y WHERE y.id = r.id);
  SELECT array_agg(batch ORDER BY batch) INTO locked FROM (
    SELECT c.batch FROM "{{schema}}".claim_batches c
    WHERE c.span && (SELECT range_agg(int8range(w, w + 1)) FROM unnest(wanted) w) AND c.settled_at IS NULL
    ORDER BY c.batch FOR UPDATE
  ) b;
  IF locked IS NULL THEN RETURN 0; END IF;
  WITH open AS MATERIALIZED (
    SELECT c.batch, u.id, u.fence, u.attempt, c.owner, coalesce(lease_until, c.expires_at) AS expires_at, c.claimed_at
    FROM "{{schema}}".claim_batches c, unnest(c.ids, c.fences, c.attempts) AS u(id, fence, attempt)
    WHERE c.batch = ANY(locked) AND u.id = ANY(wanted) AND u.id <> ALL(c.closed)
      AND NOT EXISTS (SELECT 1 FROM "{{schema}}".completion_batches d WHERE d.claim_batch = c.batch AND u.id = ANY(d.ids))
  ), moved_runs AS (
    UPDATE "{{schema}}".runs r SET state = 'running', fence = o.fence, attempt = o.attempt, lease_owner = o.owner,
      lease_expires_at = o.expires_at, claimed_by = o.owner, claimed_at = o.claimed_at, claimed_fence = o.fence,
      claimed_attempt = o.attempt, updated_at = now()
    FROM open o WHERE r.id = o.id AND r.state = 'ledger'
    RETURNING r.id
  ), closing AS (
    UPDATE "{{schema}}".claim_batches c SET closed = c.closed || o.ids
    FROM (SELECT batch, array_agg(id) AS ids FROM open GROUP BY batch) o
    WHERE c.batch = o.batch
  )
  SELECT count(*) INTO moved FROM moved_runs;
  -- A batch whose every run is completed or closed is settled: out of the open-batch index.
  UPDATE "{{schema}}".claim_batches c SET settled_at = now()
    WHERE c.batch = ANY(locked) AND c.settled_at IS NULL
      AND cardinality(c.closed) + coalesce((SELECT sum(cardinality(d.ids)) FROM "{{schema}}".completion_batches d
        WHERE d.claim_batch = c.batch), 0) >= cardinality(c.ids);
  RETURN moved;
END $fn$;
-- The whole history, the ledger's claims and completions included (those of runs their rows
-- have not taken over: a closed run's claim is on its row). Reading one run's history by id
-- goes to the tables (internal/statements/read.ts): this view reads every batch.
CREATE OR REPLACE VIEW "{{schema}}".run_history AS
  SELECT e.id::text AS id, e.id AS seq, e.run_id, e.fence, e.kind, e.owner, e.detail, e.at
  FROM "{{schema}}".run_events e
  UNION ALL
  SELECT r.id || '/claimed/' || r.claimed_fence, NULL, r.id, r.claimed_fence, 'claimed', r.claimed_by,
    jsonb_build_object('attempt', r.claimed_attempt), r.claimed_at
  FROM "{{schema}}".runs r WHERE r.claimed_at IS NOT NULL
  UNION ALL
  SELECT r.id || '/completed', NULL, r.id, r.fence, 'completed', NULL, NULL, r.finished_at
  FROM "{{schema}}".runs r WHERE r.state = 'completed'
  UNION ALL
  SELECT u.id || '/claimed/' || u.fence, NULL, u.id, u.fence, 'claimed', c.owner, jsonb_build_object('attempt', u.attempt), c.claimed_at
  FROM "{{schema}}".claim_batches c, unnest(c.ids, c.fences, c.attempts) AS u(id, fence, attempt)
  WHERE u.id <> ALL (c.closed)
  UNION ALL
  SELECT u.id || '/completed', NULL, u.id, u.fence, 'completed', NULL, NULL, d.at
  FROM "{{schema}}".completion_batches d JOIN "{{schema}}".claim_batches c ON c.batch = d.claim_batch,
    unnest(d.ids, d.fences) AS u(id, fence)
  WHERE u.id <> ALL (c.closed);
-- Each run as it stands: a ledger run's state, fence, lease and result read from the ledger.
CREATE VIEW "{{schema}}".runs_now AS
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
    r.trace_parent, r.concurrency_key, r.key_scope, r.key_slot, l.batch AS claim_batch
  FROM "{{schema}}".runs r
  LEFT JOIN LATERAL (
    SELECT CASE WHEN y.id IS NOT NULL THEN 'pending' WHEN d.at IS NOT NULL THEN 'completed' WHEN c.batch IS NOT NULL THEN 'running' END AS state,
      c.batch, c.owner, c.expires_at, c.claimed_at, c.fences[c.pos] AS fence, c.attempts[c.pos] AS attempt,
      d.at AS finished_at, d.result
    FROM (SELECT r.id AS id) x
    LEFT JOIN "{{schema}}".ready y ON y.id = x.id
    LEFT JOIN LATERAL (
      SELECT b.batch, b.owner, b.expires_at, b.claimed_at, b.fences, b.attempts, array_position(b.ids, x.id) AS pos
      FROM "{{schema}}".claim_batches b WHERE b.span @> x.id AND y.id IS NULL ORDER BY b.batch DESC LIMIT 1
    ) c ON true
    LEFT JOIN LATERAL (
      SELECT e.at, e.results[array_position(e.ids, x.id)] AS result
      FROM "{{schema}}".completion_batches e WHERE e.claim_batch = c.batch AND x.id = ANY(e.ids) LIMIT 1
    ) d ON true
    WHERE r.state = 'ledger'
  ) l ON true;
