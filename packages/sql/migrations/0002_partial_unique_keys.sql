-- Most runs have neither a signal token nor an idempotency key: partial unique indexes leave their
-- NULLs out, which spares two index entries for every row version a run writes.

ALTER TABLE "{{schema}}".runs DROP CONSTRAINT runs_signal_token_key;
CREATE UNIQUE INDEX runs_signal_token ON "{{schema}}".runs (signal_token) WHERE signal_token IS NOT NULL;
ALTER TABLE "{{schema}}".runs DROP CONSTRAINT runs_idempotency_key_key;
CREATE UNIQUE INDEX runs_idempotency_key ON "{{schema}}".runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
