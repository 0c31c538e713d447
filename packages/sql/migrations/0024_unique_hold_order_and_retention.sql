-- Uniqueness windows, continued (docs/adr/0020-uniqueness-windows.md, consequences).
--
-- 1. A batch takes its holds in one canonical order. unique_hold_key is the one formula of a hold's
--    key (enqueue_run's, and the TypeScript batch's lock pass, which takes every hold of a batch in
--    (kind, key) order before the batch's runs are enqueued in request order): two batches of the
--    same keys in opposite orders queue on the first key they share instead of deadlocking.
-- 2. Retention deletes holds. A completion that deletes its run (completedRuns "delete") deletes
--    the holds of that run that can never hold again (with states: a deleted run is in none; with a
--    period only, once it ended), and as many holds whose period ended as runs it deleted; the two
--    indexes below make both probes. A hold row may now vanish between enqueue_run's insert (which
--    met it) and its lock (which finds nothing): enqueue_run then inserts again.
-- 3. enqueue_run takes admit_keys (default true): false leaves the admission of a keyed run to
--    the caller, the TypeScript batch, which admits once for the whole batch as the memory store
--    does (runs of a batch take their keys' slots in claim order, not in request order).

CREATE INDEX unique_holds_run ON "{{schema}}".unique_holds (run_id);

CREATE INDEX unique_holds_until ON "{{schema}}".unique_holds (held_until) WHERE held_until IS NOT NULL;

CREATE FUNCTION "{{schema}}".unique_hold_key(unique_key text, payload jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $fn$
    -- jsonb's text is canonical: payloads equal as JSON values have one key.
    SELECT CASE WHEN unique_key IS NOT NULL THEN 'key:' || unique_key
      ELSE 'payload:' || encode(sha256(convert_to(coalesce(payload, 'null'::jsonb)::text, 'UTF8')), 'hex') END
  $fn$;

DROP FUNCTION "{{schema}}".enqueue_run(text, jsonb, text, timestamptz, integer, integer, text, text, text, text, text[], interval);

CREATE FUNCTION "{{schema}}".enqueue_run(kind text, payload jsonb, queue text DEFAULT 'default', run_at timestamptz DEFAULT now(),
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
    IF concurrency_key IS NOT NULL AND admit_keys THEN PERFORM "{{schema}}".admit_key(kind, queue, concurrency_key); END IF;
  END
  $fn$;
