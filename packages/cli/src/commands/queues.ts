/**
 * `leasehold queues`, `queues pause <name>` and `queues resume <name>`: which queues hold runs,
 * which are paused, and the operator's switch. A paused queue is not claimed; its running runs
 * finish; enqueues still land and wait.
 */
import { Client, RunStore } from "@leasehold/core"
import { Effect } from "effect"
import { Argument, Command } from "effect/cli"
import { recorded } from "../Audit.js"
import * as Connection from "../Connection.js"
import { actorFlag, actorOf, connectionFlags, jsonFlag } from "../Flags.js"
import * as Output from "../Output.js"

const queueName = Argument.String("queue").pipe(Argument.withDescription("the queue's name"))

const list = Command.make("list", { ...connectionFlags, json: jsonFlag }, (flags) =>
  Effect.gen(function*() {
    const [stats, paused] = yield* Connection.withStore(
      flags,
      RunStore.use((store) => Effect.all([store.stats, store.pausedQueues])),
      { migrate: false }
    )
    const pausedSince = new Map(paused.map((p) => [p.queue, p.since]))
    const names = [...new Set([...stats.byStateAndQueue.map((r) => r.queue), ...pausedSince.keys()])].sort()
    const count = (queue: string, state: string) =>
      stats.byStateAndQueue.filter((r) => r.queue === queue && r.state === state).reduce((n, r) => n + r.count, 0)
    const due = (queue: string) => stats.dueByQueue.find((d) => d.queue === queue)?.due ?? 0
    const rows = names.map((queue) => ({
      queue,
      paused: pausedSince.has(queue),
      pausedSince: Output.isoTime(pausedSince.get(queue)),
      pending: count(queue, "pending"),
      due: due(queue),
      running: count(queue, "running"),
      suspended: count(queue, "suspended")
    }))
    if (flags.json) return yield* Output.json(rows)
    yield* Output.lines(Output.table(
      ["QUEUE", "STATUS", "PENDING", "DUE", "RUNNING", "SUSPENDED"],
      rows.map((r) => [
        r.queue,
        r.paused ? `paused since ${Output.time(pausedSince.get(r.queue))}` : "active",
        String(r.pending),
        String(r.due),
        String(r.running),
        String(r.suspended)
      ])
    ))
  })).pipe(Command.withDescription("Queues with runs or paused: status and counts"))

const pause = Command.make(
  "pause",
  { ...connectionFlags, queue: queueName, as: actorFlag, json: jsonFlag },
  (flags) =>
    Effect.gen(function*() {
      const actor = yield* actorOf(flags)
      const changed = yield* Connection.withStore(
        flags,
        recorded(actor, "queue.pause", flags.queue, Client.pauseQueue(flags.queue), (changed) => ({ changed })),
        { migrate: false }
      )
      if (flags.json) return yield* Output.json({ queue: flags.queue, paused: true, changed })
      yield* Output.line(
        changed
          ? `paused queue "${flags.queue}": nothing in it is claimed until it is resumed; running runs finish`
          : `queue "${flags.queue}" was paused already`
      )
    })
).pipe(Command.withDescription("Pause a queue: no claims from it; running runs finish"))

const resume = Command.make(
  "resume",
  { ...connectionFlags, queue: queueName, as: actorFlag, json: jsonFlag },
  (flags) =>
    Effect.gen(function*() {
      const actor = yield* actorOf(flags)
      const changed = yield* Connection.withStore(
        flags,
        recorded(actor, "queue.resume", flags.queue, Client.resumeQueue(flags.queue), (changed) => ({ changed })),
        { migrate: false }
      )
      if (flags.json) return yield* Output.json({ queue: flags.queue, paused: false, changed })
      yield* Output.line(changed ? `resumed queue "${flags.queue}"` : `queue "${flags.queue}" was not paused`)
    })
).pipe(Command.withDescription("Resume a paused queue; idle workers are woken"))

export const queues = Command.make("queues").pipe(
  Command.withDescription("List queues, pause and resume them"),
  Command.withSubcommands([list, pause, resume])
)
