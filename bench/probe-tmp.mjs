import { Handler, RunStore, Worker, WorkerEvents } from "@leasehold/core"
import { Database, PgRunStore } from "@leasehold/sql"
import { Context, Effect, Exit, Layer, Schema, Scope, Stream, Fiber } from "effect"
import pg from "pg"
const url = process.argv[2]
const admin = new pg.Client({ connectionString: url }); await admin.connect()
await admin.query("DROP SCHEMA IF EXISTS probe CASCADE")
const open = async (max, migrate) => {
  const scope = Effect.runSync(Scope.make())
  const layer = PgRunStore.layer({ schema: "probe", migrate }).pipe(Layer.provideMerge(Database.layerFromUrl(url, { maxConnections: max })))
  const ctx = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  return { store: Context.get(ctx, RunStore), close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}
const e = await open(2, true)
const w = await open(10, false)
const now = () => performance.now()
const marks = []
const mark = (what) => marks.push([what, now()])
const timed = (name, f) => (...args) => Effect.suspend(() => { mark(`${name}>`); return f(...args).pipe(Effect.tap(() => Effect.sync(() => mark(`${name}<`)))) })
const s = w.store
const wrapped = { ...s, claim: timed("claim", s.claim), completeBatch: timed("complete", s.completeBatch),
  notifications: s.notifications.pipe(Stream.tap((n) => Effect.sync(() => mark(`note:${n._tag}`)))) }
const handler = Handler.make({ kind: "noop", payload: Schema.Struct({ i: Schema.Number }), handle: ({ i }) => Effect.sync(() => { mark("start"); started.get(i)?.() }) })
const started = new Map()
const fiber = Effect.runFork(Worker.run({ handlers: [handler], concurrency: 10, ttl: "30 seconds", pollInterval: "1 second" }).pipe(
  Effect.provideService(RunStore, wrapped), Effect.provideService(WorkerEvents.WorkerEvents, { emit: () => Effect.void })))
await new Promise((r) => setTimeout(r, 1500))
const rows = []
for (let i = 0; i < 230; i++) {
  marks.length = 0
  const p = new Promise((r) => started.set(i, r))
  const t0 = now(); mark("enq>")
  await Effect.runPromise(e.store.enqueue([{ kind: "noop", payload: { i } }]))
  mark("enq<")
  await p
  if (i >= 30) rows.push(marks.map(([k, t]) => [k, t - t0]))
  await new Promise((r) => setTimeout(r, 3 + (i % 5)))
}
// median time of each mark's first occurrence
const firsts = new Map()
for (const r of rows) { const seen = new Set(); for (const [k, t] of r) if (!seen.has(k)) { seen.add(k); (firsts.get(k) ?? firsts.set(k, []).get(k)).push(t) } }
const med = (a) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)]
for (const [k, a] of [...firsts].sort((x, y) => med(x[1]) - med(y[1]))) console.log(k.padEnd(22), med(a).toFixed(2), "ms", `(${a.length})`)
await Effect.runPromise(Fiber.interrupt(fiber)); await w.close(); await e.close(); await admin.end()
