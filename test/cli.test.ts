/**
 * The `leasehold` command as a user runs it: the real built binary, spawned as a child process
 * against the test PostgreSQL, each test in its own schema. Asserts what it prints on stdout and
 * stderr, its exit code, and what it wrote (or did not write) in the database.
 */
import { assert, describe, it } from "@effect/vitest"
import { AttemptTimedOut, FenceRejected, RunStore } from "@leasehold/core"
import { Database } from "@leasehold/sql"
import { Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { background, binPath, type CliResult, completion, connection, leasehold, start } from "./support/cli.js"
import { databaseUrl, freshSchema, layerStore, setLeaseExpirySql } from "./support/db.js"
import { signature } from "./support/http.js"
import { eventually } from "./support/workers.js"

const fixtureTasks = fileURLToPath(new URL("./fixtures/cli-tasks.ts", import.meta.url))
const payoutTasks = fileURLToPath(new URL("../examples/payout-tasks.ts", import.meta.url))

/** A store on `schema` (migrated) and its SqlClient, for seeding and for checking what the CLI wrote. */
const openStore = (schema: string) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(layerStore(schema, 3))
    return { store: Context.get(context, RunStore), sql: Context.get(context, SqlClient.SqlClient) }
  })

/** A bare SqlClient (no store, no migration): to look at schemas the CLI must not create. */
const openSql = Effect.map(
  Layer.build(Database.layerFromUrl(databaseUrl(), { maxConnections: 2 })),
  (context) => Context.get(context, SqlClient.SqlClient)
)

const schemaExists = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.map(
    sql<{ n: number }>`SELECT count(*)::int AS n FROM information_schema.schemata WHERE schema_name = ${schema}`,
    (rows) => rows[0]!.n === 1
  )

const countRows = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.map(
    sql.unsafe<{ runs: number; events: number }>(
      `SELECT (SELECT count(*)::int FROM "${schema}".runs) AS runs, (SELECT count(*)::int FROM "${schema}".run_events) AS events`
    ),
    (rows) => rows[0]!
  )

/** A rejected command: its exit code, exactly one `leasehold: ` line naming the reason, no stack trace, no stdout. */
const assertRejected = (result: CliResult, code: number, reason: RegExp) => {
  assert.strictEqual(result.code, code, `exit code; stderr was: ${result.stderr}`)
  assert.strictEqual(result.stdout, "", "nothing on stdout")
  const lines = result.stderr.split("\n").filter((l) => l.length > 0)
  assert.strictEqual(lines.length, 1, `one line on stderr, got: ${result.stderr}`)
  assert.match(lines[0]!, /^leasehold: /)
  assert.match(lines[0]!, reason)
  assert.notMatch(result.stderr, /^\s+at /m, "no stack trace")
}

const assertOk = (result: CliResult) => assert.strictEqual(result.code, 0, `exit code; stderr was: ${result.stderr}`)

const parse = <A = any>(result: CliResult): A => {
  assertOk(result)
  return JSON.parse(result.stdout) as A
}

const runIdOf = (result: CliResult): string => {
  assertOk(result)
  const match = /^enqueued run (\d+) /.exec(result.stdout)
  assert.isNotNull(match, `enqueue printed: ${result.stdout}`)
  return match![1]!
}

const claimOne = (store: RunStore["Service"], owner: string, queue: string, kind: string) =>
  Effect.map(
    store.claim({ owner, queues: [queue], kinds: [kind], limit: 1, ttl: Duration.seconds(30) }),
    (claimed) => {
      assert.strictEqual(claimed.length, 1, `${owner} claimed a ${kind} run on ${queue}`)
      return claimed[0]!
    }
  )

const expireLease = (sql: SqlClient.SqlClient, schema: string, runId: string) =>
  sql.unsafe(setLeaseExpirySql(schema, runId, "now() - interval '1 second'"))

describe("leasehold: commands and usage", () => {
  it.live("--help lists every command; an unknown command, flag or bad schema name is a usage error (exit 2)", () =>
    Effect.gen(function*() {
      const help = yield* leasehold(["--help"])
      assertOk(help)
      for (
        const command of [
          "migrate",
          "enqueue",
          "runs",
          "queues",
          "schedules",
          "resume",
          "cancel",
          "retry",
          "stats",
          "worker",
          "serve"
        ]
      ) {
        assert.match(help.stdout, new RegExp(`^\\s+${command}\\s+\\S`, "m"), `help lists ${command}`)
      }
      // The demo is the repository's (`npm start`), built on its test infrastructure: not a command.
      assert.notMatch(help.stdout, /^\s+demo\s/m)
      const runsHelp = yield* leasehold(["runs", "--help"])
      assert.match(runsHelp.stdout, /^\s+list\s+List runs/m)
      assert.match(runsHelp.stdout, /^\s+show\s+Show a run/m)

      const [unknownCommand, unknownFlag, missingId, badSchema] = yield* Effect.all([
        leasehold(["bogus"]),
        leasehold(["runs", "list", "--bogus"]),
        leasehold(["runs", "show", ...connection("cli_unused")]),
        leasehold(["stats", "--schema", "Bad-Name"])
      ], { concurrency: 4 })
      assertRejected(unknownCommand, 2, /Unknown subcommand "bogus"/)
      assertRejected(unknownFlag, 2, /Unrecognized flag: --bogus/)
      assertRejected(missingId, 2, /Missing required argument: id/)
      assertRejected(badSchema, 2, /invalid option schema: "Bad-Name" is not a plain name/)
    }))

  it.live("migrate creates the store; a second migrate applies nothing and says so", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const sql = yield* openSql
      const first = yield* leasehold(["migrate", ...connection(schema)])
      assertOk(first)
      assert.strictEqual(
        first.stdout,
        `schema "${schema}": applied 0001_init, 0002_partial_unique_keys, 0003_lazy_claim_history, 0004_runs_fillfactor, 0005_signal_delivery, 0006_trace_context, 0007_hot_lease_renewal, 0008_paused_queues, 0009_schedules, 0010_key_concurrency, 0011_workflows, 0012_fence_epoch, 0013_key_admission, 0014_key_hot_path, 0015_key_limit_peaks, 0016_runs_listed, 0017_workflow_awaits, 0018_batch_ledger, 0019_worker_registry, 0020_activity_window, 0021_enqueue_function, 0022_unique_windows, 0023_rate_limits, 0024_unique_hold_order_and_retention, 0025_keyed_ledger, 0026_ledger_settlement, 0027_timeouts, 0028_operator_actions, 0029_attempt_logs, 0030_ledger_lock_in_statement, 0031_unique_ledger, 0032_runs_now_by_span, 0033_history_partitions, 0034_idempotent_ledger\n`
      )
      const tables = yield* sql<{ table_name: string }>`
        SELECT table_name FROM information_schema.tables WHERE table_schema = ${schema}
          AND table_name NOT IN (SELECT c.relname FROM pg_class c WHERE c.relispartition AND c.relnamespace = ${schema}::regnamespace)
        ORDER BY table_name`
      assert.deepStrictEqual(tables.map((t) => t.table_name), [
        "attempt_logs",
        "callbacks",
        "claim_batches",
        "completion_batches",
        "history_ranges",
        "idempotency_keys",
        "key_holds",
        "key_limit_peaks",
        "key_limits",
        "leasehold_migrations",
        "operator_actions",
        "paused_queues",
        "rate_limits",
        "rate_starts",
        "ready",
        "run_events",
        "run_history",
        "runs",
        "runs_now",
        "schedules",
        "signal_deliveries",
        "signal_tokens",
        "unique_holds",
        "waiting",
        "workers",
        "workflow_activities",
        "workflow_awaits",
        "workflow_clocks",
        "workflow_deferreds"
      ])

      const second = parse(yield* leasehold(["migrate", "--json", ...connection(schema)]))
      assert.deepStrictEqual(second, {
        schema,
        applied: [],
        migrations: [
          "0001_init",
          "0002_partial_unique_keys",
          "0003_lazy_claim_history",
          "0004_runs_fillfactor",
          "0005_signal_delivery",
          "0006_trace_context",
          "0007_hot_lease_renewal",
          "0008_paused_queues",
          "0009_schedules",
          "0010_key_concurrency",
          "0011_workflows",
          "0012_fence_epoch",
          "0013_key_admission",
          "0014_key_hot_path",
          "0015_key_limit_peaks",
          "0016_runs_listed",
          "0017_workflow_awaits",
          "0018_batch_ledger",
          "0019_worker_registry",
          "0020_activity_window",
          "0021_enqueue_function",
          "0022_unique_windows",
          "0023_rate_limits",
          "0024_unique_hold_order_and_retention",
          "0025_keyed_ledger",
          "0026_ledger_settlement",
          "0027_timeouts",
          "0028_operator_actions",
          "0029_attempt_logs",
          "0030_ledger_lock_in_statement",
          "0031_unique_ledger",
          "0032_runs_now_by_span",
          "0033_history_partitions",
          "0034_idempotent_ledger"
        ]
      })
      const human = yield* leasehold(["migrate", ...connection(schema)])
      assert.strictEqual(
        human.stdout,
        `schema "${schema}" is up to date (0001_init, 0002_partial_unique_keys, 0003_lazy_claim_history, 0004_runs_fillfactor, 0005_signal_delivery, 0006_trace_context, 0007_hot_lease_renewal, 0008_paused_queues, 0009_schedules, 0010_key_concurrency, 0011_workflows, 0012_fence_epoch, 0013_key_admission, 0014_key_hot_path, 0015_key_limit_peaks, 0016_runs_listed, 0017_workflow_awaits, 0018_batch_ledger, 0019_worker_registry, 0020_activity_window, 0021_enqueue_function, 0022_unique_windows, 0023_rate_limits, 0024_unique_hold_order_and_retention, 0025_keyed_ledger, 0026_ledger_settlement, 0027_timeouts, 0028_operator_actions, 0029_attempt_logs, 0030_ledger_lock_in_statement, 0031_unique_ledger, 0032_runs_now_by_span, 0033_history_partitions, 0034_idempotent_ledger)\n`
      )
    }))
})

describe("leasehold enqueue --file", () => {
  const writeLines = (lines: ReadonlyArray<string>) => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-cli-")), "runs.jsonl")
    fs.writeFileSync(file, lines.join("\n"))
    return file
  }
  const image = (n: number) => JSON.stringify({ kind: "resize-image", payload: { image: `${n}.png`, width: n } })

  it.live("enqueues every line in one batch, with the flags as defaults for what a line does not say", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const file = writeLines([
        image(1),
        "",
        JSON.stringify({ kind: "resize-image", payload: { image: "2.png", width: 2 }, queue: "bulk", priority: 3 }),
        image(3)
      ])
      const result = yield* leasehold(["enqueue", "--file", file, "--queue", "images", ...connection(schema)])
      assertOk(result)
      assert.strictEqual(result.stdout, `enqueued 3 runs from ${file}\n`)
      const rows = yield* sql.unsafe<any>(`SELECT payload, queue, priority FROM "${schema}".runs ORDER BY id`)
      assert.deepStrictEqual(rows.map((r) => [r.payload.width, r.queue, r.priority]), [
        [1, "images", 0],
        [2, "bulk", 3],
        [3, "images", 0]
      ])
    }))

  it.live("a bad line: one line on stderr naming it, exit 2, nothing written", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const bad: ReadonlyArray<[ReadonlyArray<string>, RegExp]> = [
        [[image(1), "{\"kind\":", image(3)], /runs\.jsonl line 2: not JSON/],
        [
          [image(1), image(2), JSON.stringify({ kind: "resize-image", payload: { image: 7 } })],
          /line 3: invalid payload for kind "resize-image"/
        ],
        [[JSON.stringify({ kind: "sms", payload: {} })], /line 1: unknown kind "sms"/],
        [
          [image(1), JSON.stringify({ kind: "resize-image", payload: { image: "a", width: 1 }, priority: 0.5 })],
          /line 2: invalid option priority/
        ],
        [[image(1), JSON.stringify(["resize-image"])], /line 2: not a run/],
        [["", "  "], /holds no runs/]
      ]
      for (const [lines, reason] of bad) {
        assertRejected(yield* leasehold(["enqueue", "--file", writeLines(lines), ...connection(schema)]), 2, reason)
      }
      assertRejected(
        yield* leasehold(["enqueue", "resize-image", "--file", writeLines([image(1)]), ...connection(schema)]),
        2,
        /the kind argument is not taken with --file: each line gives its own/
      )
      assert.deepStrictEqual(yield* countRows(sql, schema), { runs: 0, events: 0 })
    }))
})

describe("leasehold resume: the signal's declared schema", () => {
  it.live("a payload that does not decode: one line, exit 2, the run still suspended and nothing written", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql, store } = yield* openStore(schema)
      const id = (yield* store.enqueue([{ kind: "approve-payout", payload: { order: "P-1" } }]))[0]!.id
      const held = yield* claimOne(store, "worker-a", "default", "approve-payout")
      yield* store.suspend({ runId: id, fence: held.fence, signal: "approval", token: "tok-P-1", timeout: undefined })
      const before = yield* countRows(sql, schema)
      const refused = yield* leasehold([
        "resume",
        id,
        "--tasks",
        payoutTasks,
        "--payload",
        `{"approved":"yes"}`,
        ...connection(schema)
      ])
      assertRejected(refused, 2, /invalid payload for kind "approve-payout \(signal approval\)"/)
      assertRejected(
        yield* leasehold([
          "resume",
          "--token",
          "tok-P-1",
          "--tasks",
          payoutTasks,
          "--payload",
          "{}",
          ...connection(schema)
        ]),
        2,
        /invalid payload for kind "approve-payout \(signal approval\)"/
      )
      assert.deepStrictEqual(yield* countRows(sql, schema), before)
      assert.deepInclude(yield* store.get(id), { state: "suspended", signals: {} })
      assertOk(
        yield* leasehold([
          "resume",
          id,
          "--tasks",
          payoutTasks,
          "--payload",
          `{"approved":true}`,
          ...connection(schema)
        ])
      )
      assert.strictEqual((yield* store.get(id)).state, "pending")
    }))
})

describe("leasehold enqueue", () => {
  it.live("writes the run with its queue, priority, delay, max attempts and payload (inline or from a file)", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const result = yield* leasehold([
        "enqueue",
        "approve-refund",
        "--payload",
        `{"order":"A-1","amount":42}`,
        "--queue",
        "money",
        "--priority",
        "7",
        "--delay",
        "5 seconds",
        "--max-attempts",
        "3",
        ...connection(schema)
      ])
      const id = runIdOf(result)
      assert.strictEqual(result.stdout, `enqueued run ${id} (approve-refund on queue money)\n`)
      const [row] = yield* sql.unsafe<any>(`
        SELECT kind, queue, priority, max_attempts, payload, state, fence,
          extract(epoch FROM run_at - created_at)::float8 AS delay FROM "${schema}".runs_now WHERE id = ${id}`)
      assert.deepInclude(row, {
        kind: "approve-refund",
        queue: "money",
        priority: 7,
        max_attempts: 3,
        state: "pending"
      })
      assert.deepStrictEqual(row.payload, { order: "A-1", amount: 42 })
      assert.strictEqual(Number(row.fence), 0)
      // The delay is counted by the database from the insert, so it is 5 s up to rounding.
      assert.approximately(row.delay, 5, 0.05)

      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-cli-")), "payload.json")
      fs.writeFileSync(file, JSON.stringify({ image: "owl.png", width: 640 }))
      const fromFile = runIdOf(
        yield* leasehold(["enqueue", "resize-image", "--payload-file", file, ...connection(schema)])
      )
      const [fileRow] = yield* sql.unsafe<any>(
        `SELECT payload, queue, max_attempts FROM "${schema}".runs WHERE id = ${fromFile}`
      )
      assert.deepStrictEqual(fileRow.payload, { image: "owl.png", width: 640 })
      assert.strictEqual(fileRow.queue, "default")
      assert.strictEqual(fileRow.max_attempts, 5)
    }))

  it.live("the same idempotency key twice yields one run, and the second enqueue says it was not created", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const args = [
        "enqueue",
        "resize-image",
        "--payload",
        `{"image":"a.png","width":10}`,
        "--idempotency-key",
        "order-7"
      ]
      const first = parse<{ id: string; created: boolean }>(
        yield* leasehold([...args, "--json", ...connection(schema)])
      )
      const second = parse<{ id: string; created: boolean }>(
        yield* leasehold([...args, "--json", ...connection(schema)])
      )
      assert.isTrue(first.created)
      assert.deepStrictEqual(second, { id: first.id, created: false })
      const third = yield* leasehold([...args, ...connection(schema)])
      assertOk(third)
      assert.strictEqual(
        third.stdout,
        `run ${first.id} already exists for idempotency key "order-7" (not enqueued again)\n`
      )
      assert.deepStrictEqual(yield* countRows(sql, schema), { runs: 1, events: 0 })
    }))

  it.live("a unique key yields the run that holds it, and the second enqueue says so", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const args = [
        "enqueue",
        "resize-image",
        "--payload",
        `{"image":"a.png","width":10}`,
        "--unique-key",
        "a.png",
        "--unique-for",
        "1 hour"
      ]
      const first = parse<{ id: string; created: boolean }>(
        yield* leasehold([...args, "--json", ...connection(schema)])
      )
      assert.isTrue(first.created)
      const second = yield* leasehold([
        "enqueue",
        "resize-image",
        "--payload",
        `{"image":"a.png","width":20}`,
        "--unique-key",
        "a.png",
        ...connection(schema)
      ])
      assertOk(second)
      assert.strictEqual(second.stdout, `run ${first.id} already holds this unique window (not enqueued again)\n`)
      const byPayload = [
        "enqueue",
        "resize-image",
        "--payload",
        `{"width":10,"image":"b.png"}`,
        "--unique-by-payload",
        "--json"
      ]
      const third = parse<{ id: string; created: boolean }>(yield* leasehold([...byPayload, ...connection(schema)]))
      const fourth = parse<{ id: string; created: boolean }>(yield* leasehold([...byPayload, ...connection(schema)]))
      assert.deepStrictEqual(fourth, { id: third.id, created: false })
      assert.deepStrictEqual(yield* countRows(sql, schema), { runs: 2, events: 0 })
      // A bad window: one line, exit 2, nothing written.
      const bad: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
        [["--unique-states", "pending,done"], /invalid option unique\.states: "done" is not a run state/],
        [
          ["--unique-key", "c.png", "--unique-for", "0 seconds"],
          /invalid option unique\.periodMs: 0 ms is not a period of more than 0/
        ]
      ]
      for (const [flags, reason] of bad) {
        assertRejected(
          yield* leasehold([
            "enqueue",
            "resize-image",
            "--payload",
            `{"image":"c.png","width":1}`,
            ...flags,
            ...connection(schema)
          ]),
          2,
          reason
        )
      }
      assert.deepStrictEqual(yield* countRows(sql, schema), { runs: 2, events: 0 })
    }))

  it.live("--tasks takes the kinds and schemas from the given module", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const id = runIdOf(
        yield* leasehold([
          "enqueue",
          "send-email",
          "--tasks",
          fixtureTasks,
          "--payload",
          `{"to":"ana@example.com","subject":"hi"}`,
          ...connection(schema)
        ])
      )
      const [row] = yield* sql.unsafe<any>(`SELECT kind, payload FROM "${schema}".runs WHERE id = ${id}`)
      assert.strictEqual(row.kind, "send-email")
      assert.deepStrictEqual(row.payload, { to: "ana@example.com", subject: "hi" })
      // The sample tasks' kinds are not known to that module.
      assertRejected(
        yield* leasehold(["enqueue", "resize-image", "--tasks", fixtureTasks, ...connection(schema)]),
        2,
        /unknown kind "resize-image" \(known: send-email\)$/
      )
    }))

  it.live("bad input: one line on stderr, exit 2, and nothing written (not even the schema)", () =>
    Effect.gen(function*() {
      const migrated = freshSchema("cli")
      const { sql } = yield* openStore(migrated)
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-cli-"))
      const malformedFile = path.join(dir, "bad.json")
      fs.writeFileSync(malformedFile, "{oops")
      const valid = `{"image":"a.png","width":10}`
      const validFile = path.join(dir, "good.json")
      fs.writeFileSync(validFile, valid)
      const cases: ReadonlyArray<readonly [string, ReadonlyArray<string>, RegExp]> = [
        [
          "malformed JSON",
          ["enqueue", "resize-image", "--payload", "{oops"],
          /Invalid value for flag --payload: "\{oops"\. Expected: valid JSON/
        ],
        [
          "unknown kind",
          ["enqueue", "resize-images", "--payload", valid],
          /unknown kind "resize-images" \(known: resize-image, approve-refund\)/
        ],
        [
          "payload failing its schema",
          ["enqueue", "resize-image", "--payload", `{"image":"a.png","width":"wide"}`],
          /invalid payload for kind "resize-image": Expected number at \["width"\]/
        ],
        [
          "payload missing a field",
          ["enqueue", "resize-image", "--payload", `{"image":"a.png"}`],
          /invalid payload for kind "resize-image": Missing key at \["width"\]/
        ],
        [
          "malformed payload file",
          ["enqueue", "resize-image", "--payload-file", malformedFile],
          /--payload-file: .*Failed to parse '\.json' file content/
        ],
        [
          "missing payload file",
          ["enqueue", "resize-image", "--payload-file", path.join(dir, "none.json")],
          /--payload-file: .*File does not exist/
        ],
        [
          "both payload flags",
          ["enqueue", "resize-image", "--payload", valid, "--payload-file", validFile],
          /give either --payload or --payload-file, not both/
        ],
        [
          "bad delay",
          ["enqueue", "resize-image", "--payload", valid, "--delay", "soon"],
          /--delay: "soon"\. Expected: a duration such as "5 seconds"/
        ],
        [
          "zero max attempts",
          ["enqueue", "resize-image", "--payload", valid, "--max-attempts", "0"],
          /--max-attempts: "0"\. Expected: a positive integer/
        ],
        ["unloadable tasks module", [
          "enqueue",
          "resize-image",
          "--payload",
          valid,
          "--tasks",
          path.join(dir, "tasks.js")
        ], /cannot load tasks module .*tasks\.js/],
        [
          "unknown flag",
          ["enqueue", "resize-image", "--payload", valid, "--colour", "red"],
          /Unrecognized flag: --colour/
        ],
        ["no kind", ["enqueue", "--payload", valid], /enqueue takes a kind \(or --file <runs.jsonl>\)/],
        [
          "malformed worker TTL",
          ["worker", "--ttl", "thirty seconds"],
          /invalid option ttl: "thirty seconds" is not a duration/
        ],
        [
          "heartbeat over half the TTL",
          ["worker", "--ttl", "10 seconds", "--heartbeat", "6 seconds"],
          /invalid option heartbeat: 6s must be more than 0 and at most half the TTL \(10s\)/
        ],
        [
          "no worker concurrency",
          ["worker", "--concurrency", "0"],
          /invalid option concurrency: 0 is not a whole number of at least 1/
        ]
      ]
      const never = freshSchema("cli")
      yield* Effect.forEach(cases, ([what, args, reason]) =>
        Effect.gen(function*() {
          const onMigrated = yield* leasehold([...args, ...connection(migrated)])
          assert.strictEqual(onMigrated.code, 2, `${what}: ${onMigrated.stderr}`)
          assertRejected(onMigrated, 2, reason)
          assertRejected(yield* leasehold([...args, ...connection(never)]), 2, reason)
        }), { concurrency: 3, discard: true })
      assert.deepStrictEqual(yield* countRows(sql, migrated), { runs: 0, events: 0 })
      assert.isFalse(yield* schemaExists(sql, never), "bad input never created the schema")
    }))
})

/**
 * `leasehold ...args <raw>` where the last argument is the bytes `printf` makes of `raw` (octal
 * escapes): Node's spawn can only pass valid UTF-8, a shell can pass any bytes.
 */
const leaseholdRawLast = (args: ReadonlyArray<string>, raw: string): Effect.Effect<CliResult> =>
  Effect.promise(() => {
    const env: NodeJS.ProcessEnv = { ...process.env }
    delete env.DATABASE_URL
    return completion(
      spawn("/bin/sh", ["-c", `exec "$@" "$(printf -- '${raw}')"`, "sh", process.execPath, binPath, ...args], {
        env,
        stdio: ["ignore", "pipe", "pipe"]
      })
    )
  })

describe("flag values that start with - (issue 40)", () => {
  it.live("are taken as the value: a negative duration is exit 2 in one line, -h is an idempotency key; never the help with exit 0", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const enqueue = ["enqueue", "resize-image", "--payload", `{"image":"a.png","width":10}`]
      const refused: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
        [[...enqueue, "--delay", "-1 hour"], /--delay: "-1 hour"\. Expected: a duration such as "5 seconds"/],
        [[...enqueue, "--delay", "-5 seconds"], /--delay: "-5 seconds"\. Expected: a duration/],
        [
          [...enqueue, "--unique-key", "k", "--unique-for", "-1 hour"],
          /--unique-for: "-1 hour"\. Expected: a duration/
        ],
        [[
          "schedules",
          "set",
          "nightly",
          "--cron",
          "0 3 * * *",
          "--kind",
          "resize-image",
          "--backfill-window",
          "-2 hours"
        ], /--backfill-window: "-2 hours"\. Expected: a duration/]
      ]
      for (const [args, reason] of refused) {
        assertRejected(yield* leasehold([...args, ...connection(schema)]), 2, reason)
      }
      assert.deepStrictEqual(yield* countRows(sql, schema), { runs: 0, events: 0 })
      assert.deepStrictEqual(yield* sql.unsafe(`SELECT name FROM "${schema}".schedules`), [])

      const id = runIdOf(yield* leasehold([...enqueue, "--idempotency-key", "-h", ...connection(schema)]))
      const rows = yield* sql.unsafe<{ idempotency_key: string }>(
        `SELECT idempotency_key FROM "${schema}".runs WHERE id = ${id}`
      )
      assert.deepStrictEqual(rows.map((r) => r.idempotency_key), ["-h"])
      // --help itself still shows the help.
      const help = yield* leasehold(["enqueue", "--help"])
      assert.strictEqual(help.code, 0)
      assert.match(help.stdout, /Enqueue a run/)
    }))
})

describe("the HTTP API's limits in the CLI (issue 40)", () => {
  it.live("invalid UTF-8 in an argument or a payload file, a payload over 1 MiB and --limit over 500 are exit 2 in one line naming the flag; nothing written", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const enqueue = ["enqueue", "resize-image", ...connection(schema)]
      const valid = `{"image":"a.png","width":10}`
      // \303 opens a two-byte sequence that never ends; \377 is never UTF-8.
      assertRejected(
        yield* leaseholdRawLast([...enqueue, "--payload"], `{"image":"a\\303","width":10}`),
        2,
        /^leasehold: the value of --payload is not valid UTF-8$/
      )
      assertRejected(
        yield* leaseholdRawLast([...enqueue, "--payload", valid, "--idempotency-key"], "k\\377"),
        2,
        /^leasehold: the value of --idempotency-key is not valid UTF-8$/
      )
      assertRejected(
        yield* leaseholdRawLast([...enqueue, "--payload", valid], "--queue=q\\377"),
        2,
        /^leasehold: the value of --queue is not valid UTF-8$/
      )

      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-cli-"))
      const notUtf8 = path.join(dir, "latin1.json")
      fs.writeFileSync(
        notUtf8,
        Buffer.concat([Buffer.from(`{"image":"caf`), Buffer.from([0xe9]), Buffer.from(`.png","width":10}`)])
      )
      assertRejected(
        yield* leasehold([...enqueue, "--payload-file", notUtf8]),
        2,
        /--payload-file: ".*latin1\.json"\. Expected: the file is not valid UTF-8/
      )
      const large = path.join(dir, "large.json")
      fs.writeFileSync(large, JSON.stringify({ image: "a".repeat(1024 * 1024), width: 10 }))
      assertRejected(
        yield* leasehold([...enqueue, "--payload-file", large]),
        2,
        /--payload-file: .*at most 1048576 bytes of JSON \(the HTTP API's limit\)/
      )
      assert.deepStrictEqual(yield* countRows(sql, schema), { runs: 0, events: 0 })

      // A payload file just within the limit is taken.
      const within = path.join(dir, "within.json")
      const frame = JSON.stringify({ image: "", width: 10 }).length
      fs.writeFileSync(within, JSON.stringify({ image: "a".repeat(1024 * 1024 - frame), width: 10 }))
      runIdOf(yield* leasehold([...enqueue, "--payload-file", within]))
      assert.deepStrictEqual(yield* countRows(sql, schema), { runs: 1, events: 0 })

      for (const limit of ["501", "1000000000"]) {
        assertRejected(
          yield* leasehold(["runs", "list", "--limit", limit, ...connection(schema)]),
          2,
          /--limit: ".*"\. Expected: a whole number from 1 to 500/
        )
      }
      assertRejected(
        yield* leasehold(["runs", "list", "--offset", "1000001", ...connection(schema)]),
        2,
        /--offset: .*from 0 to 1000000/
      )
      assert.strictEqual(
        parse(yield* leasehold(["runs", "list", "--limit", "500", "--json", ...connection(schema)])).runs.length,
        1
      )
    }))
})

describe("leasehold runs", () => {
  it.live("a reader that stops early (| head) ends the command quietly: exit 0, no stack trace", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      yield* store.enqueue(
        Array.from({ length: 400 }, (_, i) => ({ kind: "resize-image", payload: { image: `${i}.png`, width: i } }))
      )
      // Far more than a pipe holds (64 KiB): the reader closes after the first chunk.
      const child = start(["runs", "list", "--limit", "400", "--json", ...connection(schema)])
      const stderr: Array<string> = []
      child.stderr!.on("data", (chunk) => stderr.push(String(chunk)))
      yield* Effect.promise(() => new Promise<void>((resolve) => child.stdout!.once("data", () => resolve())))
      child.stdout!.destroy()
      const code = yield* Effect.promise(() =>
        new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)))
      )
      assert.strictEqual(stderr.join(""), "")
      assert.strictEqual(code, 0)
    }))

  it.live("runs list: newest first, filtered by state, queue and kind, paged, as a table or JSON", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      const enqueued = yield* store.enqueue([
        { kind: "resize-image", payload: { image: "1.png", width: 1 } },
        { kind: "approve-refund", payload: { order: "A-2", amount: 2 }, queue: "money" },
        { kind: "resize-image", payload: { image: "3.png", width: 3 } },
        { kind: "resize-image", payload: { image: "4.png", width: 4 }, queue: "money" },
        { kind: "approve-refund", payload: { order: "A-5", amount: 5 } }
      ])
      const [r1, r2, r3, r4, r5] = enqueued.map((e) => e.id) as [string, string, string, string, string]
      yield* claimOne(store, "worker-list", "default", "resize-image") // takes r1
      const ids = (args: ReadonlyArray<string>) =>
        Effect.map(
          leasehold(["runs", "list", "--json", ...args, ...connection(schema)]),
          (result) => parse<{ runs: ReadonlyArray<{ id: string }> }>(result).runs.map((r) => r.id)
        )

      const all = parse(yield* leasehold(["runs", "list", "--json", ...connection(schema)]))
      assert.deepStrictEqual(all.runs.map((r: any) => r.id), [r5, r4, r3, r2, r1])
      assert.deepInclude(all.runs[4], { id: r1, state: "running", fence: 1, attempt: 1, leaseOwner: "worker-list" })
      assert.deepInclude(all.runs[1], { id: r4, kind: "resize-image", queue: "money", state: "pending", fence: 0 })
      assert.deepStrictEqual(all.runs[1].payload, { image: "4.png", width: 4 })

      const [running, money, refunds, defaultResizes, firstPage, secondPage, tail] = yield* Effect.all([
        ids(["--state", "running"]),
        ids(["--queue", "money"]),
        ids(["--kind", "approve-refund"]),
        ids(["--queue", "default", "--kind", "resize-image"]),
        ids(["--limit", "2"]),
        ids(["--limit", "2", "--page", "2"]),
        ids(["--limit", "2", "--offset", "4"])
      ], { concurrency: 4 })
      assert.deepStrictEqual(running, [r1])
      assert.deepStrictEqual(money, [r4, r2])
      assert.deepStrictEqual(refunds, [r5, r2])
      assert.deepStrictEqual(defaultResizes, [r3, r1])
      assert.deepStrictEqual(firstPage, [r5, r4])
      assert.deepStrictEqual(secondPage, [r3, r2])
      assert.deepStrictEqual(tail, [r1])

      const table = yield* leasehold(["runs", "list", ...connection(schema)])
      assertOk(table)
      const [header, ...rows] = table.stdout.trimEnd().split("\n")
      assert.match(header!, /^ID\s+KIND\s+QUEUE\s+STATE\s+FENCE\s+ATTEMPT\s+CREATED\s+NOTE$/)
      assert.strictEqual(rows.length, 5)
      // Aligned: every cell starts under its header.
      const column = (name: string) => header!.indexOf(name)
      for (const row of rows) {
        assert.match(row.slice(column("STATE")), /^(pending|running) /)
        assert.match(row.slice(column("FENCE")), /^[01] /)
      }
      assert.match(
        rows[4]!,
        new RegExp(
          `^${r1}\\s+resize-image\\s+default\\s+running\\s+1\\s+1/5\\s+\\S+\\s+owner worker-list, lease until `
        )
      )

      const paged = yield* leasehold(["runs", "list", "--limit", "2", "--page", "1", ...connection(schema)])
      assert.match(paged.stdout, /\(runs 1-2; more with --page 2\)\n$/)
      // Keyset pages: the next page is the one before the last id shown.
      const first = yield* leasehold(["runs", "list", "--limit", "2", ...connection(schema)])
      assert.match(first.stdout, new RegExp(`\\(more with --before ${r4}\\)\\n$`))
      assert.deepStrictEqual(yield* ids(["--limit", "2", "--before", r4]), [r3, r2])
      const last = parse<{ next: string | null; runs: ReadonlyArray<{ id: string }> }>(
        yield* leasehold(["runs", "list", "--json", "--limit", "2", "--before", r2, ...connection(schema)])
      )
      assert.deepStrictEqual([last.runs.map((r) => r.id), last.next], [[r1], null])
      assert.strictEqual(
        (yield* leasehold(["runs", "list", "--before", r1, ...connection(schema)])).stdout,
        `no runs before ${r1}\n`
      )
      assertRejected(
        yield* leasehold(["runs", "list", "--before", "r4", ...connection(schema)]),
        2,
        /--before: "r4" is not a run id/
      )
      assertRejected(
        yield* leasehold(["runs", "list", "--before", r4, "--page", "2", ...connection(schema)]),
        2,
        /give either --before or --page\/--offset, not both/
      )
      assertRejected(
        yield* leasehold(["runs", "list", "--page", "2", "--offset", "2", ...connection(schema)]),
        2,
        /give either --page or --offset, not both/
      )
      assertRejected(yield* leasehold(["runs", "list", "--state", "done", ...connection(schema)]), 2, /--state: "done"/)
      assertRejected(
        yield* leasehold(["runs", "list", "--limit", "0", ...connection(schema)]),
        2,
        /--limit: "0"\. Expected: a whole number from 1 to 500/
      )
    }))

  it.live("runs show: a traced run's trace id, as the console shows it; none for a run not traced", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      const traceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
      const [traced, plain] =
        (yield* store.enqueue([{ kind: "k", payload: {}, traceParent }, { kind: "k", payload: {} }])) as unknown as [
          { id: string },
          { id: string }
        ]
      const text = yield* leasehold(["runs", "show", traced.id, ...connection(schema)])
      assertOk(text)
      assert.match(text.stdout, /^trace\s+0af7651916cd43dd8448eb211c80319c$/m)
      assert.strictEqual(
        parse(yield* leasehold(["runs", "show", traced.id, "--json", ...connection(schema)])).run.traceId,
        "0af7651916cd43dd8448eb211c80319c"
      )
      const untraced = yield* leasehold(["runs", "show", plain.id, ...connection(schema)])
      assertOk(untraced)
      assert.notMatch(untraced.stdout, /^trace\s/m)
      assert.strictEqual(
        parse(yield* leasehold(["runs", "show", plain.id, "--json", ...connection(schema)])).run.traceId,
        null
      )
    }))

  it.live("runs show: a failed attempt's log lines under its fence, a terminal's escape sequences shown escaped; --json gives them whole", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      const [run] = (yield* store.enqueue([{ kind: "k", payload: {}, maxAttempts: 1 }])) as unknown as [{ id: string }]
      const [claimed] = yield* store.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["k"],
        limit: 1,
        ttl: Duration.minutes(1)
      })
      const at = new Date("2026-12-03T12:00:00.000Z")
      yield* store.fail({
        runId: run.id,
        fence: claimed!.fence,
        error: { message: "declined" },
        retryDelayMs: undefined,
        log: {
          attempt: 1,
          dropped: 3,
          lines: [
            { level: "Info", at, message: "calling the API", annotations: { order: "o-1" }, cut: 0 },
            { level: "Error", at, message: "\u001b[2Jcleared?", annotations: {}, cut: 0 }
          ]
        }
      })
      const text = yield* leasehold(["runs", "show", run.id, ...connection(schema)])
      assertOk(text)
      assert.include(
        text.stdout,
        [
          "attempt logs",
          "  fence 1, attempt 1, failed: 2 lines (3 earlier left out)",
          "    2026-12-03T12:00:00.000Z INFO calling the API order=o-1",
          "    2026-12-03T12:00:00.000Z ERROR \\u001b[2Jcleared?"
        ].join("\n")
      )
      assert.notInclude(text.stdout, "\u001b", "no escape sequence reaches the terminal")
      const json = parse(yield* leasehold(["runs", "show", run.id, "--json", ...connection(schema)]))
      assert.deepStrictEqual(json.attemptLogs, [{
        fence: 1,
        attempt: 1,
        outcome: "failed",
        dropped: 3,
        at: json.attemptLogs[0].at,
        lines: [
          { level: "Info", at: at.toISOString(), message: "calling the API", annotations: { order: "o-1" }, cut: 0 },
          { level: "Error", at: at.toISOString(), message: "\u001b[2Jcleared?", annotations: {}, cut: 0 }
        ]
      }])
    }))

  it.live("runs show: a run's attempt timeout and deadline, and an attempt that timed out says so in its attempts", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      const enqueue = (...flags: ReadonlyArray<string>) =>
        Effect.map(
          leasehold([
            "enqueue",
            "resize-image",
            "--payload",
            "{\"image\":\"a.png\",\"width\":1}",
            ...flags,
            "--json",
            ...connection(schema)
          ]),
          (result) => parse(result) as { id: string }
        )
      const timed = yield* enqueue("--attempt-timeout", "90 seconds", "--deadline", "1 hour")
      const plain = yield* enqueue()
      const [claimed] = yield* store.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["resize-image"],
        limit: 1,
        ttl: Duration.seconds(30)
      })
      assert.strictEqual(claimed!.id, timed!.id)
      const error = new AttemptTimedOut({ runId: timed!.id, attempt: 1, timeoutMs: 90_000 })
      yield* store.fail({
        runId: timed!.id,
        fence: claimed!.fence,
        error: { tag: error._tag, message: error.message },
        retryDelayMs: 1_000
      })
      const record = yield* store.get(timed!.id)
      assert.strictEqual(record.deadline!.getTime() - record.createdAt.getTime(), 3_600_000, "--deadline from now()")
      const text = yield* leasehold(["runs", "show", timed!.id, ...connection(schema)])
      assertOk(text)
      assert.match(text.stdout, /^attempt timeout\s+1m 30s \(set at enqueue\)$/m)
      assert.match(text.stdout, /^deadline\s+\S+/m)
      assert.include(text.stdout, `retry_scheduled: run ${timed!.id}: attempt 1 ran past its timeout of 90000 ms`)
      assert.deepInclude(parse(yield* leasehold(["runs", "show", timed!.id, "--json", ...connection(schema)])).run, {
        attemptTimeoutMs: 90_000,
        deadline: record.deadline!.toISOString()
      })
      // Bad timeouts: one line, exit 2, nothing written.
      const before = (yield* store.list({ limit: 10 })).length
      assertRejected(
        yield* leasehold([
          "enqueue",
          "resize-image",
          "--payload",
          "{\"image\":\"a.png\",\"width\":1}",
          "--delay",
          "2 hours",
          "--deadline",
          "1 hour",
          ...connection(schema)
        ]),
        2,
        /deadline: the run would be due \(in 7200000 ms\) only once its deadline had passed/
      )
      assert.strictEqual((yield* store.list({ limit: 10 })).length, before, "nothing written")
      const untimed = yield* leasehold(["runs", "show", plain!.id, ...connection(schema)])
      assert.notMatch(untimed.stdout, /^(attempt timeout|deadline)\s/m)
      assert.deepInclude(parse(yield* leasehold(["runs", "show", plain!.id, "--json", ...connection(schema)])).run, {
        attemptTimeoutMs: null,
        deadline: null
      })
    }))

  it.live("runs show: a pending run no live worker would claim says so; once one serves its queue and kind, it counts it", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      const [{ id }] = (yield* store.enqueue([{ kind: "k", payload: {}, queue: "nobody" }])) as unknown as [
        { id: string }
      ]
      // A worker serving the queue, but not the kind, would not claim it either.
      const announce = (owner: string, kinds: ReadonlyArray<string>) =>
        store.announceWorker({
          owner,
          host: "h",
          pid: 1,
          version: "0",
          queues: ["nobody"],
          kinds,
          concurrency: 1,
          runsHeld: 0,
          startedAt: new Date(),
          ttl: Duration.minutes(1)
        })
      yield* announce("other-kinds", ["other"])
      const unserved = yield* leasehold(["runs", "show", id, ...connection(schema)])
      assertOk(unserved)
      assert.match(
        unserved.stdout,
        /^workers\s+none: no live worker serves queue nobody with kind k, so nothing will claim it$/m
      )
      assert.strictEqual(
        parse(yield* leasehold(["runs", "show", id, "--json", ...connection(schema)])).run.workersServing,
        0
      )
      yield* announce("serving", ["k"])
      const served = yield* leasehold(["runs", "show", id, ...connection(schema)])
      assert.notMatch(served.stdout, /^workers\s/m)
      assert.strictEqual(
        parse(yield* leasehold(["runs", "show", id, "--json", ...connection(schema)])).run.workersServing,
        1
      )
    }))

  it.live("runs show: attempts with fence and owner, the suspension and its resume, rejected stale writes", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql, store } = yield* openStore(schema)
      const [{ id }] = (yield* store.enqueue([
        { kind: "approve-refund", payload: { order: "A-7", amount: 5 }, queue: "money" }
      ])) as unknown as [{ id: string }]
      const first = yield* claimOne(store, "worker-a", "money", "approve-refund")
      yield* store.checkpoint({ runId: id, fence: first.fence }, { step: "drafted" })
      yield* store.suspend({
        runId: id,
        fence: first.fence,
        signal: "approval",
        token: "tok-A-7",
        timeout: Duration.hours(1)
      })
      const resumed = yield* leasehold([
        "resume",
        "--token",
        "tok-A-7",
        "--payload",
        `{"approved":true}`,
        ...connection(schema)
      ])
      assertOk(resumed)
      assert.strictEqual(
        resumed.stdout,
        `resumed run ${id} (now pending; a worker re-claims it under a higher fence)\n`
      )
      const second = yield* claimOne(store, "worker-b", "money", "approve-refund")
      // The first holder comes back late: the fence refuses its write and the history records it.
      const stale = yield* Effect.flip(store.checkpoint({ runId: id, fence: first.fence }, { step: "late" }))
      assert.instanceOf(stale, FenceRejected)
      yield* store.completeBatch([{ runId: id, fence: second.fence, result: JSON.stringify({ refunded: true }) }])

      const shown = parse(yield* leasehold(["runs", "show", id, "--json", ...connection(schema)]))
      assert.deepInclude(shown.run, { id, state: "completed", fence: 2, leaseOwner: null })
      assert.deepStrictEqual(shown.run.result, { refunded: true })
      assert.deepStrictEqual(
        shown.attempts.map((a: any) => [a.fence, a.owner, a.via, a.outcome, a.detail]),
        [[1, "worker-a", "claimed", "suspended", `awaiting "approval"`], [2, "worker-b", "claimed", "completed", null]]
      )
      for (const attempt of shown.attempts) assert.isAtMost(Date.parse(attempt.start), Date.parse(attempt.end))
      assert.strictEqual(shown.suspensions.length, 1)
      assert.deepInclude(shown.suspensions[0], { fence: 1, signal: "approval", outcome: "resumed" })
      assert.deepStrictEqual(shown.suspensions[0].payload, { approved: true })
      assert.deepStrictEqual(
        shown.rejectedWrites.map((r: any) => [r.operation, r.presentedFence, r.storedFence]),
        [["checkpoint", 1, 2]]
      )
      assert.deepStrictEqual(
        shown.events.map((e: any) => [e.kind, e.fence]),
        [["claimed", 1], ["suspended", 1], ["resumed", 1], ["claimed", 2], ["stale_write_rejected", 1], [
          "completed",
          2
        ]]
      )

      const text = yield* leasehold(["runs", "show", id, ...connection(schema)])
      assertOk(text)
      assert.match(text.stdout, new RegExp(`^run\\s+${id} \\(approve-refund on queue money\\)$`, "m"))
      assert.match(text.stdout, /^state\s+completed$/m)
      assert.match(text.stdout, /^fence\s+2$/m)
      assert.match(text.stdout, /^checkpoint\s+\{"step":"drafted"\}$/m)
      assert.match(text.stdout, /^\s+FENCE\s+OWNER\s+VIA\s+START\s+END\s+OUTCOME$/m)
      assert.match(text.stdout, /^\s+1\s+worker-a\s+claimed\s+\S+Z\s+\S+Z\s+suspended: awaiting "approval"$/m)
      assert.match(text.stdout, /^\s+2\s+worker-b\s+claimed\s+\S+Z\s+\S+Z\s+completed$/m)
      assert.match(text.stdout, /^\s+1\s+approval\s+\S+Z\s+\S+Z\s+\S+Z\s+resumed with \{"approved":true\}$/m)
      assert.match(text.stdout, /^\s+\S+Z\s+checkpoint\s+1\s+2$/m)

      // A lease that expired and was taken over shows as its own attempt, ended by the reclaim.
      const [{ id: other }] = (yield* store.enqueue([{ kind: "resize-image", payload: {} }])) as unknown as [
        { id: string }
      ]
      yield* claimOne(store, "worker-a", "default", "resize-image")
      yield* expireLease(sql, schema, other)
      yield* claimOne(store, "worker-b", "default", "resize-image")
      const reclaimed = parse(yield* leasehold(["runs", "show", other, "--json", ...connection(schema)]))
      assert.deepStrictEqual(
        reclaimed.attempts.map((a: any) => [a.fence, a.owner, a.via, a.outcome, a.detail, a.end === null]),
        [[1, "worker-a", "claimed", "lease_expired", "reclaimed under fence 2", false], [
          2,
          "worker-b",
          "reclaimed",
          "running",
          null,
          true
        ]]
      )
      assert.deepStrictEqual(reclaimed.rejectedWrites, [])

      assertRejected(yield* leasehold(["runs", "show", "999999", ...connection(schema)]), 1, /run 999999 not found$/)
      assertRejected(yield* leasehold(["runs", "show", "nine", ...connection(schema)]), 1, /run nine not found$/)
    }))
})

describe("leasehold resume, cancel, retry", () => {
  it.live("each moves the run as asked; a run in the wrong state or an unknown one fails (exit 1) and nothing changes", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql, store } = yield* openStore(schema)
      const [refund, pending, done] = (yield* store.enqueue([
        { kind: "approve-refund", payload: { order: "A-9", amount: 9 }, queue: "money" },
        { kind: "resize-image", payload: { image: "p.png", width: 1 }, queue: "later" },
        { kind: "resize-image", payload: { image: "d.png", width: 1 } }
      ])).map((e) => e.id) as [string, string, string]
      const claimed = yield* claimOne(store, "worker-a", "money", "approve-refund")
      yield* store.suspend({
        runId: refund,
        fence: claimed.fence,
        signal: "approval",
        token: "tok-A-9",
        timeout: undefined
      })
      const finished = yield* claimOne(store, "worker-a", "default", "resize-image")
      yield* store.completeBatch([{ runId: done, fence: finished.fence, result: null }])

      const snapshot = Effect.map(
        sql.unsafe<{ id: string; state: string; fence: string; updated_at: Date; signals: unknown }>(
          `SELECT id::text AS id, state, fence::text AS fence, updated_at, signals FROM "${schema}".runs_now ORDER BY id`
        ),
        (rows) => JSON.stringify(rows)
      )
      const eventCount = Effect.map(countRows(sql, schema), (c) => c.events)

      // Wrong state or unknown run: one line, exit 1, no row and no history touched.
      const before = yield* snapshot
      const eventsBefore = yield* eventCount
      const refusals: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
        [["resume", pending, "--payload", "{}"], new RegExp(`run ${pending} is pending: cannot resume it$`)],
        [["resume", "--token", "no-such-token"], /no suspended run holds signal token "no-such-token"$/],
        [["resume", "999999"], /run 999999 not found$/],
        [["cancel", done], new RegExp(`run ${done} is completed: cannot cancel it$`)],
        [["cancel", "999999"], /run 999999 not found$/],
        [["retry", pending], new RegExp(`run ${pending} is pending: cannot retry it$`)],
        [["retry", "999999"], /run 999999 not found$/]
      ]
      yield* Effect.forEach(
        refusals,
        ([args, reason]) =>
          Effect.map(leasehold([...args, ...connection(schema)]), (result) => assertRejected(result, 1, reason)),
        {
          concurrency: 3,
          discard: true
        }
      )
      assertRejected(
        yield* leasehold(["resume", refund, "--payload", "{not json", ...connection(schema)]),
        2,
        /--payload: "\{not json"\. Expected: valid JSON/
      )
      assert.strictEqual(yield* snapshot, before, "no run changed")
      assert.strictEqual(yield* eventCount, eventsBefore, "no history written")

      // Resume by id, with a payload the handler will see as the signal's outcome.
      const resumed = parse(
        yield* leasehold(["resume", refund, "--payload", `{"approved":false}`, "--json", ...connection(schema)])
      )
      assert.deepStrictEqual(resumed, { id: refund, state: "pending", fence: 1 })
      const afterResume = yield* store.get(refund)
      assert.deepStrictEqual(afterResume.signals, { approval: { _tag: "Signalled", payload: { approved: false } } })
      assert.isNull(afterResume.signalToken)

      // Cancel advances the fence; a second cancel is refused; retry brings it back under a higher fence.
      const cancelled = yield* leasehold(["cancel", pending, ...connection(schema)])
      assertOk(cancelled)
      assert.strictEqual(cancelled.stdout, `cancelled run ${pending} (fence now 1: a holder's writes are rejected)\n`)
      assert.deepInclude(yield* store.get(pending), { state: "cancelled", fence: 1 })
      assertRejected(yield* leasehold(["cancel", pending, ...connection(schema)]), 1, /is cancelled: cannot cancel it$/)
      const retried = yield* leasehold(["retry", pending, ...connection(schema)])
      assertOk(retried)
      assert.strictEqual(retried.stdout, `run ${pending} is pending again, with fresh attempts (fence now 2)\n`)
      assert.deepInclude(yield* store.get(pending), { state: "pending", fence: 2, attempt: 0 })
      const history = parse(yield* leasehold(["runs", "show", pending, "--json", ...connection(schema)]))
      assert.deepStrictEqual(history.adminActions.map((a: any) => [a.action, a.fence]), [["cancelled", 1], [
        "retried",
        2
      ]])
    }))
})

describe("leasehold stats", () => {
  it.live("resume by id and resume by token never mix: a token that reads like another run's id resumes only its own run", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql, store } = yield* openStore(schema)
      const [first, second] = (yield* store.enqueue([
        { kind: "approve-refund", payload: { order: "T-1", amount: 1 }, queue: "money" },
        { kind: "approve-refund", payload: { order: "T-2", amount: 2 }, queue: "money" }
      ])).map((e) => e.id) as [string, string]
      // The second run waits on a token that is exactly the first run's id.
      for (const [id, token] of [[first, "tok-T-1"], [second, first]] as const) {
        const claimed = yield* claimOne(store, "worker-a", "money", "approve-refund")
        assert.strictEqual(claimed.id, id)
        yield* store.suspend({ runId: id, fence: claimed.fence, signal: "approval", token, timeout: undefined })
      }
      const states = Effect.map(
        sql.unsafe<{ id: string; state: string }>(`SELECT id::text AS id, state FROM "${schema}".runs_now ORDER BY id`),
        (rows) => rows.map((r) => [r.id, r.state])
      )
      // Neither or both: a usage error, and nothing moves.
      assertRejected(
        yield* leasehold(["resume", ...connection(schema)]),
        2,
        /resume takes a run id or --token <token>, not both or neither$/
      )
      assertRejected(
        yield* leasehold(["resume", first, "--token", first, ...connection(schema)]),
        2,
        /resume takes a run id or --token <token>, not both or neither$/
      )
      assert.deepStrictEqual(yield* states, [[first, "suspended"], [second, "suspended"]])

      const byToken = parse(yield* leasehold(["resume", "--token", first, "--json", ...connection(schema)]))
      assert.strictEqual(byToken.id, second)
      assert.deepStrictEqual(yield* states, [[first, "suspended"], [second, "pending"]])
      const byId = parse(yield* leasehold(["resume", first, "--json", ...connection(schema)]))
      assert.strictEqual(byId.id, first)
      assert.deepStrictEqual(yield* states, [[first, "pending"], [second, "pending"]])
    }))

  it.live("counts of runs not ended by state and queue, live leases, oldest pending age, fence rejections and reclaims; ended runs in the throughput", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql, store } = yield* openStore(schema)
      const empty = parse(yield* leasehold(["stats", "--json", ...connection(schema)]))
      assert.deepInclude(empty.throughput, { minutes: 10, series: [], truncated: false })
      delete empty.throughput
      assert.deepStrictEqual(empty, {
        byState: { pending: 0, running: 0, suspended: 0 },
        byStateAndQueue: [],
        liveLeases: 0,
        oldestPendingSeconds: null,
        fenceRejections: 0,
        reclaims: 0,
        keyLimits: [],
        rateLimits: []
      })

      const [a, , , d] = (yield* store.enqueue([
        { kind: "resize-image", payload: {} },
        { kind: "resize-image", payload: {} },
        { kind: "resize-image", payload: {}, queue: "money" },
        { kind: "resize-image", payload: {}, queue: "money" }
      ])).map((e) => e.id) as [string, string, string, string]
      // Due a while ago, so the oldest pending age is known to be at least a minute.
      yield* sql.unsafe(
        `UPDATE "${schema}".runs SET run_at = now() - interval '90 seconds' WHERE state IN ('pending', 'ledger')`
      )
      const first = yield* claimOne(store, "worker-a", "default", "resize-image") // a
      yield* expireLease(sql, schema, a)
      yield* claimOne(store, "worker-b", "default", "resize-image") // a again: a reclaim, live lease
      yield* Effect.flip(store.checkpoint({ runId: a, fence: first.fence }, {})) // a rejected stale write
      const money = yield* claimOne(store, "worker-b", "money", "resize-image")
      yield* store.completeBatch([{ runId: money.id, fence: money.fence, result: null }])
      yield* store.cancel(d)

      const stats = parse(yield* leasehold(["stats", "--json", ...connection(schema)]))
      // The completed and the cancelled run are not counted (ADR 0030): the throughput has the completed one.
      assert.deepStrictEqual(stats.byState, { pending: 1, running: 1, suspended: 0 })
      assert.deepStrictEqual(stats.byStateAndQueue, [
        { queue: "default", state: "pending", count: 1 },
        { queue: "default", state: "running", count: 1 }
      ])
      assert.strictEqual(stats.liveLeases, 1)
      assert.strictEqual(stats.fenceRejections, 1)
      assert.strictEqual(stats.reclaims, 1)
      assert.isAtLeast(stats.oldestPendingSeconds, 90)
      assert.isBelow(stats.oldestPendingSeconds, 120)

      const text = yield* leasehold(["stats", ...connection(schema)])
      assertOk(text)
      const lines = text.stdout.split("\n")
      assert.match(lines[0]!, /^QUEUE\s+PENDING\s+RUNNING\s+SUSPENDED\s+TOTAL$/)
      assert.match(lines[1]!, /^default\s+1\s+1\s+0\s+2$/)
      // The minute's throughput, read from the run that finished in it.
      assert.include(text.stdout, "finished in the last 10 minutes:")
      assert.match(text.stdout, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}\s+money\s+1\s+0\s/m)
      assert.match(lines[2]!, /^\(all\)\s+1\s+1\s+0\s+2$/)
      // Aligned: each count sits under its header.
      for (const row of lines.slice(1, 3)) assert.match(row.slice(lines[0]!.indexOf("TOTAL")), /^[0-9]+$/)
      assert.match(text.stdout, /^live leases\s+1$/m)
      assert.match(text.stdout, /^oldest pending\s+1m [0-9]{2}s waiting$/m)
      assert.match(text.stdout, /^fence rejections\s+1$/m)
      assert.match(text.stdout, /^reclaims\s+1$/m)
    }))
})

describe("leasehold queues", () => {
  it.live("pause holds a queue's runs back while other queues run; list shows it; resume lets them go; an empty name is exit 2 and pauses nothing", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql, store } = yield* openStore(schema)
      yield* store.enqueue([
        { kind: "resize-image", payload: {}, queue: "money" },
        { kind: "resize-image", payload: {}, queue: "money" },
        { kind: "resize-image", payload: {} }
      ])
      const paused = yield* leasehold(["queues", "pause", "money", ...connection(schema)])
      assertOk(paused)
      assert.match(paused.stdout, /^paused queue "money": nothing in it is claimed until it is resumed/)
      assert.match((yield* leasehold(["queues", "pause", "money", ...connection(schema)])).stdout, /was paused already/)

      // Claims take the active queue only.
      const claimed = yield* store.claim({
        owner: "w",
        queues: ["default", "money"],
        kinds: ["resize-image"],
        limit: 10,
        ttl: Duration.seconds(30)
      })
      assert.deepStrictEqual(claimed.map((c) => c.queue), ["default"])

      const list = parse(yield* leasehold(["queues", "list", "--json", ...connection(schema)]))
      assert.deepStrictEqual(
        list.map((
          q: { queue: string; paused: boolean; pending: number; running: number }
        ) => [q.queue, q.paused, q.pending, q.running]),
        [
          ["default", false, 0, 1],
          ["money", true, 2, 0]
        ]
      )
      const text = yield* leasehold(["queues", "list", ...connection(schema)])
      assert.match(text.stdout, /^QUEUE\s+STATUS\s+PENDING\s+DUE\s+RUNNING\s+SUSPENDED$/m)
      assert.match(text.stdout, /^money\s+paused since \S.*\s+2\s+2\s+0\s+0$/m)

      // Bad input: one line, exit 2, and the set of paused queues is unchanged.
      assertRejected(
        yield* leasehold(["queues", "pause", "", ...connection(schema)]),
        2,
        /queue: must be a non-empty string/
      )
      const stored = yield* sql.unsafe<{ queue: string }>(`SELECT queue FROM "${schema}".paused_queues`)
      assert.deepStrictEqual(stored.map((r) => r.queue), ["money"])

      const resumed = parse(yield* leasehold(["queues", "resume", "money", "--json", ...connection(schema)]))
      assert.deepStrictEqual(resumed, { queue: "money", paused: false, changed: true })
      const after = yield* store.claim({
        owner: "w",
        queues: ["money"],
        kinds: ["resize-image"],
        limit: 10,
        ttl: Duration.seconds(30)
      })
      assert.strictEqual(after.length, 2)
      assert.match((yield* leasehold(["queues", "resume", "money", ...connection(schema)])).stdout, /was not paused/)
    }))
})

describe("leasehold limits", () => {
  it.live("set, list, enqueue with a key, runs show and stats name key and limit; remove; a bad limit or scope is exit 2 and writes nothing", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql, store } = yield* openStore(schema)
      const set = yield* leasehold(["limits", "set", "--kind", "resize-image", "--per-key", "1", ...connection(schema)])
      assertOk(set)
      assert.strictEqual(set.stdout, `at most 1 running per key in kind "resize-image"\n`)
      const first = parse(
        yield* leasehold([
          "enqueue",
          "resize-image",
          "--payload",
          "{\"image\":\"a.png\",\"width\":1}",
          "--concurrency-key",
          "customer-7",
          "--json",
          ...connection(schema)
        ])
      )
      const second = parse(
        yield* leasehold([
          "enqueue",
          "resize-image",
          "--payload",
          "{\"image\":\"b.png\",\"width\":1}",
          "--concurrency-key",
          "customer-7",
          "--json",
          ...connection(schema)
        ])
      )
      // One of customer-7's runs at a time: the second waits for the first.
      const claimed = yield* store.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["resize-image"],
        limit: 10,
        ttl: Duration.seconds(30)
      })
      assert.deepStrictEqual(claimed.map((c) => c.id), [first.id])

      const listed = parse(yield* leasehold(["limits", "list", "--json", ...connection(schema)]))
      assert.deepStrictEqual(listed, [{ scope: "kind", name: "resize-image", perKey: 1, keysRunning: 1, keyedDue: 1 }])
      const text = yield* leasehold(["limits", "list", ...connection(schema)])
      assert.match(text.stdout, /^KEY LIMIT\s+PER KEY\s+KEYS RUNNING\s+KEYED DUE$/m)
      assert.match(text.stdout, /^kind resize-image\s+1\s+1\s+1$/m)
      const show = yield* leasehold(["runs", "show", second.id, ...connection(schema)])
      assert.match(
        show.stdout,
        /^key\s+customer-7 \(at most 1 running per key in kind resize-image\), waiting for a free slot$/m
      )
      assert.deepInclude(parse(yield* leasehold(["runs", "show", second.id, "--json", ...connection(schema)])).run, {
        concurrencyKey: "customer-7",
        keySlot: null,
        waitingForKey: true,
        keyLimits: [{ scope: "kind", name: "resize-image", perKey: 1 }]
      })
      const running = yield* leasehold(["runs", "show", first.id, ...connection(schema)])
      assert.match(
        running.stdout,
        /^key\s+customer-7 \(at most 1 running per key in kind resize-image\), holds slot 0$/m
      )
      assert.match((yield* leasehold(["stats", ...connection(schema)])).stdout, /^kind resize-image\s+1\s+1\s+1$/m)

      // Bad input: one line, exit 2, and the limits are unchanged.
      assertRejected(
        yield* leasehold(["limits", "set", "--kind", "resize-image", "--per-key", "0", ...connection(schema)]),
        2,
        /perKey: 0 is not a whole number of at least 1/
      )
      assertRejected(
        yield* leasehold(["limits", "set", "--kind", "a", "--queue", "b", "--per-key", "2", ...connection(schema)]),
        2,
        /exactly one of --queue and --kind/
      )
      assertRejected(
        yield* leasehold(["limits", "set", "--per-key", "2", ...connection(schema)]),
        2,
        /exactly one of --queue and --kind/
      )
      assertRejected(
        yield* leasehold([
          "enqueue",
          "resize-image",
          "--payload",
          "{\"image\":\"c.png\",\"width\":1}",
          "--concurrency-key",
          "",
          ...connection(schema)
        ]),
        2,
        /concurrencyKey: must be a non-empty string/
      )
      const stored = yield* sql.unsafe<{ scope: string; name: string; per_key: number }>(
        `SELECT scope, name, per_key FROM "${schema}".key_limits`
      )
      assert.deepStrictEqual(stored, [{ scope: "kind", name: "resize-image", per_key: 1 }])
      assert.strictEqual(
        (yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".runs`))[0]!.n,
        2,
        "the bad enqueue wrote nothing"
      )

      assert.deepStrictEqual(
        parse(yield* leasehold(["limits", "remove", "--kind", "resize-image", "--json", ...connection(schema)])),
        {
          scope: "kind",
          name: "resize-image",
          removed: true
        }
      )
      assert.match(
        (yield* leasehold(["limits", "remove", "--kind", "resize-image", ...connection(schema)])).stdout,
        /had no per-key limit/
      )
      assert.strictEqual(
        (yield* leasehold(["limits", "list", ...connection(schema)])).stdout,
        "no per-key limits declared\n"
      )
    }))
})

describe("leasehold limits rate", () => {
  it.live("rate set, list, runs show and stats name the rate limit and its starts; remove; a bad limit or interval is exit 2 and writes nothing", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql, store } = yield* openStore(schema)
      const set = yield* leasehold([
        "limits",
        "rate",
        "set",
        "--kind",
        "resize-image",
        "--limit",
        "1",
        "--interval",
        "1 hour",
        "--per-key",
        ...connection(schema)
      ])
      assertOk(set)
      assert.strictEqual(set.stdout, `at most 1 started per 1 hour per key in kind "resize-image"\n`)
      const runs = yield* store.enqueue(
        ["a.png", "b.png"].map((image) => ({
          kind: "resize-image",
          payload: { image, width: 1 },
          concurrencyKey: "customer-7"
        }))
      )
      const claimed = yield* store.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["resize-image"],
        limit: 10,
        ttl: Duration.minutes(10)
      })
      assert.deepStrictEqual(claimed.map((c) => c.id), [runs[0]!.id], "one start per hour for customer-7")

      const listed = parse(yield* leasehold(["limits", "list", "--json", ...connection(schema)]))
      assert.deepStrictEqual(listed, {
        keyLimits: [],
        rateLimits: [{
          scope: "kind",
          name: "resize-image",
          limit: 1,
          intervalMs: 3_600_000,
          perKey: true,
          startedInWindow: 1,
          due: 1
        }]
      })
      const text = yield* leasehold(["limits", "list", ...connection(schema)])
      assert.match(text.stdout, /^RATE LIMIT\s+STARTS\s+PER\s+PER KEY\s+STARTED IN LAST INTERVAL\s+DUE$/m)
      assert.match(text.stdout, /^kind resize-image\s+1\s+1h\s+yes\s+1\s+1$/m)
      const show = yield* leasehold(["runs", "show", runs[1]!.id, ...connection(schema)])
      assert.match(
        show.stdout,
        /^rate limit\s+at most 1 started per 1h per key in kind resize-image \(1 started in the last interval, 1 due waiting\)$/m
      )
      assert.deepInclude(parse(yield* leasehold(["runs", "show", runs[1]!.id, "--json", ...connection(schema)])).run, {
        rateLimit: {
          scope: "kind",
          name: "resize-image",
          limit: 1,
          intervalMs: 3_600_000,
          perKey: true,
          startedInWindow: 1,
          due: 1
        }
      })
      assert.match(
        (yield* leasehold(["stats", ...connection(schema)])).stdout,
        /^kind resize-image\s+1\s+1h\s+yes\s+1\s+1$/m
      )

      // Bad input: one line, exit 2, and the limits are unchanged.
      const rate = (...args: Array<string>) => leasehold(["limits", "rate", "set", ...args, ...connection(schema)])
      assertRejected(
        yield* rate("--kind", "resize-image", "--limit", "0", "--interval", "1 second"),
        2,
        /limit: 0 is not a whole number of at least 1/
      )
      assertRejected(
        yield* rate("--kind", "resize-image", "--limit", "5", "--interval", "0 seconds"),
        2,
        /interval: "0 seconds" is not an interval above 0/
      )
      assertRejected(
        yield* rate("--kind", "resize-image", "--limit", "5", "--interval", "soon"),
        2,
        /interval: "soon" is not an interval above 0/
      )
      assertRejected(
        yield* rate("--queue", "q", "--kind", "k", "--limit", "5", "--interval", "1 second"),
        2,
        /exactly one of --queue and --kind/
      )
      const stored = yield* sql.unsafe<{ name: string; per_interval: number }>(
        `SELECT name, per_interval FROM "${schema}".rate_limits`
      )
      assert.deepStrictEqual(stored, [{ name: "resize-image", per_interval: 1 }])

      assert.deepStrictEqual(
        parse(
          yield* leasehold(["limits", "rate", "remove", "--kind", "resize-image", "--json", ...connection(schema)])
        ),
        {
          scope: "kind",
          name: "resize-image",
          removed: true
        }
      )
      assert.match(
        (yield* leasehold(["limits", "rate", "remove", "--kind", "resize-image", ...connection(schema)])).stdout,
        /had no rate limit/
      )
      const after = yield* store.claim({
        owner: "w",
        queues: ["default"],
        kinds: ["resize-image"],
        limit: 10,
        ttl: Duration.minutes(10)
      })
      assert.deepStrictEqual(after.map((c) => c.id), [runs[1]!.id], "removed: the held-back run starts")
    }))
})

describe("leasehold schedules", () => {
  it.live("set registers once (again: unchanged), list shows the next ticks, pause and resume; a bad cron or time zone is exit 2 and writes nothing", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { sql } = yield* openStore(schema)
      const set = [
        "schedules",
        "set",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--time-zone",
        "Europe/Paris",
        "--kind",
        "resize-image",
        "--payload",
        "{\"width\":10}"
      ]
      assert.strictEqual((yield* leasehold([...set, ...connection(schema)])).stdout, `schedule "nightly" created\n`)
      assert.strictEqual((yield* leasehold([...set, ...connection(schema)])).stdout, `schedule "nightly" unchanged\n`)
      const [listed] = parse(yield* leasehold(["schedules", "list", "--json", ...connection(schema)]))
      assert.deepInclude(listed, {
        name: "nightly",
        cron: "0 3 * * *",
        timeZone: "Europe/Paris",
        kind: "resize-image",
        queue: "default",
        paused: false,
        lastTick: null
      })
      // 03:00 in Paris: 02:00 UTC in winter, 01:00 in summer; three ticks a day apart.
      assert.strictEqual(listed.nextTicks.length, 3)
      for (const tick of listed.nextTicks) assert.match(tick, /T0[12]:00:00\.000Z$/)
      const text = yield* leasehold(["schedules", "list", ...connection(schema)])
      assert.match(text.stdout, /^NAME\s+CRON\s+TIME ZONE\s+KIND\s+QUEUE\s+STATUS\s+LAST TICK\s+NEXT TICKS$/m)
      assert.match(text.stdout, /^nightly\s+0 3 \* \* \*\s+Europe\/Paris\s+resize-image\s+default\s+active\s+-\s+\S+/m)

      assertRejected(
        yield* leasehold(["schedules", "set", "bad", "--cron", "61 * * * *", "--kind", "k", ...connection(schema)]),
        2,
        /invalid option cron/
      )
      assertRejected(
        yield* leasehold([
          "schedules",
          "set",
          "bad",
          "--cron",
          "* * * * *",
          "--time-zone",
          "Mars/Olympus",
          "--kind",
          "k",
          ...connection(schema)
        ]),
        2,
        /invalid option timeZone: "Mars\/Olympus" is not a known time zone/
      )
      const names = yield* sql.unsafe<{ name: string }>(`SELECT name FROM "${schema}".schedules`)
      assert.deepStrictEqual(names.map((r) => r.name), ["nightly"])

      assert.match(
        (yield* leasehold(["schedules", "pause", "nightly", ...connection(schema)])).stdout,
        /paused schedule "nightly"/
      )
      assert.isTrue(parse(yield* leasehold(["schedules", "list", "--json", ...connection(schema)]))[0].paused)
      assert.deepStrictEqual(
        parse(yield* leasehold(["schedules", "resume", "nightly", "--json", ...connection(schema)])),
        { name: "nightly", paused: false, changed: true }
      )
      assertRejected(
        yield* leasehold(["schedules", "pause", "nope", ...connection(schema)]),
        1,
        /schedule "nope" not found/
      )
    }))
})

describe("leasehold: the database", () => {
  it.live("DATABASE_URL selects the server when --database-url is absent", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      yield* store.enqueue([{ kind: "resize-image", payload: {} }])
      const viaEnv = parse(
        yield* leasehold(["stats", "--json", "--schema", schema], { env: { DATABASE_URL: databaseUrl() } })
      )
      assert.strictEqual(viaEnv.byState.pending, 1)
      // The flag wins over the environment.
      assertRejected(
        yield* leasehold(["stats", "--schema", schema, "--database-url", "postgres://nobody@127.0.0.1:1/x"], {
          env: { DATABASE_URL: databaseUrl() }
        }),
        1,
        /cannot connect to the database: connect ECONNREFUSED 127\.0\.0\.1:1$/
      )
    }))

  it.live("an unreachable database fails fast: one line, exit 1, for every command", () =>
    Effect.gen(function*() {
      const unreachable = ["--database-url", "postgres://nobody@127.0.0.1:1/x", "--schema", "cli_unreachable"]
      const commands: ReadonlyArray<ReadonlyArray<string>> = [
        ["migrate"],
        ["enqueue", "resize-image", "--payload", `{"image":"a.png","width":1}`],
        ["runs", "list"],
        ["runs", "show", "1"],
        ["resume", "1"],
        ["cancel", "1"],
        ["retry", "1"],
        ["stats"]
      ]
      yield* Effect.forEach(commands, (args) =>
        Effect.gen(function*() {
          const started = Date.now()
          const result = yield* leasehold([...args, ...unreachable])
          assertRejected(result, 1, /^leasehold: cannot connect to the database: connect ECONNREFUSED 127\.0\.0\.1:1$/)
          assert.isBelow(Date.now() - started, 10_000, `${args.join(" ")} failed fast`)
        }), { concurrency: 4, discard: true })
    }))

  it.live("a schema without a store: reads and admin commands fail (exit 1) and do not create it", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const sql = yield* openSql
      for (const args of [["runs", "list"], ["runs", "show", "1"], ["stats"], ["cancel", "1"]]) {
        assertRejected(
          yield* leasehold([...args, ...connection(schema)]),
          1,
          new RegExp(`no Leasehold store in schema "${schema}" \\(run \`leasehold migrate\` first`)
        )
      }
      assert.isFalse(yield* schemaExists(sql, schema))
    }))
})

describe("leasehold worker", () => {
  it.live("--completed-runs delete: completed runs leave no row; a bad value is a usage error and starts nothing", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store, sql } = yield* openStore(schema)
      const bad = yield* leasehold(["worker", "--completed-runs", "forever", ...connection(schema)])
      assertRejected(bad, 2, /completed-runs/)
      const id = runIdOf(
        yield* leasehold([
          "enqueue",
          "resize-image",
          "--payload",
          `{"image":"dog.png","width":64}`,
          ...connection(schema)
        ])
      )
      const worker = yield* background(["worker", "--completed-runs", "delete", "--json", ...connection(schema)])
      yield* eventually(
        "the run completed and deleted",
        Effect.map(
          sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".runs`),
          (rows) => rows[0]!.n === 0
        ),
        "20 seconds"
      )
      assert.strictEqual((yield* Effect.flip(store.get(id)))._tag, "RunNotFound")
      worker.child.kill("SIGTERM")
      const exited = yield* Effect.promise(() => worker.exited)
      assert.strictEqual(exited.code, 130)
      const settled = exited.stdout.trim().split("\n").map((l) => JSON.parse(l)).filter((e) => e._tag === "RunSettled")
      assert.deepStrictEqual(settled.map((e) => [e.runId, e.fence, e.outcome]), [[id, 1, "completed"]])
    }))

  it.live("with LEASEHOLD_CALLBACK_SECRETS set, handlers hand out signed callback URLs; a malformed secret is one line, exit 2", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      const tasks = fileURLToPath(new URL("./fixtures/callback-tasks.ts", import.meta.url))
      const secret = "cli-test-secret-0123456789abcdef0123"
      const env = { LEASEHOLD_CALLBACK_SECRETS: secret, LEASEHOLD_CALLBACK_BASE_URL: "https://hooks.example.test" }
      const id = runIdOf(
        yield* leasehold([
          "enqueue",
          "needs-approval",
          "--payload",
          `{"order":"C-1"}`,
          "--tasks",
          tasks,
          ...connection(schema)
        ])
      )
      yield* background(["worker", "--tasks", tasks, ...connection(schema)], { env })
      yield* eventually("suspended", Effect.map(store.get(id), (r) => r.state === "suspended"), "20 seconds")
      const { url } = (yield* store.get(id)).checkpoint as { url: string }
      const parsed = new URL(url)
      assert.strictEqual(`${parsed.origin}${parsed.pathname}`, `https://hooks.example.test/callbacks/${id}/approval`)
      const exp = parsed.searchParams.get("exp")!
      assert.strictEqual(parsed.searchParams.get("sig"), signature(secret, id, "approval", exp))

      assertRejected(
        yield* leasehold(["worker", "--tasks", tasks, ...connection(schema)], {
          env: { ...env, LEASEHOLD_CALLBACK_SECRETS: "short" }
        }),
        2,
        /^leasehold: invalid option LEASEHOLD_CALLBACK_SECRETS: every secret needs at least 32 characters$/
      )
    }))

  it.live("runs what enqueue wrote, a suspension and resume included, serves its metrics, and shuts down gracefully on SIGTERM", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      const { store } = yield* openStore(schema)
      const quick = runIdOf(
        yield* leasehold([
          "enqueue",
          "resize-image",
          "--payload",
          `{"image":"cat.png","width":320}`,
          ...connection(schema)
        ])
      )
      const worker = yield* background([
        "worker",
        "--concurrency",
        "2",
        "--ttl",
        "5 seconds",
        "--json",
        "--metrics-port",
        "0",
        ...connection(schema)
      ])
      let printed = ""
      worker.child.stdout!.on("data", (chunk) => void (printed += String(chunk)))
      yield* eventually("the run completed", Effect.map(store.get(quick), (r) => r.state === "completed"), "20 seconds")
      const record = yield* store.get(quick)
      assert.strictEqual(record.fence, 1)
      assert.deepStrictEqual(record.result, { image: "cat.png", width: 320, resized: true })

      // The refund suspends for approval; the worker holds nothing for it.
      const refund = runIdOf(
        yield* leasehold([
          "enqueue",
          "approve-refund",
          "--payload",
          `{"order":"B-2","amount":7}`,
          ...connection(schema)
        ])
      )
      yield* eventually(
        "the refund suspended",
        Effect.map(store.get(refund), (r) => r.state === "suspended"),
        "20 seconds"
      )
      assertOk(
        yield* leasehold(["resume", "--token", "refund-B-2", "--payload", `{"approved":true}`, ...connection(schema)])
      )
      yield* eventually(
        "the refund completed",
        Effect.map(store.get(refund), (r) => r.state === "completed"),
        "20 seconds"
      )
      assert.strictEqual((yield* store.get(refund)).fence, 2)

      // The metrics endpoint it announced agrees: three claims, the refund's suspension, two completions.
      const url = (/"_tag":"MetricsServing","url":"([^"]+)"/.exec(printed) ?? [])[1]
      assert.match(url ?? "", /^http:\/\/127\.0\.0\.1:\d+\/metrics$/)
      const text = yield* eventually(
        "both completions in the metrics",
        Effect.promise(async () => {
          const body = await (await fetch(url!)).text()
          return body.includes(
            `leasehold_runs_settled_total{queue="default",kind="approve-refund",outcome="completed"} 1`
          ) && body
        }),
        "10 seconds"
      )
      assert.include(text, `leasehold_runs_settled_total{queue="default",kind="resize-image",outcome="completed"} 1`)
      assert.include(text, `leasehold_runs_settled_total{queue="default",kind="approve-refund",outcome="suspended"} 1`)

      worker.child.kill("SIGTERM")
      const exited = yield* Effect.promise(() => worker.exited)
      assert.strictEqual(exited.stderr, "")
      // Interrupted by the signal after a graceful shutdown, not killed by it.
      assert.isNull(exited.signal)
      assert.strictEqual(exited.code, 130)
      const events = exited.stdout.trim().split("\n").map((l) => JSON.parse(l))
      assert.strictEqual(events[0]._tag, "MetricsServing")
      assert.deepStrictEqual(
        events.filter((e) => e._tag === "Claimed").map((e) => [e.runId, e.fence]),
        [[quick, 1], [refund, 1], [refund, 2]]
      )
    }))
})

describe("leasehold: a port in use", () => {
  it.live("serve --port and worker --metrics-port on a busy port say so in one line naming the port and the flag, exit 1", () =>
    Effect.gen(function*() {
      const schema = freshSchema("cli")
      yield* openStore(schema)
      const busy = yield* Effect.acquireRelease(
        Effect.promise(() =>
          new Promise<net.Server>((resolve, reject) => {
            const server = net.createServer()
            server.once("error", reject)
            server.listen(0, "127.0.0.1", () => resolve(server))
          })
        ),
        (server) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
      )
      const port = (busy.address() as net.AddressInfo).port
      const env = { LEASEHOLD_CALLBACK_SECRETS: "k1:" + "s".repeat(32) }
      assertRejected(
        yield* leasehold(["serve", "--port", String(port), ...connection(schema)], { env }),
        1,
        new RegExp(`^leasehold: port ${port} is in use on 127\\.0\\.0\\.1 \\(--port\\)$`)
      )
      assertRejected(
        yield* leasehold(["worker", "--metrics-port", String(port), ...connection(schema)]),
        1,
        new RegExp(`^leasehold: port ${port} is in use on 127\\.0\\.0\\.1 \\(--metrics-port\\)$`)
      )
    }))
})
