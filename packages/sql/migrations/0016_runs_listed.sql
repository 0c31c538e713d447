-- Lists newest first by the run's number (internal/statements/read.ts › list) read the primary key
-- backwards; for the states few runs are in, whose runs the primary key would pass over by the
-- thousand (the approvals inbox, failed runs), they read this instead. Pending, running and
-- completed runs are left out: they are the states every run passes through, and an entry for
-- each would cost every run of a drain another index write at each step.

CREATE INDEX runs_listed ON "{{schema}}".runs (state, id) WHERE state IN ('suspended', 'failed', 'cancelled');
