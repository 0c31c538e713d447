#!/usr/bin/env bash
# Mutation checks: in a temporary copy of the repository, remove what provides a guarantee,
# rebuild, and run the test that proves it. The check passes only if the test FAILS there.
#   scripts/mutation-check.sh         the fence comparison of every guarded write (the SQL
#                                     predicates and the transaction's check), against
#                                     test/it-leases-fencing.test.ts;
#   scripts/mutation-check.sh keys    the uniqueness of the held key slots (migration 0010's
#                                     indexes and 0025's key_holds), against test/keys-process.test.ts,
#                                     run up to three times (a race: it shows in most runs, not in every one);
#   scripts/mutation-check.sh key-holds  key_holds' primary key alone (migration 0025: the one slot
#                                     domain of row and ledger runs), against the same test;
#   scripts/mutation-check.sh successor-place  a ledger completion's claimed successors joined back
#                                     to their leases by run id (a nested loop over the batch), against
#                                     test/plans.test.ts;
#   scripts/mutation-check.sh workflow  the holder check of a workflow activity's recorded result
#                                     (internal/statements/workflow.ts), against the workflow tests;
#   scripts/mutation-check.sh memory-journal  the same holder check in the memory twin
#                                     (core internal/memory/Journal.ts), against test/workflow-journal.test.ts;
#   scripts/mutation-check.sh wake    the wake of a running replay parked on a wait that ended
#                                     (LeaseholdWorkflows › wakeWhenDone never acts), against
#                                     test/workflow-engine.test.ts and the workflow process test;
#   scripts/mutation-check.sh child-first-run  a parent suspends for its child at once, before the
#                                     child's first run (LeaseholdWorkflows › execute), against
#                                     test/workflow-children.test.ts (the parent's replays counted);
#   scripts/mutation-check.sh child-slot  a parent waits for its child with no slot free for it
#                                     (LeaseholdWorkflows › firstResultOfChild), against the same
#                                     test's one-slot and narrow workers (they wait on each other);
#   scripts/mutation-check.sh workflow-trace  an execution is enqueued without its caller's
#                                     traceparent, against test/workflow-tracing.test.ts;
#   scripts/mutation-check.sh epoch   the timeline floor of claimed fences (internal/statements/claim.ts, claimFragments.ts),
#                                     against test/failover.test.ts (asynchronous failover);
#   scripts/mutation-check.sh position  the claim position of due-only claims (internal/statements/claim.ts
#                                     reads every queue from its head), against the model test:
#                                     the memory store keeps the position, so the two disagree
#                                     (run up to three times: random sequences);
#   scripts/mutation-check.sh handoff  the hand-off (and the claim in it) of a freed key slot to its key's next waiting
#                                     run (internal/statements/admit.ts › handOff in completions, migration
#                                     0013's row trigger), against the model test: the memory store
#                                     hands slots on, so the two disagree (up to three times);
#   scripts/mutation-check.sh peak    the hand-off's look for a slot above a lowered limit (only
#                                     while the limit is below its peak, migration 0015), against
#                                     test/hand-off.test.ts;
#   scripts/mutation-check.sh signature  callback URLs sign the v1 texts again (`v1.<run>.<signal>.<exp>`,
#                                     a deferred's `v1.workflow:<name>:<execution>.<deferred>.<exp>`)
#                                     instead of length-prefixed parts (http/src/internal/CallbackSignature.ts),
#                                     against test/http-deferred-callbacks.test.ts (a re-split around a colon);
#   scripts/mutation-check.sh expiry  `exp` is no longer required to be 1 to 12 digits (CallbackSignature.ts
#                                     › parseExp), against test/http-callbacks.test.ts (a signed `Infinity`
#                                     never expires; a v1 URL's re-split into exp verifies);
#   scripts/mutation-check.sh reclaim  the sweep that follows a sweep which took expired leases
#                                     (Worker's claim loop: sweeps once per poll interval only),
#                                     against test/reclaim-process.test.ts and the worker-clock test;
#   scripts/mutation-check.sh prerequisites  npm test's check takes PgBouncer as present without
#                                     looking (scripts/prerequisites.mjs), against
#                                     test/prerequisites.test.ts (a fresh machine's shape);
#   scripts/mutation-check.sh skips   a skipped test no longer fails a CI=true run
#                                     (test/support/skipsReporter.ts), against
#                                     test/skips-reporter.test.ts;
#   scripts/mutation-check.sh circle  core's Fence.ts re-exports from Run.ts, which imports Fence.ts (a new
#                                     circle), against test/import-graph.test.ts;
#   scripts/mutation-check.sh upward  @leasehold/http imports @leasehold/sql (same floor, undeclared),
#                                     against test/import-graph.test.ts;
#   scripts/mutation-check.sh ledger-fence  a ledger completion no longer compares the lease's
#                                     fence with its batch's (internal/statements/ledger.ts ›
#                                     openLeases), against test/fencing.test.ts and test/ledger.test.ts;
#   scripts/mutation-check.sh ledger-closed  a ledger completion no longer skips the runs moved
#                                     to their rows (the batch's `closed`), against test/ledger.test.ts;
#   scripts/mutation-check.sh ledger-lapse  a renewal no longer moves the runs its worker stopped
#                                     naming to their rows with their expiry (ledger.ts › renew),
#                                     against test/ledger.test.ts;
#   scripts/mutation-check.sh ledger-renew-ended  a renewal by claim batch no longer counts the runs
#                                     moved to their rows (the batch's `closed`) as ended there
#                                     (ledger.ts › renewClaimed), against test/ledger.test.ts (a
#                                     cancelled and a reclaimed run are answered as held);
#   scripts/mutation-check.sh ledger-renew-owner  a renewal by claim batch no longer checks the
#                                     batch's owner (ledger.ts › renewClaimed), against
#                                     test/ledger.test.ts (another owner's name extends the batch);
#   scripts/mutation-check.sh ledger-renew-lock  a renewal by claim batch no longer locks its batches
#                                     before it decides (ledger.ts › renewClaimed), against
#                                     test/interleavings.test.ts beside a stalled holder of the batch
#                                     (a run moved to its row meanwhile is answered renewed, its lease not extended);
#   scripts/mutation-check.sh expire-cap  a sweep moves at most 8 expired claim batches to their rows whatever
#                                     its limit (claim.ts › claimAll), against test/ledger.test.ts (20 single-run
#                                     batches of a dead worker and 20 due runs: the sweep takes due runs first);
#   scripts/mutation-check.sh completion-idle-bound  a transaction that completed runs in the ledger may then
#                                     sit idle for a day, holding their batches (ledger.ts › openLeases), against
#                                     test/ledger.test.ts (the sweep never takes a stalled keyed completion's run);
#   scripts/mutation-check.sh writer-lanes  completions go to the writers in turn, whatever their claim
#                                     (CompletionBatcher › submit ignores the lane), against test/worker-clock.test.ts
#                                     (both writers write runs of one claim at the same time);
#   scripts/mutation-check.sh rated-claim-timeouts  a rated claim no longer returns its runs' attempt timeouts
#                                     and deadlines (rate.ts › claimRated), against the contract suite (the
#                                     worker read a missing deadline as passed and failed every rated run);
#   scripts/mutation-check.sh ledger-expire-skip  the sweep waits for an expired batch another
#                                     transaction holds (ledger.ts › expire), against
#                                     test/ledger.test.ts (the sweep's claim never answers);
#   scripts/mutation-check.sh fenced-tx-idle-bound  a fenced transaction no longer bounds its idle
#                                     time on the server (guarded.ts › completeInTransaction sets no
#                                     idle_in_transaction_session_timeout), against
#                                     test/silent-holder.test.ts (a silent holder's runs are never reclaimed);
#   scripts/mutation-check.sh attempt-logs-fence  a failed attempt's log lines are written whatever its
#                                     guarded failure matched (attemptLogs.ts › withFailure reads the
#                                     request, not the UPDATE's rows), against the contract suite on
#                                     PostgreSQL (a stale holder's lines must not be kept);
#   scripts/mutation-check.sh attempt-logs-bound  the bound of attempt logs is not applied
#                                     (core AttemptLogStorage.ts › bound keeps every line whole), against
#                                     the contract suite on the memory store;
#   scripts/mutation-check.sh fenced-tx-worker-ttl  Run.transaction no longer hands the worker's
#                                     lease TTL to the store (core Run.ts › transaction), against
#                                     test/silent-holder.test.ts's worker scenarios;
#   scripts/mutation-check.sh ledger-ready  an update of a ledger run's row creates its ready row
#                                     when missing (ready_on_update, migration 0025's), against
#                                     test/ledger.test.ts (a run the ledger holds is claimed again);
#   scripts/mutation-check.sh snooze-fence  a snooze no longer compares the fence (guarded.ts ›
#                                     snooze), against the contract suite on PostgreSQL (a stale
#                                     holder's snooze must be FenceRejected);
#   scripts/mutation-check.sh snooze-attempt  a snooze no longer gives the attempt back (guarded.ts
#                                     › snooze), against the contract suite on PostgreSQL;
#   scripts/mutation-check.sh rate-room  a rated claim takes as many runs of a window as its limit
#                                     asks, whatever the window's room (rate.ts › claimRated),
#                                     against the contract suite on PostgreSQL;
#   scripts/mutation-check.sh rate-lock  rated claims no longer lock their windows (rate.ts ›
#                                     claimRated), against test/rate-process.test.ts, up to three
#                                     times (a race between claimers);
#   scripts/mutation-check.sh unique-lock  a unique enqueue reads a taken hold without locking it
#                                     (migration 0034's enqueue_run), against test/unique-process.test.ts
#                                     (two enqueuers of a released key both take it), up to three times;
#   scripts/mutation-check.sh sql-enqueue-ledger  the SQL enqueue records every run in its row
#                                     (migration 0034's enqueue_run), against test/sql-enqueue.test.ts;
#   scripts/mutation-check.sh idem-ledger  runs with an idempotency key are recorded in their rows again,
#                                     not the ledger (enqueue.ts › enqueueWithKeys, migration 0034's
#                                     enqueue_run), against test/ledger.test.ts (their claim and completion
#                                     rewrite their rows) and test/sql-enqueue.test.ts;
#   scripts/mutation-check.sh unique-ledger-state  a unique window judges its holder by its row's
#                                     state alone, not the ledger's (migration 0034's enqueue_run),
#                                     against the contract suite on PostgreSQL (a second run of a key
#                                     held by a pending or running ledger run);
#   scripts/mutation-check.sh deferred-schema  a workflow's decision is recorded as sent, not
#                                     decoded with its person deferred's success schema
#                                     (http/src/internal/SignalSchemas.ts › encodeDecision), against
#                                     test/workflow-approvals.test.ts (a text amount is refused, nothing written);
#   scripts/mutation-check.sh console-fields  the runs search's fields take `value` from the page's
#                                     link, which Preact writes back on each render (http console
#                                     pages/runs.tsx), against test/console.browser.test.ts (a live
#                                     reload wipes what the operator typed);
#   scripts/mutation-check.sh console-order  a console page shows whichever of its requests answers
#                                     last (http console ui.tsx › useLoad), against
#                                     test/console.browser.test.ts (an older reload's answer held back);
#   scripts/mutation-check.sh shutdown-await  the worker's shutdown interrupts the runs still going
#                                     after the drain without waiting for them (Worker.ts › run:
#                                     their finalizers and releases may outlive the worker), against
#                                     test/worker-clock.test.ts (the worker stops before they end);
#   scripts/mutation-check.sh silent-slot  with no event sink, a completed run's slot is not freed
#                                     (Lease.ts › settledAs skips freeSlot when nothing listens),
#                                     against test/worker-clock.test.ts (a one-slot worker stops after its first run);
#   scripts/mutation-check.sh ledger-read-committed  the ledger's transactions keep the isolation level
#                                     the session asks for (transactions.ts › readCommitted), against
#                                     test/interleavings.test.ts on sessions defaulting to REPEATABLE READ;
#   scripts/mutation-check.sh ledger-lock  ledger completions lock their batches FOR KEY SHARE,
#                                     which does not order them among themselves (migration 0030's
#                                     lock_claim_batches), against test/interleavings.test.ts (a completion
#                                     and its retry both record the run);
#   scripts/mutation-check.sh ledger-isolation-check  lock_claim_batches reads under whatever isolation
#                                     the transaction has (migration 0030: no refusal, so no READ COMMITTED
#                                     retry), against test/interleavings.test.ts on sessions defaulting to REPEATABLE READ;
#   scripts/mutation-check.sh ledger-once  a keyed completion's transaction sends its ledger statement, then the
#                                     rows', then a second ledger statement for what the rows missed
#                                     (guarded.ts › ledgerThenRows in place of ledgerOnce: two lock passes),
#                                     against test/ledger-lock-order.test.ts (two crossing completions deadlock);
#   scripts/mutation-check.sh unique-order  a batch of unique requests no longer takes its holds in
#                                     one order first (enqueue.ts › takeHolds), against
#                                     test/unique-process.test.ts (opposite-order batches in callers'
#                                     transactions, where no deadlock is retried, deadlock), up to three times;
#   scripts/mutation-check.sh idem-order  a batch with idempotency keys inserts its rows in request
#                                     order, not key order (enqueue.ts › enqueueWithKeys), against
#                                     test/idempotency-order.test.ts (opposite-order batches deadlock);
#   scripts/mutation-check.sh unique-retake  enqueue_run no longer takes anew a hold deleted between
#                                     its insert and its lock (migration 0034's enqueue_run), against
#                                     test/retention.test.ts (the enqueue yields no run);
#   scripts/mutation-check.sh unique-retention  a completion that deletes its run keeps that run's
#                                     holds (guarded.ts › releasedHolds), against test/retention.test.ts;
#   scripts/mutation-check.sh rate-full-window  a full rate window takes a place among a rated
#                                     claim's windows (rate.ts › claimRated), against the contract
#                                     suite on PostgreSQL (a window with room behind it waits);
#   scripts/mutation-check.sh rate-wake  the memory store no longer wakes its workers as a rate window
#                                     that held runs back opens (MemoryRunStore › claim), against
#                                     test/worker-clock.test.ts (TestClock: the run starts at the poll);
#   scripts/mutation-check.sh rate-wake-pg  the same in PgRunStore, against test/rate-process.test.ts
#                                     (a worker polling once an hour: the runs never start in time);
#   scripts/mutation-check.sh enqueue-deadlock  a batch of unique requests the server aborted to break a
#                                     deadlock is not sent again (enqueue.ts › retryDeadlocks), against
#                                     test/unique-process.test.ts (idempotency keys in opposite orders);
#   scripts/mutation-check.sh ledger-unkeyed  a ledger completion whose lease says nothing of a key is
#                                     taken as keyed whatever its claim said (ledger.ts › complete), against
#                                     test/ledger.test.ts (a fenced transaction sends the key hand-off);
#   scripts/mutation-check.sh claim-loop  a worker whose claim loop died runs on (Worker › run waits
#                                     forever instead of joining the loop), against test/worker-clock.test.ts;
#   scripts/mutation-check.sh rate-retry  a retried run keeps the rate scope it had when it ended,
#                                     against test/contract.test.ts
#   scripts/mutation-check.sh rate-running  a rate limit declared leaves the runs running in the
#                                     ledger there (rate.ts › regovern), against test/contract.test.ts
#                                     (released, snoozed and retried, all three start within the hour);
#   scripts/mutation-check.sh rate-seen  PgRunStore remembers one "no rate limit declared" for every
#                                     claim, whatever its queues and kinds (rate.ts › RatedSeen), against
#                                     the contract suite on PostgreSQL (a due-only claim skips a governed run);
#   scripts/mutation-check.sh attempt-timeout  the attempt timeout never fires (core internal/Timeouts.ts
#                                     › bounded ignores it), against test/timeouts-process.test.ts (a hung
#                                     handler kept alive by heartbeats) and test/worker-clock.test.ts;
#   scripts/mutation-check.sh deadline-running  a running attempt is not stopped at its run's deadline
#                                     (Timeouts.ts › bounded ignores the claim's deadlineInMs), against
#                                     test/worker-clock.test.ts and test/timeouts-process.test.ts;
#   scripts/mutation-check.sh deadline-retry  a failed attempt gets a retry due past its run's deadline
#                                     (guarded.ts › fail), against the contract suite on PostgreSQL;
#   scripts/mutation-check.sh deadline-memory  the same in the memory store (core internal/memory/Guarded.ts
#                                     › fail), against the model test: PostgreSQL fails the run, the memory
#                                     store retries it, so the two disagree (up to three times: random sequences);
#   scripts/mutation-check.sh delete-running  a delete takes running runs too (deletes.ts: no busy
#                                     check, no state guard), against the contract suite on PostgreSQL;
#   scripts/mutation-check.sh delete-count  a delete goes ahead whatever count the filter selects now
#                                     (deletes.ts), against the contract suite on PostgreSQL;
#   scripts/mutation-check.sh delete-history  a delete leaves the runs' history behind (deletes.ts:
#                                     no DELETE of run_events), against test/delete-runs.test.ts;
#   scripts/mutation-check.sh delete-attempt-logs  a delete leaves the runs' attempt logs behind
#                                     (deletes.ts: no DELETE of attempt_logs), against test/delete-runs.test.ts;
#   scripts/mutation-check.sh delete-ledger  a delete leaves the ledger's batches as they were
#                                     (ledger.ts › forgetDeleted not called), against test/delete-runs.test.ts;
#   scripts/mutation-check.sh retention-live  retention takes no account of row runs not ended
#                                     (migration 0033's history_range_kept), against the contract suite on PostgreSQL;
#   scripts/mutation-check.sh retention-memory  the memory store's retention drops runs not ended
#                                     (internal/memory/History.ts), against the contract suite on the memory store;
#   scripts/mutation-check.sh readonly-token  a read-only credential may write (Admin.ts's guard),
#                                     against test/http-operators.test.ts;
#   scripts/mutation-check.sh batch-partial  Client.enqueueMany writes each payload as soon as it
#                                     encodes, before the batch's bad one fails (Client.ts), against
#                                     the contract suite on the memory store and test/client.test.ts;
#   scripts/mutation-check.sh signal-unchecked  the check Client.resume and resumeByToken pass the
#                                     store accepts every payload (Client.ts › signalCheck),
#                                     against the contract suite on the memory store and test/http-admin.test.ts;
#   scripts/mutation-check.sh signal-check-pg  PgRunStore's resume ignores its check
#                                     (admin.ts › checkedResume), against the contract suite on PostgreSQL;
#   scripts/mutation-check.sh signal-check-memory  MemoryRunStore's resume ignores its check
#                                     (internal/memory/Admin.ts › refused), against the contract suite;
#   scripts/mutation-check.sh search-window  a creation window is not turned into an id bound
#                                     (read.ts › list: the scan by id walks into all history), against
#                                     test/plans.test.ts's operator reads on a large store;
set -euo pipefail
mutation="${1:-fence}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/leasehold-mutant-XXXXXX)"
trap '[ -n "${KEEP_MUTANT:-}" ] || rm -rf "$work"' EXIT

tar -C "$repo" --exclude=./node_modules --exclude=./.git --exclude='*/dist' --exclude='*.tsbuildinfo' \
  --exclude=./.leasehold --exclude=./.scratch -cf - . | tar -C "$work" -xf -

if [ "$mutation" = "keys" ]; then
  migrations="$work/packages/sql/migrations/0010_key_concurrency.sql"
  holds="$work/packages/sql/migrations/0025_keyed_ledger.sql"
  sed -i "s/CREATE UNIQUE INDEX runs_key_slots_/CREATE INDEX runs_key_slots_/" "$migrations"
  sed -i "s/^  PRIMARY KEY (scope, name, key, slot)$/  CHECK (true)/" "$holds"
  grep -q "CREATE UNIQUE INDEX runs_key_slots" "$migrations" && { echo "mutation incomplete"; exit 2; }
  grep -q "PRIMARY KEY (scope, name, key, slot)" "$holds" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: the held key slots are no longer unique, in rows or in key_holds ($migrations, $holds)"
  tests=(test/keys-process.test.ts)
  attempts=3
elif [ "$mutation" = "key-holds" ]; then
  holds="$work/packages/sql/migrations/0025_keyed_ledger.sql"
  # The rows' slot indexes stay: only the ledger's slots (and the rows' mirrored ones) lose their key.
  sed -i "s/^  PRIMARY KEY (scope, name, key, slot)$/  CHECK (true)/" "$holds"
  grep -q "PRIMARY KEY (scope, name, key, slot)" "$holds" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: key_holds' primary key is gone: two admissions of one slot both commit ($holds)"
  tests=(test/keys-process.test.ts)
  attempts=3
elif [ "$mutation" = "successor-place" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  # The ledger completion's successors are joined back to the leases by run id instead of
  # carrying their lease's place.
  sed -i 's/SELECT o.id, h.scope, h.name, h.key, h.slot, o.ord AS after, /SELECT o.id, h.scope, h.name, h.key, h.slot, o.id AS after, /' "$ledger"
  sed -i 's/      FROM handed h WHERE h.claim`/      FROM handed h JOIN (SELECT id, min(ord) AS ord FROM open_leases GROUP BY id) i ON i.id = h.after WHERE h.claim`/' "$ledger"
  sed -i "s/      SELECT 'next', h.after::text, h.id::text,/      SELECT 'next', i.ord::text, h.id::text,/" "$ledger"
  grep -q "h.slot, o.id AS after, " "$ledger" || { echo "mutation incomplete"; exit 2; }
  grep -q "i ON i.id = h.after WHERE h.claim" "$ledger" || { echo "mutation incomplete"; exit 2; }
  grep -q "SELECT 'next', i.ord::text" "$ledger" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a ledger completion's successors are joined back to their leases ($ledger)"
  tests=(test/plans.test.ts -t "in the ledger, a keyed completion")
  attempts=1
elif [ "$mutation" = "ledger-fence" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  sed -i 's/WHERE h.ids\[i.pos\] = i.id AND h.fences\[i.pos\] = i.fence AND/WHERE h.ids[i.pos] = i.id AND/' "$ledger"
  grep -q "h.fences\[i.pos\] = i.fence" "$ledger" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a ledger completion or renewal matches any fence at the run's place ($ledger)"
  tests=(test/ledger.test.ts test/fencing.test.ts)
  attempts=1
elif [ "$mutation" = "ledger-closed" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  sed -i 's/ AND i.id <> ALL (h.closed)$//' "$ledger"
  grep -q "i.id <> ALL (h.closed)" "$ledger" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a ledger completion completes runs moved to their rows ($ledger)"
  tests=(test/ledger.test.ts)
  attempts=1
elif [ "$mutation" = "ledger-lapse" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  sed -i 's/    if (lapsed.length > 0) {/    if (lapsed.length < 0) {/' "$ledger"
  grep -q "if (lapsed.length > 0)" "$ledger" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a renewal extends every open run of a batch it names, named or not ($ledger)"
  tests=(test/ledger.test.ts)
  attempts=1
elif [ "$mutation" = "ledger-renew-ended" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  perl -0pi -e 's/SELECT h\.batch, u\.id FROM held h, unnest\(h\.closed\) AS u\(id\)\n\s*UNION\n//' "$ledger"
  grep -q "FROM held h, unnest(h.closed) AS u(id)" "$ledger" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a renewal by claim batch takes the runs moved to their rows for open ($ledger)"
  tests=(test/ledger.test.ts)
  attempts=1
elif [ "$mutation" = "ledger-renew-owner" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  sed -i 's/AND c.settled_at IS NULL AND c.owner = ${owner}$/AND c.settled_at IS NULL/' "$ledger"
  grep -q 'AND c.settled_at IS NULL AND c.owner = ${owner}$' "$ledger" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a renewal by claim batch renews a batch whatever its owner ($ledger)"
  tests=(test/ledger.test.ts)
  attempts=1
elif [ "$mutation" = "ledger-renew-lock" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  perl -0pi -e 's/ORDER BY c\.batch FOR NO KEY UPDATE OF c`,\n      decide/ORDER BY c.batch`,\n      decide/' "$ledger"
  grep -q 'ORDER BY c.batch`,$' "$ledger" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a renewal by claim batch decides without locking its batches first ($ledger)"
  export ISO_ONLY=stall,renew,checkpoint
  tests=(test/interleavings.test.ts)
  attempts=1
elif [ "$mutation" = "expire-cap" ]; then
  claim="$work/packages/sql/src/internal/statements/claim.ts"
  sed -i 's/ledger.expire(sql, s, Math.max(expiredBatchesPerSweep, request.limit))/ledger.expire(sql, s, expiredBatchesPerSweep)/' "$claim"
  grep -q "Math.max(expiredBatchesPerSweep" "$claim" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a sweep moves at most 8 expired claim batches to their rows ($claim)"
  tests=(test/ledger.test.ts -t "however small their claim batches")
  attempts=1
elif [ "$mutation" = "completion-idle-bound" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  sed -i 's/      ${idleBoundMs(bound)}::int)$/      ${idleBoundMs(Duration.sum(bound, Duration.days(1)))}::int)/' "$ledger"
  grep -q 'idleBoundMs(Duration.sum(bound' "$ledger" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a transaction that completed runs in the ledger may sit idle for a day ($ledger)"
  tests=(test/ledger.test.ts -t "stalled after its ledger statement")
  attempts=1
elif [ "$mutation" = "writer-lanes" ]; then
  batcher="$work/packages/core/src/internal/CompletionBatcher.ts"
  sed -i 's/    const i = Math.abs(Math.trunc(lane)) % queues.length/    const i = (turn++ + lane * 0) % queues.length/' "$batcher"
  sed -i 's/^  const submit = ($/  let turn = 0\n  const submit = (/' "$batcher"
  grep -q "turn++" "$batcher" && grep -q "let turn = 0" "$batcher" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: completions go to the writers in turn, whatever their claim ($batcher)"
  tests=(test/worker-clock.test.ts -t "completion writers")
  attempts=1
elif [ "$mutation" = "rated-claim-timeouts" ]; then
  rate="$work/packages/sql/src/internal/statements/rate.ts"
  sed -i 's/          2 AS origin, wait_ms, trace_parent, attempt_timeout_ms, deadline_in_ms$/          2 AS origin, wait_ms, trace_parent/' "$rate"
  grep -q "trace_parent, attempt_timeout_ms, deadline_in_ms$" "$rate" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a rated claim returns no attempt timeouts or deadlines ($rate)"
  tests=(test/contract.test.ts -t "a rated claim hands over")
  attempts=1
elif [ "$mutation" = "ledger-expire-skip" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  sed -i '/^        FOR UPDATE OF c SKIP LOCKED$/d' "$ledger"
  grep -q 'FOR UPDATE OF c SKIP LOCKED' "$ledger" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: the sweep waits for an expired batch another transaction holds ($ledger)"
  tests=(test/ledger.test.ts)
  attempts=1
elif [ "$mutation" = "fenced-tx-idle-bound" ]; then
  guarded="$work/packages/sql/src/internal/statements/guarded.ts"
  sed -i 's/^  const bound = ttl === undefined ? sql`` : sql`, ${idleBound(sql, ttl)} AS idle_bound`$/  const bound = true ? sql`` : sql`, ${idleBound(sql, ttl!)} AS idle_bound`/' "$guarded"
  grep -q '^  const bound = true ? sql``' "$guarded" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a fenced transaction's idle time on the server is no longer bounded ($guarded)"
  tests=(test/silent-holder.test.ts)
  attempts=1
elif [ "$mutation" = "fenced-tx-worker-ttl" ]; then
  run="$work/packages/core/src/Run.ts"
  perl -0pi -e 's/\(a\) => encode\(fence\.runId, a\),\n\s*Settlement\.leaseTtl\(run\)\n/(a) => encode(fence.runId, a)\n/' "$run"
  grep -q 'Settlement.leaseTtl(run)' "$run" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: Run.transaction no longer hands the worker's lease TTL to the store ($run)"
  tests=(test/silent-holder.test.ts -t "a worker's transaction")
  attempts=1
elif [ "$mutation" = "ledger-ready" ]; then
  # The function in force is migration 0025's (0023 and 0025 replaced 0018's).
  migrations="$work/packages/sql/migrations/0025_keyed_ledger.sql"
  perl -0pi -e 's/THEN was\n(\s*)ELSE NEW\.state/THEN true\n$1ELSE NEW.state/; s/ELSIF is_now AND OLD\.state <> .ledger. THEN/ELSIF is_now THEN/' "$migrations"
  grep -q "THEN true" "$migrations" && grep -q "ELSIF is_now THEN" "$migrations" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: an update of a ledger run's row makes it ready again, held or not ($migrations)"
  tests=(test/ledger.test.ts)
  attempts=1
elif [ "$mutation" = "snooze-fence" ] || [ "$mutation" = "snooze-attempt" ]; then
  guarded="$work/packages/sql/src/internal/statements/guarded.ts"
  if [ "$mutation" = "snooze-fence" ]; then
    perl -0pi -e 's/(run_at = now\(\) \+ \$\{request\.delayMs\}[^\n]*\n[^\n]*\n\s*WHERE id = \$\{request\.runId\}::bigint) AND fence = \$\{request\.fence\}::bigint/$1/' "$guarded"
    echo "mutation: a snooze matches its run by id and state, not fence ($guarded)"
  else
    perl -0pi -e 's/(run_at = now\(\) \+ \$\{request\.delayMs\}[^\n]*\n\s*)attempt = greatest\(attempt - 1, 0\), /$1/' "$guarded"
    echo "mutation: a snooze keeps the attempt it ended ($guarded)"
  fi
  cmp -s "$guarded" "$repo/packages/sql/src/internal/statements/guarded.ts" && { echo "mutation incomplete"; exit 2; }
  tests=(test/contract.test.ts -t "snooze|superseded holder")
  attempts=1
elif [ "$mutation" = "rate-room" ]; then
  rate="$work/packages/sql/src/internal/statements/rate.ts"
  sed -i 's/LIMIT greatest(w.room, 0)/LIMIT ${request.limit}/' "$rate"
  grep -q 'greatest(w.room, 0)' "$rate" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a rated claim ignores its windows' room ($rate)"
  tests=(test/contract.test.ts -t "rate limits")
  attempts=1
elif [ "$mutation" = "rate-lock" ]; then
  rate="$work/packages/sql/src/internal/statements/rate.ts"
  sed -i "s/WHERE pg_try_advisory_xact_lock(hashtextextended(/WHERE true OR pg_try_advisory_xact_lock(hashtextextended(/" "$rate"
  grep -q 'WHERE true OR pg_try_advisory_xact_lock' "$rate" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: rated claims take no lock on their windows ($rate)"
  tests=(test/rate-process.test.ts)
  attempts=3
elif [ "$mutation" = "unique-order" ]; then
  enqueue="$work/packages/sql/src/internal/statements/enqueue.ts"
  sed -i 's/^  if (requests.length < 2) return Effect.void$/  if (requests.length >= 0) return Effect.void/' "$enqueue"
  grep -q 'if (requests.length >= 0) return Effect.void' "$enqueue" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a unique batch takes its holds in request order, one request at a time ($enqueue)"
  # Inside callers' transactions: outside, a deadlock's aborted batch is sent again (enqueue-deadlock).
  tests=(test/unique-process.test.ts -t "callers' transactions")
  attempts=3
elif [ "$mutation" = "idem-order" ]; then
  enqueue="$work/packages/sql/src/internal/statements/enqueue.ts"
  sed -i 's/^        ORDER BY idempotency_key COLLATE "C", ord$/        ORDER BY ord/' "$enqueue"
  grep -q 'ORDER BY idempotency_key' "$enqueue" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a batch with idempotency keys inserts its rows in request order ($enqueue)"
  tests=(test/idempotency-order.test.ts)
  attempts=1
elif [ "$mutation" = "unique-retake" ]; then
  # The enqueue_run in force: migration 0034's (0024's, 0025's, 0031's and 0033's, replaced).
  migration="$work/packages/sql/migrations/0034_idempotent_ledger.sql"
  sed -i 's/^        IF FOUND THEN$/        IF true THEN/' "$migration"
  grep -q '^        IF true THEN$' "$migration" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: enqueue_run judges a hold it found deleted as held ($migration)"
  tests=(test/retention.test.ts -t "taken anew")
  attempts=1
elif [ "$mutation" = "unique-retention" ]; then
  guarded="$work/packages/sql/src/internal/statements/guarded.ts"
  sed -i 's/WHERE h.run_id = ANY(ARRAY(SELECT id FROM deleted)) AND (h.states IS NOT NULL OR h.held_until <= now())/WHERE false/' "$guarded"
  grep -q 'h.states IS NOT NULL OR h.held_until <= now()' "$guarded" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a completion that deletes its run keeps the run's holds ($guarded)"
  tests=(test/retention.test.ts -t "uniqueness windows")
  attempts=1
elif [ "$mutation" = "rate-full-window" ]; then
  rate="$work/packages/sql/src/internal/statements/rate.ts"
  sed -i 's/SELECT \* FROM counted WHERE started < per_interval ORDER BY first/SELECT * FROM counted WHERE started >= 0 ORDER BY first/' "$rate"
  grep -q "FROM counted WHERE started >= 0 ORDER BY first" "$rate" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a full window takes a place among a rated claim's windows ($rate)"
  tests=(test/contract.test.ts -t "rate limits")
  attempts=1
elif [ "$mutation" = "rate-wake" ]; then
  store="$work/packages/core/src/MemoryRunStore.ts"
  sed -i "s/wake === undefined ? Effect.void : rateWakes.schedule(wake, now)/wake === undefined || now >= 0 ? Effect.void : rateWakes.schedule(wake, now)/" "$store"
  grep -q 'now >= 0 ? Effect.void' "$store" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: the memory store schedules no wake for runs a rate window held back ($store)"
  tests=(test/worker-clock.test.ts -t "rate limits")
  attempts=1
elif [ "$mutation" = "rate-wake-pg" ]; then
  store="$work/packages/sql/src/PgRunStore.ts"
  sed -i 's/if (wake.next === undefined) return Effect.void/if (wake.next === undefined || request.limit > 0) return Effect.void/' "$store"
  grep -q 'request.limit > 0) return Effect.void' "$store" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: PgRunStore schedules no wake for runs a rate window held back ($store)"
  tests=(test/rate-process.test.ts -t "wake")
  attempts=1
elif [ "$mutation" = "enqueue-deadlock" ]; then
  enqueue="$work/packages/sql/src/internal/statements/enqueue.ts"
  sed -i 's/const deadlockRetries = 5/const deadlockRetries = 0/' "$enqueue"
  grep -q 'const deadlockRetries = 0' "$enqueue" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a deadlock's aborted batch is not sent again ($enqueue)"
  tests=(test/unique-process.test.ts -t "mix unique keys and idempotency keys")
  attempts=1
elif [ "$mutation" = "ledger-unkeyed" ]; then
  ledger="$work/packages/sql/src/internal/statements/ledger.ts"
  sed -i 's/leases.some((l, i) => l.keyed === true || known\[i\] === undefined/leases.some((l, i) => l.keyed !== false || known[i] === undefined/' "$ledger"
  grep -q 'l.keyed !== false || known\[i\] === undefined' "$ledger" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a completion that says nothing of a key is taken as keyed ($ledger)"
  tests=(test/ledger.test.ts -t "sends no key hand-off")
  attempts=1
elif [ "$mutation" = "claim-loop" ]; then
  worker="$work/packages/core/src/Worker.ts"
  sed -i 's/return yield\* Effect.orDie(Fiber.join(claiming))/return yield* Effect.andThen(Effect.succeed(claiming), Effect.never)/' "$worker"
  grep -q 'Effect.succeed(claiming), Effect.never' "$worker" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a worker whose claim loop died runs on ($worker)"
  tests=(test/worker-clock.test.ts -t "a claim that dies")
  attempts=1
elif [ "$mutation" = "rate-retry" ]; then
  admin="$work/packages/sql/src/internal/statements/admin.ts"
  sed -i 's/rate.governing(s, "runs.kind", "runs.queue"))}`/rate.governing(s, "runs.kind", "runs.queue") \&\& "rate_scope")}`/' "$admin"
  grep -q '"runs.queue") && "rate_scope")}`' "$admin" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a retried run keeps the rate scope it had when it ended ($admin)"
  tests=(test/contract.test.ts -t "retried run is governed")
  attempts=1
elif [ "$mutation" = "rate-running" ]; then
  rate="$work/packages/sql/src/internal/statements/rate.ts"
  sed -i 's/WHERE c.settled_at IS NULL AND u.id <> ALL (c.closed) AND r.state = .ledger./WHERE false/' "$rate"
  grep -q "WHERE false" "$rate" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a rate limit declared leaves the runs running in the ledger there, ungoverned once pending again ($rate)"
  tests=(test/contract.test.ts -t "declared while runs of its kind are running")
  attempts=1
elif [ "$mutation" = "rate-seen" ]; then
  rate="$work/packages/sql/src/internal/statements/rate.ts"
  sed -i 's/this.declared.get(RatedSeen.scope(request))/this.declared.get(RatedSeen.scope(request) \&\& "")/; s/this.declared.set(RatedSeen.scope(request), declared)/this.declared.set(RatedSeen.scope(request) \&\& "", declared)/' "$rate"
  grep -q 'RatedSeen.scope(request) && "", declared' "$rate" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: one remembered answer for every claim's kinds and queues ($rate)"
  tests=(test/contract.test.ts -t "rate limits")
  attempts=1
elif [ "$mutation" = "ledger-read-committed" ]; then
  transactions="$work/packages/sql/src/internal/statements/transactions.ts"
  sed -i 's/^  Effect.provideService(effect, SqlClient.BeginTransaction, "BEGIN ISOLATION LEVEL READ COMMITTED")$/  effect/' "$transactions"
  grep -q 'BEGIN ISOLATION LEVEL READ COMMITTED")$' "$transactions" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: the ledger's transactions run at the session's isolation level ($transactions)"
  tests=(test/interleavings.test.ts -t "REPEATABLE READ")
  attempts=1
elif [ "$mutation" = "ledger-lock" ]; then
  ledger="$work/packages/sql/migrations/0030_ledger_lock_in_statement.sql"
  sed -i 's/^    ORDER BY c.batch FOR NO KEY UPDATE OF c$/    ORDER BY c.batch FOR KEY SHARE OF c/' "$ledger"
  grep -q '^    ORDER BY c.batch FOR KEY SHARE OF c$' "$ledger" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: ledger completions lock their batches FOR KEY SHARE, unordered among themselves ($ledger)"
  export ISO_ONLY=stall,complete,retry
  tests=(test/interleavings.test.ts)
  attempts=1
elif [ "$mutation" = "ledger-once" ]; then
  guarded="$work/packages/sql/src/internal/statements/guarded.ts"
  # ledgerOnce stays named (noUnusedLocals), never called.
  sed -i 's/readCommitted(sql.withTransaction(ledgerOnce(sql, s, items, completedRuns, next, refs)))/readCommitted(sql.withTransaction((false ? ledgerOnce : ledgerThenRows)(sql, s, items, completedRuns, next, refs)))/' "$guarded"
  grep -q "withTransaction((false ? ledgerOnce : ledgerThenRows)(" "$guarded" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a keyed completion's transaction locks its batches in two ledger statements ($guarded)"
  tests=(test/ledger-lock-order.test.ts)
  attempts=1
elif [ "$mutation" = "ledger-isolation-check" ]; then
  ledger="$work/packages/sql/migrations/0030_ledger_lock_in_statement.sql"
  sed -i "s/^  IF current_setting('transaction_isolation') <> 'read committed' THEN$/  IF false THEN/" "$ledger"
  grep -q '^  IF false THEN$' "$ledger" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: lock_claim_batches reads under any isolation level ($ledger)"
  tests=(test/interleavings.test.ts -t "REPEATABLE READ")
  attempts=1
elif [ "$mutation" = "epoch" ]; then
  claim="$work/packages/sql/src/internal/statements/claim.ts"
  # The claim in a run's row (due, rated and hand-off claims) is written once, in claimFragments.ts.
  fragments="$work/packages/sql/src/internal/statements/claimFragments.ts"
  sed -i 's/greatest(r\.fence + 1, f\.floor)/r.fence + 1/g' "$claim" "$fragments"
  grep -q "f\.floor)" "$claim" "$fragments" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: claims raise the fence by 1 whatever the server's timeline ($claim, $fragments)"
  tests=(test/failover.test.ts)
  attempts=1
elif [ "$mutation" = "position" ]; then
  claim="$work/packages/sql/src/internal/statements/claim.ts"
  sed -i 's/dueRows(sql, s, request, positions\.of(request\.queues, request\.kinds))/dueRows(sql, s, request, new Map())/' "$claim"
  grep -q "positions\.of(request" "$claim" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: due-only claims read every queue from its head, ignoring the claim position ($claim)"
  tests=(test/model.test.ts)
  # Random sequences: most runs of 500 find a run backdated behind a position, not every one.
  attempts=3
elif [ "$mutation" = "handoff" ]; then
  admit="$work/packages/sql/src/internal/statements/admit.ts"
  migrations="$work/packages/sql/migrations/0013_key_admission.sql"
  ledger_keys="$work/packages/sql/migrations/0025_keyed_ledger.sql"
  # Completions hand no slot on (their hand-off gives it to no row and no ledger run), and the row
  # trigger finds no successor (0013's, and 0025's give_slot that replaces its search).
  sed -i 's/      FROM successors sc, fence_floor f WHERE r.id = sc.id AND NOT sc.ledger$/      FROM successors sc, fence_floor f WHERE r.id = sc.id AND NOT sc.ledger AND false/' "$admit"
  sed -i 's/^      WHERE sc.ledger AND r.state = .ledger.$/      WHERE sc.ledger AND r.state = '"'ledger'"' AND false/' "$admit"
  sed -i 's/^  IF successor IS NOT NULL THEN/  IF false THEN/' "$migrations"
  sed -i 's/^  -- Claim order: priority DESC, run_at, id.$/  RETURN false;/' "$ledger_keys"
  grep -q "WHERE r.id = sc.id AND NOT sc.ledger AND false" "$admit" || { echo "mutation incomplete"; exit 2; }
  grep -q "WHERE sc.ledger AND r.state = 'ledger' AND false" "$admit" || { echo "mutation incomplete"; exit 2; }
  grep -q "IF successor IS NOT NULL" "$migrations" && { echo "mutation incomplete"; exit 2; }
  grep -q "^  RETURN false;$" "$ledger_keys" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a freed key slot is not handed on ($admit, $migrations, $ledger_keys)"
  tests=(test/model.test.ts)
  attempts=3
elif [ "$mutation" = "peak" ]; then
  admit="$work/packages/sql/src/internal/statements/admit.ts"
  # The hand-off never looks for a slot above a lowered limit, whatever the limit's peak.
  sed -i 's/AND CASE WHEN coalesce(p.peak, 2147483647) > l.per_key THEN/AND CASE WHEN false THEN/' "$admit"
  grep -q "CASE WHEN false THEN" "$admit" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a completion hands its slot on while its key holds one above a lowered limit ($admit)"
  tests=(test/hand-off.test.ts)
  attempts=1
elif [ "$mutation" = "signature" ]; then
  signature="$work/packages/http/src/internal/CallbackSignature.ts"
  perl -0pi -e 's/encode\(\[runDomain, target\.runId, target\.signal, exp\]\)/`v1.\$\{target.runId\}.\$\{target.signal\}.\$\{exp\}`/; s/encode\(\[deferredDomain,.*?exp\]\)/`v1.workflow:\$\{target.workflow\}:\$\{target.executionId\}.\$\{target.deferred\}.\$\{exp\}`/s' "$signature"
  grep -q "encode(\[" "$signature" && { echo "mutation incomplete"; exit 2; }
  # Still referenced, so the mutant compiles (no unused locals).
  echo 'export const mutantKeeps = [encode, runDomain, deferredDomain]' >> "$signature"
  echo "mutation: callback URLs sign the ambiguous v1 texts ($signature)"
  tests=(test/http-deferred-callbacks.test.ts)
  attempts=1
elif [ "$mutation" = "expiry" ]; then
  signature="$work/packages/http/src/internal/CallbackSignature.ts"
  sed -i 's#/^\[0-9\]{1,12}\$/\.test(exp)#true#' "$signature"
  grep -q '\[0-9\]{1,12}' "$signature" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: any exp is accepted and read with parseInt ($signature)"
  tests=(test/http-callbacks.test.ts)
  attempts=1
elif [ "$mutation" = "reclaim" ]; then
  worker="$work/packages/core/src/Worker.ts"
  # A sweep is never followed by another: once per poll interval, with the slots free then.
  sed -i 's/sweepAgain = claimed.length > 0 \&\& claimed.every((run) => run.via !== "due")/sweepAgain = false/' "$worker"
  grep -q 'run.via !== "due")$' "$worker" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: expired leases are swept once per poll interval however many a sweep met ($worker)"
  tests=(test/reclaim-process.test.ts test/worker-clock.test.ts)
  attempts=1
elif [ "$mutation" = "shutdown-await" ]; then
  worker="$work/packages/core/src/Worker.ts"
  sed -i 's/        return Fiber.interruptAll(runFibers(inFlight))/        return Effect.forkDetach(Fiber.interruptAll(runFibers(inFlight)))/' "$worker"
  grep -q "        return Fiber.interruptAll(runFibers(inFlight))" "$worker" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: shutdown interrupts the runs still going without waiting for them ($worker)"
  tests=(test/worker-clock.test.ts -t "shutdown")
  attempts=1
elif [ "$mutation" = "silent-slot" ]; then
  lease="$work/packages/core/src/internal/Lease.ts"
  sed -i 's/ctx.listened ? Effect.onExit(reportSettled(ctx, entry, outcome), () => freeSlot(ctx, entry)) : freeSlot(ctx, entry)/ctx.listened ? Effect.onExit(reportSettled(ctx, entry, outcome), () => freeSlot(ctx, entry)) : Effect.void/' "$lease"
  grep -q ': freeSlot(ctx, entry)$' "$lease" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: with no event sink, a completed run's slot is never freed ($lease)"
  tests=(test/worker-clock.test.ts -t "no event sink")
  attempts=1
elif [ "$mutation" = "prerequisites" ]; then
  check="$work/scripts/prerequisites.mjs"
  sed -i 's|found: which("pgbouncer") }|found: which("pgbouncer") ?? "/usr/sbin/pgbouncer" }|' "$check"
  grep -q 'which("pgbouncer") ?? ' "$check" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: npm test's check takes PgBouncer as installed without looking ($check)"
  tests=(test/prerequisites.test.ts)
  attempts=1
elif [ "$mutation" = "skips" ]; then
  reporter="$work/test/support/skipsReporter.ts"
  sed -i 's/    if (ci) process.exitCode = 1/    if (ci) void 0/' "$reporter"
  grep -q "process.exitCode = 1" "$reporter" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a skipped test no longer fails a CI=true run ($reporter)"
  tests=(test/skips-reporter.test.ts)
  attempts=1
elif [ "$mutation" = "circle" ]; then
  fence="$work/packages/core/src/Fence.ts"
  grep -q '"./Fence.js"' "$work/packages/core/src/Run.ts" || { echo "mutation incomplete: Run.ts no longer imports Fence.ts"; exit 2; }
  echo 'export type {} from "./Run.js"' >> "$fence"
  echo "mutation: $fence imports Run.ts, which imports it"
  tests=(test/import-graph.test.ts)
  attempts=1
elif [ "$mutation" = "upward" ]; then
  console="$work/packages/http/src/Console.ts"
  echo 'import type {} from "@leasehold/sql"' >> "$console"
  echo "mutation: $console imports @leasehold/sql, a package on its own floor that its manifest does not declare"
  tests=(test/import-graph.test.ts)
  attempts=1
elif [ "$mutation" = "workflow" ]; then
  journal="$work/packages/sql/src/internal/statements/workflow.ts"
  # The holder is any run with that id, whatever its fence and state.
  sed -i -E '/WITH holder AS/,/FOR SHARE/{s/ AND fence = \$\{lease\.fence\}::bigint AND state = .running. COLLATE "C"//}' "$journal"
  grep -A3 "WITH holder AS" "$journal" | grep -q "AND fence" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: an activity's result is recorded whatever the holder's fence ($journal)"
  tests=(test/workflow.test.ts test/workflow-process.test.ts)
  attempts=1
elif [ "$mutation" = "memory-journal" ]; then
  journal="$work/packages/core/src/internal/memory/Journal.ts"
  # The memory twin records an activity's result whatever the holder's fence.
  sed -i 's/if (holder(this.state, lease) === undefined) {/if (false) {/' "$journal"
  grep -q "holder(this.state, lease) === undefined" "$journal" && { echo "mutation incomplete"; exit 2; }
  # The holder check is still referenced, so the mutant compiles (no unused imports).
  echo 'export const mutantKeeps = [holder]' >> "$journal"
  echo "mutation: the memory journal records an activity's result whatever the holder's fence ($journal)"
  tests=(test/workflow-journal.test.ts)
  attempts=1
elif [ "$mutation" = "unique-lock" ]; then
  # The enqueue_run in force: migration 0034's (0022's, 0024's, 0025's, 0031's and 0033's, replaced).
  windows="$work/packages/sql/migrations/0034_idempotent_ledger.sql"
  sed -i 's/h.unique_key = hold_key FOR UPDATE;/h.unique_key = hold_key;/' "$windows"
  grep -q "hold_key FOR UPDATE" "$windows" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a unique enqueue reads a taken hold without locking it ($windows)"
  tests=(test/unique-process.test.ts)
  attempts=3
elif [ "$mutation" = "sql-enqueue-ledger" ]; then
  # The enqueue_run in force: migration 0034's (0024's, 0025's, 0031's and 0033's, replaced).
  windows="$work/packages/sql/migrations/0034_idempotent_ledger.sql"
  sed -i "s/CASE WHEN into_ledger THEN 'ledger' ELSE 'pending' END)/'pending')/" "$windows"
  grep -q "THEN 'ledger' ELSE 'pending' END" "$windows" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: the SQL enqueue records every run in its row, not the ledger as the default store does ($windows)"
  tests=(test/sql-enqueue.test.ts)
  attempts=1
elif [ "$mutation" = "idem-ledger" ]; then
  enqueue="$work/packages/sql/src/internal/statements/enqueue.ts"
  migration="$work/packages/sql/migrations/0034_idempotent_ledger.sql"
  sed -i "s/^          concurrency_key, \${initialState(sql, storage)}, rate_scope, attempt_timeout_ms, \${$/          concurrency_key, 'pending', rate_scope, attempt_timeout_ms, \${/" "$enqueue"
  sed -i "s/^        CASE WHEN into_ledger THEN 'ledger' ELSE 'pending' END);$/        CASE WHEN idempotency_key IS NULL AND into_ledger THEN 'ledger' ELSE 'pending' END);/" "$migration"
  grep -q "concurrency_key, 'pending', rate_scope" "$enqueue" && grep -q "WHEN idempotency_key IS NULL AND into_ledger" "$migration" \
    || { echo "mutation incomplete"; exit 2; }
  echo "mutation: runs with an idempotency key are recorded in their rows, not the ledger ($enqueue, $migration)"
  tests=(test/ledger.test.ts test/sql-enqueue.test.ts -t "idempotent run drains through the ledger|recorded alike")
  attempts=1
elif [ "$mutation" = "unique-ledger-state" ]; then
  windows="$work/packages/sql/migrations/0034_idempotent_ledger.sql"
  sed -i 's/FROM "{{schema}}".runs_now r WHERE r.id = holder/FROM "{{schema}}".runs r WHERE r.id = holder/' "$windows"
  grep -q 'runs_now r WHERE r.id = holder' "$windows" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a unique window judges its holder by its row's state alone, not the ledger's ($windows)"
  tests=(test/contract.test.ts -t "unique key while the run is unfinished")
  attempts=1
elif [ "$mutation" = "deferred-schema" ]; then
  schemas="$work/packages/http/src/internal/SignalSchemas.ts"
  sed -i 's/  if (schema === undefined) return Effect.succeed(input)$/  if (schema === undefined || input !== schema) return Effect.succeed(input)/' "$schemas"
  grep -q "if (schema === undefined) return Effect.succeed(input)" "$schemas" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a workflow's decision is recorded without decoding it with its deferred's schema ($schemas)"
  # The API test alone: the browser tests do not decode decisions.
  tests=(test/workflow-approvals.test.ts -t "does not decode with the deferred's schema")
  attempts=1
elif [ "$mutation" = "console-fields" ]; then
  runs="$work/packages/http/src/console/pages/runs.tsx"
  sed -i 's/name={name} defaultValue={filter\[name\]}/name={name} value={filter[name]}/; s/<select id="filter-state" name="state">/<select id="filter-state" name="state" value={filter.state}>/' "$runs"
  grep -q "defaultValue={filter" "$runs" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: the runs search's fields take \`value\` from the page's link, written back on every render ($runs)"
  tests=(test/console.browser.test.ts -t "stays while the list reloads")
  attempts=1
elif [ "$mutation" = "console-order" ]; then
  ui="$work/packages/http/src/console/ui.tsx"
  sed -i 's/      if (request !== latest.current) return$/      void request/' "$ui"
  grep -q "if (request !== latest.current) return" "$ui" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a page shows whichever of its requests answers last, not the latest one's answer ($ui)"
  tests=(test/console.browser.test.ts -t "held back past a bulk retry")
  attempts=1
elif [ "$mutation" = "attempt-logs-fence" ]; then
  logs="$work/packages/sql/src/internal/statements/attemptLogs.ts"
  sed -i 's/^        FROM f$/        FROM (SELECT ${request.runId}::bigint AS id, ${request.fence}::bigint AS fence) f/' "$logs"
  grep -q "^        FROM f$" "$logs" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a failed attempt's log lines are written whatever the guarded failure matched ($logs)"
  tests=(test/contract.test.ts -t "the fence rejects writes no lines")
  attempts=1
elif [ "$mutation" = "attempt-logs-bound" ]; then
  bound="$work/packages/core/src/AttemptLogStorage.ts"
  sed -i 's/^export const bound = (log: AttemptLogInput): AttemptLogInput => {$/&\n  if (log.attempt > 0) return log/' "$bound"
  grep -q "if (log.attempt > 0) return log" "$bound" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: the bound of attempt logs is not applied ($bound)"
  tests=(test/contract-memory.test.ts -t "attempt logs" test/attempt-logs-memory.test.ts)
  attempts=1
elif [ "$mutation" = "attempt-timeout" ]; then
  timeouts="$work/packages/core/src/internal/Timeouts.ts"
  sed -i 's/^  const timeoutMs = run.attemptTimeoutMs ?? handlerTimeoutMs$/  const timeoutMs: number | undefined = undefined/' "$timeouts"
  grep -q "run.attemptTimeoutMs ?? handlerTimeoutMs" "$timeouts" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: the attempt timeout never fires ($timeouts)"
  tests=(test/timeouts-process.test.ts test/worker-clock.test.ts -t "attempt timeout")
  attempts=1
elif [ "$mutation" = "deadline-running" ]; then
  timeouts="$work/packages/core/src/internal/Timeouts.ts"
  sed -i 's/^  const deadlineMs = run.deadlineInMs ?? undefined$/  const deadlineMs: number | undefined = undefined/' "$timeouts"
  grep -q "run.deadlineInMs ?? undefined" "$timeouts" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a running attempt is not stopped at its run's deadline ($timeouts)"
  tests=(test/worker-clock.test.ts test/timeouts-process.test.ts -t "deadline")
  attempts=1
elif [ "$mutation" = "deadline-retry" ]; then
  guarded="$work/packages/sql/src/internal/statements/guarded.ts"
  sed -i "s/  const retrying = sql\`\${wantsRetry} AND NOT coalesce(deadline <= now() + \${delay} \* interval '1 millisecond', false)\`/  const retrying = wantsRetry/" "$guarded"
  grep -q "const retrying = wantsRetry$" "$guarded" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a failed attempt gets a retry due past its run's deadline ($guarded)"
  tests=(test/contract.test.ts -t "no retry due at or past")
  attempts=1
elif [ "$mutation" = "deadline-memory" ]; then
  guarded="$work/packages/core/src/internal/memory/Guarded.ts"
  sed -i 's/^    const stoppedByDeadline = wantsRetry \&\& run.deadline !== null \&\& now + request.retryDelayMs! >= run.deadline$/    const stoppedByDeadline = false/' "$guarded"
  grep -q "const stoppedByDeadline = false" "$guarded" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: the memory store schedules a retry past the run's deadline ($guarded)"
  tests=(test/model.test.ts)
  attempts=3
elif [ "$mutation" = "batch-partial" ]; then
  client="$work/packages/core/src/Client.ts"
  sed -i 's/^      Effect.mapError((error) => new InvalidPayload({ kind: error.kind, issue: `payload ${index}: ${error.issue}` }))$/&,\n      Effect.tap((run) => write([run], handler.kind, options?.queue))/' "$client"
  grep -q "Effect.tap((run) => write(\[run\]" "$client" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: Client.enqueueMany writes each payload as it encodes, before the batch is checked whole ($client)"
  tests=(test/contract-memory.test.ts test/client.test.ts -t "enqueueMany|the batch")
  attempts=1
elif [ "$mutation" = "signal-unchecked" ]; then
  client="$work/packages/core/src/Client.ts"
  sed -i 's/    return handler === undefined ? Exit.void : Handler.signalDecoder(handler, signal)(payload)/    return handler === undefined ? Exit.void : Exit.void/' "$client"
  grep -q "handler === undefined ? Exit.void : Exit.void" "$client" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: a resume checks no signal schema, handlers or not ($client)"
  tests=(test/contract-memory.test.ts test/http-admin.test.ts -t "the handlers refuse|declared schema does not decode")
  attempts=1
elif [ "$mutation" = "signal-check-pg" ]; then
  admin="$work/packages/sql/src/internal/statements/admin.ts"
  sed -i 's/    if (run !== undefined) yield\* check({ kind: run.kind, signal: run.signal_name })/    if (run !== undefined) yield* Effect.void/' "$admin"
  grep -q "if (run !== undefined) yield\* Effect.void" "$admin" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: PgRunStore resumes without running its check ($admin)"
  tests=(test/contract.test.ts -t "the handlers refuse")
  attempts=1
elif [ "$mutation" = "signal-check-memory" ]; then
  memory="$work/packages/core/src/internal/memory/Admin.ts"
  sed -i 's/  const checked = check({ kind: run.kind, signal: run.signalName! })/  const checked = Exit.succeed(run.kind)/' "$memory"
  grep -q "const checked = Exit.succeed(run.kind)" "$memory" || { echo "mutation incomplete"; exit 2; }
  echo "mutation: MemoryRunStore resumes without running its check ($memory)"
  tests=(test/contract-memory.test.ts -t "the handlers refuse")
  attempts=1
elif [ "$mutation" = "wake" ]; then
  engine="$work/packages/workflow/src/LeaseholdWorkflows.ts"
  sed -i 's/if (parked.length === 0) continue/if (parked.length >= 0) continue/' "$engine"
  grep -q "parked.length === 0" "$engine" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a running replay is never woken where it stands ($engine)"
  tests=(test/workflow-engine.test.ts test/workflow-process.test.ts)
  attempts=1
elif [ "$mutation" = "child-first-run" ]; then
  engine="$work/packages/workflow/src/LeaseholdWorkflows.ts"
  sed -i 's/const settled = yield\* resultOf(workflow, run)$/const settled = Option.orElse(yield* resultOf(workflow, run), () => Option.some(suspended))/' "$engine"
  grep -q "const settled = yield\* resultOf(workflow, run)$" "$engine" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a parent suspends for its child at once, before the child's first run ($engine)"
  tests=(test/workflow-children.test.ts)
  attempts=1
elif [ "$mutation" = "child-slot" ]; then
  engine="$work/packages/workflow/src/LeaseholdWorkflows.ts"
  sed -i 's/slots.value.free() - childSlotsReserved <= 0/false/' "$engine"
  grep -q "childSlotsReserved <= 0" "$engine" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a parent waits for its child's first run with no slot free for it ($engine)"
  tests=(test/workflow-children.test.ts -t "one slot|fewer slots")
  attempts=1
elif [ "$mutation" = "workflow-trace" ]; then
  engine="$work/packages/workflow/src/LeaseholdWorkflows.ts"
  sed -i 's/return Option.isSome(span) ? Telemetry.traceParentOf(span.value) : undefined/return Option.isSome(span) ? undefined : undefined/' "$engine"
  grep -q "? Telemetry.traceParentOf(span.value) : undefined" "$engine" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: an execution is enqueued without its caller's trace ($engine)"
  tests=(test/workflow-tracing.test.ts)
elif [ "$mutation" = "delete-running" ]; then
  deletes="$work/packages/sql/src/internal/statements/deletes.ts"
  sed -i "s/    if (found.busy > 0) return yield\* Effect.fail(new RunsBusy({ busy: found.busy, deleted: 0 }))/    void found.busy/; s/AND state = 'running'\`/AND false\`/; s/ AND state <> 'running'$//" "$deletes"
  grep -q "found.busy > 0\|AND state = 'running'\|AND state <> 'running'" "$deletes" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a delete takes running runs too ($deletes)"
  tests=(test/contract.test.ts -t "one of a running run is refused")
  attempts=1
elif [ "$mutation" = "delete-count" ]; then
  deletes="$work/packages/sql/src/internal/statements/deletes.ts"
  sed -i 's/    if (found.count !== request.expected) {/    if (false as boolean) {/' "$deletes"
  grep -q "found.count !== request.expected" "$deletes" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a delete goes ahead whatever the filter selects now ($deletes)"
  tests=(test/contract.test.ts -t "confirmed for another count")
  attempts=1
elif [ "$mutation" = "delete-history" ]; then
  deletes="$work/packages/sql/src/internal/statements/deletes.ts"
  sed -i 's/      DELETE FROM ${s.events(sql)} WHERE run_id IN (SELECT id FROM gone)/      SELECT 1/' "$deletes"
  grep -q "DELETE FROM \${s.events(sql)}" "$deletes" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a delete leaves the runs' history behind ($deletes)"
  tests=(test/delete-runs.test.ts)
  attempts=1
elif [ "$mutation" = "delete-attempt-logs" ]; then
  deletes="$work/packages/sql/src/internal/statements/deletes.ts"
  sed -i 's/      DELETE FROM ${s.attemptLogs(sql)} WHERE run_id IN (SELECT id FROM gone)/      SELECT 1/' "$deletes"
  grep -q "DELETE FROM \${s.attemptLogs(sql)}" "$deletes" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a delete leaves the runs' attempt logs behind ($deletes)"
  tests=(test/delete-runs.test.ts -t "catalog scan")
  attempts=1
elif [ "$mutation" = "delete-ledger" ]; then
  deletes="$work/packages/sql/src/internal/statements/deletes.ts"
  sed -i 's/      const inOpenBatches = yield\* ledger.forgetDeleted(sql, s, ids)/      const inOpenBatches: ReadonlyArray<string> = []/' "$deletes"
  grep -q "ledger.forgetDeleted(sql, s, ids)" "$deletes" && { echo "mutation incomplete"; exit 2; }
  sed -i 's/^import \* as ledger from ".\/ledger.js"$//' "$deletes"
  echo "mutation: a delete leaves the ledger's claim and completion batches as they were ($deletes)"
  tests=(test/delete-runs.test.ts)
  attempts=1
elif [ "$mutation" = "retention-live" ]; then
  migration="$work/packages/sql/migrations/0033_history_partitions.sql"
  sed -i "s/  SELECT EXISTS (SELECT 1 FROM \"{{schema}}\".runs r WHERE r.id >= lo AND r.id < hi AND r.state IN ('pending', 'running', 'suspended'))/  SELECT false/" "$migration"
  grep -q "AND r.state IN ('pending', 'running', 'suspended'))$" "$migration" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a range of runs is reclaimed with its row runs not ended ($migration)"
  tests=(test/contract.test.ts -t "retention")
  attempts=1
elif [ "$mutation" = "retention-memory" ]; then
  history="$work/packages/core/src/internal/memory/History.ts"
  sed -i 's/    ended(run) \&\& run.finishedAt !== null \&\& !held.has(run.id)/    (ended(run) || true) \&\& !held.has(run.id)/; s/    \&\& now - run.finishedAt >= /    \&\& now - (run.finishedAt ?? 0) >= /' "$history"
  grep -q "ended(run) && run.finishedAt" "$history" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: the memory store's retention drops runs not ended ($history)"
  tests=(test/contract-memory.test.ts -t "retention")
  attempts=1
elif [ "$mutation" = "search-window" ]; then
  read="$work/packages/sql/src/internal/statements/read.ts"
  sed -i 's/      ...(from === undefined ? \[\] : \[sql`r.id >= ${from}::bigint`\]),/      ...(from === undefined ? [] : []),/' "$read"
  grep -q 'r.id >= ${from}::bigint' "$read" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a search's creation window bounds no id range ($read)"
  tests=(test/plans.test.ts -t "operator reads on a large store")
  attempts=1
elif [ "$mutation" = "readonly-token" ]; then
  admin="$work/packages/http/src/Admin.ts"
  sed -i 's/        if (write \&\& admitted.credential?.scope === "ro") {/        if (write \&\& admitted.credential?.scope === ("none" as string)) {/' "$admin"
  grep -q 'admitted.credential?.scope === "ro"' "$admin" && { echo "mutation incomplete"; exit 2; }
  echo "mutation: a read-only credential may write ($admin)"
  tests=(test/http-operators.test.ts -t "read-only credential")
  attempts=1
else
  guarded="$work/packages/sql/src/internal/statements/guarded.ts"
  before=$(grep -c "fence" "$guarded")
  sed -i -E 's/ AND fence = \$\{[^}]*\}::bigint//g; s/ AND r\.fence = i\.fence//g; s/if \(stored !== lease\.fence\)/if (false)/' "$guarded"
  after=$(grep -c "fence" "$guarded")
  echo "mutation: removed fence comparisons from $guarded ($before -> $after lines mentioning fence)"
  grep -n "AND fence = \|r.fence = i.fence\|stored !== lease.fence" "$guarded" && { echo "mutation incomplete"; exit 2; }
  tests=(test/it-leases-fencing.test.ts)
  attempts=1
fi

# MUTANT_APPLY_ONLY=1: show that the mutant applies and changes the source (after a reformat, say), and stop.
if [ -n "${MUTANT_APPLY_ONLY:-}" ]; then
  changed=$(diff -rq --exclude=node_modules --exclude=dist --exclude='*.tsbuildinfo' --exclude=.git "$repo" "$work" 2>/dev/null | grep -c "differ" || true)
  [ "$changed" -gt 0 ] || { echo "mutation incomplete: no file changed"; exit 2; }
  echo "mutant applies: $changed file(s) changed"
  exit 0
fi

# The mutant shares the installed dependencies, but its @leasehold packages are its own copies:
# the test process and the worker processes it spawns must all load the mutated store.
mkdir -p "$work/node_modules/@leasehold"
for entry in "$repo"/node_modules/* "$repo"/node_modules/.bin; do
  name="${entry##*/}"
  [ "$name" = "@leasehold" ] || ln -s "$entry" "$work/node_modules/$name"
done
# Every workspace package, linked as npm links it (relative), so each resolves to the mutant's copy.
for entry in "$repo"/node_modules/@leasehold/*; do ln -s "$(readlink "$entry")" "$work/node_modules/@leasehold/$(basename "$entry")"; done
cd "$work"
# Node 24 from the dev dependency, as npm scripts would run it.
export PATH="$work/node_modules/.bin:$PATH"
node_modules/.bin/tsc -b > "$work/tsc.log" || { echo "the mutant does not compile:"; head -20 "$work/tsc.log"; exit 2; }
# The console's files beside its compiled modules, as `npm run build` lays them out.
node packages/http/scripts/console-assets.mjs >/dev/null
status=0
for attempt in $(seq 1 "$attempts"); do
  set +e
  node_modules/.bin/vitest run "${tests[@]}" > "$work/mutant.log" 2>&1
  status=$?
  set -e
  grep -E "✓|×|AssertionError|Tests " "$work/mutant.log" | sed 's/\x1b\[[0-9;]*m//g' | head -20
  [ "$status" -ne 0 ] && break
done
if [ "$status" -eq 0 ]; then
  echo "MUTATION SURVIVED: ${tests[*]} passed $attempts time(s) without it"
  exit 1
fi
echo "mutation killed: ${tests[*]} fails without it (vitest exit $status)"
