-- A completion gives its key slot back in its own SET (internal/statements/guarded.ts), so the row trigger
-- that would do it (a PL/pgSQL call per completed keyed run) is skipped: it fires only when the
-- update leaves a slot held that must be given back (docs/adr/0014, "A leaner hand-off").

-- One statement, which locks out writes (not reads) for an instant (PostgreSQL 14 and later).
CREATE OR REPLACE TRIGGER key_slot_rules BEFORE UPDATE ON "{{schema}}".runs FOR EACH ROW
  WHEN ((OLD.key_slot IS NOT NULL AND NEW.key_slot IS NOT NULL AND NEW.state <> 'running'
      AND NOT (OLD.state = 'pending' AND NEW.state = 'pending'))
    OR (NEW.concurrency_key IS NOT NULL AND NEW.state = 'pending' AND OLD.state <> 'pending'))
  EXECUTE FUNCTION "{{schema}}".key_slot_rules();
