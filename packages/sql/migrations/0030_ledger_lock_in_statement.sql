-- The ledger's lock and its read in one call, so a completion is one statement, not a transaction
-- of four round trips (issue 39, docs/adr/0022-ledger-writers-ordered-by-lock.md, "Amended 2026-12-03 (evening)").
--
-- `lock_claim_batches` locks the unsettled claim batches named by id (`wanted`), or whose span
-- holds one of `unknown`'s run ids, in batch order, `FOR NO KEY UPDATE` (as ledger.ts's writers
-- did in a statement of their own), and only then reads them and their completions, in a statement
-- of its own: under READ COMMITTED each statement of a volatile function takes a fresh snapshot,
-- so the read sees every write the lock waited for, though the statement that calls it began
-- before the wait. Under a stricter level the read would see the caller's snapshot, so the
-- function refuses (SQLSTATE LH001) and the caller runs it in a READ COMMITTED transaction.
-- Called in a transaction that goes on after it (a keyed completion's, a fenced transaction's),
-- the locks are held to its end: `idle_bound_ms` bounds how long that transaction may then sit
-- idle (the server ends it, and its session), as the lock statement it replaces did.

CREATE FUNCTION "{{schema}}".lock_claim_batches(wanted bigint[], unknown int8multirange, holder text,
  idle_bound_ms integer)
RETURNS TABLE (batch bigint, ids bigint[], fences bigint[], closed bigint[], size integer, expires_at timestamptz,
  completed bigint[])
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  locked bigint[];
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'the ledger decides under READ COMMITTED only (this transaction is %)',
      current_setting('transaction_isolation') USING ERRCODE = 'LH001';
  END IF;
  PERFORM set_config('idle_in_transaction_session_timeout',
    least(nullif(extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000, 0),
      idle_bound_ms)::int::text, true);
  SELECT array_agg(l.batch ORDER BY l.batch) INTO locked FROM (
    SELECT c.batch FROM "{{schema}}".claim_batches c
    WHERE c.batch = ANY (ARRAY(
        SELECT w FROM unnest(wanted) AS w
        UNION SELECT b.batch FROM "{{schema}}".claim_batches b WHERE unknown IS NOT NULL AND b.span && unknown))
      AND c.settled_at IS NULL
      AND (holder IS NULL OR c.owner = holder)
    ORDER BY c.batch FOR NO KEY UPDATE OF c
  ) l;
  IF locked IS NULL THEN RETURN; END IF;
  -- The arrays sliced: one detoasted copy per batch, not one per subscript.
  RETURN QUERY
    SELECT c.batch, c.ids[1:], c.fences[1:], c.closed, cardinality(c.ids), c.expires_at,
      coalesce((SELECT array_agg(u.id) FROM "{{schema}}".completion_batches d, unnest(d.ids) AS u(id)
        WHERE d.claim_batch = c.batch), '{}')
    FROM "{{schema}}".claim_batches c
    WHERE c.batch = ANY (locked) AND c.settled_at IS NULL;
END $fn$;
