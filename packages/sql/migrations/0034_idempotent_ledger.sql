-- Runs with an idempotency key in the batch ledger (issue 41 item 4; docs/adr/0017-batch-ledger-storage.md,
-- "Amended 2026-12-03"): they stayed on their rows for the unique index on runs.idempotency_key,
-- which the ledger's claim and completion never write. Since migration 0033 the key is held by
-- idempotency_keys, inserted before its run, so nothing ties a keyed run to its row: enqueue_run
-- records it as it records a run without a key, in the ledger unless into_ledger is false (a store
-- of storage "rows"). A repeated key still yields its run, from idempotency_keys; a workflow's
-- execution is still found by its key, its state read through runs_now (workflow.ts).

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
        -- The default store's rule: every run is recorded in the batch ledger, with or without an
        -- idempotency key (a rate limit that governs it moves it to its row, as for the rest).
        CASE WHEN into_ledger THEN 'ledger' ELSE 'pending' END);
    END IF;
    created := true;
    PERFORM pg_notify('{{channel}}', 'q:' || queue);
    IF concurrency_key IS NOT NULL AND admit_keys THEN PERFORM "{{schema}}".admit_key(kind, queue, concurrency_key); END IF;
  END
  $fn$;
