-- Keyed runs in the batch ledger (docs/adr/0017-batch-ledger-storage.md, "Step 2"): a keyed run
-- under a limit is recorded in state `ledger` too. Its slot is a key_holds row, its wait a
-- waiting row; its run row is written once, at the enqueue, as an unkeyed ledger run's.
--
-- One slot domain: every held slot is a key_holds row under its primary key, whichever path holds
-- it. A row's slot (runs.key_slot, migrations 0010 and 0013) is mirrored there by a trigger, so
-- two transactions that both saw a slot free, one admitting a row run and one a ledger run, still
-- collide on key_holds_pkey: the limit stays exact, with no counter row.

-- Slots and rows held still while the mirror is filled (the order of 0015: key_limits, then runs).
LOCK TABLE "{{schema}}".key_limits IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE "{{schema}}".runs IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE "{{schema}}".key_holds (
  scope text NOT NULL CHECK (scope IN ('queue', 'kind')),
  name text NOT NULL,
  key text NOT NULL,
  slot integer NOT NULL,
  run_id bigint NOT NULL,
  PRIMARY KEY (scope, name, key, slot)
);
INSERT INTO "{{schema}}".key_holds (scope, name, key, slot, run_id)
  SELECT key_scope, CASE key_scope WHEN 'kind' THEN kind ELSE queue END, concurrency_key, key_slot, id
  FROM "{{schema}}".runs WHERE key_slot IS NOT NULL;
-- A governed ledger run waiting for a slot of its key, in claim order per key.
CREATE TABLE "{{schema}}".waiting (
  id bigint PRIMARY KEY,
  scope text NOT NULL,
  name text NOT NULL,
  key text NOT NULL,
  queue text NOT NULL,
  kind text NOT NULL,
  priority integer NOT NULL,
  run_at timestamptz NOT NULL
);
CREATE INDEX waiting_by_key ON "{{schema}}".waiting (scope, name, key, priority DESC, run_at, id);
-- The counts by queue (stats, the live sample) and the oldest due wait, read by index.
CREATE INDEX waiting_by_queue ON "{{schema}}".waiting (queue, run_at);

-- A row's slot, held or given back, in key_holds. The delete names the holder: a slot a statement
-- already handed on (admit.ts › handOff deletes it itself) is not taken from its new holder.
CREATE FUNCTION "{{schema}}".key_holds_mirror() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP <> 'INSERT' AND OLD.key_slot IS NOT NULL THEN
    DELETE FROM "{{schema}}".key_holds
      WHERE scope = OLD.key_scope AND name = CASE OLD.key_scope WHEN 'kind' THEN OLD.kind ELSE OLD.queue END
        AND key = OLD.concurrency_key AND slot = OLD.key_slot AND run_id = OLD.id;
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.key_slot IS NOT NULL THEN
    INSERT INTO "{{schema}}".key_holds (scope, name, key, slot, run_id)
      VALUES (NEW.key_scope, CASE NEW.key_scope WHEN 'kind' THEN NEW.kind ELSE NEW.queue END, NEW.concurrency_key, NEW.key_slot, NEW.id);
  END IF;
  RETURN NULL;
END $fn$;
-- Named to fire before key_slot_hand_off (triggers of one event fire in name order): the slot
-- given back is out of key_holds when the hand-off looks for slots above a lowered limit.
CREATE TRIGGER key_holds_mirror AFTER UPDATE ON "{{schema}}".runs FOR EACH ROW
  WHEN (OLD.key_slot IS DISTINCT FROM NEW.key_slot OR (NEW.key_slot IS NOT NULL AND (OLD.key_scope IS DISTINCT FROM NEW.key_scope
    OR OLD.kind IS DISTINCT FROM NEW.kind OR OLD.queue IS DISTINCT FROM NEW.queue OR OLD.concurrency_key IS DISTINCT FROM NEW.concurrency_key)))
  EXECUTE FUNCTION "{{schema}}".key_holds_mirror();
CREATE TRIGGER key_holds_mirror_insert AFTER INSERT ON "{{schema}}".runs FOR EACH ROW
  WHEN (NEW.key_slot IS NOT NULL) EXECUTE FUNCTION "{{schema}}".key_holds_mirror();
-- A ledger run deleted (never on the routine path) takes its hold and its wait with it.
CREATE FUNCTION "{{schema}}".key_holds_forget() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  DELETE FROM "{{schema}}".key_holds
    WHERE scope = OLD.key_scope AND name = CASE OLD.key_scope WHEN 'kind' THEN OLD.kind ELSE OLD.queue END
      AND key = OLD.concurrency_key AND run_id = OLD.id;
  DELETE FROM "{{schema}}".waiting WHERE id = OLD.id;
  RETURN NULL;
END $fn$;
CREATE TRIGGER key_holds_forget AFTER DELETE ON "{{schema}}".runs FOR EACH ROW
  WHEN (OLD.key_scope IS NOT NULL) EXECUTE FUNCTION "{{schema}}".key_holds_forget();

-- A keyed run inserted in state ledger is governed as a pending one (its kind's limit, else its
-- queue's); a row leaving the ledger (`hold`) keeps the scope and slot `hold` gives it.
CREATE OR REPLACE FUNCTION "{{schema}}".key_slot_rules() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  NEW.key_slot := NULL;
  IF NEW.state IN ('pending', 'ledger') AND NEW.concurrency_key IS NOT NULL THEN
    NEW.key_scope := CASE
      WHEN EXISTS (SELECT 1 FROM "{{schema}}".key_limits WHERE scope = 'kind' AND name = NEW.kind) THEN 'kind'
      WHEN EXISTS (SELECT 1 FROM "{{schema}}".key_limits WHERE scope = 'queue' AND name = NEW.queue) THEN 'queue'
    END;
  END IF;
  RETURN NEW;
END
$fn$;
CREATE OR REPLACE TRIGGER key_slot_rules BEFORE UPDATE ON "{{schema}}".runs FOR EACH ROW
  WHEN ((OLD.key_slot IS NOT NULL AND NEW.key_slot IS NOT NULL AND NEW.state <> 'running'
      AND NOT (OLD.state = 'pending' AND NEW.state = 'pending'))
    OR (NEW.concurrency_key IS NOT NULL AND NEW.state = 'pending' AND OLD.state NOT IN ('pending', 'ledger')))
  EXECUTE FUNCTION "{{schema}}".key_slot_rules();

-- The insert's runs enter the ready set, or, governed ledger runs with no slot, their key's line.
CREATE OR REPLACE FUNCTION "{{schema}}".ready_on_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
  BEGIN
    INSERT INTO "{{schema}}".ready (id, queue, kind, priority, run_at, ledger)
      SELECT id, queue, kind, priority, run_at, state = 'ledger' FROM added
      WHERE state IN ('pending', 'ledger') AND (key_scope IS NULL OR key_slot IS NOT NULL) AND rate_scope IS NULL;
    INSERT INTO "{{schema}}".waiting (id, scope, name, key, queue, kind, priority, run_at)
      SELECT id, key_scope, CASE key_scope WHEN 'kind' THEN kind ELSE queue END, concurrency_key, queue, kind, priority, run_at
      FROM added WHERE state = 'ledger' AND key_scope IS NOT NULL AND key_slot IS NULL AND rate_scope IS NULL;
    RETURN NULL;
  END $fn$;
-- A ledger run is ready while it has a ready row (an admitted keyed one holds its slot in
-- key_holds, not on its row); leaving the ledger, it leaves its key's line (`waiting`) too.
CREATE OR REPLACE FUNCTION "{{schema}}".ready_on_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
  DECLARE
    was boolean := CASE WHEN OLD.state = 'ledger' THEN EXISTS (SELECT 1 FROM "{{schema}}".ready WHERE id = OLD.id)
      ELSE OLD.state = 'pending' AND (OLD.key_scope IS NULL OR OLD.key_slot IS NOT NULL) AND OLD.rate_scope IS NULL END;
    -- A run that stays in the ledger stays as ready as it was: an admitted keyed one holds its
    -- slot in key_holds, not in its row's key_slot.
    is_now boolean := CASE WHEN OLD.state = 'ledger' AND NEW.state = 'ledger' THEN was
      ELSE NEW.state IN ('pending', 'ledger') AND (NEW.key_scope IS NULL OR NEW.key_slot IS NOT NULL) AND NEW.rate_scope IS NULL END;
  BEGIN
    IF OLD.state = 'ledger' AND NEW.state <> 'ledger' THEN
      DELETE FROM "{{schema}}".waiting WHERE id = OLD.id;
    ELSIF OLD.state = 'ledger' THEN
      -- A waiting run's line follows its row (an operator's or a test's update of its due time).
      UPDATE "{{schema}}".waiting SET queue = NEW.queue, kind = NEW.kind, priority = NEW.priority, run_at = NEW.run_at,
        name = CASE scope WHEN 'kind' THEN NEW.kind ELSE NEW.queue END
      WHERE id = NEW.id;
    END IF;
    IF was AND is_now THEN
      UPDATE "{{schema}}".ready SET queue = NEW.queue, kind = NEW.kind, priority = NEW.priority, run_at = NEW.run_at,
        ledger = NEW.state = 'ledger'
      WHERE id = NEW.id;
    ELSIF was THEN
      DELETE FROM "{{schema}}".ready WHERE id = OLD.id;
    ELSIF is_now AND OLD.state <> 'ledger' THEN
      INSERT INTO "{{schema}}".ready (id, queue, kind, priority, run_at, ledger)
        VALUES (NEW.id, NEW.queue, NEW.kind, NEW.priority, NEW.run_at, NEW.state = 'ledger');
    END IF;
    RETURN NULL;
  END $fn$;

-- A slot given back on a row (migration 0013's trigger) goes to the key's next waiting due run in
-- claim order, in its row or in the ledger; slots above a lowered limit are read in key_holds.
CREATE OR REPLACE FUNCTION "{{schema}}".key_slot_hand_off() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  per integer;
  group_name text := CASE OLD.key_scope WHEN 'kind' THEN OLD.kind ELSE OLD.queue END;
BEGIN
  SELECT per_key INTO per FROM "{{schema}}".key_limits WHERE scope = OLD.key_scope AND name = group_name;
  IF per IS NULL OR OLD.key_slot >= per THEN RETURN NULL; END IF;
  IF EXISTS (SELECT 1 FROM "{{schema}}".key_holds WHERE scope = OLD.key_scope AND name = group_name AND key = OLD.concurrency_key
      AND slot >= per) THEN RETURN NULL; END IF;
  PERFORM "{{schema}}".give_slot(OLD.key_scope, group_name, OLD.concurrency_key, OLD.key_slot);
  RETURN NULL;
END
$fn$;
-- Gives a free slot to the key's first waiting due run in claim order (rows and ledger merged),
-- in a queue not paused, skipping runs another transaction holds; answers whether one took it.
CREATE FUNCTION "{{schema}}".give_slot(p_scope text, p_name text, p_key text, p_slot integer) RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
  row_id bigint;
  row_order record;
  ledger_run record;
BEGIN
  IF p_scope = 'kind' THEN
    SELECT id, priority, run_at INTO row_order FROM "{{schema}}".runs
      WHERE state = 'pending' AND key_scope = 'kind' AND key_slot IS NULL AND kind = p_name AND concurrency_key = p_key
        AND run_at <= now() AND NOT EXISTS (SELECT 1 FROM "{{schema}}".paused_queues p WHERE p.queue = runs.queue)
      ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED;
  ELSE
    SELECT id, priority, run_at INTO row_order FROM "{{schema}}".runs
      WHERE state = 'pending' AND key_scope = 'queue' AND key_slot IS NULL AND queue = p_name AND concurrency_key = p_key
        AND run_at <= now() AND NOT EXISTS (SELECT 1 FROM "{{schema}}".paused_queues p WHERE p.queue = runs.queue)
      ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED;
  END IF;
  SELECT * INTO ledger_run FROM "{{schema}}".waiting w
    WHERE w.scope = p_scope AND w.name = p_name AND w.key = p_key AND w.run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM "{{schema}}".paused_queues p WHERE p.queue = w.queue)
    ORDER BY w.priority DESC, w.run_at, w.id LIMIT 1 FOR UPDATE SKIP LOCKED;
  -- Claim order: priority DESC, run_at, id.
  IF ledger_run.id IS NOT NULL AND (row_order.id IS NULL OR (-(ledger_run.priority::bigint), ledger_run.run_at, ledger_run.id)
      < (-(row_order.priority::bigint), row_order.run_at, row_order.id)) THEN
    -- In the ledger: out of the line, the slot held in key_holds, ready to be claimed.
    DELETE FROM "{{schema}}".waiting WHERE id = ledger_run.id;
    INSERT INTO "{{schema}}".key_holds (scope, name, key, slot, run_id) VALUES (p_scope, p_name, p_key, p_slot, ledger_run.id);
    INSERT INTO "{{schema}}".ready (id, queue, kind, priority, run_at, ledger)
      VALUES (ledger_run.id, ledger_run.queue, ledger_run.kind, ledger_run.priority, ledger_run.run_at, true);
    PERFORM pg_notify('{{channel}}', 'q:' || ledger_run.queue);
    RETURN true;
  END IF;
  IF row_order.id IS NULL THEN RETURN false; END IF;
  UPDATE "{{schema}}".runs SET key_slot = p_slot WHERE id = row_order.id RETURNING id INTO row_id;
  PERFORM pg_notify('{{channel}}', 'q:' || queue) FROM "{{schema}}".runs WHERE id = row_id;
  RETURN true;
END $fn$;

-- Moves runs from the ledger to their rows, as in 0018, keyed ones with their slots: a waiting
-- run becomes a waiting row, an admitted one a pending row holding its slot, an open one a
-- running row holding its slot. Its key_holds row is given to the row's mirror in this transaction
-- (deleted, then inserted again by the row's update), so nobody else sees the slot free.
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
  UPDATE "{{schema}}".claim_batches c SET settled_at = now()
    WHERE c.batch = ANY(locked) AND c.settled_at IS NULL
      AND cardinality(c.closed) + coalesce((SELECT sum(cardinality(d.ids)) FROM "{{schema}}".completion_batches d
        WHERE d.claim_batch = c.batch), 0) >= cardinality(c.ids);
  RETURN moved;
END $fn$;

-- The SQL enqueue's admission (0021) reads the slots in key_holds (ledger runs hold some) and
-- gives them to waiting runs of rows and ledger in claim order, one slot at a time.
CREATE OR REPLACE FUNCTION "{{schema}}".admit_key(p_kind text, p_queue text, p_key text) RETURNS integer LANGUAGE plpgsql AS $fn$
  DECLARE
    admitted integer := 0;
    violated text;
    g record;
    free_slot integer;
  BEGIN
    FOR g IN SELECT l.scope, l.name, l.per_key FROM "{{schema}}".key_limits l
        WHERE (l.scope = 'kind' AND l.name = p_kind) OR (l.scope = 'queue' AND l.name = p_queue) LOOP
      FOR free_slot IN
        SELECT n.slot FROM generate_series(0, g.per_key - 1) AS n(slot)
        WHERE NOT EXISTS (SELECT 1 FROM "{{schema}}".key_holds h WHERE h.scope = g.scope AND h.name = g.name AND h.key = p_key AND h.slot = n.slot)
        ORDER BY n.slot
        LIMIT greatest(0, g.per_key - (SELECT count(*) FROM "{{schema}}".key_holds h WHERE h.scope = g.scope AND h.name = g.name AND h.key = p_key))
      LOOP
        EXIT WHEN NOT "{{schema}}".give_slot(g.scope, g.name, p_key, free_slot);
        admitted := admitted + 1;
      END LOOP;
    END LOOP;
    RETURN admitted;
  EXCEPTION
    WHEN deadlock_detected THEN RETURN 0;
    WHEN unique_violation THEN
      GET STACKED DIAGNOSTICS violated = CONSTRAINT_NAME;
      IF violated IN ('runs_key_slots_kind', 'runs_key_slots_queue', 'key_holds_pkey') THEN RETURN 0; END IF;
      RAISE;
  END
  $fn$;

-- Each run as it stands (0018), a ledger run's slot read in key_holds.
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
    r.trace_parent, r.concurrency_key, r.key_scope, coalesce(r.key_slot, l.key_slot) AS key_slot, l.batch AS claim_batch
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

-- The SQL enqueue records a keyed run as the TypeScript enqueue does: in the ledger.
CREATE OR REPLACE FUNCTION "{{schema}}".enqueue_run(kind text, payload jsonb, queue text DEFAULT 'default', run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0, max_attempts integer DEFAULT 5, idempotency_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, trace_parent text DEFAULT NULL, unique_key text DEFAULT NULL,
    unique_states text[] DEFAULT NULL, unique_for interval DEFAULT NULL, admit_keys boolean DEFAULT true,
    OUT id bigint, OUT created boolean)
  LANGUAGE plpgsql AS $fn$
  -- Unqualified names are columns where a table is in scope (the conflict targets), else parameters.
  #variable_conflict use_column
  DECLARE
    is_unique constant boolean := unique_key IS NOT NULL OR unique_states IS NOT NULL OR unique_for IS NOT NULL;
    hold_key text;
    hold_states text[];
    holder bigint;
    holder_states text[];
    holder_until timestamptz;
  BEGIN
    PERFORM "{{schema}}".check_enqueue(kind, queue, run_at, priority, max_attempts, idempotency_key, concurrency_key);
    IF is_unique THEN
      PERFORM "{{schema}}".check_unique(idempotency_key, unique_key, unique_states, unique_for);
      hold_key := "{{schema}}".unique_hold_key(unique_key, payload);
      -- Without states, a window of a period holds its key in every state (NULL: even once deleted).
      hold_states := coalesce(unique_states, CASE WHEN unique_for IS NULL THEN ARRAY['pending', 'running', 'suspended'] END);
      id := nextval(pg_get_serial_sequence('"{{schema}}".runs', 'id'));
      LOOP
        INSERT INTO "{{schema}}".unique_holds (kind, unique_key, run_id, states, held_until)
          VALUES (kind, hold_key, id, hold_states, now() + unique_for)
          ON CONFLICT (kind, unique_key) DO NOTHING;
        EXIT WHEN FOUND;
        SELECT h.run_id, h.states, h.held_until INTO holder, holder_states, holder_until FROM "{{schema}}".unique_holds h
          WHERE h.kind = enqueue_run.kind AND h.unique_key = hold_key FOR UPDATE;
        IF FOUND THEN
          -- A new statement: its snapshot, taken under the lock, sees the holder's run as committed.
          IF (holder_until IS NULL OR holder_until > now())
            AND (holder_states IS NULL OR EXISTS (SELECT 1 FROM "{{schema}}".runs r WHERE r.id = holder AND r.state = ANY(holder_states))) THEN
            id := holder;
            created := false;
            RETURN;
          END IF;
          UPDATE "{{schema}}".unique_holds h SET run_id = enqueue_run.id, states = hold_states, held_until = now() + unique_for
            WHERE h.kind = enqueue_run.kind AND h.unique_key = hold_key;
          EXIT;
        END IF;
        -- The hold the insert met was deleted before it could be locked (retention): take it anew.
      END LOOP;
      INSERT INTO "{{schema}}".runs (id, kind, payload, queue, priority, run_at, max_attempts, trace_parent, concurrency_key, state)
      VALUES (id, kind, coalesce(payload, 'null'::jsonb), queue, priority, greatest(run_at, now()), max_attempts, trace_parent,
        concurrency_key, 'pending');
    ELSE
      INSERT INTO "{{schema}}".runs AS r (kind, payload, queue, priority, run_at, max_attempts, idempotency_key, trace_parent,
        concurrency_key, state)
      VALUES (kind, coalesce(payload, 'null'::jsonb), queue, priority, greatest(run_at, now()), max_attempts, idempotency_key,
        trace_parent, concurrency_key,
        -- The default store's rule: a run without an idempotency key is recorded in the batch
        -- ledger, a keyed one too (a rate limit that governs it moves it to its row, as for the rest).
        CASE WHEN idempotency_key IS NULL THEN 'ledger' ELSE 'pending' END)
      ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
      RETURNING r.id INTO id;
      IF id IS NULL THEN
        -- A new statement, a new snapshot: the run of the key the insert met, committed before it went on.
        SELECT r.id INTO id FROM "{{schema}}".runs r WHERE r.idempotency_key = enqueue_run.idempotency_key;
        created := false;
        RETURN;
      END IF;
    END IF;
    created := true;
    PERFORM pg_notify('{{channel}}', 'q:' || queue);
    IF concurrency_key IS NOT NULL AND admit_keys THEN PERFORM "{{schema}}".admit_key(kind, queue, concurrency_key); END IF;
  END
  $fn$;
