-- The Leasehold store's schema, as a freshly migrated store has it: every table, index,
-- sequence, function, trigger and view, in that order, each kind sorted by name. Read it to learn
-- the schema; change it through a new migration in packages/sql/migrations/.
--
-- Generated from the catalogs by test/support/schemaDump.ts; do not edit. After adding a
-- migration, regenerate it with: npm run schema (test/schema.test.ts fails while it is stale).
-- Partitioned tables show their key, not their partitions (history_ranges lists those; each
-- has its parent's columns, indexes and triggers, fillfactor 100).
-- Not replayable: objects are in reading order, not dependency order. {{schema}} and
-- {{channel}} stand for the store's schema and notification channel, as in the migrations.

-- ======================================================================
-- Tables: columns, defaults and constraints
-- ======================================================================

CREATE TABLE "{{schema}}".attempt_logs (
  run_id bigint NOT NULL,
  fence bigint NOT NULL,
  attempt integer NOT NULL,
  outcome text NOT NULL,
  lines jsonb NOT NULL,
  dropped integer NOT NULL,
  at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT attempt_logs_pkey PRIMARY KEY (run_id, fence),
  CONSTRAINT attempt_logs_dropped_check CHECK (dropped >= 0),
  CONSTRAINT attempt_logs_outcome_check CHECK (outcome = ANY (ARRAY['failed'::text, 'completed'::text]))
);

CREATE TABLE "{{schema}}".callbacks (
  run_id bigint NOT NULL,
  signal text NOT NULL,
  expires_at timestamp with time zone NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT callbacks_pkey PRIMARY KEY (run_id, signal)
);

CREATE TABLE "{{schema}}".claim_batches (
  batch bigint DEFAULT nextval('"{{schema}}".claim_batches_batch_seq'::regclass) NOT NULL,
  owner text NOT NULL,
  claimed_at timestamp with time zone DEFAULT now() NOT NULL,
  expires_at timestamp with time zone NOT NULL,
  ids bigint[] NOT NULL,
  fences bigint[] NOT NULL,
  attempts integer[] NOT NULL,
  span int8multirange NOT NULL,
  closed bigint[] DEFAULT '{}'::bigint[] NOT NULL,
  settled_at timestamp with time zone,
  CONSTRAINT claim_batches_pkey PRIMARY KEY (batch)
) PARTITION BY RANGE (batch);

CREATE TABLE "{{schema}}".completion_batches (
  claim_batch bigint NOT NULL,
  at timestamp with time zone DEFAULT now() NOT NULL,
  ids bigint[] NOT NULL,
  fences bigint[] NOT NULL,
  results jsonb[]
) PARTITION BY RANGE (claim_batch);

CREATE TABLE "{{schema}}".history_ranges (
  tbl text NOT NULL,
  lo bigint NOT NULL,
  hi bigint NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  quiet_since timestamp with time zone,
  CONSTRAINT history_ranges_pkey PRIMARY KEY (tbl, lo),
  CONSTRAINT history_ranges_check CHECK (lo < hi),
  CONSTRAINT history_ranges_tbl_check CHECK (tbl = ANY (ARRAY['runs'::text, 'claim_batches'::text]))
);

CREATE TABLE "{{schema}}".idempotency_keys (
  key text NOT NULL,
  run_id bigint NOT NULL,
  CONSTRAINT idempotency_keys_pkey PRIMARY KEY (key)
);

CREATE TABLE "{{schema}}".key_holds (
  scope text NOT NULL,
  name text NOT NULL,
  key text NOT NULL,
  slot integer NOT NULL,
  run_id bigint NOT NULL,
  CONSTRAINT key_holds_pkey PRIMARY KEY (scope, name, key, slot),
  CONSTRAINT key_holds_scope_check CHECK (scope = ANY (ARRAY['queue'::text, 'kind'::text]))
);

CREATE TABLE "{{schema}}".key_limit_peaks (
  scope text NOT NULL,
  name text NOT NULL,
  peak integer NOT NULL,
  CONSTRAINT key_limit_peaks_pkey PRIMARY KEY (scope, name),
  CONSTRAINT key_limit_peaks_scope_check CHECK (scope = ANY (ARRAY['queue'::text, 'kind'::text]))
);

CREATE TABLE "{{schema}}".key_limits (
  scope text NOT NULL,
  name text NOT NULL,
  per_key integer NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT key_limits_pkey PRIMARY KEY (scope, name),
  CONSTRAINT key_limits_per_key_check CHECK (per_key >= 1),
  CONSTRAINT key_limits_scope_check CHECK (scope = ANY (ARRAY['queue'::text, 'kind'::text]))
);

CREATE TABLE "{{schema}}".leasehold_migrations (
  migration_id integer NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  name text NOT NULL,
  CONSTRAINT leasehold_migrations_pkey PRIMARY KEY (migration_id)
);

CREATE TABLE "{{schema}}".operator_actions (
  id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  at timestamp with time zone DEFAULT now() NOT NULL,
  by text NOT NULL,
  via text NOT NULL,
  action text NOT NULL,
  target text NOT NULL,
  detail jsonb,
  CONSTRAINT operator_actions_pkey PRIMARY KEY (id),
  CONSTRAINT operator_actions_via_check CHECK (via = ANY (ARRAY['console'::text, 'api'::text, 'cli'::text, 'callback'::text]))
);

CREATE TABLE "{{schema}}".paused_queues (
  queue text NOT NULL,
  since timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT paused_queues_pkey PRIMARY KEY (queue)
);

CREATE TABLE "{{schema}}".rate_limits (
  scope text NOT NULL,
  name text NOT NULL,
  per_interval integer NOT NULL,
  interval_ms double precision NOT NULL,
  per_key boolean NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT rate_limits_pkey PRIMARY KEY (scope, name),
  CONSTRAINT rate_limits_interval_ms_check CHECK (interval_ms > 0::double precision),
  CONSTRAINT rate_limits_per_interval_check CHECK (per_interval > 0),
  CONSTRAINT rate_limits_scope_check CHECK (scope = ANY (ARRAY['queue'::text, 'kind'::text]))
);

CREATE TABLE "{{schema}}".rate_starts (
  scope text NOT NULL,
  name text NOT NULL,
  window_key text NOT NULL,
  started_at timestamp with time zone NOT NULL,
  run_id bigint NOT NULL
);

CREATE TABLE "{{schema}}".ready (
  id bigint NOT NULL,
  queue text NOT NULL,
  kind text NOT NULL,
  priority integer NOT NULL,
  run_at timestamp with time zone NOT NULL,
  ledger boolean NOT NULL,
  CONSTRAINT ready_pkey PRIMARY KEY (id)
);

CREATE TABLE "{{schema}}".run_events (
  id bigint DEFAULT nextval('"{{schema}}".run_events_id_seq'::regclass) NOT NULL,
  run_id bigint NOT NULL,
  fence bigint NOT NULL,
  kind text NOT NULL,
  owner text,
  detail jsonb,
  at timestamp with time zone DEFAULT now() NOT NULL
) PARTITION BY RANGE (run_id);

CREATE TABLE "{{schema}}".runs (
  id bigint DEFAULT nextval('"{{schema}}".runs_id_seq'::regclass) NOT NULL,
  queue text DEFAULT 'default'::text NOT NULL,
  kind text NOT NULL,
  payload jsonb DEFAULT '{}'::jsonb NOT NULL,
  priority integer DEFAULT 0 NOT NULL,
  run_at timestamp with time zone DEFAULT now() NOT NULL,
  state text DEFAULT 'pending'::text NOT NULL,
  attempt integer DEFAULT 0 NOT NULL,
  max_attempts integer DEFAULT 5 NOT NULL,
  fence bigint DEFAULT 0 NOT NULL,
  lease_owner text,
  lease_expires_at timestamp with time zone,
  checkpoint jsonb,
  result jsonb,
  error jsonb,
  signal_name text,
  signal_token text,
  suspend_deadline timestamp with time zone,
  signals jsonb DEFAULT '{}'::jsonb NOT NULL,
  idempotency_key text,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  finished_at timestamp with time zone,
  claimed_by text,
  claimed_at timestamp with time zone,
  claimed_fence bigint,
  claimed_attempt integer,
  trace_parent text,
  concurrency_key text,
  key_scope text,
  key_slot integer,
  rate_scope text,
  attempt_timeout_ms integer,
  deadline timestamp with time zone,
  CONSTRAINT runs_pkey PRIMARY KEY (id),
  CONSTRAINT runs_attempt_check CHECK (attempt >= 0),
  CONSTRAINT runs_attempt_timeout_ms_check CHECK (attempt_timeout_ms > 0),
  CONSTRAINT runs_claim_recorded CHECK ((claimed_at IS NULL) = (claimed_fence IS NULL)),
  CONSTRAINT runs_fence_check CHECK (fence >= 0),
  CONSTRAINT runs_lease_iff_running CHECK ((state = 'running'::text) = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)),
  CONSTRAINT runs_max_attempts_check CHECK (max_attempts >= 1),
  CONSTRAINT runs_signal_iff_suspended CHECK (state = 'suspended'::text OR signal_name IS NULL),
  CONSTRAINT runs_state_check CHECK (state = ANY (ARRAY['pending'::text, 'running'::text, 'suspended'::text, 'completed'::text, 'failed'::text, 'cancelled'::text, 'ledger'::text]))
) PARTITION BY RANGE (id);

CREATE TABLE "{{schema}}".schedules (
  name text NOT NULL,
  cron text NOT NULL,
  time_zone text NOT NULL,
  kind text NOT NULL,
  queue text NOT NULL,
  payload jsonb NOT NULL,
  missed text NOT NULL,
  max_backfill integer NOT NULL,
  backfill_window_ms bigint NOT NULL,
  paused boolean DEFAULT false NOT NULL,
  next_tick timestamp with time zone NOT NULL,
  last_tick timestamp with time zone,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT schedules_pkey PRIMARY KEY (name),
  CONSTRAINT schedules_backfill_window_ms_check CHECK (backfill_window_ms >= 0),
  CONSTRAINT schedules_max_backfill_check CHECK (max_backfill >= 1),
  CONSTRAINT schedules_missed_check CHECK (missed = ANY (ARRAY['skip'::text, 'once'::text, 'all'::text]))
);

CREATE TABLE "{{schema}}".signal_deliveries (
  id text NOT NULL,
  run_id bigint NOT NULL,
  signal text NOT NULL,
  at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT signal_deliveries_pkey PRIMARY KEY (id)
);

CREATE TABLE "{{schema}}".signal_tokens (
  token text NOT NULL,
  run_id bigint NOT NULL,
  CONSTRAINT runs_signal_token PRIMARY KEY (token)
);

CREATE TABLE "{{schema}}".unique_holds (
  kind text NOT NULL,
  unique_key text NOT NULL,
  run_id bigint NOT NULL,
  states text[],
  held_until timestamp with time zone,
  CONSTRAINT unique_holds_pkey PRIMARY KEY (kind, unique_key)
);

CREATE TABLE "{{schema}}".waiting (
  id bigint NOT NULL,
  scope text NOT NULL,
  name text NOT NULL,
  key text NOT NULL,
  queue text NOT NULL,
  kind text NOT NULL,
  priority integer NOT NULL,
  run_at timestamp with time zone NOT NULL,
  CONSTRAINT waiting_pkey PRIMARY KEY (id)
);

CREATE TABLE "{{schema}}".workers (
  owner text NOT NULL,
  host text NOT NULL,
  pid integer NOT NULL,
  version text NOT NULL,
  queues text[] NOT NULL,
  kinds text[] NOT NULL,
  concurrency integer NOT NULL,
  runs_held integer NOT NULL,
  started_at timestamp with time zone NOT NULL,
  last_heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
  expires_at timestamp with time zone NOT NULL,
  CONSTRAINT workers_pkey PRIMARY KEY (owner)
) WITH (fillfactor=50);

CREATE TABLE "{{schema}}".workflow_activities (
  execution text NOT NULL,
  activity text NOT NULL,
  attempt integer NOT NULL,
  fence bigint NOT NULL,
  exit jsonb NOT NULL,
  recorded_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT workflow_activities_pkey PRIMARY KEY (execution, activity, attempt)
);

CREATE TABLE "{{schema}}".workflow_awaits (
  execution text NOT NULL,
  name text NOT NULL,
  first_awaited_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT workflow_awaits_pkey PRIMARY KEY (execution, name)
);

CREATE TABLE "{{schema}}".workflow_clocks (
  execution text NOT NULL,
  deferred text NOT NULL,
  wake_at timestamp with time zone NOT NULL,
  CONSTRAINT workflow_clocks_pkey PRIMARY KEY (execution, deferred)
);

CREATE TABLE "{{schema}}".workflow_deferreds (
  execution text NOT NULL,
  name text NOT NULL,
  exit jsonb NOT NULL,
  recorded_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT workflow_deferreds_pkey PRIMARY KEY (execution, name)
);

-- ======================================================================
-- Indexes (other than those of primary key, unique and exclusion constraints)
-- ======================================================================

CREATE INDEX claim_batches_open ON ONLY "{{schema}}".claim_batches USING btree (expires_at) WHERE (settled_at IS NULL);

CREATE INDEX claim_batches_span ON ONLY "{{schema}}".claim_batches USING gist (span);

CREATE INDEX completion_batches_at ON ONLY "{{schema}}".completion_batches USING btree (at);

CREATE INDEX completion_batches_claim ON ONLY "{{schema}}".completion_batches USING btree (claim_batch);

CREATE INDEX idempotency_keys_run ON "{{schema}}".idempotency_keys USING btree (run_id);

CREATE INDEX rate_starts_window ON "{{schema}}".rate_starts USING btree (scope, name, window_key, started_at);

CREATE INDEX ready_due ON "{{schema}}".ready USING btree (queue, priority DESC, run_at, id);

CREATE INDEX run_events_by_kind ON ONLY "{{schema}}".run_events USING btree (kind) WHERE (kind = ANY (ARRAY['stale_write_rejected'::text, 'reclaimed'::text]));

CREATE INDEX run_events_by_run ON ONLY "{{schema}}".run_events USING btree (run_id, id);

CREATE INDEX runs_by_signal_token ON ONLY "{{schema}}".runs USING btree (signal_token) WHERE (signal_token IS NOT NULL);

CREATE INDEX runs_finished_brin ON ONLY "{{schema}}".runs USING brin (finished_at) WITH (autosummarize='on');

CREATE INDEX runs_key_slots_kind ON ONLY "{{schema}}".runs USING btree (kind, concurrency_key, key_slot) WHERE ((key_scope = 'kind'::text) AND (key_slot IS NOT NULL));

CREATE INDEX runs_key_slots_queue ON ONLY "{{schema}}".runs USING btree (queue, concurrency_key, key_slot) WHERE ((key_scope = 'queue'::text) AND (key_slot IS NOT NULL));

CREATE INDEX runs_listed ON ONLY "{{schema}}".runs USING btree (state, id) WHERE (state = ANY (ARRAY['suspended'::text, 'failed'::text, 'cancelled'::text]));

CREATE INDEX runs_live ON ONLY "{{schema}}".runs USING btree (id) WHERE (state = ANY (ARRAY['pending'::text, 'running'::text, 'suspended'::text]));

CREATE INDEX runs_rated ON ONLY "{{schema}}".runs USING btree (priority DESC, run_at, id) WHERE ((state = 'pending'::text) AND (rate_scope IS NOT NULL) AND ((key_scope IS NULL) OR (key_slot IS NOT NULL)));

CREATE INDEX runs_running ON ONLY "{{schema}}".runs USING btree (queue) WHERE (state = 'running'::text);

CREATE INDEX runs_suspend_deadline ON ONLY "{{schema}}".runs USING btree (suspend_deadline) WHERE ((state = 'suspended'::text) AND (suspend_deadline IS NOT NULL));

CREATE INDEX runs_waiting_kind ON ONLY "{{schema}}".runs USING btree (kind, concurrency_key, priority DESC, run_at, id) WHERE ((state = 'pending'::text) AND (key_scope = 'kind'::text) AND (key_slot IS NULL));

CREATE INDEX runs_waiting_queue ON ONLY "{{schema}}".runs USING btree (queue, concurrency_key, priority DESC, run_at, id) WHERE ((state = 'pending'::text) AND (key_scope = 'queue'::text) AND (key_slot IS NULL));

CREATE INDEX schedules_due ON "{{schema}}".schedules USING btree (next_tick) WHERE (NOT paused);

CREATE INDEX unique_holds_run ON "{{schema}}".unique_holds USING btree (run_id);

CREATE INDEX unique_holds_until ON "{{schema}}".unique_holds USING btree (held_until) WHERE (held_until IS NOT NULL);

CREATE INDEX waiting_by_key ON "{{schema}}".waiting USING btree (scope, name, key, priority DESC, run_at, id);

CREATE INDEX waiting_by_queue ON "{{schema}}".waiting USING btree (queue, run_at);

-- ======================================================================
-- Sequences
-- ======================================================================

CREATE SEQUENCE "{{schema}}".claim_batches_batch_seq AS bigint INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807
  START WITH 1 CACHE 1 NO CYCLE
  OWNED BY "{{schema}}".claim_batches.batch;

CREATE SEQUENCE "{{schema}}".operator_actions_id_seq AS bigint INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807
  START WITH 1 CACHE 1 NO CYCLE
  OWNED BY "{{schema}}".operator_actions.id;

CREATE SEQUENCE "{{schema}}".run_events_id_seq AS bigint INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807
  START WITH 1 CACHE 1 NO CYCLE
  OWNED BY "{{schema}}".run_events.id;

CREATE SEQUENCE "{{schema}}".runs_id_seq AS bigint INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807
  START WITH 1 CACHE 1 NO CYCLE
  OWNED BY "{{schema}}".runs.id;

-- ======================================================================
-- Functions
-- ======================================================================

CREATE OR REPLACE FUNCTION "{{schema}}".admit_key(p_kind text, p_queue text, p_key text)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
  $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".check_enqueue(kind text, queue text, run_at timestamp with time zone, priority integer, max_attempts integer, idempotency_key text, concurrency_key text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
AS $function$
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
  $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".check_unique(idempotency_key text, unique_key text, unique_states text[], unique_for interval)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
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
  $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".enqueue(kind text, payload jsonb, queue text DEFAULT 'default'::text, run_at timestamp with time zone DEFAULT now(), priority integer DEFAULT 0, max_attempts integer DEFAULT 5, idempotency_key text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text, trace_parent text DEFAULT NULL::text, unique_key text DEFAULT NULL::text, unique_states text[] DEFAULT NULL::text[], unique_for interval DEFAULT NULL::interval)
 RETURNS bigint
 LANGUAGE sql
AS $function$
    SELECT e.id FROM "{{schema}}".enqueue_run($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) e
  $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".enqueue_run(kind text, payload jsonb, queue text DEFAULT 'default'::text, run_at timestamp with time zone DEFAULT now(), priority integer DEFAULT 0, max_attempts integer DEFAULT 5, idempotency_key text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text, trace_parent text DEFAULT NULL::text, unique_key text DEFAULT NULL::text, unique_states text[] DEFAULT NULL::text[], unique_for interval DEFAULT NULL::interval, admit_keys boolean DEFAULT true, into_ledger boolean DEFAULT true, OUT id bigint, OUT created boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
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
  $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".fence_floor()
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
  SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 32
$function$;

CREATE OR REPLACE FUNCTION "{{schema}}".fence_must_not_decrease()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION 'fence of run % may not decrease (% -> %)', OLD.id, OLD.fence, NEW.fence
    USING ERRCODE = 'check_violation';
END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".give_slot(p_scope text, p_name text, p_key text, p_slot integer)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".history_range_kept(lo bigint, hi bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT EXISTS (SELECT 1 FROM "{{schema}}".runs r WHERE r.id >= lo AND r.id < hi AND r.state IN ('pending', 'running', 'suspended'))
    OR EXISTS (SELECT 1 FROM "{{schema}}".ready y WHERE y.id >= lo AND y.id < hi)
    OR EXISTS (SELECT 1 FROM "{{schema}}".waiting w WHERE w.id >= lo AND w.id < hi)
    OR EXISTS (SELECT 1 FROM "{{schema}}".unique_holds h WHERE h.run_id >= lo AND h.run_id < hi)
    OR EXISTS (SELECT 1 FROM "{{schema}}".claim_batches c
      WHERE c.settled_at IS NULL AND c.span && int8multirange(int8range(lo, hi)))
$function$;

CREATE OR REPLACE FUNCTION "{{schema}}".hold(wanted bigint[], lease_until timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".key_holds_forget()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  DELETE FROM "{{schema}}".key_holds
    WHERE scope = OLD.key_scope AND name = CASE OLD.key_scope WHEN 'kind' THEN OLD.kind ELSE OLD.queue END
      AND key = OLD.concurrency_key AND run_id = OLD.id;
  DELETE FROM "{{schema}}".waiting WHERE id = OLD.id;
  RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".key_holds_mirror()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".key_limit_peak()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  INSERT INTO "{{schema}}".key_limit_peaks AS k (scope, name, peak) VALUES (NEW.scope, NEW.name, NEW.per_key)
  ON CONFLICT (scope, name) DO UPDATE SET peak = greatest(k.peak, excluded.peak);
  RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION "{{schema}}".key_slot_hand_off()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION "{{schema}}".key_slot_rules()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION "{{schema}}".lock_claim_batches(wanted bigint[], unknown int8multirange, holder text, idle_bound_ms integer)
 RETURNS TABLE(batch bigint, ids bigint[], fences bigint[], closed bigint[], size integer, expires_at timestamp with time zone, completed bigint[])
 LANGUAGE plpgsql
AS $function$
DECLARE
  locked bigint[];
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'the ledger decides under READ COMMITTED only (this transaction is %)',
      current_setting('transaction_isolation') USING ERRCODE = 'LH001';
  END IF;
  PERFORM set_config('idle_in_transaction_session_timeout',
    least(nullif(extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000, 0),
      idle_bound_ms)::int::text, true);
  SELECT array_agg(l.batch ORDER BY l.batch) INTO locked FROM (
    SELECT c.batch FROM "{{schema}}".claim_batches c
    WHERE c.batch = ANY (ARRAY(
        SELECT w FROM unnest(wanted) AS w
        UNION SELECT b.batch FROM "{{schema}}".claim_batches b WHERE unknown IS NOT NULL AND b.span && unknown))
      AND c.settled_at IS NULL
      AND (holder IS NULL OR c.owner = holder)
    ORDER BY c.batch FOR NO KEY UPDATE OF c
  ) l;
  IF locked IS NULL THEN RETURN; END IF;
  -- The arrays sliced: one detoasted copy per batch, not one per subscript.
  RETURN QUERY
    SELECT c.batch, c.ids[1:], c.fences[1:], c.closed, cardinality(c.ids), c.expires_at,
      coalesce((SELECT array_agg(u.id) FROM "{{schema}}".completion_batches d, unnest(d.ids) AS u(id)
        WHERE d.claim_batch = c.batch), '{}')
    FROM "{{schema}}".claim_batches c
    WHERE c.batch = ANY (locked) AND c.settled_at IS NULL;
END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".maintain_history(keep interval, keep_failed interval, range_floor bigint DEFAULT 100000, dry_run boolean DEFAULT false)
 RETURNS TABLE(action text, tbl text, lo bigint, hi bigint)
 LANGUAGE plpgsql
AS $function$
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
    IF NOT pg_try_advisory_xact_lock(hashtext('leasehold:history:"{{schema}}"')) THEN RETURN; END IF;
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
$function$;

CREATE OR REPLACE FUNCTION "{{schema}}".rate_govern_inserted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
  BEGIN
    IF NOT EXISTS (SELECT 1 FROM "{{schema}}".rate_limits) THEN RETURN NULL; END IF;
    UPDATE "{{schema}}".runs r SET rate_scope = g.scope, state = CASE WHEN r.state = 'ledger' THEN 'pending' ELSE r.state END
    FROM (
      SELECT a.id, CASE WHEN EXISTS (SELECT 1 FROM "{{schema}}".rate_limits l WHERE l.scope = 'kind' AND l.name = a.kind) THEN 'kind'
        WHEN EXISTS (SELECT 1 FROM "{{schema}}".rate_limits l WHERE l.scope = 'queue' AND l.name = a.queue) THEN 'queue' END AS scope
      FROM added a WHERE a.rate_scope IS NULL AND a.state IN ('pending', 'ledger')
    ) g
    WHERE r.id = g.id AND g.scope IS NOT NULL AND r.rate_scope IS NULL;
    RETURN NULL;
  END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".ready_on_insert()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
  BEGIN
    INSERT INTO "{{schema}}".ready (id, queue, kind, priority, run_at, ledger)
      SELECT id, queue, kind, priority, run_at, state = 'ledger' FROM added
      WHERE state IN ('pending', 'ledger') AND (key_scope IS NULL OR key_slot IS NOT NULL) AND rate_scope IS NULL;
    INSERT INTO "{{schema}}".waiting (id, scope, name, key, queue, kind, priority, run_at)
      SELECT id, key_scope, CASE key_scope WHEN 'kind' THEN kind ELSE queue END, concurrency_key, queue, kind, priority, run_at
      FROM added WHERE state = 'ledger' AND key_scope IS NOT NULL AND key_slot IS NULL AND rate_scope IS NULL;
    RETURN NULL;
  END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".ready_on_update()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
  END $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".signal_tokens_mirror()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
  BEGIN
    IF TG_OP <> 'INSERT' AND OLD.signal_token IS NOT NULL THEN
      DELETE FROM "{{schema}}".signal_tokens t WHERE t.token = OLD.signal_token AND t.run_id = OLD.id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.signal_token IS NOT NULL THEN
      INSERT INTO "{{schema}}".signal_tokens (token, run_id) VALUES (NEW.signal_token, NEW.id);
    END IF;
    RETURN NULL;
  END
$function$;

CREATE OR REPLACE FUNCTION "{{schema}}".text_issue(value text, max_bytes integer)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- PostgreSQL's text holds neither NUL nor an unpaired surrogate: only emptiness and length remain.
    SELECT CASE
      WHEN value IS NULL OR value = '' THEN 'must be a non-empty string'
      WHEN octet_length(convert_to(value, 'UTF8')) > max_bytes
        THEN 'is ' || octet_length(convert_to(value, 'UTF8')) || ' bytes long, over the limit of ' || max_bytes
    END
  $function$;

CREATE OR REPLACE FUNCTION "{{schema}}".unique_hold_key(unique_key text, payload jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- jsonb's text is canonical: payloads equal as JSON values have one key.
    SELECT CASE WHEN unique_key IS NOT NULL THEN 'key:' || unique_key
      ELSE 'payload:' || encode(sha256(convert_to(coalesce(payload, 'null'::jsonb)::text, 'UTF8')), 'hex') END
  $function$;

-- ======================================================================
-- Triggers
-- ======================================================================

CREATE TRIGGER key_limit_peak AFTER INSERT OR UPDATE OF per_key ON "{{schema}}".key_limits FOR EACH ROW EXECUTE FUNCTION "{{schema}}".key_limit_peak();

CREATE TRIGGER key_holds_forget AFTER DELETE ON "{{schema}}".runs FOR EACH ROW WHEN (old.key_scope IS NOT NULL) EXECUTE FUNCTION "{{schema}}".key_holds_forget();

CREATE TRIGGER key_holds_mirror AFTER UPDATE ON "{{schema}}".runs FOR EACH ROW WHEN (old.key_slot IS DISTINCT FROM new.key_slot OR new.key_slot IS NOT NULL AND (old.key_scope IS DISTINCT FROM new.key_scope OR old.kind IS DISTINCT FROM new.kind OR old.queue IS DISTINCT FROM new.queue OR old.concurrency_key IS DISTINCT FROM new.concurrency_key)) EXECUTE FUNCTION "{{schema}}".key_holds_mirror();

CREATE TRIGGER key_holds_mirror_insert AFTER INSERT ON "{{schema}}".runs FOR EACH ROW WHEN (new.key_slot IS NOT NULL) EXECUTE FUNCTION "{{schema}}".key_holds_mirror();

CREATE TRIGGER key_slot_govern BEFORE INSERT ON "{{schema}}".runs FOR EACH ROW WHEN (new.concurrency_key IS NOT NULL) EXECUTE FUNCTION "{{schema}}".key_slot_rules();

CREATE TRIGGER key_slot_hand_off AFTER UPDATE ON "{{schema}}".runs FOR EACH ROW WHEN (old.key_slot IS NOT NULL AND new.key_slot IS NULL AND (old.state = 'running'::text OR new.state <> 'pending'::text) AND new.state <> 'completed'::text) EXECUTE FUNCTION "{{schema}}".key_slot_hand_off();

CREATE TRIGGER key_slot_rules BEFORE UPDATE ON "{{schema}}".runs FOR EACH ROW WHEN (old.key_slot IS NOT NULL AND new.key_slot IS NOT NULL AND new.state <> 'running'::text AND NOT (old.state = 'pending'::text AND new.state = 'pending'::text) OR new.concurrency_key IS NOT NULL AND new.state = 'pending'::text AND (old.state <> ALL (ARRAY['pending'::text, 'ledger'::text]))) EXECUTE FUNCTION "{{schema}}".key_slot_rules();

CREATE TRIGGER ready_on_delete AFTER DELETE ON "{{schema}}".runs FOR EACH ROW WHEN (old.state = ANY (ARRAY['pending'::text, 'ledger'::text])) EXECUTE FUNCTION "{{schema}}".ready_on_update();

CREATE TRIGGER ready_on_insert AFTER INSERT ON "{{schema}}".runs REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION "{{schema}}".ready_on_insert();

CREATE TRIGGER ready_on_update AFTER UPDATE OF state, key_scope, key_slot, queue, kind, priority, run_at, rate_scope ON "{{schema}}".runs FOR EACH ROW WHEN ((old.state = ANY (ARRAY['pending'::text, 'ledger'::text])) OR (new.state = ANY (ARRAY['pending'::text, 'ledger'::text]))) EXECUTE FUNCTION "{{schema}}".ready_on_update();

CREATE TRIGGER runs_fence_monotonic BEFORE UPDATE OF fence ON "{{schema}}".runs FOR EACH ROW WHEN (new.fence < old.fence) EXECUTE FUNCTION "{{schema}}".fence_must_not_decrease();

CREATE TRIGGER signal_tokens_forget AFTER DELETE ON "{{schema}}".runs FOR EACH ROW WHEN (old.signal_token IS NOT NULL) EXECUTE FUNCTION "{{schema}}".signal_tokens_mirror();

CREATE TRIGGER signal_tokens_insert AFTER INSERT ON "{{schema}}".runs FOR EACH ROW WHEN (new.signal_token IS NOT NULL) EXECUTE FUNCTION "{{schema}}".signal_tokens_mirror();

CREATE TRIGGER signal_tokens_mirror AFTER UPDATE OF signal_token ON "{{schema}}".runs FOR EACH ROW WHEN (old.signal_token IS DISTINCT FROM new.signal_token) EXECUTE FUNCTION "{{schema}}".signal_tokens_mirror();

CREATE TRIGGER zz_rate_govern_inserted AFTER INSERT ON "{{schema}}".runs REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION "{{schema}}".rate_govern_inserted();

-- ======================================================================
-- Views
-- ======================================================================

CREATE VIEW "{{schema}}".run_history AS
 SELECT e.id::text AS id,
    e.id AS seq,
    e.run_id,
    e.fence,
    e.kind,
    e.owner,
    e.detail,
    e.at
   FROM "{{schema}}".run_events e
UNION ALL
 SELECT (r.id || '/claimed/'::text) || r.claimed_fence AS id,
    NULL::bigint AS seq,
    r.id AS run_id,
    r.claimed_fence AS fence,
    'claimed'::text AS kind,
    r.claimed_by AS owner,
    jsonb_build_object('attempt', r.claimed_attempt) AS detail,
    r.claimed_at AS at
   FROM "{{schema}}".runs r
  WHERE r.claimed_at IS NOT NULL
UNION ALL
 SELECT r.id || '/completed'::text AS id,
    NULL::bigint AS seq,
    r.id AS run_id,
    r.fence,
    'completed'::text AS kind,
    NULL::text AS owner,
    NULL::jsonb AS detail,
    r.finished_at AS at
   FROM "{{schema}}".runs r
  WHERE r.state = 'completed'::text
UNION ALL
 SELECT (u.id || '/claimed/'::text) || u.fence AS id,
    NULL::bigint AS seq,
    u.id AS run_id,
    u.fence,
    'claimed'::text AS kind,
    c.owner,
    jsonb_build_object('attempt', u.attempt) AS detail,
    c.claimed_at AS at
   FROM "{{schema}}".claim_batches c,
    LATERAL UNNEST(c.ids, c.fences, c.attempts) u(id, fence, attempt)
  WHERE u.id <> ALL (c.closed)
UNION ALL
 SELECT u.id || '/completed'::text AS id,
    NULL::bigint AS seq,
    u.id AS run_id,
    u.fence,
    'completed'::text AS kind,
    NULL::text AS owner,
    NULL::jsonb AS detail,
    d.at
   FROM "{{schema}}".completion_batches d
     JOIN "{{schema}}".claim_batches c ON c.batch = d.claim_batch,
    LATERAL UNNEST(d.ids, d.fences) u(id, fence)
  WHERE u.id <> ALL (c.closed);

CREATE VIEW "{{schema}}".runs_now AS
 SELECT r.id,
    r.queue,
    r.kind,
    r.payload,
    r.priority,
    r.run_at,
    COALESCE(l.state, r.state) AS state,
    COALESCE(l.attempt, r.attempt) AS attempt,
    r.max_attempts,
    COALESCE(l.fence, r.fence) AS fence,
        CASE
            WHEN r.state <> 'ledger'::text THEN r.lease_owner
            WHEN l.state = 'running'::text THEN l.owner
            ELSE NULL::text
        END AS lease_owner,
        CASE
            WHEN r.state <> 'ledger'::text THEN r.lease_expires_at
            WHEN l.state = 'running'::text THEN l.expires_at
            ELSE NULL::timestamp with time zone
        END AS lease_expires_at,
    r.checkpoint,
        CASE
            WHEN l.state = 'completed'::text THEN l.result
            ELSE r.result
        END AS result,
    r.error,
    r.signal_name,
    r.signal_token,
    r.suspend_deadline,
    r.signals,
    r.idempotency_key,
    r.created_at,
    COALESCE(l.finished_at, l.claimed_at, r.updated_at) AS updated_at,
    COALESCE(l.finished_at, r.finished_at) AS finished_at,
    COALESCE(l.owner, r.claimed_by) AS claimed_by,
    COALESCE(l.claimed_at, r.claimed_at) AS claimed_at,
    COALESCE(l.fence, r.claimed_fence) AS claimed_fence,
    COALESCE(l.attempt, r.claimed_attempt) AS claimed_attempt,
    r.trace_parent,
    r.concurrency_key,
    r.key_scope,
    COALESCE(r.key_slot, l.key_slot) AS key_slot,
    l.batch AS claim_batch,
    r.attempt_timeout_ms,
    r.deadline
   FROM "{{schema}}".runs r
     LEFT JOIN LATERAL ( SELECT
                CASE
                    WHEN y.id IS NOT NULL OR wt.id IS NOT NULL THEN 'pending'::text
                    WHEN d.at IS NOT NULL THEN 'completed'::text
                    WHEN c.batch IS NOT NULL THEN 'running'::text
                    ELSE NULL::text
                END AS state,
            c.batch,
            c.owner,
            c.expires_at,
            c.claimed_at,
            c.fences[c.pos] AS fence,
            c.attempts[c.pos] AS attempt,
            d.at AS finished_at,
            d.result,
            kh.slot AS key_slot
           FROM ( SELECT r.id) x
             LEFT JOIN "{{schema}}".ready y ON y.id = x.id
             LEFT JOIN "{{schema}}".waiting wt ON wt.id = x.id
             LEFT JOIN LATERAL ( SELECT f.batch,
                    f.owner,
                    f.expires_at,
                    f.claimed_at,
                    f.fences,
                    f.attempts,
                    array_position(f.ids, x.id) AS pos
                   FROM ( SELECT b.batch,
                            b.owner,
                            b.expires_at,
                            b.claimed_at,
                            b.fences,
                            b.attempts,
                            b.ids
                           FROM "{{schema}}".claim_batches b
                          WHERE b.span @> x.id AND y.id IS NULL AND wt.id IS NULL
                         OFFSET 0) f
                  ORDER BY f.batch DESC
                 LIMIT 1) c ON true
             LEFT JOIN LATERAL ( SELECT e.at,
                    e.results[array_position(e.ids, x.id)] AS result
                   FROM "{{schema}}".completion_batches e
                  WHERE e.claim_batch = c.batch AND (x.id = ANY (e.ids))
                 LIMIT 1) d ON true
             LEFT JOIN "{{schema}}".key_holds kh ON r.key_scope IS NOT NULL AND kh.scope = r.key_scope AND kh.name =
                CASE r.key_scope
                    WHEN 'kind'::text THEN r.kind
                    ELSE r.queue
                END AND kh.key = r.concurrency_key AND kh.run_id = x.id
          WHERE r.state = 'ledger'::text) l ON true;
