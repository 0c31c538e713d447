/*
 * The batch ledger's concurrency protocol (docs/adr/0017-batch-ledger-storage.md, issue 39), for
 * Spin. One claim batch B of N runs, each claimed at fence 1 by worker A. Each labelled step is one
 * statement, or one statement and its commit, of the store: MAPPING.md names the code of each.
 * Modelled as the protocol stands once issue 39's fix is in. -DSNAPSHOT_BUG restores today's
 * completion and settlement (issue 39, defects 1 and 3), -DRENEWAL_BUG today's renewal (defect 2).
 *
 * PostgreSQL as modelled: row locks on B (FOR KEY SHARE, FOR NO KEY UPDATE, FOR UPDATE) held to
 * commit. READ COMMITTED: a statement reads what was committed when it started, except that a row
 * it waited to lock is re-read as it stands once granted (EvalPlanQual); other tables are not.
 * Writes become visible at commit and nobody reads another's uncommitted rows, so a statement's
 * writes and its commit are one step. Every step is a d_step: nothing else interleaves inside it.
 *
 * Invariants (MAPPING.md): 1 at most one completion per (run, fence); 2 a settled batch has no
 * open run; 3 at the end, a batch whose runs all ended is settled, and every run is completed or
 * on its row; 4 a renewal never answers lost a lease whose run is open in B or held on its row by
 * its worker. A violation prints "INVARIANT n violated" before its assertion fails.
 */

#define N 3

/* A run's row (runs), as hold and the row statements leave it. */
#define LEDGER 0 /* not on its row: its state is the ledger's (open, or completed there) */
#define RUN1   1 /* moved by hold: running under fence 1, owner A */
#define DONE1  2 /* completed on its row under fence 1 */
#define DONE2  3 /* its row's lease expired: reclaimed by worker W2 under fence 2, completed */

/* B (claim_batches) and its completion rows (completion_batches). */
bit closed[N];   /* B.closed: the runs hold moved to their rows */
byte comp[N];    /* how many completion rows of B name the run (all at fence 1) */
bit settled;     /* B.settled_at set */
bit expired;     /* B.expires_at passed */
byte row[N];
bit rowexp[N];   /* the row's lease_expires_at passed */

/* Row locks on B. FOR KEY SHARE conflicts only with FOR UPDATE; FOR NO KEY UPDATE with itself
   and FOR UPDATE; FOR UPDATE with all three. */
byte ks;
bit nku;
bit upd;

byte finished;   /* processes that ended: init waits for all, the sweep for the others */
#define OTHERS 6 /* three completions, the hold, the renewal, the clock */

#define ENDED(r) (closed[r] || comp[r] > 0)
#define ALL_ENDED (ENDED(0) && ENDED(1) && ENDED(2))
#define NENDED ((ENDED(0) -> 1 : 0) + (ENDED(1) -> 1 : 0) + (ENDED(2) -> 1 : 0))
#define NCLOSED (closed[0] + closed[1] + closed[2])
#define NCOMP (comp[0] + comp[1] + comp[2])
#define IN(set, r) (((set) >> (r)) & 1)
#define FENCE1_COMPLETIONS(r) (comp[r] + (row[r] == DONE1 -> 1 : 0))

#define INV1 (FENCE1_COMPLETIONS(0) <= 1 && FENCE1_COMPLETIONS(1) <= 1 && FENCE1_COMPLETIONS(2) <= 1)
#define INV2 (!settled || ALL_ENDED)

/* Settlement as hold and the completion decide it once they hold B's lock: by the distinct runs
   ended. Today: closed runs plus the completion rows' ids, duplicates counted. */
#ifdef SNAPSHOT_BUG
#define SETTLES (NCLOSED + NCOMP >= N)
#else
#define SETTLES (NENDED == N)
#endif

/* Invariants 1 and 2, checked in every state (one transition: a violation is reported at the
   depth where it happens). */
active proctype Invariants() {
end:
  d_step {
    !(INV1 && INV2) ->
    if
    :: !INV1 -> printf("INVARIANT 1 violated: a (run, fence) completed twice\n"); assert(INV1)
    :: else -> printf("INVARIANT 2 violated: a settled batch has an open run\n"); assert(INV2)
    fi
  }
}

/* -DPROBE=n: fails once outcome n is reached, to show the model reaches what the invariants
   speak of (the test's probes). */
#if PROBE == 1
#define REACH (row[1] == DONE1)                     /* a held run completed on its row by its holder */
#elif PROBE == 2
#define REACH (row[2] == DONE2)                     /* a run reclaimed by the sweep under fence 2 */
#elif PROBE == 3
#define REACH (settled && closed[1] && comp[0] > 0) /* B settled, runs ended both ways */
#elif PROBE == 4
#define REACH (comp[0] == 1 && comp[2] == 1 && !closed[1] && comp[1] == 1 && settled) /* all completed in the ledger */
#endif
#ifdef REACH
active proctype Reach() {
end:
  d_step { REACH -> printf("REACHED\n"); assert(false) }
}
#endif

/* The row completion of the runs in `set` (guarded.ts › completeInRows): one statement, each run
   matched on (id, fence 1, running) under its row's lock. */
inline completeRows(set) {
  d_step {
    r = 0;
    do
    :: r < N ->
       if
       :: IN(set, r) && row[r] == RUN1 -> row[r] = DONE1
       :: else -> skip /* refused by fence or state, or completed there already: acknowledged */
       fi;
       r++
    :: else -> break
    od;
    r = 0
  }
}

/* A completion of the leases in `lease` (a set of runs) by worker A. `orphan`: the first attempt
   of a retried completion, whose client lost its connection: it commits or rolls back, and
   nobody acts on its answer. */
proctype Complete(byte lease; bit orphan) {
  byte open = 0;  /* the leases this statement completes */
  byte r;
  bit held;       /* B locked, and unsettled once granted */
  bit commits = 1;
  if
  :: orphan -> commits = 0 /* its connection lost before the commit reached the server */
  :: true
  fi;
#ifdef SNAPSHOT_BUG
  byte earlier[N]; /* B's completion rows as the statement's snapshot has them */
  bit settle;
  /* One statement. Its snapshot is taken before it waits for the lock. */
snapshot:
  d_step {
    printf("Complete(%d): snapshot of the completion rows\n", lease);
    r = 0; do :: r < N -> earlier[r] = comp[r]; r++ :: else -> break od; r = 0
  }
  /* Granted once no FOR UPDATE is held. B is re-read as it stands (closed, settled); the
     completion rows are not. */
lock_key_share:
  d_step {
    !upd ->
    if
    :: !settled ->
       printf("Complete(%d): B locked FOR KEY SHARE\n", lease);
       ks++; held = 1;
       r = 0;
       do
       :: r < N -> if :: IN(lease, r) && !closed[r] && earlier[r] == 0 -> open = open | (1 << r) :: else fi; r++
       :: else -> break
       od;
       r = 0;
       /* Settled when this statement's ids + closed + the snapshot's ids reach N. */
       settle = open != 0 && ((open & 1) + ((open >> 1) & 1) + ((open >> 2) & 1) + NCLOSED
         + earlier[0] + earlier[1] + earlier[2] >= N)
    :: else -> printf("Complete(%d): B settled, nothing locked\n", lease); held = 0
    fi
  }
  /* The settling update locks B FOR NO KEY UPDATE as well: it waits for a renewal's. */
insert_commit:
  d_step {
    (!settle || !nku) ->
    if
    :: held && commits ->
       printf("Complete(%d): completes %d, settles %d, commits\n", lease, open, settle);
       r = 0; do :: r < N -> if :: IN(open, r) -> comp[r]++ :: else fi; r++ :: else -> break od; r = 0;
       if :: settle -> settled = 1 :: else fi
    :: held && !commits -> printf("Complete(%d): rolled back\n", lease)
    :: else
    fi;
    if :: held -> ks-- :: else fi;
    settle = 0
  }
#else
  /* Statement 1: B locked FOR NO KEY UPDATE, if unsettled once granted. */
lock_no_key_update:
  d_step {
    !upd && !nku ->
    if
    :: !settled -> printf("Complete(%d): B locked FOR NO KEY UPDATE\n", lease); nku = 1; held = 1
    :: else -> printf("Complete(%d): B settled, nothing locked\n", lease); held = 0
    fi
  }
  /* Statement 2, a fresh snapshot: one completion row for the leases still open, B settled once
     its distinct runs ended are all of them; then the commit. */
insert_commit:
  d_step {
    if
    :: held ->
       r = 0;
       do
       :: r < N -> if :: IN(lease, r) && !ENDED(r) -> open = open | (1 << r) :: else fi; r++
       :: else -> break
       od;
       r = 0;
       if
       :: commits ->
          printf("Complete(%d): completes %d, commits\n", lease, open);
          r = 0; do :: r < N -> if :: IN(open, r) -> comp[r]++ :: else fi; r++ :: else -> break od; r = 0;
          if :: open != 0 && SETTLES -> settled = 1 :: else fi
       :: else -> printf("Complete(%d): rolled back\n", lease)
       fi;
       nku = 0
    :: else
    fi
  }
#endif
  /* The leases the ledger did not complete go to their rows (not the orphan's: its answer is lost). */
  if
  :: !orphan -> row_complete: completeRows(lease & ~open)
  :: else
  fi;
  d_step { open = 0; held = 0; commits = 0; finished++ }
}

/* `hold` (migration 0025) for the runs in `want`, then the exceptional write (here a checkpoint)
   on their rows. */
proctype Hold(byte want) {
  byte r;
  bit held;
lock_update:
  d_step {
    !upd && !nku && ks == 0 ->
    if
    :: !settled -> printf("Hold(%d): B locked FOR UPDATE\n", want); upd = 1; held = 1
    :: else -> printf("Hold(%d): B settled, nothing locked\n", want); held = 0
    fi
  }
  /* Its next statements, fresh snapshots: the wanted runs still open moved to their rows and
     closed in B, B settled once its distinct runs ended are all of them; commit. */
move_commit:
  d_step {
    if
    :: held ->
       r = 0;
       do
       :: r < N -> if :: IN(want, r) && !ENDED(r) -> closed[r] = 1; row[r] = RUN1; rowexp[r] = expired :: else fi; r++
       :: else -> break
       od;
       r = 0;
       if :: SETTLES -> settled = 1 :: else fi;
       printf("Hold(%d): moved, settled %d, commits\n", want, settled);
       upd = 0
    :: else
    fi
  }
  /* The write on the row: guarded by (id, fence 1, running), it changes nothing the invariants read. */
checkpoint:
  d_step { held = 0; finished++ }
}

/* The row renewal of the leases in `set` the ledger did not renew (renew.ts › renew): one
   statement, each run matched on (id, fence 1, running, owner A). A lease neither renews is
   answered lost, and its worker stops it as superseded: invariant 4 is checked there. */
inline renewRows(set) {
  d_step {
    r = 0;
    do
    :: r < N ->
       if
       :: IN(set, r) && row[r] == RUN1 -> rowexp[r] = 0
       :: IN(set, r) && row[r] != RUN1 && !ENDED(r) ->
          printf("INVARIANT 4 violated: run %d answered lost while open in its batch\n", r); assert(false)
       :: else
       fi;
       r++
    :: else -> break
    od;
    r = 0
  }
}

/* Worker A renews its leases of B (all N named). */
proctype Renew() {
  byte r;
  byte ledgerMissed = 0; /* the named leases the ledger did not renew */
#ifdef RENEWAL_BUG
  bit closedThen[N];
  byte endedThen = 0;
  bit settledThen;
  /* One statement: its snapshot at the start; the update of B then waits for its lock and is
     rechecked on B as it stands: not renewed if B's closed runs changed meanwhile. */
snapshot:
  d_step {
    printf("Renew: snapshot\n");
    settledThen = settled;
    r = 0;
    do :: r < N -> closedThen[r] = closed[r]; if :: ENDED(r) -> endedThen = endedThen | (1 << r) :: else fi; r++
    :: else -> break
    od;
    r = 0
  }
update_commit:
  d_step {
    !upd && !nku ->
    if
    :: !settledThen && !settled && closed[0] == closedThen[0] && closed[1] == closedThen[1] && closed[2] == closedThen[2] ->
       printf("Renew: B renewed, commits\n");
       ledgerMissed = endedThen; expired = 0
    :: else -> printf("Renew: B moved meanwhile, not renewed\n"); ledgerMissed = 7 /* every named lease to the rows */
    fi;
    endedThen = 0; settledThen = 0;
    closedThen[0] = 0; closedThen[1] = 0; closedThen[2] = 0
  }
#else
  bit held;
  /* Statement 1: B locked FOR NO KEY UPDATE (owner A, unsettled once granted). */
lock_no_key_update:
  d_step {
    !upd && !nku ->
    if
    :: !settled -> printf("Renew: B locked FOR NO KEY UPDATE\n"); nku = 1; held = 1
    :: else -> printf("Renew: B settled, nothing locked\n"); held = 0; ledgerMissed = 7
    fi
  }
  /* Statement 2, a fresh snapshot: the ended leases answered not renewed here, the open ones
     renewed (B's expiry moved); then the commit. */
renew_commit:
  d_step {
    if
    :: held ->
       r = 0; do :: r < N -> if :: ENDED(r) -> ledgerMissed = ledgerMissed | (1 << r) :: else fi; r++ :: else -> break od;
       r = 0;
       if :: ledgerMissed != 7 -> expired = 0 :: else fi;
       printf("Renew: not renewed here %d, commits\n", ledgerMissed);
       nku = 0; held = 0
    :: else
    fi
  }
#endif
row_renew:
  renewRows(ledgerMissed);
  d_step { ledgerMissed = 0; finished++ }
}

/* Time passes B's lease and the lease of every row moved with it. Once, at any point. */
proctype Clock() {
  byte r;
tick:
  d_step {
    printf("Clock: leases expire\n");
    expired = 1;
    r = 0; do :: r < N -> if :: row[r] == RUN1 -> rowexp[r] = 1 :: else fi; r++ :: else -> break od; r = 0;
    finished++
  }
}

/* The sweep, every poll: `expire` moves the open runs of B, expired and unsettled, to their rows
   (skipping B while anyone holds a lock on it), and the claim's expired-lease branch gives a row
   whose lease expired to worker W2 under fence 2, which completes it there. */
proctype Sweep() {
  byte r;
  do
  :: expired && !settled ->
expire:
     d_step {
       /* Its own statement: B selected (expired, unsettled) and locked FOR UPDATE SKIP LOCKED,
          then hold's fresh snapshots, as Hold above; commit. */
       if
       :: expired && !settled && !upd && !nku && ks == 0 ->
          r = 0;
          do
          :: r < N -> if :: !ENDED(r) -> closed[r] = 1; row[r] = RUN1; rowexp[r] = 1 :: else fi; r++
          :: else -> break
          od;
          r = 0;
          if :: SETTLES -> settled = 1 :: else fi;
          printf("Sweep: expire moved B's open runs, settled %d\n", settled)
       :: else -> skip /* renewed or settled meanwhile, or locked: skipped */
       fi
     }
  :: (row[0] == RUN1 && rowexp[0]) || (row[1] == RUN1 && rowexp[1]) || (row[2] == RUN1 && rowexp[2]) ->
reclaim:
     d_step {
       if
       :: row[0] == RUN1 && rowexp[0] -> row[0] = DONE2; printf("Sweep: W2 reclaims run 0 under fence 2, completes it\n")
       :: row[1] == RUN1 && rowexp[1] -> row[1] = DONE2; printf("Sweep: W2 reclaims run 1 under fence 2, completes it\n")
       :: row[2] == RUN1 && rowexp[2] -> row[2] = DONE2; printf("Sweep: W2 reclaims run 2 under fence 2, completes it\n")
       :: else -> skip /* completed by its holder meanwhile */
       fi
     }
  :: finished == OTHERS -> break
  od;
  finished++
}

init {
  byte r;
  atomic {
    run Sweep();
    run Clock();
    run Renew();
    run Hold(2);          /* run 1 (r2): a checkpoint, or any exceptional write */
    run Complete(4, 0);   /* run 2 (r3) */
    run Complete(3, 0);   /* runs 0 and 1 (r1, r2): the retry */
    run Complete(3, 1)    /* runs 0 and 1: the first attempt, its connection lost */
  }
  /* Invariant 3, once every process has ended. */
  finished == OTHERS + 1 ->
  d_step {
    r = 0;
    do
    :: r < N ->
       if
       :: !(comp[r] > 0 || row[r] != LEDGER) ->
          printf("INVARIANT 3 violated: run %d stranded open in the ledger\n", r); assert(false)
       :: else
       fi;
       r++
    :: else -> break
    od;
    if
    :: ALL_ENDED && !settled -> printf("INVARIANT 3 violated: every run ended, the batch unsettled\n"); assert(false)
    :: else
    fi
  }
}
