-- The worker registry (core WorkerRegistry): one row per worker process, refreshed at each of its
-- heartbeats. Only the primary key indexes it, so a refresh (heartbeat, runs held, expiry) is a HOT
-- update, and the low fillfactor leaves room on the page for the new version.

CREATE TABLE "{{schema}}".workers (
  owner text PRIMARY KEY,
  host text NOT NULL,
  pid integer NOT NULL,
  version text NOT NULL,
  queues text[] NOT NULL,
  kinds text[] NOT NULL,
  concurrency integer NOT NULL,
  runs_held integer NOT NULL,
  started_at timestamptz NOT NULL,
  last_heartbeat_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
) WITH (fillfactor = 50);
