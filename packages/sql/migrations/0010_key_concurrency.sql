-- Per-key concurrency (issue 13, docs/adr/0014-per-key-concurrency.md): a run may carry a key; a
-- kind or a queue declares how many runs of one key may run at once. A running keyed run holds a
-- numbered slot of its key, and a unique index over the held slots makes the limit exact: two
-- claims that both saw a slot free cannot both commit it, whatever their snapshots. No row is
-- shared between runs (no counter), and the indexes only hold the slots held now.

ALTER TABLE "{{schema}}".runs ADD COLUMN concurrency_key text, ADD COLUMN key_scope text, ADD COLUMN key_slot integer;
-- A slot is held while its run runs: a run leaving 'running' (completed, failed, released,
-- suspended, cancelled) gives its slot back in the same update, whichever statement makes it.
-- So "holds a slot" is "key_slot IS NOT NULL", and only the slot indexes below answer it.
CREATE FUNCTION "{{schema}}".release_key_slot() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  NEW.key_scope := NULL;
  NEW.key_slot := NULL;
  RETURN NEW;
END
$fn$;
CREATE TRIGGER release_key_slot BEFORE UPDATE ON "{{schema}}".runs FOR EACH ROW
  WHEN (OLD.key_slot IS NOT NULL AND OLD.state = 'running' AND NEW.state <> 'running')
  EXECUTE FUNCTION "{{schema}}".release_key_slot();
CREATE UNIQUE INDEX runs_key_slots_kind ON "{{schema}}".runs (kind, concurrency_key, key_slot)
  WHERE key_scope = 'kind' AND key_slot IS NOT NULL;
CREATE UNIQUE INDEX runs_key_slots_queue ON "{{schema}}".runs (queue, concurrency_key, key_slot)
  WHERE key_scope = 'queue' AND key_slot IS NOT NULL;
-- A key's due runs in claim order (per queue and kind): a claim takes a key's runs in order, and
-- only as many as it has slots for.
CREATE INDEX runs_pending_keys ON "{{schema}}".runs (concurrency_key, queue, kind, priority DESC, run_at, id)
  WHERE state = 'pending' AND concurrency_key IS NOT NULL;
CREATE TABLE "{{schema}}".key_limits (
  scope text NOT NULL CHECK (scope IN ('queue', 'kind')),
  name text NOT NULL,
  per_key integer NOT NULL CHECK (per_key >= 1),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, name)
);
