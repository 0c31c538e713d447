-- The deferreds a workflow's replays found not done (issue 27): what a suspended workflow waits on,
-- for the operator tools to name, and to tell the ones meant for a person (core isForPerson).

CREATE TABLE "{{schema}}".workflow_awaits (
  execution text NOT NULL,
  name text NOT NULL,
  first_awaited_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (execution, name)
);
