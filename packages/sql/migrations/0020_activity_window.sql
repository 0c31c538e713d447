-- The console's charts and `leasehold stats` read the runs that finished in the last minutes
-- (internal/statements/operators.ts › activity). A BRIN index keeps one summary per range of
-- pages, so a finishing run (an update that is not HOT anyway: its state changes) adds no index
-- entry of its own; runs finish roughly in the order their pages fill, so recent ranges are few.

CREATE INDEX runs_finished_brin ON "{{schema}}".runs USING brin (finished_at) WITH (autosummarize = on);
