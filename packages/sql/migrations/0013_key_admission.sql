-- Keys admitted at the hand-off (issue 13, docs/adr/0014-per-key-concurrency.md, "Admission at the
-- hand-off"): a keyed run under a limit takes its key's slot when it is admitted, not when it is
-- claimed, and holds it while pending (admitted) and running. A run its key has no room for waits
-- outside the due index (pending, key_scope set, no slot), so claims read only runs they may take.
-- The update that gives a slot back hands it to the key's next waiting due run in claim order.

-- The due index holds only runs a claim may take: no limit governs them, or they hold a slot.
CREATE INDEX runs_ready ON "{{schema}}".runs (queue, priority DESC, run_at, id)
  WHERE state = 'pending' AND (key_scope IS NULL OR key_slot IS NOT NULL);
DROP INDEX "{{schema}}".runs_due;
ALTER INDEX "{{schema}}".runs_ready RENAME TO runs_due;
-- A key's waiting runs in claim order, one index per scope (as the slot indexes).
CREATE INDEX runs_waiting_kind ON "{{schema}}".runs (kind, concurrency_key, priority DESC, run_at, id)
  WHERE state = 'pending' AND key_scope = 'kind' AND key_slot IS NULL;
CREATE INDEX runs_waiting_queue ON "{{schema}}".runs (queue, concurrency_key, priority DESC, run_at, id)
  WHERE state = 'pending' AND key_scope = 'queue' AND key_slot IS NULL;
DROP INDEX "{{schema}}".runs_pending_keys;
DROP TRIGGER release_key_slot ON "{{schema}}".runs;
DROP FUNCTION "{{schema}}".release_key_slot();
-- Before the update: a run stops holding its slot when it leaves pending and running (or goes
-- back from running to pending: a retry or a release waits for a slot again); a keyed run that
-- becomes pending is governed by the limit declared now (its kind's, else its queue's), and waits.
CREATE FUNCTION "{{schema}}".key_slot_rules() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  NEW.key_slot := NULL;
  IF NEW.state = 'pending' AND NEW.concurrency_key IS NOT NULL THEN
    NEW.key_scope := CASE
      WHEN EXISTS (SELECT 1 FROM "{{schema}}".key_limits WHERE scope = 'kind' AND name = NEW.kind) THEN 'kind'
      WHEN EXISTS (SELECT 1 FROM "{{schema}}".key_limits WHERE scope = 'queue' AND name = NEW.queue) THEN 'queue'
    END;
  END IF;
  RETURN NEW;
END
$fn$;
CREATE TRIGGER key_slot_rules BEFORE UPDATE ON "{{schema}}".runs FOR EACH ROW
  WHEN ((OLD.key_slot IS NOT NULL AND NEW.state <> 'running' AND NOT (OLD.state = 'pending' AND NEW.state = 'pending'))
    OR (NEW.concurrency_key IS NOT NULL AND NEW.state = 'pending' AND OLD.state <> 'pending'))
  EXECUTE FUNCTION "{{schema}}".key_slot_rules();
CREATE TRIGGER key_slot_govern BEFORE INSERT ON "{{schema}}".runs FOR EACH ROW
  WHEN (NEW.concurrency_key IS NOT NULL)
  EXECUTE FUNCTION "{{schema}}".key_slot_rules();
-- After the update (but a completion's, which hands its slots on set-based in its own statement,
-- internal/statements/admit.ts › handOff): the slot given back goes to the key's next waiting due run (in
-- a queue not paused: a paused queue's runs hold no slot), in claim order,
-- skipping runs another transaction holds. Nobody else can take this slot before this
-- transaction commits (every other snapshot still sees it held), so the hand-off never meets
-- another writer on the slot index. A slot at or above a lowered limit is not handed on, nor
-- any while the key holds one there. The admitted run announces itself like an enqueued one.
CREATE FUNCTION "{{schema}}".key_slot_hand_off() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  per integer;
  successor bigint;
  successor_queue text;
BEGIN
  SELECT per_key INTO per FROM "{{schema}}".key_limits
    WHERE scope = OLD.key_scope AND name = CASE OLD.key_scope WHEN 'kind' THEN OLD.kind ELSE OLD.queue END;
  IF per IS NULL OR OLD.key_slot >= per THEN RETURN NULL; END IF;
  IF OLD.key_scope = 'kind' THEN
    IF EXISTS (SELECT 1 FROM "{{schema}}".runs WHERE key_scope = 'kind' AND kind = OLD.kind AND concurrency_key = OLD.concurrency_key
        AND key_slot >= per) THEN RETURN NULL; END IF;
    SELECT id, queue INTO successor, successor_queue FROM "{{schema}}".runs
      WHERE state = 'pending' AND key_scope = 'kind' AND key_slot IS NULL AND kind = OLD.kind AND concurrency_key = OLD.concurrency_key
        AND run_at <= now() AND NOT EXISTS (SELECT 1 FROM "{{schema}}".paused_queues p WHERE p.queue = runs.queue)
      ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED;
  ELSE
    IF EXISTS (SELECT 1 FROM "{{schema}}".runs WHERE key_scope = 'queue' AND queue = OLD.queue AND concurrency_key = OLD.concurrency_key
        AND key_slot >= per) THEN RETURN NULL; END IF;
    SELECT id, queue INTO successor, successor_queue FROM "{{schema}}".runs
      WHERE state = 'pending' AND key_scope = 'queue' AND key_slot IS NULL AND queue = OLD.queue AND concurrency_key = OLD.concurrency_key
        AND run_at <= now() AND NOT EXISTS (SELECT 1 FROM "{{schema}}".paused_queues p WHERE p.queue = runs.queue)
      ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED;
  END IF;
  IF successor IS NOT NULL THEN
    UPDATE "{{schema}}".runs SET key_slot = OLD.key_slot WHERE id = successor;
    PERFORM pg_notify('{{channel}}', 'q:' || successor_queue);
  END IF;
  RETURN NULL;
END
$fn$;
CREATE TRIGGER key_slot_hand_off AFTER UPDATE ON "{{schema}}".runs FOR EACH ROW
  WHEN (OLD.key_slot IS NOT NULL AND NEW.key_slot IS NULL AND (OLD.state = 'running' OR NEW.state <> 'pending')
    AND NEW.state <> 'completed')
  EXECUTE FUNCTION "{{schema}}".key_slot_hand_off();
-- Keyed runs pending now are governed by today's limits and wait; sweeps admit them.
UPDATE "{{schema}}".runs r SET key_scope = CASE
    WHEN EXISTS (SELECT 1 FROM "{{schema}}".key_limits WHERE scope = 'kind' AND name = r.kind) THEN 'kind'
    WHEN EXISTS (SELECT 1 FROM "{{schema}}".key_limits WHERE scope = 'queue' AND name = r.queue) THEN 'queue'
  END, key_slot = NULL
  WHERE state = 'pending' AND concurrency_key IS NOT NULL;
