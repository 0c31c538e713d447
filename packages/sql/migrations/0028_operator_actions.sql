-- The operators' audit (issue 43): who paused or resumed a queue, changed a schedule or a limit,
-- or deleted runs, from where (console, api, cli, callback) and when. Actions on one run (resume,
-- cancel, retry) are recorded in that run's history instead (run_events.detail: by, via). A
-- delete's line names the filter, the count and the ids it deleted, never a payload.
--
-- A new, empty table: online, and nothing else changes.

CREATE TABLE "{{schema}}".operator_actions (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  by text NOT NULL,
  via text NOT NULL CHECK (via IN ('console', 'api', 'cli', 'callback')),
  action text NOT NULL,
  target text NOT NULL,
  detail jsonb
);
