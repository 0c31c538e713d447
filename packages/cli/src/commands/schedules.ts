/**
 * `leasehold schedules`: list schedules with their next ticks, register one (`set`), pause and
 * resume. A schedule fires one run per tick whatever the number of workers ticking it; every
 * `leasehold worker` ticks every schedule of its store.
 */
import { RunStore, Schedules } from "@leasehold/core"
import { Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { recorded } from "../Audit.js"
import * as Connection from "../Connection.js"
import {
  actorFlag,
  actorOf,
  connectionFlags,
  durationFlag,
  jsonFlag,
  payloadFlags,
  payloadOf,
  UsageError
} from "../Flags.js"
import * as Output from "../Output.js"

const scheduleName = Argument.String("name").pipe(Argument.withDescription("the schedule's name"))

const list = Command.make("list", {
  ...connectionFlags,
  json: jsonFlag,
  next: Flag.Int("next").pipe(Flag.withDefault(3), Flag.withDescription("how many upcoming ticks to show"))
}, (flags) =>
  Effect.gen(function*() {
    const schedules = yield* Connection.withStore(flags, RunStore.use((store) => store.schedules), { migrate: false })
    const rows = schedules.map((s) => ({
      name: s.name,
      cron: s.cron,
      timeZone: s.timeZone,
      kind: s.kind,
      queue: s.queue,
      missed: s.missed,
      paused: s.paused,
      lastTick: Output.isoTime(s.lastTick),
      // The stored next tick, then the ones after it (the store's clock decides when each is due).
      nextTicks: [s.nextTick, ...Schedules.upcoming(s, s.nextTick, Math.max(0, flags.next - 1))].map((d) =>
        d.toISOString()
      )
    }))
    if (flags.json) return yield* Output.json(rows)
    if (rows.length === 0) return yield* Output.line("no schedules")
    yield* Output.lines(Output.table(
      ["NAME", "CRON", "TIME ZONE", "KIND", "QUEUE", "STATUS", "LAST TICK", "NEXT TICKS"],
      rows.map((r) => [
        r.name,
        r.cron,
        r.timeZone,
        r.kind,
        r.queue,
        r.paused ? "paused" : "active",
        Output.time(r.lastTick),
        r.paused ? "-" : r.nextTicks.map((t) => Output.time(t)).join(", ")
      ])
    ))
  })).pipe(Command.withDescription("Schedules with their next ticks"))

const set = Command.make("set", {
  ...connectionFlags,
  ...payloadFlags,
  name: scheduleName,
  cron: Flag.String("cron").pipe(Flag.withDescription("cron expression: 5 fields, or 6 with seconds first")),
  kind: Flag.String("kind").pipe(Flag.withDescription("the kind of run each tick enqueues")),
  timeZone: Flag.String("time-zone").pipe(
    Flag.withDefault("UTC"),
    Flag.withDescription("IANA time zone of the cron expression")
  ),
  queue: Flag.String("queue").pipe(Flag.withDefault("default")),
  missed: Flag.Literals("missed", ["skip", "once", "all"]).pipe(
    Flag.withDefault("skip"),
    Flag.withDescription("what missed ticks do")
  ),
  maxBackfill: Flag.Int("max-backfill").pipe(
    Flag.optional,
    Flag.withDescription("with --missed all: at most this many missed ticks fire")
  ),
  backfillWindow: durationFlag("backfill-window").pipe(
    Flag.optional,
    Flag.withDescription("missed ticks older than this never fire")
  ),
  as: actorFlag,
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const payload = yield* payloadOf(flags, {})
    if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
      return yield* new UsageError({ message: "a schedule's payload must be a JSON object" })
    }
    const actor = yield* actorOf(flags)
    const [registered] = yield* Connection.withStore(
      flags,
      recorded(
        actor,
        "schedule.register",
        flags.name,
        RunStore.use((store) =>
          store.registerSchedules([{
            name: flags.name,
            cron: flags.cron,
            timeZone: flags.timeZone,
            kind: flags.kind,
            queue: flags.queue,
            payload: payload as Record<string, unknown>,
            missed: flags.missed,
            maxBackfill: Option.getOrUndefined(flags.maxBackfill),
            backfillWindow: Option.getOrUndefined(flags.backfillWindow)
          }])
        ),
        ([r]) => ({ outcome: r!.outcome, cron: flags.cron, kind: flags.kind })
      )
    )
    if (flags.json) return yield* Output.json(registered)
    yield* Output.line(`schedule "${flags.name}" ${registered!.outcome}`)
  })).pipe(Command.withDescription("Create or update a schedule (the same definition again changes nothing)"))

const pause = Command.make(
  "pause",
  { ...connectionFlags, name: scheduleName, as: actorFlag, json: jsonFlag },
  (flags) =>
    Effect.gen(function*() {
      const actor = yield* actorOf(flags)
      const changed = yield* Connection.withStore(
        flags,
        recorded(actor, "schedule.pause", flags.name, RunStore.use((store) => store.pauseSchedule(flags.name)), (
          changed
        ) => ({ changed })),
        { migrate: false }
      )
      if (flags.json) return yield* Output.json({ name: flags.name, paused: true, changed })
      yield* Output.line(
        changed
          ? `paused schedule "${flags.name}": its ticks do not fire`
          : `schedule "${flags.name}" was paused already`
      )
    })
).pipe(Command.withDescription("Pause a schedule"))

const resume = Command.make(
  "resume",
  { ...connectionFlags, name: scheduleName, as: actorFlag, json: jsonFlag },
  (flags) =>
    Effect.gen(function*() {
      const actor = yield* actorOf(flags)
      const changed = yield* Connection.withStore(
        flags,
        recorded(actor, "schedule.resume", flags.name, RunStore.use((store) => store.resumeSchedule(flags.name)), (
          changed
        ) => ({ changed })),
        { migrate: false }
      )
      if (flags.json) return yield* Output.json({ name: flags.name, paused: false, changed })
      yield* Output.line(
        changed
          ? `resumed schedule "${flags.name}": next tick is the first after now`
          : `schedule "${flags.name}" was not paused`
      )
    })
).pipe(Command.withDescription("Resume a paused schedule"))

export const schedules = Command.make("schedules").pipe(
  Command.withDescription("List schedules with their next ticks; set, pause and resume them"),
  Command.withSubcommands([list, set, pause, resume])
)
