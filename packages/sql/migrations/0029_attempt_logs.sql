-- Attempt logs (core AttemptLogs): the log lines a handler wrote during one attempt, one row per
-- claim, keyed by the run and the claim's fence (an attempt number restarts at an operator's retry
-- and is given back at a suspension; a fence names one claim for good). Written with a failure in
-- its guarded statement, or after a completion under the same fence; deleted with their run.
-- A new empty table: online, no lock on any existing table.

CREATE TABLE "{{schema}}".attempt_logs (
  run_id bigint NOT NULL,
  fence bigint NOT NULL,
  attempt integer NOT NULL,
  outcome text NOT NULL CHECK (outcome IN ('failed', 'completed')),
  lines jsonb NOT NULL,
  dropped integer NOT NULL CHECK (dropped >= 0),
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, fence)
);
