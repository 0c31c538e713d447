-- Failover-safe fences (issue 16, docs/adr/0016-failover-safe-fences.md): a claim's fence is at
-- least the floor of the server's timeline, (timeline - 1) << 32. A promotion starts a new
-- timeline, so a standby promoted after losing the old primary's last claims (asynchronous
-- replication) grants every run a fence above any the old primary can have granted, and a holder
-- from before the failover is refused by the fence. 0 on the first timeline: nothing changes for
-- a store that never failed over.

CREATE FUNCTION "{{schema}}".fence_floor() RETURNS bigint LANGUAGE sql STABLE AS $fn$
  SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 32
$fn$;
