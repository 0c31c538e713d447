/**
 * Every program in examples/ run as the guides say to run it, `node examples/<name>.ts` from the
 * repository's root, each against a database of its own on the test PostgreSQL. Each program
 * checks itself and exits 1 when what it shows did not happen; here its exit and what it printed
 * are checked, and for some what it left in the database.
 */
import { Database } from "@leasehold/sql"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { spawn } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "vitest"
import { databaseUrl } from "./support/db.js"

const root = fileURLToPath(new URL("..", import.meta.url))

interface Example {
  readonly file: string
  /** What its last lines say. */
  readonly prints: ReadonlyArray<RegExp>
  /** Checked on its database after it exited. */
  readonly leaves?: (sql: SqlClient.SqlClient) => Effect.Effect<void, unknown>
}

const examples: ReadonlyArray<Example> = [
  {
    file: "refund.ts",
    prints: [/^run 1 completed under fence 2, 1 refund written$/m],
    leaves: (sql) =>
      Effect.gen(function*() {
        const events = yield* sql<
          { kind: string; fence: number }
        >`SELECT kind, fence::int AS fence FROM leasehold.run_history WHERE run_id = 1 ORDER BY at, id`
        assert.deepStrictEqual(events.map((e) => `${e.kind}@${e.fence}`), [
          "claimed@1",
          "suspended@1",
          "resumed@1",
          "claimed@2",
          "completed@2"
        ])
        assert.lengthOf(yield* sql`SELECT 1 FROM refunds`, 1)
      })
  },
  {
    file: "handlers.ts",
    prints: [
      /^resize-image: completed, attempt 2, result \{"fence":2,"runId":"1","width":640,"attempt":2\}$/m,
      /^quote: completed, stored result \{"cents":"1999"\}$/m,
      /^unstorable: failed, attempt 1: .*UnstorableValue.*BigInt/m,
      /^poll-export: completed, attempt 1 of 1, fence 2$/m,
      /^charge: failed after 3 of 10 attempts$/m,
      /^charge attempt 1 \(failed\): \S+Z WARN the bank said no card=4242$/m,
      /^charge attempt 3 \(failed\): \S+Z WARN the bank said no card=4242$/m,
      /^audit: completed, kept audited acme$/m,
      /^lookup-address: failed after 2 attempts, AttemptTimedOut$/m,
      /^lookup-address with a deadline: failed after 1 attempt, RunDeadlinePassed$/m
    ]
  },
  {
    file: "worker.ts",
    prints: [
      /^while its queue was paused the run was pending; history claimed@1, completed@1$/m,
      /^with completed runs deleted, reading a completed run is RunNotFound$/m
    ],
    leaves: (sql) =>
      Effect.gen(function*() {
        assert.lengthOf(
          yield* sql`SELECT 1 FROM leasehold_lean.runs`,
          0,
          "the completed run was deleted with its completion"
        )
        assert.lengthOf(
          yield* sql`SELECT 1 FROM leasehold.runs_now WHERE state = 'completed'`,
          1,
          "the default store keeps it"
        )
      })
  },
  {
    file: "schedules.ts",
    prints: [/^pulse: (\d+) runs for \1 ticks; daily-report's next tick \S+ \(06:00:00 in Paris\)$/m],
    leaves: (sql) =>
      Effect.gen(function*() {
        const keys = yield* sql<{ key: string }>`SELECT idempotency_key AS key FROM leasehold.runs WHERE kind = 'pulse'`
        assert.isAtLeast(keys.length, 2)
        assert.isTrue(keys.every((k) => k.key.startsWith("schedule:pulse:")), "each tick's run carries its tick's key")
      })
  },
  {
    file: "key-limits.ts",
    prints: [/^limit kind refund: 1 per key; at most 1 refund per customer at once, [23] customers at once$/m],
    leaves: (sql) =>
      Effect.gen(function*() {
        const runs =
          yield* sql`SELECT 1 FROM leasehold.runs_now WHERE kind = 'refund' AND state = 'completed' AND key_scope = 'kind'`
        assert.lengthOf(runs, 12, "every refund ran governed by the limit")
      })
  },
  {
    file: "rate-limits.ts",
    prints: [/^rate limit kind sync-tenant: 3 per 1000 ms per key; at most 3 starts of a tenant in any second$/m],
    leaves: (sql) =>
      Effect.gen(function*() {
        const runs =
          yield* sql`SELECT 1 FROM leasehold.runs WHERE kind = 'sync-tenant' AND state = 'completed' AND rate_scope = 'kind'`
        assert.lengthOf(runs, 12, "every sync ran governed by the rate limit")
      })
  },
  {
    file: "workflow.ts",
    prints: [/^refund A-\S+ approved by sam@example\.com: run completed under fence 2, 1 payment$/m]
  },
  {
    file: "observability.ts",
    prints: [
      /^leasehold_runs_enqueued_total\{queue="default",kind="ping"\} 5$/m,
      /^leasehold_runs_settled_total\{queue="default",kind="ping",outcome="completed"\} 5$/m
    ]
  },
  {
    file: "bulk-enqueue.ts",
    prints: [
      /^enqueued 3 runs in one batch: 1, 2, 3$/m,
      /^refused: invalid payload for kind "welcome-email": payload 1: /m,
      /^runs stored: 3$/m
    ],
    leaves: (sql) =>
      Effect.gen(function*() {
        assert.deepStrictEqual(yield* sql`SELECT customers FROM imports`, [{ customers: 3 }])
      })
  },
  {
    file: "pooler.ts",
    prints: [/^run 1 completed through the pooled client, result 42$/m]
  },
  {
    file: "agent.ts",
    prints: [/^run 1 is completed under fence 2: /m, /^refunds issued for order A-\S+: 1$/m]
  },
  {
    file: "approval-workflow.ts",
    prints: [/approval posted, HTTP 202$/m, /4200 cents refunded, approved by sam@example\.com$/m]
  }
]

const run = (file: string, env: NodeJS.ProcessEnv) =>
  new Promise<{ code: number | null; out: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [path.join("examples", file)], {
      cwd: root,
      env,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    child.stdout.on("data", (chunk) => (out += chunk))
    child.stderr.on("data", (chunk) => (out += chunk))
    const timer = setTimeout(() => child.kill("SIGKILL"), 90_000)
    child.on("error", reject)
    child.on("exit", (code) => {
      clearTimeout(timer)
      resolve({ code, out })
    })
  })

/** Runs `f` with a client of the server at `url`, closed after. */
const onServer = (url: string, f: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown>) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(Database.layerFromUrl(url, { maxConnections: 1 }))
    yield* f(Context.get(context, SqlClient.SqlClient))
  })))

describe("examples/, run as the guides say", () => {
  for (const example of examples) {
    it(`node examples/${example.file}`, async () => {
      const name = `example_${example.file.replace(/\W/g, "_")}_${Math.random().toString(36).slice(2, 8)}`
      const url = new URL(databaseUrl())
      url.pathname = `/${name}`
      await onServer(databaseUrl(), (sql) => sql.unsafe(`CREATE DATABASE ${name}`))
      try {
        const { code, out } = await run(example.file, { ...process.env, DATABASE_URL: url.href })
        assert.strictEqual(code, 0, `node examples/${example.file} failed:\n${out}`)
        for (const line of example.prints) assert.match(out, line)
        if (example.leaves !== undefined) {
          await onServer(url.href, example.leaves)
        }
      } finally {
        await onServer(databaseUrl(), (sql) => sql.unsafe(`DROP DATABASE ${name} WITH (FORCE)`))
      }
    })
  }
})
