/**
 * Today's `runs` table through the store itself (`PgRunStore`, its own statements and migrations):
 * the baseline, with completed runs kept (the default) or deleted (`completedRuns: "delete"`).
 */
import { KeyLimits, RunStore } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Duration, Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { type Held, KEYED_KIND, KIND, type Layout, type LayoutSession, TTL_MS } from "./Layout.js"

const OWNER = "layout-loop"
const ttl = Duration.millis(TTL_MS)
const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> => Effect.runPromise(effect)

const build = async (url: string, schema: string, completedRuns: PgRunStore.CompletedRuns, migrate: boolean) => {
  const scope = Effect.runSync(Scope.make())
  // One connection in each of the store's pools: the loop sends one statement at a time.
  const layer = PgRunStore.layer({ schema, migrate, completedRuns, runtimeConnections: 1 }).pipe(
    Layer.provideMerge(Database.layerFromUrl(url, { maxConnections: 1, applicationName: "layout" }))
  )
  const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  return {
    store: Context.get(context, RunStore),
    sql: Context.get(context, SqlClient.SqlClient) as SqlClient.SqlClient,
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

const session = async (
  url: string,
  schema: string,
  completedRuns: PgRunStore.CompletedRuns
): Promise<LayoutSession> => {
  const { store, sql, close } = await build(url, schema, completedRuns, false)
  const claim = (limit: number, keyed = false, dueOnly = true) =>
    run(store.claim({ owner: OWNER, queues: ["default"], kinds: [keyed ? KEYED_KIND : KIND], limit, ttl, dueOnly }))
  const toHeld = (r: { id: string; fence: number; concurrencyKey?: string | null | undefined }): Held => ({
    id: r.id,
    fence: r.fence,
    key: r.concurrencyKey ?? undefined
  })
  const enqueueRange = async (from: number, count: number, key: (i: number) => string | undefined, kind: string) => {
    for (let at = from; at < from + count; at += 5_000) {
      const n = Math.min(5_000, from + count - at)
      await run(
        store.enqueue(
          Array.from({ length: n }, (_, j) => ({ kind, payload: { i: at + j }, concurrencyKey: key(at + j) }))
        )
      )
    }
  }
  return {
    enqueue: (from, count) => enqueueRange(from, count, () => undefined, KIND),
    enqueueKeyed: async (from, count, keys) => {
      await run(store.setKeyLimits([KeyLimits.perKind(KEYED_KIND, 1)]))
      await enqueueRange(from, count, (i) => `k${i % keys}`, KEYED_KIND)
    },
    claim: async (limit, keyed) => (await claim(limit, keyed)).map(toHeld),
    complete: async (held) => {
      const outcomes = await run(
        store.completeBatch(held.map((h) => ({ runId: h.id, fence: h.fence, result: null, keyed: false })))
      )
      const rejected = outcomes.filter((o) => o._tag !== "Finalized")
      if (rejected.length > 0) throw new Error(`today: ${rejected.length} completions rejected`)
    },
    completeHandingOff: async (held) => {
      const outcomes = await run(store.completeBatch(
        held.map((h) => ({ runId: h.id, fence: h.fence, result: null, keyed: true })),
        { owner: OWNER, ttl, queues: ["default"], kinds: [KEYED_KIND] }
      ))
      const next: Array<Held> = []
      for (const o of outcomes) {
        if (o._tag !== "Finalized") throw new Error(`today: a keyed completion was rejected`)
        if (o.next !== undefined) next.push(toHeld(o.next))
      }
      return next
    },
    renew: async (held) =>
      (await run(store.renew(OWNER, held.map((h) => ({ runId: h.id, fence: h.fence })), ttl))).length,
    expire: async (held) => {
      await run(
        sql.unsafe(
          `UPDATE "${schema}".runs SET lease_expires_at = now() - interval '1 second' WHERE id = ANY($1::bigint[])`,
          [
            held.map((h) => h.id)
          ]
        )
      )
    },
    // The sweep: a full claim (expired leases first), as a worker sends at least once per poll interval.
    reclaim: async (limit) => (await claim(limit, false, false)).map(toHeld),
    close
  }
}

const todayLayout = (
  id: string,
  schema: string,
  completedRuns: PgRunStore.CompletedRuns,
  description: string
): Layout => ({
  id,
  description,
  schema,
  install: async (url) => {
    const { close } = await build(url, schema, completedRuns, true)
    await close()
  },
  open: (url) => session(url, schema, completedRuns)
})

export const today = todayLayout(
  "runs",
  "lay_runs",
  "keep",
  "(a) today's runs table, completed runs kept (the store's own statements)"
)
export const todayDelete = todayLayout(
  "runs-delete",
  "lay_runs_delete",
  "delete",
  "(b) today's runs table, completed runs deleted (completedRuns: \"delete\")"
)
