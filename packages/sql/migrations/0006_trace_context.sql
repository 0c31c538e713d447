-- The W3C traceparent of the span that enqueued a run (docs/adr/0011-run-tracing.md); NULL unless
-- tracing is on. Adding a nullable column without a default rewrites nothing.

ALTER TABLE "{{schema}}".runs ADD COLUMN trace_parent text;
