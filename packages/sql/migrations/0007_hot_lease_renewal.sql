-- Renewals become HOT updates (docs/adr/0012-hot-lease-renewal.md): no index names
-- lease_expires_at, so a heartbeat rewrites the row in place on its page and adds no index entry.
-- The sweep for expired leases reads the running runs of its queues and filters by expiry.

DROP INDEX "{{schema}}".runs_leases;
CREATE INDEX runs_running ON "{{schema}}".runs (queue) WHERE state = 'running';
