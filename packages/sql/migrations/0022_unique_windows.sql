-- Uniqueness windows (issue 33, docs/adr/0020-uniqueness-windows.md). A unique enqueue takes its
-- kind and key's row in unique_holds (the key, or a hash of the payload's jsonb text): inserted
-- when the key is new, locked when it is not; under that lock, a new statement (a snapshot taken
-- after the lock, so after the holder's commit) reads the holder's row: while it is in the
-- window's states and within its period, the enqueue yields it (created false), otherwise the new
-- run takes the hold. Two enqueuers of one key meet on the primary key or the row lock, never both
-- past it. A unique run is recorded in its row (never the ledger), where its state is, so the check
-- reads one row by primary key. enqueue and enqueue_run (0021) are replaced by the same functions
-- with three more arguments (unique_key, unique_states, unique_for); without them they do what
-- they did.

CREATE TABLE "{{schema}}".unique_holds (
    kind text NOT NULL,
    unique_key text NOT NULL,
    run_id bigint NOT NULL,
    states text[],
    held_until timestamptz,
    PRIMARY KEY (kind, unique_key)
  );

DROP FUNCTION "{{schema}}".enqueue(text, jsonb, text, timestamptz, integer, integer, text, text, text);

DROP FUNCTION "{{schema}}".enqueue_run(text, jsonb, text, timestamptz, integer, integer, text, text, text);

CREATE FUNCTION "{{schema}}".check_unique(idempotency_key text, unique_key text, unique_states text[], unique_for interval)
  RETURNS void LANGUAGE plpgsql IMMUTABLE AS $fn$
  DECLARE
    issue text;
    unknown text;
  BEGIN
    IF idempotency_key IS NOT NULL THEN
      RAISE EXCEPTION 'invalid option %: %', 'unique', 'cannot be combined with an idempotency_key (a key that is unique for ever)'
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF unique_key IS NOT NULL THEN
      issue := "{{schema}}".text_issue(unique_key, 1024);
      IF issue IS NOT NULL THEN RAISE EXCEPTION 'invalid option %: %', 'unique_key', issue USING ERRCODE = 'invalid_parameter_value'; END IF;
    END IF;
    IF unique_states IS NOT NULL THEN
      IF cardinality(unique_states) = 0 THEN
        RAISE EXCEPTION 'invalid option %: %', 'unique_states', 'must be a non-empty list of run states' USING ERRCODE = 'invalid_parameter_value';
      END IF;
      SELECT string_agg(coalesce(to_json(u)::text, 'null'), ', ') INTO unknown FROM unnest(unique_states) u
        WHERE u IS NULL OR u NOT IN ('pending', 'running', 'suspended', 'completed', 'failed', 'cancelled');
      IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'invalid option %: %', 'unique_states',
          unknown || ' is not a run state (pending, running, suspended, completed, failed, cancelled)' USING ERRCODE = 'invalid_parameter_value';
      END IF;
    END IF;
    IF unique_for IS NOT NULL AND (unique_for <= interval '0' OR unique_for > interval '1 millisecond' * 3155760000000) THEN
      RAISE EXCEPTION 'invalid option %: %', 'unique_for', unique_for::text || ' is not a period of more than 0 and at most 100 years'
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
  END
  $fn$;

CREATE FUNCTION "{{schema}}".enqueue_run(kind text, payload jsonb, queue text DEFAULT 'default', run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0, max_attempts integer DEFAULT 5, idempotency_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, trace_parent text DEFAULT NULL, unique_key text DEFAULT NULL,
    unique_states text[] DEFAULT NULL, unique_for interval DEFAULT NULL, OUT id bigint, OUT created boolean)
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
      hold_key := CASE WHEN unique_key IS NOT NULL THEN 'key:' || unique_key
        ELSE 'payload:' || encode(sha256(convert_to(coalesce(payload, 'null'::jsonb)::text, 'UTF8')), 'hex') END;
      -- Without states, a window of a period holds its key in every state (NULL: even once deleted).
      hold_states := coalesce(unique_states, CASE WHEN unique_for IS NULL THEN ARRAY['pending', 'running', 'suspended'] END);
      id := nextval(pg_get_serial_sequence('"{{schema}}".runs', 'id'));
      INSERT INTO "{{schema}}".unique_holds (kind, unique_key, run_id, states, held_until)
        VALUES (kind, hold_key, id, hold_states, now() + unique_for)
        ON CONFLICT (kind, unique_key) DO NOTHING;
      IF NOT FOUND THEN
        SELECT h.run_id, h.states, h.held_until INTO holder, holder_states, holder_until FROM "{{schema}}".unique_holds h
          WHERE h.kind = enqueue_run.kind AND h.unique_key = hold_key FOR UPDATE;
        -- A new statement: its snapshot, taken under the lock, sees the holder's run as committed.
        IF (holder_until IS NULL OR holder_until > now())
          AND (holder_states IS NULL OR EXISTS (SELECT 1 FROM "{{schema}}".runs r WHERE r.id = holder AND r.state = ANY(holder_states))) THEN
          id := holder;
          created := false;
          RETURN;
        END IF;
        UPDATE "{{schema}}".unique_holds h SET run_id = enqueue_run.id, states = hold_states, held_until = now() + unique_for
          WHERE h.kind = enqueue_run.kind AND h.unique_key = hold_key;
      END IF;
      INSERT INTO "{{schema}}".runs (id, kind, payload, queue, priority, run_at, max_attempts, trace_parent, concurrency_key, state)
      VALUES (id, kind, coalesce(payload, 'null'::jsonb), queue, priority, greatest(run_at, now()), max_attempts, trace_parent,
        concurrency_key, 'pending');
    ELSE
      INSERT INTO "{{schema}}".runs AS r (kind, payload, queue, priority, run_at, max_attempts, idempotency_key, trace_parent,
        concurrency_key, state)
      VALUES (kind, coalesce(payload, 'null'::jsonb), queue, priority, greatest(run_at, now()), max_attempts, idempotency_key,
        trace_parent, concurrency_key,
        -- The default store's rule: a run with neither key is recorded in the batch ledger.
        CASE WHEN idempotency_key IS NULL AND concurrency_key IS NULL THEN 'ledger' ELSE 'pending' END)
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
    IF concurrency_key IS NOT NULL THEN PERFORM "{{schema}}".admit_key(kind, queue, concurrency_key); END IF;
  END
  $fn$;

CREATE FUNCTION "{{schema}}".enqueue(kind text, payload jsonb, queue text DEFAULT 'default', run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0, max_attempts integer DEFAULT 5, idempotency_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, trace_parent text DEFAULT NULL, unique_key text DEFAULT NULL,
    unique_states text[] DEFAULT NULL, unique_for interval DEFAULT NULL) RETURNS bigint
  LANGUAGE sql AS $fn$
    SELECT e.id FROM "{{schema}}".enqueue_run($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) e
  $fn$;
