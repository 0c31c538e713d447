/**
 * Operator tools and a workflow's run: a suspended workflow waits on its journal (a deferred, a
 * durable clock), not on its run's `wake/<fence>` signal. The admin API refuses to resume it as an
 * approval (409, nothing written), and `leasehold runs show` names what it waits on.
 */
import { assert, describe, it } from "@effect/vitest"
import { type InvalidConfig, RunStore } from "@leasehold/core"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Duration, Effect, Layer, Schema } from "effect"
import { DurableDeferred, Workflow } from "effect/workflow"
import { connection, leasehold } from "./support/cli.js"
import { postJson, request, snapshot, startServer } from "./support/http.js"
import { type Stores, twoStores } from "./support/stores.js"
import { leaseholdEngine } from "./support/workflowEngine.js"

// A workflow that waits for a label, then ships (or fails when out of stock).
const LabelPrinted = DurableDeferred.make("label printed", { success: Schema.String })
const Dispatch = Workflow.make("Dispatch", {
  payload: { order: Schema.String },
  success: Schema.Struct({ parcel: Schema.String }),
  error: Schema.String,
  idempotencyKey: ({ order }) => order
})
const DispatchLayer = Dispatch.toLayer(({ order }) =>
  order === "sold-out"
    ? Effect.fail("no stock")
    : Effect.map(DurableDeferred.await(LabelPrinted), (label) => ({ parcel: `${order}:${label}` }))
)

// `LeaseholdWorkflows.worker` is typed with what it needs: the registered workflows, the store,
// and what the extra handlers need (nothing here).
const typedWorker: Effect.Effect<never, InvalidConfig, LeaseholdWorkflows.WorkflowHandlers | RunStore> =
  LeaseholdWorkflows.worker({})
void typedWorker

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

  it.live("a workflow run reads as its workflow: runs show and the admin API give its outcome, and name what each suspension waited for", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const engine = yield* Layer.build(
        DispatchLayer.pipe(Layer.provideMerge(leaseholdEngine({ schema: stores.schema })))
      )
      const shipped = yield* Effect.gen(function*() {
        const executionId = yield* Dispatch.execute({ order: "o-7" }, { discard: true })
        while (true) {
          const polled = yield* Dispatch.poll(executionId)
          if (polled._tag === "Some" && polled.value._tag === "Suspended") break
          yield* Effect.sleep("20 millis")
        }
        const token = DurableDeferred.tokenFromExecutionId(LabelPrinted, { workflow: Dispatch, executionId })
        yield* DurableDeferred.succeed(LabelPrinted, { token, value: "L-1" })
        assert.deepStrictEqual(yield* Dispatch.execute({ order: "o-7" }), { parcel: "o-7:L-1" })
        yield* Effect.flip(Dispatch.execute({ order: "sold-out" }))
      }).pipe(Effect.provide(engine))
      void shipped
      const [failed, done] = yield* stores.a.list({ limit: 2, state: undefined })
      assert(done !== undefined && failed !== undefined)
      const show = (id: string, json = false) =>
        leasehold(["runs", "show", id, ...(json ? ["--json"] : []), ...connection(stores.schema)])
      const shown = yield* show(done.id)
      assert.strictEqual(shown.code, 0, shown.stderr)
      assert.match(shown.stdout, /^result\s+succeeded with \{"parcel":"o-7:L-1"\}$/m)
      assert.match(shown.stdout, /^\s+1\s+deferred "label printed"\s/m, "the suspension is named by its deferred")
      assert.notMatch(shown.stdout, /wake\//, "no wake signal shown")
      assert.match(shown.stdout, /^\s+1\s.*suspended: waiting on deferred "label printed"$/m)
      assert.match((yield* show(failed.id)).stdout, /^result\s+failed with no stock$/m)
      const json = JSON.parse((yield* show(done.id, true)).stdout)
      assert.deepStrictEqual(json.workflow.outcome, { _tag: "Succeeded", value: { parcel: "o-7:L-1" } })
      assert.strictEqual(json.suspensions[0].waitedFor, "deferred \"label printed\"")
      const origin = yield* serve(stores)
      const page = yield* request(`${origin}/api/runs/${done.id}`, { headers: bearer })
      assert.deepStrictEqual(page.body.run.workflow.outcome, { _tag: "Succeeded", value: { parcel: "o-7:L-1" } })
      assert.strictEqual(page.body.history.suspensions[0].waitedFor, "deferred \"label printed\"")
      const failedPage = yield* request(`${origin}/api/runs/${failed.id}`, { headers: bearer })
      assert.deepStrictEqual(failedPage.body.run.workflow.outcome, { _tag: "Failed", error: "no stock" })
    }))
})
