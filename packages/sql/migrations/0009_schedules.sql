-- Schedules (issue 13): one row per schedule; its runs carry the tick's idempotency key, so the
-- unique index on runs.idempotency_key is what makes a tick fire once.

CREATE TABLE "{{schema}}".schedules (
  name text PRIMARY KEY,
  cron text NOT NULL,
  time_zone text NOT NULL,
  kind text NOT NULL,
  queue text NOT NULL,
  payload jsonb NOT NULL,
  missed text NOT NULL CHECK (missed IN ('skip', 'once', 'all')),
  max_backfill integer NOT NULL CHECK (max_backfill >= 1),
  backfill_window_ms bigint NOT NULL CHECK (backfill_window_ms >= 0),
  paused boolean NOT NULL DEFAULT false,
  next_tick timestamptz NOT NULL,
  last_tick timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due ON "{{schema}}".schedules (next_tick) WHERE NOT paused;
