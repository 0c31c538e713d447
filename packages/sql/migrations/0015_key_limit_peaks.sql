-- The highest limit each kind's and queue's keys were ever declared under (docs/adr/0014, "Where
-- the rest goes"): a key can hold a slot at or above its limit only if the limit was lowered, so a
-- hand-off looks for such a slot only while the limit is below its peak. The peak only grows, kept
-- by a trigger on every write of a limit (whatever version of the store writes it), and outlives a
-- removed limit (a limit removed and declared again lower still finds its runs' old slots).

-- Limits, then every run's slot, held still while the peaks are read: a hand-off in flight under
-- an older, higher limit commits before (it writes runs), and is counted. In the order a limit's
-- change takes them (key_limits, then runs), so one from a worker running meanwhile waits
-- instead of deadlocking with this.
LOCK TABLE "{{schema}}".key_limits IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE "{{schema}}".runs IN SHARE MODE;
CREATE TABLE "{{schema}}".key_limit_peaks (
  scope text NOT NULL CHECK (scope IN ('queue', 'kind')),
  name text NOT NULL,
  peak integer NOT NULL,
  PRIMARY KEY (scope, name)
);
CREATE FUNCTION "{{schema}}".key_limit_peak() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO "{{schema}}".key_limit_peaks AS k (scope, name, peak) VALUES (NEW.scope, NEW.name, NEW.per_key)
  ON CONFLICT (scope, name) DO UPDATE SET peak = greatest(k.peak, excluded.peak);
  RETURN NULL;
END
$fn$;
CREATE TRIGGER key_limit_peak AFTER INSERT OR UPDATE OF per_key ON "{{schema}}".key_limits FOR EACH ROW
  EXECUTE FUNCTION "{{schema}}".key_limit_peak();
-- Today's limits, and above them any slot held now (a limit lowered or removed before).
INSERT INTO "{{schema}}".key_limit_peaks (scope, name, peak)
  SELECT scope, name, max(peak) FROM (
    SELECT scope, name, per_key AS peak FROM "{{schema}}".key_limits
    UNION ALL
    SELECT 'kind', kind, max(key_slot) + 1 FROM "{{schema}}".runs WHERE key_scope = 'kind' AND key_slot IS NOT NULL GROUP BY kind
    UNION ALL
    SELECT 'queue', queue, max(key_slot) + 1 FROM "{{schema}}".runs WHERE key_scope = 'queue' AND key_slot IS NOT NULL GROUP BY queue
  ) p GROUP BY scope, name;
