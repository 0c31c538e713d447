/**
 * Operator tools and a workflow's run: a suspended workflow waits on its journal (a deferred, a
 * durable clock), not on its run's `wake/<fence>` signal. The admin API refuses to resume it as an
 * approval (409, nothing written), and `leasehold runs show` names what it waits on.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { connection, leasehold } from "./support/cli.js"
import { postJson, snapshot, startServer } from "./support/http.js"
import { type Stores, twoStores } from "./support/stores.js"

const token = "admin-token-for-tests-0123456789"
const bearer = { authorization: `Bearer ${token}` }

const serve = (stores: Stores) => Effect.map(startServer(stores, { token }), (server) => server.origin)

/** A run suspended as the workflow engine suspends an execution's run (kind, key and signal as it names them). */
const suspendedAs = (stores: Stores, kind: string, key: string, signal: (fence: number) => string) =>
  Effect.gen(function*() {
    const [enqueued] = yield* stores.a.enqueue([{ kind, payload: {}, idempotencyKey: key }])
    const [held] = yield* stores.a.claim({
      owner: "w",
      queues: ["default"],
      kinds: [kind],
      limit: 1,
      ttl: Duration.minutes(1)
    })
    assert.strictEqual(held?.id, enqueued!.id)
    yield* stores.a.suspend({
      runId: held!.id,
      fence: held!.fence,
      signal: signal(held!.fence),
      token: `tok-${key}`,
      timeout: undefined
    })
    return held!.id
  })

describe("a workflow's run in the operator tools", () => {
  it.live("resuming a suspended workflow's run is refused (409, nothing written); a run that awaits a signal is still resumed", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const workflowRun = yield* suspendedAs(stores, "workflow/Ship", "workflow/Ship/e-1", (fence) => `wake/${fence}`)
      const approval = yield* suspendedAs(stores, "approve-refund", "refund-1", () => "approval")
      const origin = yield* serve(stores)
      const before = yield* snapshot(stores)
      const refused = yield* postJson(
        `${origin}/api/runs/${workflowRun}/resume`,
        { payload: { approved: true } },
        bearer
      )
      assert.strictEqual(refused.status, 409)
      assert.strictEqual(refused.body.error, "workflow-run")
      assert.match(refused.body.message, /waiting on its journal/)
      assert.strictEqual(yield* snapshot(stores), before, "nothing written")
      const resumed = yield* postJson(`${origin}/api/runs/${approval}/resume`, { payload: { approved: true } }, bearer)
      assert.strictEqual(resumed.status, 200)
      assert.strictEqual((yield* stores.a.get(approval)).state, "pending")
    }))

  it.live("runs show names the deferreds and durable clocks a suspended workflow waits on (not the ones done or passed), and its execution", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const id = yield* suspendedAs(stores, "workflow/Ship", "workflow/Ship/e-2", (fence) => `wake/${fence}`)
      const s = `"${stores.schema}"`
      // What the journal holds as the engine leaves it: clocks scheduled, deferreds awaited (the
      // replay read them as not done), one of them done since, one clock passed.
      yield* stores.sql.unsafe(`INSERT INTO ${s}.workflow_clocks (execution, deferred, wake_at) VALUES
        ('workflow/Ship/e-2', 'cool-off', now() + interval '1 hour'), ('workflow/Ship/e-2', 'passed', now() - interval '1 minute')`)
      yield* stores.sql.unsafe(`INSERT INTO ${s}.workflow_awaits (execution, name, first_awaited_at) VALUES
        ('workflow/Ship/e-2', 'cool-off', now() - interval '3 seconds'), ('workflow/Ship/e-2', 'passed', now() - interval '2 seconds'),
        ('workflow/Ship/e-2', 'person/sign-off', now() - interval '1 second'), ('workflow/Ship/e-2', 'label-printed', now())`)
      yield* stores.sql.unsafe(
        `INSERT INTO ${s}.workflow_deferreds (execution, name, exit) VALUES ('workflow/Ship/e-2', 'label-printed', '{}')`
      )
      const shown = yield* leasehold(["runs", "show", id, ...connection(stores.schema)])
      assert.strictEqual(shown.code, 0, shown.stderr)
      assert.match(
        shown.stdout,
        /^state\s+suspended, a workflow waiting on clock "cool-off" until \S+Z, deferred "person\/sign-off" \(for a person: approve it\) \(execution workflow\/Ship\/e-2\)$/m
      )
      assert.notMatch(shown.stdout, /^state.*wake\//m, "the state line names what it waits on, not its wake signal")
      const json = JSON.parse((yield* leasehold(["runs", "show", id, "--json", ...connection(stores.schema)])).stdout)
      assert.strictEqual(json.workflow.execution, "workflow/Ship/e-2")
      assert.deepStrictEqual(
        json.workflow.awaiting.map((a: { name: string; forPerson: boolean }) => [a.name, a.forPerson]),
        [
          ["cool-off", false],
          ["person/sign-off", true]
        ]
      )
    }))
})
