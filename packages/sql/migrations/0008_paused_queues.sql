-- Pausable queues: a row exists only while its queue is paused (pauses are rare; the claim reads
-- this small table once per statement, and nothing writes it on the hot path).

CREATE TABLE "{{schema}}".paused_queues (
  queue text PRIMARY KEY,
  since timestamptz NOT NULL DEFAULT now()
);
