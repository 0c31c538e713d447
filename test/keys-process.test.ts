/**
 * Issue 13's key process test: three `leasehold worker` processes at concurrency 20 run 300 runs
 * over 10 concurrency keys whose kind declares a limit of 1 per key (set with `leasehold limits`).
 * The runs are enqueued key by key (all of the first key's, then the second's...), so a claim that
 * waited on a full key instead of passing over it would run one key at a time. One worker is
 * killed partway and its leases expire and are reclaimed. Then, with every key idle, a second
 * wave of runs is enqueued several per key at once, so admissions of one key race.
 *
 * The database records every state change of a keyed run as it executes (a trigger, numbered by a
 * sequence): a claim's change is recorded after the completion it depends on committed, so
 * replaying the record in order shows how many runs of each key held a lease at every moment.
 */
import { assert, describe, it } from "@effect/vitest"
import { RunStore } from "@leasehold/core"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { fileURLToPath } from "node:url"
import { background, connection, leasehold } from "./support/cli.js"
import { freshSchema, layerStore } from "./support/db.js"
import { eventually } from "./support/workers.js"

const tasks = fileURLToPath(new URL("./fixtures/keyed-tasks.ts", import.meta.url))
const keys = Array.from({ length: 10 }, (_, i) => `customer-${i}`)
const perKey = 30
/** The second wave's runs per key, enqueued at once. */
const racers = 4
const total = perKey + racers

describe("per-key concurrency across worker processes", () => {
  it.live(
    "3 workers × concurrency 20, 300 runs over 10 keys at limit 1, one worker killed, then 4 runs per idle key enqueued at once: never two runs of a key at once, all complete, every key progresses",
    () =>
      Effect.gen(function*() {
        const schema = freshSchema("keyproc")
        const context = yield* Layer.build(layerStore(schema, racers * 2))
        const sql = Context.get(context, SqlClient.SqlClient)
        const store = Context.get(context, RunStore)

        const set = yield* leasehold(["limits", "set", "--kind", "keyed-step", "--per-key", "1", ...connection(schema)])
        assert.strictEqual(set.code, 0, set.stderr)
        yield* sql.unsafe(`CREATE TABLE "${schema}".key_log (
          seq bigserial PRIMARY KEY, run_id bigint NOT NULL, key text NOT NULL, from_state text NOT NULL, to_state text NOT NULL)`)
        yield* sql.unsafe(`CREATE FUNCTION "${schema}".log_key() RETURNS trigger LANGUAGE plpgsql AS $fn$
          BEGIN
            INSERT INTO "${schema}".key_log (run_id, key, from_state, to_state) VALUES (NEW.id, NEW.concurrency_key, OLD.state, NEW.state);
            RETURN NULL;
          END $fn$`)
        yield* sql.unsafe(`CREATE TRIGGER log_key AFTER UPDATE ON "${schema}".runs FOR EACH ROW
          WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.concurrency_key IS NOT NULL) EXECUTE FUNCTION "${schema}".log_key('runs')`)
        // Keyed runs of the ledger (migration 0025) start in a claim batch and end in a completion
        // batch, their rows not written: those inserts are recorded too. A ledger run moved to its
        // row while open (`hold`) goes on running there: recorded as running to running. Each
        // trigger names its table: a partition's trigger sees the partition's name (ADR 0028).
        yield* sql.unsafe(`CREATE OR REPLACE FUNCTION "${schema}".log_key() RETURNS trigger LANGUAGE plpgsql AS $fn$
          BEGIN
            IF TG_ARGV[0] = 'runs' THEN
              INSERT INTO "${schema}".key_log (run_id, key, from_state, to_state)
                VALUES (NEW.id, NEW.concurrency_key, CASE WHEN OLD.state = 'ledger' AND NEW.state = 'running' THEN 'running' ELSE OLD.state END, NEW.state);
            ELSE
              INSERT INTO "${schema}".key_log (run_id, key, from_state, to_state)
                SELECT u.id, r.concurrency_key, CASE TG_ARGV[0] WHEN 'claim_batches' THEN 'pending' ELSE 'running' END,
                  CASE TG_ARGV[0] WHEN 'claim_batches' THEN 'running' ELSE 'completed' END
                FROM unnest(NEW.ids) WITH ORDINALITY AS u(id, ord) JOIN "${schema}".runs r ON r.id = u.id
                WHERE r.concurrency_key IS NOT NULL ORDER BY u.ord;
            END IF;
            RETURN NULL;
          END $fn$`)
        for (const table of ["claim_batches", "completion_batches"]) {
          yield* sql.unsafe(
            `CREATE TRIGGER log_key AFTER INSERT ON "${schema}".${table} FOR EACH ROW EXECUTE FUNCTION "${schema}".log_key('${table}')`
          )
        }

        // Each key's runs alternate between two queues: the kind's limit counts across both, so
        // the claims of one key's runs do not even meet in one queue's order.
        yield* store.enqueue(keys.flatMap((key) =>
          Array.from({ length: perKey }, (_, n) => ({
            kind: "keyed-step",
            queue: n % 2 === 0 ? "keys-a" : "keys-b",
            payload: { key, n },
            concurrencyKey: key
          }))
        ))
        const worker = () =>
          background([
            "worker",
            "--tasks",
            tasks,
            "--queue",
            "keys-a,keys-b",
            "--concurrency",
            "20",
            "--ttl",
            "2 seconds",
            ...connection(schema)
          ])
        const completed = Effect.map(
          sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".runs_now WHERE state = 'completed'`),
          (rows) => rows[0]!.n
        )

        const workers = [yield* worker(), yield* worker(), yield* worker()]
        yield* eventually("a third of the runs complete", Effect.map(completed, (n) => n >= 100), "30 seconds")
        // Killed with runs in hand (a worker's owner name carries its pid): their leases expire and
        // are reclaimed, keeping their keys' slots meanwhile. Runs end fast, so a worker seen
        // holding leases may have finished them before a kill lands: each candidate is frozen
        // first (SIGSTOP), its statements already sent are given time to answer, and it is killed
        // only if it still holds leases then; otherwise it goes on and another look is taken.
        const holds = (pid: number | undefined) =>
          Effect.map(store.leases, (leases) => leases.some((l) => l.owner.split(":")[1] === String(pid)))
        const frozenHolder = Effect.gen(function*() {
          for (const w of workers) {
            if (!(yield* holds(w.child.pid))) continue
            w.child.kill("SIGSTOP")
            yield* Effect.sleep("200 millis")
            if (yield* holds(w.child.pid)) return w
            w.child.kill("SIGCONT")
          }
          return undefined
        })
        const doomed = yield* eventually("a worker frozen while holding leases", frozenHolder, "10 seconds")
        yield* Effect.promise(() => (doomed.child.kill("SIGKILL"), doomed.exited))
        yield* worker()
        yield* eventually("every run completes", Effect.map(completed, (n) => n === keys.length * perKey), "60 seconds")
        // A second wave while every key is idle: for each key, racers enqueue one run each at once,
        // each in its own transaction, and each sees the key's slot free. The unique slot index
        // lets one admission through; the others are refused, tried again, and wait (admit.ts).
        yield* Effect.all(
          keys.flatMap((key) =>
            Array.from({ length: racers }, (_, n) =>
              store.enqueue([{
                kind: "keyed-step",
                queue: "keys-a",
                payload: { key, n: perKey + n },
                concurrencyKey: key
              }]))
          ),
          { concurrency: racers }
        )
        yield* eventually(
          "the second wave completes",
          Effect.map(completed, (n) => n === keys.length * total),
          "60 seconds"
        )

        const log = yield* sql.unsafe<
          { seq: string; run_id: string; key: string; from_state: string; to_state: string }
        >(
          `SELECT l.seq::text AS seq, run_id::text, key, from_state, to_state FROM "${schema}".key_log l ORDER BY l.seq`
        )
        // Replay: how many runs of each key were running after each recorded change.
        const running = new Map<string, number>()
        let most = 0
        for (const change of log) {
          const delta = (change.to_state === "running" ? 1 : 0) - (change.from_state === "running" ? 1 : 0)
          const now = (running.get(change.key) ?? 0) + delta
          running.set(change.key, now)
          most = Math.max(most, now)
          assert.isAtMost(
            now,
            1,
            `two runs of ${change.key} held a lease at once (change ${change.seq}: run ${change.run_id})`
          )
        }
        assert.strictEqual(most, 1)
        console.log(`first 90 completions by key: ${
          JSON.stringify(countBy(log.filter((c) => c.to_state === "completed").slice(0, 90)))
        }`)
        const claims = log.filter((c) =>
          c.to_state === "running"
        )
        assert.strictEqual(log.filter((c) => c.to_state === "completed").length, keys.length * total)
        assert.isAtLeast(claims.length, keys.length * total)

        // No key waited for the keys enqueued before it: among the first 90 completions (before
        // the kill), every key has a share (9 each if even; a claim that waited on its first full
        // key instead of passing over it would have run customer-0's 30, then customer-1's...).
        const early = log.filter((c) => c.to_state === "completed").slice(0, 90)
        for (const key of keys) {
          const done = early.filter((c) => c.key === key).length
          assert.isAtLeast(
            done,
            4,
            `${key} had completed ${done} of the first 90 runs: ${JSON.stringify(countBy(early))}`
          )
        }
        // The killed worker's leases were reclaimed (their runs completed under a later fence).
        const reclaims = yield* sql.unsafe<{ n: number }>(
          `SELECT count(*)::int AS n FROM "${schema}".run_events WHERE kind = 'reclaimed'`
        )
        assert.isAtLeast(reclaims[0]!.n, 1, "the killed worker held runs that were reclaimed")
      }),
    { timeout: 120_000 }
  )
})

const countBy = (changes: ReadonlyArray<{ readonly key: string }>) =>
  Object.fromEntries(keys.map((key) => [key, changes.filter((c) => c.key === key).length]))
