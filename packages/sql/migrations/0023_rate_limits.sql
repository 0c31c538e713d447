-- Rate limits (issue 33, docs/adr/0021-rate-limits.md): a queue or kind declares how many of its
-- runs may start per interval. A run a rate limit governs (rate_scope set, on its row: never in the
-- ledger) is kept out of the ready set, so the routine claim neither reads nor waits on it; the
-- claim's rated step (internal/statements/rate.ts) starts such runs while their window has room,
-- one claimer per window at a time (a transaction-level advisory lock), and appends one
-- rate_starts row per start. Nothing is updated per start: no counter row.

CREATE TABLE "{{schema}}".rate_limits (
    scope text NOT NULL CHECK (scope IN ('queue', 'kind')),
    name text NOT NULL,
    per_interval integer NOT NULL CHECK (per_interval > 0),
    interval_ms float8 NOT NULL CHECK (interval_ms > 0),
    per_key boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
  );

CREATE TABLE "{{schema}}".rate_starts (
    scope text NOT NULL,
    name text NOT NULL,
    window_key text NOT NULL,
    started_at timestamptz NOT NULL,
    run_id bigint NOT NULL
  );

CREATE INDEX rate_starts_window ON "{{schema}}".rate_starts (scope, name, window_key, started_at);

ALTER TABLE "{{schema}}".runs ADD COLUMN rate_scope text;

CREATE INDEX runs_rated ON "{{schema}}".runs (priority DESC, run_at, id)
    WHERE state = 'pending' AND rate_scope IS NOT NULL AND (key_scope IS NULL OR key_slot IS NOT NULL);

CREATE OR REPLACE FUNCTION "{{schema}}".ready_on_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
  BEGIN
    INSERT INTO "{{schema}}".ready (id, queue, kind, priority, run_at, ledger)
      SELECT id, queue, kind, priority, run_at, state = 'ledger' FROM added
      WHERE state IN ('pending', 'ledger') AND (key_scope IS NULL OR key_slot IS NOT NULL) AND rate_scope IS NULL;
    RETURN NULL;
  END $fn$;

CREATE OR REPLACE FUNCTION "{{schema}}".ready_on_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
  DECLARE
    was boolean := OLD.state IN ('pending', 'ledger') AND (OLD.key_scope IS NULL OR OLD.key_slot IS NOT NULL) AND OLD.rate_scope IS NULL;
    is_now boolean := NEW.state IN ('pending', 'ledger') AND (NEW.key_scope IS NULL OR NEW.key_slot IS NOT NULL) AND NEW.rate_scope IS NULL;
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

DROP TRIGGER ready_on_update ON "{{schema}}".runs;

CREATE TRIGGER ready_on_update AFTER UPDATE OF state, key_scope, key_slot, queue, kind, priority, run_at, rate_scope ON "{{schema}}".runs
    FOR EACH ROW WHEN (OLD.state IN ('pending', 'ledger') OR NEW.state IN ('pending', 'ledger'))
    EXECUTE FUNCTION "{{schema}}".ready_on_update();

-- Runs inserted by any other statement (the SQL enqueue function of 0021/0022, a previous
-- release's enqueue) are governed too: after the insert statement (and after ready_on_insert, which
-- the name orders first), its runs that a rate limit governs and that carry no rate_scope yet are
-- marked and kept on their rows; the update takes them out of the ready set. One call per
-- statement, and only a probe of rate_limits when none is declared.
CREATE FUNCTION "{{schema}}".rate_govern_inserted() RETURNS trigger LANGUAGE plpgsql AS $fn$
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
  END $fn$;

CREATE TRIGGER zz_rate_govern_inserted AFTER INSERT ON "{{schema}}".runs REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION "{{schema}}".rate_govern_inserted();
