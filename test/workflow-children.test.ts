/**
 * Children start with their parent (issue 42 item 1): a parent executing a child waits, in its
 * slot, for the child's first result when its worker has a slot free for the child, as Effect's
 * cluster engine waits for it; so a parent of quick children does not suspend and replay once per
 * child. Without a free slot it suspends as before, and the child's completion wakes it. On the
 * memory store under `TestClock` (no clock moves), and on PostgreSQL.
 */
import { assert, describe, it } from "@effect/vitest"
import { MemoryRunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { LeaseholdWorkflows } from "@leasehold/workflow"
import { Effect, Layer, Schema } from "effect"
import { Workflow } from "effect/workflow"
import { databaseUrl, freshSchema } from "./support/db.js"

const children = 10

/** Replays of each parent execution, by its id. */
const replays = new Map<string, number>()
const replayed = (id: string) => Effect.sync(() => replays.set(id, (replays.get(id) ?? 0) + 1))

const Child = Workflow.make("children/Child", {
  payload: { parent: Schema.String, index: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ index, parent }) => `${parent}/${index}`
})
const ChildLayer = Child.toLayer(({ index }) => Effect.succeed(index * 2))

const Parent = Workflow.make("children/Parent", {
  payload: { id: Schema.String, parallel: Schema.Boolean },
  success: Schema.Array(Schema.Number),
  idempotencyKey: ({ id }) => id
})
const ParentLayer = Parent.toLayer(({ id, parallel }) =>
  Effect.andThen(
    replayed(id),
    Effect.forEach(
      Array.from({ length: children }, (_, index) => index),
      (index) => Child.execute({ parent: id, index }),
      { concurrency: parallel ? "unbounded" : 1 }
    )
  )
)

// Slots for the parent and every child, and as many again: a child claimed before its parent looks
// again still counts among the slots held for unclaimed children, once.
const roomy = 2 * children + 1
const expected = Array.from({ length: children }, (_, index) => index * 2)
const workflows = Layer.mergeAll(ParentLayer, ChildLayer)
const serve = (concurrency: number) =>
  ({ concurrency, ttl: "2 seconds", pollInterval: "50 millis", shutdownGrace: "0 millis" }) as const

const onMemory = (concurrency: number) =>
  workflows.pipe(
    Layer.provideMerge(LeaseholdWorkflows.layerServe(serve(concurrency))),
    Layer.provideMerge(MemoryRunStore.layer)
  )
const onPostgres = (concurrency: number) =>
  workflows.pipe(
    Layer.provideMerge(LeaseholdWorkflows.layerServe(serve(concurrency))),
    Layer.provideMerge(PgRunStore.layer({ schema: freshSchema("wfc") })),
    Layer.provideMerge(Database.layerFromUrl(databaseUrl(), { maxConnections: 6 }))
  )

const parentOf = (id: string, parallel: boolean) =>
  Effect.gen(function*() {
    replays.delete(id)
    assert.deepStrictEqual(yield* Parent.execute({ id, parallel }), expected)
    return replays.get(id)
  })

describe("a child workflow starts with its parent", () => {
  it.effect("memory store, TestClock: a parent of 10 sequential children runs once; each child's first run happens while it waits", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* parentOf("memory-sequential", false), 1)
    }).pipe(Effect.provide(onMemory(4))))

  it.effect("memory store, TestClock: a parent of 10 children in parallel runs once when its worker has a slot for each", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* parentOf("memory-parallel", true), 1)
    }).pipe(Effect.provide(onMemory(roomy))))

  it.effect("memory store, TestClock: with fewer slots than children, the children past the free slots suspend the parent once", () =>
    Effect.gen(function*() {
      // 4 slots: the parent's, and 3 for children; the fourth child finds none free.
      assert.strictEqual(yield* parentOf("memory-parallel-narrow", true), 2)
    }).pipe(Effect.provide(onMemory(4))))

  it.effect("memory store, TestClock: a worker of one slot never waits for a child it has no slot for: the parent suspends per child", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* parentOf("memory-one-slot", false), children + 1)
    }).pipe(Effect.provide(onMemory(1))))

  it.live("PostgreSQL: a parent of 10 sequential children runs once", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* parentOf("pg-sequential", false), 1)
    }).pipe(Effect.provide(onPostgres(4))))

  it.live("PostgreSQL: a parent of 10 children in parallel runs once when its worker has a slot for each", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* parentOf("pg-parallel", true), 1)
    }).pipe(Effect.provide(onPostgres(roomy))))
})
