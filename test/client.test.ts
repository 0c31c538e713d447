/** Enqueueing from the application: validation before any write, and idempotency keys. */
import { assert, describe, it } from "@effect/vitest"
import { Client, Handler, KeyLimits, RunStore } from "@leasehold/core"
import { Effect, Schema } from "effect"
import { Statement } from "effect/sql"
import { type Stores, twoStores } from "./support/stores.js"

const email = Handler.make({
  kind: "email",
  payload: Schema.Struct({ to: Schema.String, subject: Schema.String }),
  handle: () => Effect.void
})
const registry = Effect.runSync(Handler.registry([email]))

const count = (stores: Stores) =>
  Effect.map(
    stores.sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM "${stores.schema}".runs`),
    (rows) => rows[0]!.n
  )

describe("enqueue", () => {
  it.live("an unknown kind or a payload that fails its schema is refused and nothing is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      yield* Effect.provideService(refusals(stores), RunStore, stores.a)
    }))

  const refusals = (stores: Stores) =>
    Effect.gen(function*() {
      const unknown = yield* Effect.flip(Client.enqueueUnknown(registry, "sms", { to: "x" }))
      assert.deepInclude(unknown, { _tag: "UnknownKind", kind: "sms" })
      assert.match(unknown.message, /unknown kind "sms" \(known: email\)/)
      const invalid = yield* Effect.flip(Client.enqueueUnknown(registry, "email", { to: 42 }))
      assert.strictEqual(invalid._tag, "InvalidPayload")
      assert.match(invalid.message, /invalid payload for kind "email"/)
      assert.strictEqual(yield* count(stores), 0)
      const ok = yield* Client.enqueueUnknown(registry, "email", { to: "a@b.c", subject: "hi" })
      assert.isTrue(ok.created)
      assert.strictEqual(yield* count(stores), 1)
    })

  it.live("the same idempotency key twice yields one run", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const first = yield* Client.enqueue(email, { to: "a@b.c", subject: "x" }, { idempotencyKey: "order-7" }).pipe(
        Effect.provideService(RunStore, stores.a)
      )
      const second = yield* Client.enqueue(email, { to: "a@b.c", subject: "x" }, { idempotencyKey: "order-7" }).pipe(
        Effect.provideService(RunStore, stores.b)
      )
      assert.isTrue(first.created)
      assert.isFalse(second.created)
      assert.strictEqual(second.id, first.id)
      const batch = yield* stores.a.enqueue([
        { kind: "email", payload: {}, idempotencyKey: "order-7" },
        { kind: "email", payload: {} },
        { kind: "email", payload: {}, idempotencyKey: "order-8" }
      ])
      assert.deepStrictEqual(batch.map((b) => b.created), [false, true, true])
      assert.strictEqual(batch[0]!.id, first.id)
      assert.strictEqual(yield* count(stores), 3)
    }))
})

describe("enqueueMany", () => {
  it.live("the batch is one store call inside the caller's transaction: it rolls back with it, or commits with it", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      let calls = 0
      const counted: RunStore["Service"] = {
        ...stores.a,
        enqueue: (requests) => Effect.suspend(() => (calls++, stores.a.enqueue(requests)))
      }
      const batch = Array.from({ length: 50 }, (_, i) => ({ to: `u${i}@b.c`, subject: "hi" }))
      const rolledBack = yield* Effect.flip(
        stores.sql.withTransaction(
          Effect.gen(function*() {
            yield* Client.enqueueMany(email, batch)
            assert.strictEqual(yield* count(stores), 50, "visible inside the caller's transaction")
            return yield* Effect.fail("the caller's own failure")
          })
        ).pipe(Effect.provideService(RunStore, counted))
      )
      assert.strictEqual(rolledBack, "the caller's own failure")
      assert.strictEqual(yield* count(stores), 0, "rolled back with the caller's transaction")
      const enqueued = yield* stores.sql.withTransaction(Client.enqueueMany(email, batch)).pipe(
        Effect.provideService(RunStore, counted)
      )
      assert.strictEqual(enqueued.length, 50)
      assert.strictEqual(yield* count(stores), 50)
      assert.strictEqual(calls, 2, "one store call per batch")
    }))

  it.live("a batch of 1,000 runs is one statement on PostgreSQL; a batch under a key limit adds its keys' admission", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const sent: Array<string> = []
      const counting: Statement.Transformer = (self) =>
        Effect.sync(() => (sent.push(self.compile()[0].trim().split(/\s+/).slice(0, 3).join(" ")), self))
      const enqueueCounted = <A, E>(effect: Effect.Effect<A, E, RunStore>) =>
        effect.pipe(
          Effect.provideService(RunStore, stores.a),
          Effect.provideService(Statement.CurrentTransformer, counting)
        )
      const batch = Array.from({ length: 1_000 }, (_, i) => ({ to: `u${i}@b.c`, subject: "hi" }))
      const enqueued = yield* enqueueCounted(Client.enqueueMany(email, batch))
      assert.strictEqual(enqueued.length, 1_000)
      assert.strictEqual(yield* count(stores), 1_000)
      assert.strictEqual(sent.length, 1, `one statement, sent: ${sent.join(" | ")}`)
      // Runs under a key limit: the insert, then the keys' free slots given in the same transaction
      // (with JIT off for the admission: admit.ts › admitOnApplicationPool).
      yield* stores.a.setKeyLimits([KeyLimits.perKind("email", 1)])
      sent.length = 0
      yield* enqueueCounted(Client.enqueueMany(email, batch, { concurrencyKey: "acct" }))
      assert.deepStrictEqual(
        sent,
        ["WITH input AS", "SET LOCAL jit", "WITH groups AS"],
        "the insert, then the admission"
      )
      assert.strictEqual(yield* count(stores), 2_000)
    }))

  it.live("a payload that does not encode fails the whole batch before anything is written", () =>
    Effect.gen(function*() {
      const stores = yield* twoStores
      const error = yield* Effect.flip(
        Client.enqueueMany(email, [{ to: "a@b.c", subject: "x" }, { to: "c@d.e" } as never]).pipe(
          Effect.provideService(RunStore, stores.a)
        )
      )
      assert.strictEqual(error._tag, "InvalidPayload")
      assert.match(error.message, /invalid payload for kind "email": payload 1: /)
      assert.strictEqual(yield* count(stores), 0)
    }))
})
