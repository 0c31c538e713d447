-- Durable Effect workflows (issue 14, docs/adr/0015-workflow-engine.md): a workflow execution is
-- a run (its idempotency key names the execution); what its replays must find again lives beside
-- it, keyed by that same execution key, so a deferred can be completed before its run exists.
-- Activity results are written under the holder's fence; deferreds and clocks are first-write-wins.

CREATE TABLE "{{schema}}".workflow_activities (
  execution text NOT NULL,
  activity text NOT NULL,
  attempt integer NOT NULL,
  fence bigint NOT NULL,
  exit jsonb NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (execution, activity, attempt)
);
CREATE TABLE "{{schema}}".workflow_deferreds (
  execution text NOT NULL,
  name text NOT NULL,
  exit jsonb NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (execution, name)
);
CREATE TABLE "{{schema}}".workflow_clocks (
  execution text NOT NULL,
  deferred text NOT NULL,
  wake_at timestamptz NOT NULL,
  PRIMARY KEY (execution, deferred)
);
