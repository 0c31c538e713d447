-- Enqueue from SQL (issue 33, docs/guides/enqueue-from-sql.md). The functions enqueue and
-- enqueue_run in the store's schema do what one TypeScript enqueue does
-- (internal/statements/enqueue.ts with core's checkEnqueueRequest): the same defaults, the same
-- checks (a bad value raises invalid_parameter_value naming the option, as InvalidConfig does,
-- before anything is written), an idempotency key that yields the run it already names, a keyed
-- run governed and admitted as the TypeScript enqueue admits it (admit_key: admit.ts's admission
-- for one kind, queue and key, giving up on a collision as admitInPassing does), a run without keys
-- recorded in the ledger (the default store's rule), and the workers of its queue woken by the same
-- notification. They run in the caller's transaction: a trigger's enqueue commits or rolls back
-- with its write. test/sql-enqueue.test.ts holds the two paths equal.

CREATE FUNCTION "{{schema}}".text_issue(value text, max_bytes integer) RETURNS text LANGUAGE sql IMMUTABLE AS $fn$
    -- PostgreSQL's text holds neither NUL nor an unpaired surrogate: only emptiness and length remain.
    SELECT CASE
      WHEN value IS NULL OR value = '' THEN 'must be a non-empty string'
      WHEN octet_length(convert_to(value, 'UTF8')) > max_bytes
        THEN 'is ' || octet_length(convert_to(value, 'UTF8')) || ' bytes long, over the limit of ' || max_bytes
    END
  $fn$;

CREATE FUNCTION "{{schema}}".admit_key(p_kind text, p_queue text, p_key text) RETURNS integer LANGUAGE plpgsql AS $fn$
  DECLARE
    admitted integer := 0;
    violated text;
  BEGIN
    WITH groups AS MATERIALIZED (
      SELECT l.scope, l.name, l.per_key FROM "{{schema}}".key_limits l
      WHERE (l.scope = 'kind' AND l.name = p_kind) OR (l.scope = 'queue' AND l.name = p_queue)
    ), held AS MATERIALIZED (
      SELECT g.*, CASE g.scope
          WHEN 'kind' THEN ARRAY(SELECT o.key_slot FROM "{{schema}}".runs o WHERE o.key_scope = 'kind'
            AND o.kind = g.name AND o.concurrency_key = p_key AND o.key_slot IS NOT NULL)
          ELSE ARRAY(SELECT o.key_slot FROM "{{schema}}".runs o WHERE o.key_scope = 'queue'
            AND o.queue = g.name AND o.concurrency_key = p_key AND o.key_slot IS NOT NULL)
        END AS slots
      FROM groups g
    ), free AS MATERIALIZED (
      SELECT h.scope, h.name, f.slots, cardinality(f.slots) AS free
      FROM held h CROSS JOIN LATERAL (
        SELECT ARRAY(SELECT n.slot FROM generate_series(0, h.per_key - 1) AS n(slot)
          WHERE n.slot <> ALL (h.slots) ORDER BY n.slot LIMIT greatest(0, h.per_key - cardinality(h.slots))) AS slots
      ) f
      WHERE cardinality(f.slots) > 0
    ), waiting AS MATERIALIZED (
      SELECT r.id, k.slots[row_number() OVER (PARTITION BY k.scope ORDER BY r.priority DESC, r.run_at, r.id)] AS slot
      FROM free k CROSS JOIN LATERAL (
        SELECT * FROM (
          SELECT w.id, w.priority, w.run_at FROM "{{schema}}".runs w
          WHERE k.scope = 'kind' AND w.state = 'pending' AND w.key_scope = 'kind' AND w.key_slot IS NULL
            AND w.kind = k.name AND w.concurrency_key = p_key AND w.run_at <= now()
            AND w.queue <> ALL (ARRAY(SELECT p.queue FROM "{{schema}}".paused_queues p))
          ORDER BY w.priority DESC, w.run_at, w.id LIMIT k.free
          FOR UPDATE OF w SKIP LOCKED
        ) kind_runs
        UNION ALL
        SELECT * FROM (
          SELECT w.id, w.priority, w.run_at FROM "{{schema}}".runs w
          WHERE k.scope = 'queue' AND w.state = 'pending' AND w.key_scope = 'queue' AND w.key_slot IS NULL
            AND w.queue = k.name AND w.concurrency_key = p_key AND w.run_at <= now()
            AND w.queue <> ALL (ARRAY(SELECT p.queue FROM "{{schema}}".paused_queues p))
          ORDER BY w.priority DESC, w.run_at, w.id LIMIT k.free
          FOR UPDATE OF w SKIP LOCKED
        ) queue_runs
      ) r
    ), taken AS (
      UPDATE "{{schema}}".runs r SET key_slot = w.slot FROM waiting w WHERE r.id = w.id
      RETURNING r.queue
    ), woken AS (
      SELECT pg_notify('{{channel}}', 'q:' || queue) FROM (SELECT DISTINCT queue FROM taken) q
    )
    SELECT (SELECT count(*) FROM taken) + 0 * (SELECT count(*) FROM woken) INTO admitted;
    RETURN admitted;
  EXCEPTION
    WHEN deadlock_detected THEN RETURN 0;
    WHEN unique_violation THEN
      GET STACKED DIAGNOSTICS violated = CONSTRAINT_NAME;
      IF violated IN ('runs_key_slots_kind', 'runs_key_slots_queue') THEN RETURN 0; END IF;
      RAISE;
  END
  $fn$;

CREATE FUNCTION "{{schema}}".check_enqueue(kind text, queue text, run_at timestamptz, priority integer,
    max_attempts integer, idempotency_key text, concurrency_key text) RETURNS void LANGUAGE plpgsql STABLE AS $fn$
  DECLARE
    issue text;
  BEGIN
    issue := "{{schema}}".text_issue(kind, 255);
    IF issue IS NOT NULL THEN RAISE EXCEPTION 'invalid option %: %', 'kind', issue USING ERRCODE = 'invalid_parameter_value'; END IF;
    issue := "{{schema}}".text_issue(queue, 255);
    IF issue IS NOT NULL THEN RAISE EXCEPTION 'invalid option %: %', 'queue', issue USING ERRCODE = 'invalid_parameter_value'; END IF;
    -- A whole number below 2^31 in magnitude, as the TypeScript check asks (integer's least value is not).
    IF priority IS NULL OR priority = -2147483648 THEN
      RAISE EXCEPTION 'invalid option %: %', 'priority', coalesce(priority::text, 'NULL') || ' is not a whole number' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A due time: from now (an earlier one is now, as a delay of 0) to 100 years on (Limits.maxDelayMs).
    IF run_at IS NULL OR NOT isfinite(run_at) OR run_at > now() + interval '1 millisecond' * 3155760000000 THEN
      RAISE EXCEPTION 'invalid option %: %', 'run_at', coalesce(run_at::text, 'NULL') || ' is not a due time within 100 years from now'
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
      RAISE EXCEPTION 'invalid option %: %', 'max_attempts', coalesce(max_attempts::text, 'NULL') || ' is not a whole number of at least 1'
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF idempotency_key IS NOT NULL THEN
      issue := "{{schema}}".text_issue(idempotency_key, 1024);
      IF issue IS NOT NULL THEN RAISE EXCEPTION 'invalid option %: %', 'idempotency_key', issue USING ERRCODE = 'invalid_parameter_value'; END IF;
    END IF;
    IF concurrency_key IS NOT NULL THEN
      issue := "{{schema}}".text_issue(concurrency_key, 1024);
      IF issue IS NOT NULL THEN RAISE EXCEPTION 'invalid option %: %', 'concurrency_key', issue USING ERRCODE = 'invalid_parameter_value'; END IF;
    END IF;
  END
  $fn$;

CREATE FUNCTION "{{schema}}".enqueue_run(kind text, payload jsonb, queue text DEFAULT 'default', run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0, max_attempts integer DEFAULT 5, idempotency_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, trace_parent text DEFAULT NULL, OUT id bigint, OUT created boolean)
  LANGUAGE plpgsql AS $fn$
  -- Unqualified names are columns where a table is in scope (the conflict target), else parameters.
  #variable_conflict use_column
  BEGIN
    PERFORM "{{schema}}".check_enqueue(kind, queue, run_at, priority, max_attempts, idempotency_key, concurrency_key);
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
    created := true;
    PERFORM pg_notify('{{channel}}', 'q:' || queue);
    IF concurrency_key IS NOT NULL THEN PERFORM "{{schema}}".admit_key(kind, queue, concurrency_key); END IF;
  END
  $fn$;

CREATE FUNCTION "{{schema}}".enqueue(kind text, payload jsonb, queue text DEFAULT 'default', run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0, max_attempts integer DEFAULT 5, idempotency_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, trace_parent text DEFAULT NULL) RETURNS bigint
  LANGUAGE sql AS $fn$
    SELECT e.id FROM "{{schema}}".enqueue_run($1, $2, $3, $4, $5, $6, $7, $8, $9) e
  $fn$;
