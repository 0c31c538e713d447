/**
 * The CLI's operator commands against a real PostgreSQL: who acted (`--as`, else the OS user) in
 * a run's history and in the audit (`leasehold audit`), and `leasehold runs delete` (counted
 * first, deleted only with `--yes`, refused for a running run with exit 2, nothing deleted).
 */
import { assert, describe, it } from "@effect/vitest"
import { RunStore } from "@leasehold/core"
import { Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as os from "node:os"
import { type CliResult, connection, leasehold } from "./support/cli.js"
import { freshSchema, layerStore } from "./support/db.js"

const openStore = (schema: string) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(layerStore(schema, 3))
    return { store: Context.get(context, RunStore), sql: Context.get(context, SqlClient.SqlClient) }
  })

const ok = (result: CliResult) => {
  assert.strictEqual(result.code, 0, `exit code; stderr was: ${result.stderr}`)
  return result
}
const json = (result: CliResult) => JSON.parse(ok(result).stdout)

describe("leasehold: who acted", () => {
  it.live(
    "cancel and retry record --as (else the OS user) from the cli, shown by runs show; queue and limit changes go to the audit",
    () =>
      Effect.gen(function*() {
        const schema = freshSchema("clio")
        const { store } = yield* openStore(schema)
        const [run] = yield* store.enqueue([{ kind: "job", payload: {} }])
        ok(yield* leasehold(["cancel", run!.id, "--as", "alice", ...connection(schema)]))
        ok(yield* leasehold(["retry", run!.id, ...connection(schema)]))
        const shown = json(yield* leasehold(["runs", "show", run!.id, "--json", ...connection(schema)]))
        assert.deepStrictEqual(shown.adminActions.map((a: any) => [a.action, a.by, a.via]), [
          ["cancelled", "alice", "cli"],
          ["retried", os.userInfo().username, "cli"]
        ])
        const text = ok(yield* leasehold(["runs", "show", run!.id, ...connection(schema)])).stdout
        assert.match(text, /cancelled\s+1\s+alice\s+cli/)
        const bad = yield* leasehold(["cancel", run!.id, "--as", "", ...connection(schema)])
        assert.strictEqual(bad.code, 2)
        assert.match(bad.stderr, /--as: the name is empty/)

        ok(yield* leasehold(["queues", "pause", "mail", "--as", "bob", ...connection(schema)]))
        ok(
          yield* leasehold([
            "limits",
            "rate",
            "set",
            "--kind",
            "job",
            "--limit",
            "5",
            "--interval",
            "1 second",
            "--as",
            "bob",
            ...connection(schema)
          ])
        )
        const audit = json(yield* leasehold(["audit", "--json", ...connection(schema)]))
        assert.deepStrictEqual(audit.actions.map((a: any) => [a.action, a.target, a.by, a.via]), [
          ["rate-limit.set", "kind:job", "bob", "cli"],
          ["queue.pause", "mail", "bob", "cli"]
        ])
        const table = ok(yield* leasehold(["audit", ...connection(schema)])).stdout
        assert.match(table, /bob\s+cli\s+queue\.pause\s+mail/)
      }),
    { timeout: 60_000 }
  )
})

describe("leasehold runs delete", () => {
  it.live(
    "prints the count and deletes nothing without --yes (exit 2); refuses a running run (exit 2); --yes deletes, recorded in the audit",
    () =>
      Effect.gen(function*() {
        const schema = freshSchema("clid")
        const { store } = yield* openStore(schema)
        const runs = yield* store.enqueue([
          { kind: "job", payload: { who: "x" }, queue: "erase" },
          { kind: "job", payload: { who: "y" }, queue: "erase" }
        ])
        const dry = yield* leasehold(["runs", "delete", "--queue", "erase", ...connection(schema)])
        assert.strictEqual(dry.code, 2)
        assert.strictEqual(dry.stdout, "the filter selects 2 runs\n")
        assert.match(dry.stderr, /nothing deleted: run it again with --yes/)
        for (const r of runs) assert.strictEqual((yield* store.get(r.id)).state, "pending")
        const none = yield* leasehold(["runs", "delete", ...connection(schema)])
        assert.strictEqual(none.code, 2)
        assert.match(none.stderr, /delete takes a run id, or a filter/)
        // A running run: refused, nothing deleted.
        yield* store.claim({ owner: "w", queues: ["erase"], kinds: ["job"], limit: 1, ttl: Duration.minutes(1) })
        const busy = yield* leasehold(["runs", "delete", "--queue", "erase", "--yes", ...connection(schema)])
        assert.strictEqual(busy.code, 2)
        assert.match(busy.stderr, /1 run of them running: cancel them first .*nothing deleted/)
        assert.lengthOf(yield* store.list({ queue: "erase", limit: 10 }), 2)
        yield* store.cancel(runs[0]!.id)
        const done = json(
          yield* leasehold([
            "runs",
            "delete",
            "--queue",
            "erase",
            "--yes",
            "--as",
            "carol",
            "--json",
            ...connection(schema)
          ])
        )
        assert.deepStrictEqual(done, { count: 2, busy: 0, deleted: 2 })
        assert.lengthOf(yield* store.list({ queue: "erase", limit: 10 }), 0)
        const one = yield* store.enqueue([{ kind: "job", payload: {} }])
        assert.strictEqual(
          ok(yield* leasehold(["runs", "delete", one[0]!.id, "--yes", ...connection(schema)])).stdout,
          "deleted 1 run\n"
        )
        const [line] = yield* store.actions({ limit: 2 })
        assert.deepInclude(line, { action: "runs.delete", via: "cli" })
        const lines = yield* store.actions({ limit: 5 })
        assert.deepInclude(lines[1], { by: "carol", action: "runs.delete" })
        assert.notInclude(JSON.stringify(lines), "\"who\"")
      }),
    { timeout: 60_000 }
  )
})
