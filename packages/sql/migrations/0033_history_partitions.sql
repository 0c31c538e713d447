-- History in id-range partitions, reclaimed by dropping them (ADR 0028). `runs` and `run_events`
-- become `PARTITION BY RANGE` on the run id, `claim_batches` and `completion_batches` on the claim
-- batch; each pair shares its bounds, so a range of runs and its events go together, as do a range
-- of claim batches and their completions. The table as it was becomes the first partition of each
-- (`<table>_from_0`, every row written so far, attached without a copy); new partitions have
-- fillfactor 100 (history rows are written once on the ledger path). `maintain_history` creates
-- the ranges ahead of the sequences and drops the ranges whose runs all ended before the window.
--
-- A partitioned table holds a unique index only on its partition key, so the idempotency key moves
-- to `idempotency_keys` (key -> run), which enqueue inserts first, and a held signal token to
-- `signal_tokens` (kept by a trigger); row runs' key slots keep non-unique indexes (a slot's
-- uniqueness is `key_holds_pkey`, whose mirror trigger 0025 put on every slot a row takes).
--
-- Not online: it holds each table in ACCESS EXCLUSIVE while it swaps it, and builds the
-- non-unique indexes on the first partition (a scan of each). Stop the workers and enqueuers of the
-- previous release first (DEPLOYMENT.md, "Upgrading to history partitions").

CREATE TABLE "{{schema}}".idempotency_keys (
  key text PRIMARY KEY,
  run_id bigint NOT NULL
);

CREATE INDEX idempotency_keys_run ON "{{schema}}".idempotency_keys (run_id);

INSERT INTO "{{schema}}".idempotency_keys (key, run_id)
  SELECT idempotency_key, id FROM "{{schema}}".runs WHERE idempotency_key IS NOT NULL;

-- One row per partition of `runs` (and its `run_events` partition) and of `claim_batches` (and
-- its `completion_batches` partition), written by the maintenance only. `quiet_since`: when the
-- maintenance first found no run of the range unended and nothing holding it (cleared if one is
-- again); the range is dropped once that is older than the window.
CREATE TABLE "{{schema}}".history_ranges (
  tbl text NOT NULL CHECK (tbl IN ('runs', 'claim_batches')),
  lo bigint NOT NULL,
  hi bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  quiet_since timestamptz,
  PRIMARY KEY (tbl, lo),
  CHECK (lo < hi)
);

-- Swaps `tbl` for a table partitioned by range on `key`, with the old table as the partition of
-- every key under `bound`. Indexes, triggers and checks move to the parent; unique indexes other
-- than the primary key stay on the old partition only (the caller gives their replacements).
CREATE FUNCTION "{{schema}}".partition_history_table(tbl text, key text, bound bigint, serial text) RETURNS void
LANGUAGE plpgsql AS $$
  DECLARE
    old text := tbl || '_from_0';
    r record;
    seq_start bigint;
    pk text;
  BEGIN
    EXECUTE format('LOCK TABLE "{{schema}}".%I IN ACCESS EXCLUSIVE MODE', tbl);
    IF serial IS NOT NULL THEN
      -- PostgreSQL 15 has no identity column on a partitioned table: a sequence owned by the column.
      EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s',
        pg_get_serial_sequence(format('"{{schema}}".%I', tbl), serial)) INTO seq_start;
      EXECUTE format('ALTER TABLE "{{schema}}".%I ALTER COLUMN %I DROP IDENTITY', tbl, serial);
    END IF;
    SELECT pg_get_constraintdef(c.oid) INTO pk FROM pg_constraint c
      WHERE c.conrelid = format('"{{schema}}".%I', tbl)::regclass AND c.contype = 'p';
    EXECUTE format('ALTER TABLE "{{schema}}".%I RENAME TO %I', tbl, old);
    FOR r IN SELECT i.indexrelid::regclass::text AS name, c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = format('"{{schema}}".%I', old)::regclass LOOP
      EXECUTE format('ALTER INDEX "{{schema}}".%I RENAME TO %I', r.relname, r.relname || '_from_0');
    END LOOP;
    EXECUTE format('CREATE TABLE "{{schema}}".%I (LIKE "{{schema}}".%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (%I)',
      tbl, old, key);
    IF pk LIKE '%(' || key || ')%' OR pk LIKE '%(' || key || ',%' OR pk LIKE '%, ' || key || ')%' THEN
      EXECUTE format('ALTER TABLE "{{schema}}".%I ADD CONSTRAINT %I %s', tbl, tbl || '_pkey', pk);
    END IF;
    -- Non-unique indexes, under their own names, on the parent: the old partition's copies are
    -- attached to them, not built again.
    FOR r IN SELECT c.relname, pg_get_indexdef(i.indexrelid) AS def FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = format('"{{schema}}".%I', old)::regclass AND NOT i.indisunique LOOP
      EXECUTE replace(replace(r.def, 'INDEX ' || r.relname || ' ON ', 'INDEX ' || left(r.relname, length(r.relname) - 7) || ' ON '),
        ' ON {{schema}}.' || old || ' USING ', ' ON {{schema}}.' || tbl || ' USING ');
    END LOOP;
    FOR r IN SELECT t.tgname, pg_get_triggerdef(t.oid) AS def FROM pg_trigger t
        WHERE t.tgrelid = format('"{{schema}}".%I', old)::regclass AND NOT t.tgisinternal LOOP
      EXECUTE format('DROP TRIGGER %I ON "{{schema}}".%I', r.tgname, old);
      EXECUTE replace(r.def, ' ON {{schema}}.' || old || ' ', ' ON {{schema}}.' || tbl || ' ');
    END LOOP;
    -- A partition's checks must be valid as its parent's are (a scan of the old table each).
    FOR r IN SELECT c.conname FROM pg_constraint c
        WHERE c.conrelid = format('"{{schema}}".%I', old)::regclass AND c.contype = 'c' AND NOT c.convalidated LOOP
      EXECUTE format('ALTER TABLE "{{schema}}".%I VALIDATE CONSTRAINT %I', old, r.conname);
    END LOOP;
    -- A validated check of the range spares the attach its scan under the lock.
    EXECUTE format('ALTER TABLE "{{schema}}".%I ADD CONSTRAINT %I CHECK (%I IS NOT NULL AND %I < %s)', old, old || '_range', key, key, bound);
    EXECUTE format('ALTER TABLE "{{schema}}".%I ATTACH PARTITION "{{schema}}".%I FOR VALUES FROM (MINVALUE) TO (%s)', tbl, old, bound);
    EXECUTE format('ALTER TABLE "{{schema}}".%I DROP CONSTRAINT %I', old, old || '_range');
    IF serial IS NOT NULL THEN
      EXECUTE format('CREATE SEQUENCE "{{schema}}".%I AS bigint START WITH %s OWNED BY "{{schema}}".%I.%I',
        tbl || '_' || serial || '_seq', seq_start, tbl, serial);
      EXECUTE format('ALTER TABLE "{{schema}}".%I ALTER COLUMN %I SET DEFAULT nextval(%L::regclass)',
        tbl, serial, '"{{schema}}".' || tbl || '_' || serial || '_seq');
    END IF;
  END
$$;

-- The views read the tables by name: their text, taken before the swap, read again after it.
CREATE TEMPORARY TABLE history_views ON COMMIT DROP AS
  SELECT c.relname, pg_get_viewdef(c.oid) AS def FROM pg_class c
  WHERE c.relnamespace = '"{{schema}}"'::regnamespace AND c.relkind = 'v'
    AND EXISTS (SELECT 1 FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid WHERE w.ev_class = c.oid
      AND d.refobjid IN ('"{{schema}}".runs'::regclass, '"{{schema}}".run_events'::regclass,
        '"{{schema}}".claim_batches'::regclass, '"{{schema}}".completion_batches'::regclass));

-- The first key of the new partitions: the next id (batch) the sequence gives.
CREATE TEMPORARY TABLE history_bounds ON COMMIT DROP AS
  SELECT (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM "{{schema}}".runs_id_seq) AS runs,
    (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM "{{schema}}".claim_batches_batch_seq) AS batches;

DROP VIEW "{{schema}}".run_history;

DROP VIEW "{{schema}}".runs_now;

SELECT "{{schema}}".partition_history_table('runs', 'id', (SELECT runs FROM history_bounds), 'id');

SELECT "{{schema}}".partition_history_table('run_events', 'run_id', (SELECT runs FROM history_bounds), 'id');

SELECT "{{schema}}".partition_history_table('claim_batches', 'batch', (SELECT batches FROM history_bounds), 'batch');

SELECT "{{schema}}".partition_history_table('completion_batches', 'claim_batch', (SELECT batches FROM history_bounds), NULL);

DROP FUNCTION "{{schema}}".partition_history_table(text, text, bigint, text);

-- A key past every range (the maintenance has not run for a range's worth of ids, or a sequence
-- was moved) lands in the default partition instead of failing; the maintenance starts its next
-- range past it. What lands there is never reclaimed.
CREATE TABLE "{{schema}}".runs_beyond PARTITION OF "{{schema}}".runs DEFAULT WITH (fillfactor = 100);

CREATE TABLE "{{schema}}".run_events_beyond PARTITION OF "{{schema}}".run_events DEFAULT WITH (fillfactor = 100);

CREATE TABLE "{{schema}}".claim_batches_beyond PARTITION OF "{{schema}}".claim_batches DEFAULT WITH (fillfactor = 100);

CREATE TABLE "{{schema}}".completion_batches_beyond PARTITION OF "{{schema}}".completion_batches DEFAULT
  WITH (fillfactor = 100);

DO $$
  DECLARE v record;
  BEGIN
    FOR v IN SELECT relname, def FROM history_views ORDER BY relname DESC LOOP
      EXECUTE format('CREATE VIEW "{{schema}}".%I AS %s', v.relname, v.def);
    END LOOP;
  END
$$;

-- The replacements of the old partition's unique indexes, not unique (their lookups); a row run's
-- slot is held once by key_holds_pkey.
CREATE INDEX runs_by_signal_token ON "{{schema}}".runs (signal_token) WHERE signal_token IS NOT NULL;

-- A signal token is held by one suspended run at a time: `signal_tokens`, kept by a trigger from
-- the runs' tokens. Its key keeps the name of the unique index it replaces, which a suspension
-- that meets a held token reads from the violation (SignalTokenInUse).
CREATE TABLE "{{schema}}".signal_tokens (
  token text NOT NULL,
  run_id bigint NOT NULL,
  CONSTRAINT runs_signal_token PRIMARY KEY (token)
);

INSERT INTO "{{schema}}".signal_tokens (token, run_id)
  SELECT signal_token, id FROM "{{schema}}".runs WHERE signal_token IS NOT NULL;

CREATE FUNCTION "{{schema}}".signal_tokens_mirror() RETURNS trigger
LANGUAGE plpgsql AS $$
  BEGIN
    IF TG_OP <> 'INSERT' AND OLD.signal_token IS NOT NULL THEN
      DELETE FROM "{{schema}}".signal_tokens t WHERE t.token = OLD.signal_token AND t.run_id = OLD.id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.signal_token IS NOT NULL THEN
      INSERT INTO "{{schema}}".signal_tokens (token, run_id) VALUES (NEW.signal_token, NEW.id);
    END IF;
    RETURN NULL;
  END
$$;

CREATE TRIGGER signal_tokens_mirror AFTER UPDATE OF signal_token ON "{{schema}}".runs
  FOR EACH ROW WHEN (OLD.signal_token IS DISTINCT FROM NEW.signal_token) EXECUTE FUNCTION "{{schema}}".signal_tokens_mirror();

CREATE TRIGGER signal_tokens_forget AFTER DELETE ON "{{schema}}".runs
  FOR EACH ROW WHEN (OLD.signal_token IS NOT NULL) EXECUTE FUNCTION "{{schema}}".signal_tokens_mirror();

CREATE TRIGGER signal_tokens_insert AFTER INSERT ON "{{schema}}".runs
  FOR EACH ROW WHEN (NEW.signal_token IS NOT NULL) EXECUTE FUNCTION "{{schema}}".signal_tokens_mirror();

CREATE INDEX runs_key_slots_kind ON "{{schema}}".runs (kind, concurrency_key, key_slot)
  WHERE key_scope = 'kind' AND key_slot IS NOT NULL;

CREATE INDEX runs_key_slots_queue ON "{{schema}}".runs (queue, concurrency_key, key_slot)
  WHERE key_scope = 'queue' AND key_slot IS NOT NULL;

-- The old partition's unique indexes: their uniqueness is held by the tables above and key_holds.
DROP INDEX "{{schema}}".runs_idempotency_key_from_0;

DROP INDEX "{{schema}}".runs_signal_token_from_0;

DROP INDEX "{{schema}}".runs_key_slots_kind_from_0;

DROP INDEX "{{schema}}".runs_key_slots_queue_from_0;

-- The runs a range must keep whatever its age, found without reading the range: row runs not ended.
CREATE INDEX runs_live ON "{{schema}}".runs (id) WHERE state IN ('pending', 'running', 'suspended');

-- The first partitions' ranges (lo 0 stands for MINVALUE).
INSERT INTO "{{schema}}".history_ranges (tbl, lo, hi)
SELECT 'runs', 0, runs FROM history_bounds UNION ALL SELECT 'claim_batches', 0, batches FROM history_bounds;

-- The SQL enqueue: an idempotency key is held by idempotency_keys (a partitioned runs table holds
-- no unique index on it); a repeated key yields its run, as before.
CREATE OR REPLACE FUNCTION "{{schema}}".enqueue_run(kind text, payload jsonb, queue text DEFAULT 'default', run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0, max_attempts integer DEFAULT 5, idempotency_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, trace_parent text DEFAULT NULL, unique_key text DEFAULT NULL,
    unique_states text[] DEFAULT NULL, unique_for interval DEFAULT NULL, admit_keys boolean DEFAULT true,
    into_ledger boolean DEFAULT true, OUT id bigint, OUT created boolean)
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
          -- A new statement: its snapshot, taken under the lock, sees the holder's run as committed,
          -- in its row or in the ledger (runs_now: one snapshot of its ready, waiting, claim and
          -- completion rows, each written whole by one transaction).
          IF (holder_until IS NULL OR holder_until > now())
            AND (holder_states IS NULL OR EXISTS (SELECT 1 FROM "{{schema}}".runs_now r WHERE r.id = holder AND r.state = ANY(holder_states))) THEN
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
        concurrency_key, CASE WHEN into_ledger THEN 'ledger' ELSE 'pending' END);
    ELSE
      id := nextval(pg_get_serial_sequence('"{{schema}}".runs', 'id'));
      IF idempotency_key IS NOT NULL THEN
        -- The key first: an insert of the same key waits for this transaction and then meets it.
        INSERT INTO "{{schema}}".idempotency_keys AS k (key, run_id) VALUES (idempotency_key, id)
          ON CONFLICT (key) DO NOTHING;
        IF NOT FOUND THEN
          -- A new statement, a new snapshot: the run of the key the insert met, committed before it went on.
          SELECT k.run_id INTO id FROM "{{schema}}".idempotency_keys k WHERE k.key = enqueue_run.idempotency_key;
          created := false;
          RETURN;
        END IF;
      END IF;
      INSERT INTO "{{schema}}".runs AS r (id, kind, payload, queue, priority, run_at, max_attempts, idempotency_key, trace_parent,
        concurrency_key, state)
      VALUES (id, kind, coalesce(payload, 'null'::jsonb), queue, priority, greatest(run_at, now()), max_attempts, idempotency_key,
        trace_parent, concurrency_key,
        -- The default store's rule: a run without an idempotency key is recorded in the batch
        -- ledger, a keyed one too (a rate limit that governs it moves it to its row, as for the rest).
        CASE WHEN idempotency_key IS NULL THEN 'ledger' ELSE 'pending' END);
    END IF;
    created := true;
    PERFORM pg_notify('{{channel}}', 'q:' || queue);
    IF concurrency_key IS NOT NULL AND admit_keys THEN PERFORM "{{schema}}".admit_key(kind, queue, concurrency_key); END IF;
  END
  $fn$;

-- Whether a range of runs holds a run that keeps it: a run not ended (a row run pending, running or
-- suspended; a ledger run ready, waiting for a key slot or open in an unsettled claim batch), or one
-- whose unique window holds its key (unique_holds names it).
CREATE FUNCTION "{{schema}}".history_range_kept(lo bigint, hi bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM "{{schema}}".runs r WHERE r.id >= lo AND r.id < hi AND r.state IN ('pending', 'running', 'suspended'))
    OR EXISTS (SELECT 1 FROM "{{schema}}".ready y WHERE y.id >= lo AND y.id < hi)
    OR EXISTS (SELECT 1 FROM "{{schema}}".waiting w WHERE w.id >= lo AND w.id < hi)
    OR EXISTS (SELECT 1 FROM "{{schema}}".unique_holds h WHERE h.run_id >= lo AND h.run_id < hi)
    OR EXISTS (SELECT 1 FROM "{{schema}}".claim_batches c
      WHERE c.settled_at IS NULL AND c.span && int8multirange(int8range(lo, hi)))
$$;

-- The store's maintenance of its history, one caller at a time (an advisory lock; a second caller
-- returns at once with nothing done). Creates the next range of each table ahead of its sequence,
-- sized to what the last day used (at least `range_floor`); marks a range of runs quiet when none of
-- its runs keeps it; drops a range of runs (and its events, idempotency keys and workflow journal)
-- quiet for longer than its window (`keep_failed` when it holds a failed or cancelled run, else
-- `keep`), and a range of claim batches (and its completions) all settled and naming only dropped
-- runs. `dry_run` reports what it would do. One row per action.
CREATE FUNCTION "{{schema}}".maintain_history(keep interval, keep_failed interval, range_floor bigint DEFAULT 100000,
    dry_run boolean DEFAULT false)
  RETURNS TABLE (action text, tbl text, lo bigint, hi bigint)
LANGUAGE plpgsql AS $$
  DECLARE
    t record;
    g record;
    next_key bigint;
    top bigint;
    size bigint;
    oldest_kept bigint;
    holds_failed boolean;
    beyond bigint;
  BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('leasehold:history:{{schema}}')) THEN RETURN; END IF;
    -- Ranges ahead: while the sequence is within half a range of the last bound, one more.
    FOR t IN SELECT * FROM (VALUES ('runs', 'run_events', '"{{schema}}".runs_id_seq'),
        ('claim_batches', 'completion_batches', '"{{schema}}".claim_batches_batch_seq')) AS v(parent, child, seq) LOOP
      EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s', t.seq) INTO next_key;
      LOOP
        SELECT max(h.hi) INTO top FROM "{{schema}}".history_ranges h WHERE h.tbl = t.parent;
        -- What the open range used per day since it was created, for a day ahead.
        SELECT greatest(range_floor, least(1000000000, coalesce(
          ((next_key - h.lo) / greatest(extract(epoch FROM now() - h.created_at), 3600) * 86400)::bigint, 0)))
          INTO size FROM "{{schema}}".history_ranges h WHERE h.tbl = t.parent AND h.lo <= next_key AND h.hi > next_key;
        size := coalesce(size, range_floor);
        EXIT WHEN top - next_key >= size / 2;
        action := 'create'; tbl := t.parent; lo := top; hi := top + size;
        IF next_key > top THEN
          -- Keys past every range are in the default partition: the next range starts past them.
          EXECUTE format('SELECT max(%I) FROM "{{schema}}".%I', CASE t.parent WHEN 'runs' THEN 'id' ELSE 'batch' END,
            t.parent || '_beyond') INTO beyond;
          lo := greatest(top, coalesce(beyond + 1, top));
          hi := greatest(next_key, lo) + size;
          IF NOT dry_run THEN
            -- And past the events (completions) there, which the new range's other table must not hold.
            EXECUTE format('SELECT max(%I) FROM "{{schema}}".%I', CASE t.child WHEN 'run_events' THEN 'run_id' ELSE 'claim_batch' END,
              t.child || '_beyond') INTO beyond;
            lo := greatest(lo, coalesce(beyond + 1, lo));
          END IF;
        END IF;
        IF NOT dry_run THEN
          EXECUTE format('CREATE TABLE "{{schema}}".%I PARTITION OF "{{schema}}".%I FOR VALUES FROM (%s) TO (%s) WITH (fillfactor = 100)',
            t.parent || '_from_' || lo, t.parent, lo, hi);
          EXECUTE format('CREATE TABLE "{{schema}}".%I PARTITION OF "{{schema}}".%I FOR VALUES FROM (%s) TO (%s) WITH (fillfactor = 100)',
            t.child || '_from_' || lo, t.child, lo, hi);
          INSERT INTO "{{schema}}".history_ranges (tbl, lo, hi) VALUES (t.parent, maintain_history.lo, maintain_history.hi);
        END IF;
        RETURN NEXT;
        EXIT WHEN dry_run;
      END LOOP;
    END LOOP;
    -- Ranges of runs the sequence has passed: quiet, or dropped once quiet for their window.
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO next_key FROM "{{schema}}".runs_id_seq;
    FOR g IN SELECT h.* FROM "{{schema}}".history_ranges h WHERE h.tbl = 'runs' AND h.hi <= next_key ORDER BY h.lo LOOP
      IF "{{schema}}".history_range_kept(g.lo, g.hi)
        -- An operator's retry ended a run again after the range went quiet.
        OR (g.quiet_since IS NOT NULL AND EXISTS (SELECT 1 FROM "{{schema}}".runs r
          WHERE r.id >= g.lo AND r.id < g.hi AND r.finished_at > g.quiet_since)) THEN
        IF g.quiet_since IS NOT NULL AND NOT dry_run THEN
          UPDATE "{{schema}}".history_ranges h SET quiet_since = NULL WHERE h.tbl = 'runs' AND h.lo = g.lo;
        END IF;
        CONTINUE;
      END IF;
      IF g.quiet_since IS NULL THEN
        action := 'quiet'; tbl := 'runs'; lo := g.lo; hi := g.hi;
        IF NOT dry_run THEN UPDATE "{{schema}}".history_ranges h SET quiet_since = now() WHERE h.tbl = 'runs' AND h.lo = g.lo; END IF;
        RETURN NEXT;
        CONTINUE;
      END IF;
      holds_failed := EXISTS (SELECT 1 FROM "{{schema}}".runs r WHERE r.id >= g.lo AND r.id < g.hi AND r.state IN ('failed', 'cancelled'));
      CONTINUE WHEN g.quiet_since > now() - CASE WHEN holds_failed THEN keep_failed ELSE keep END;
      action := 'drop'; tbl := 'runs'; lo := g.lo; hi := g.hi;
      IF NOT dry_run THEN
        -- A workflow's journal is keyed by its execution: its run's idempotency key.
        DELETE FROM "{{schema}}".workflow_activities a USING "{{schema}}".idempotency_keys k
          WHERE k.run_id >= g.lo AND k.run_id < g.hi AND a.execution = k.key;
        DELETE FROM "{{schema}}".workflow_deferreds a USING "{{schema}}".idempotency_keys k
          WHERE k.run_id >= g.lo AND k.run_id < g.hi AND a.execution = k.key;
        DELETE FROM "{{schema}}".workflow_clocks a USING "{{schema}}".idempotency_keys k
          WHERE k.run_id >= g.lo AND k.run_id < g.hi AND a.execution = k.key;
        DELETE FROM "{{schema}}".workflow_awaits a USING "{{schema}}".idempotency_keys k
          WHERE k.run_id >= g.lo AND k.run_id < g.hi AND a.execution = k.key;
        DELETE FROM "{{schema}}".idempotency_keys k WHERE k.run_id >= g.lo AND k.run_id < g.hi;
        EXECUTE format('DROP TABLE "{{schema}}".%I, "{{schema}}".%I', 'runs_from_' || g.lo, 'run_events_from_' || g.lo);
        DELETE FROM "{{schema}}".history_ranges h WHERE h.tbl = 'runs' AND h.lo = g.lo;
      END IF;
      RETURN NEXT;
    END LOOP;
    -- Ranges of claim batches: settled, naming no run still kept.
    SELECT coalesce(min(h.lo), next_key) INTO oldest_kept FROM "{{schema}}".history_ranges h
      WHERE h.tbl = 'runs';
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO next_key FROM "{{schema}}".claim_batches_batch_seq;
    FOR g IN SELECT h.* FROM "{{schema}}".history_ranges h WHERE h.tbl = 'claim_batches' AND h.hi <= next_key ORDER BY h.lo LOOP
      CONTINUE WHEN EXISTS (SELECT 1 FROM "{{schema}}".claim_batches c WHERE c.batch >= g.lo AND c.batch < g.hi
        AND (c.settled_at IS NULL OR upper(c.span) > oldest_kept));
      action := 'drop'; tbl := 'claim_batches'; lo := g.lo; hi := g.hi;
      IF NOT dry_run THEN
        EXECUTE format('DROP TABLE "{{schema}}".%I, "{{schema}}".%I', 'claim_batches_from_' || g.lo, 'completion_batches_from_' || g.lo);
        DELETE FROM "{{schema}}".history_ranges h WHERE h.tbl = 'claim_batches' AND h.lo = g.lo;
      END IF;
      RETURN NEXT;
    END LOOP;
  END
$$;

-- The first ranges ahead, at the floor.
SELECT count(*) FROM "{{schema}}".maintain_history(interval '7 days', interval '7 days');
