-- Claim and completion versions land on their own page, where pruning reclaims the dead ones
-- (docs/adr/0005-completed-runs-retention.md).

ALTER TABLE "{{schema}}".runs SET (fillfactor = 70);
