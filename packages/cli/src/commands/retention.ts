/**
 * `leasehold retention`: what the history keeps (its ranges, runs and bytes, the oldest range kept)
 * and the maintenance that reclaims it (`Retention`), which workers run every 5 minutes on their
 * own; `run` drives one pass now, `--dry-run` says what it would do.
 */
import { Retention, RunStore } from "@leasehold/core"
import { Duration, Effect } from "effect"
import { Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, durationFlag, jsonFlag } from "../Flags.js"
import * as Output from "../Output.js"

const statusJson = (status: Retention.Status) => ({
  runs: status.runs,
  bytes: status.bytes,
  oldestKeptAt: status.oldestKeptAt?.toISOString() ?? null,
  ranges: status.ranges.map((r) => ({
    table: r.table,
    from: r.from,
    to: r.to,
    createdAt: r.createdAt.toISOString(),
    quietSince: r.quietSince?.toISOString() ?? null
  }))
})

const show = Command.make("show", { ...connectionFlags, json: jsonFlag }, (flags) =>
  Effect.gen(function*() {
    const status = yield* Connection.withStore(flags, RunStore.use((s) => s.historyStatus), { migrate: false })
    if (flags.json) return yield* Output.json(statusJson(status))
    yield* Output.lines(Output.fields([
      ["runs kept (estimate)", String(status.runs)],
      ["bytes", String(status.bytes)],
      ["oldest range kept", status.oldestKeptAt === null ? "none" : Output.time(status.oldestKeptAt)]
    ]))
    if (status.ranges.length > 0) {
      yield* Output.line()
      yield* Output.lines(Output.table(
        ["TABLE", "FROM", "TO", "CREATED", "QUIET SINCE"],
        status.ranges.map((r) => [
          r.table,
          r.from,
          r.to,
          Output.time(r.createdAt),
          r.quietSince === null ? "-" : Output.time(r.quietSince)
        ])
      ))
    }
  })).pipe(Command.withDescription("What the history keeps: runs, bytes and its ranges"))

const run = Command.make(
  "run",
  {
    ...connectionFlags,
    json: jsonFlag,
    keep: durationFlag("keep").pipe(
      Flag.withDefault(Retention.defaultWindow.keep),
      Flag.withDescription("keep completed history this long after it ended (default 7 days)")
    ),
    keepFailed: durationFlag("keep-failed").pipe(
      Flag.withDefault(Retention.defaultWindow.keepFailed),
      Flag.withDescription("keep a range holding a failed or cancelled run this long (default 7 days)")
    ),
    dryRun: Flag.Boolean("dry-run").pipe(Flag.withDescription("say what would be done, do nothing"))
  },
  (flags) =>
    Effect.gen(function*() {
      const actions = yield* Connection.withStore(
        flags,
        RunStore.use((s) =>
          s.maintainHistory({ keep: flags.keep, keepFailed: flags.keepFailed, dryRun: flags.dryRun })
        ),
        { migrate: false }
      )
      if (flags.json) return yield* Output.json({ dryRun: flags.dryRun, actions })
      if (actions.length === 0) return yield* Output.line("nothing to do")
      yield* Output.lines(Output.table(
        ["ACTION", "TABLE", "FROM", "TO"],
        actions.map((a) => [flags.dryRun ? `would ${a.action}` : a.action, a.table, a.from, a.to])
      ))
      yield* Output.line(
        `window: ${Duration.format(flags.keep)}, failed and cancelled: ${Duration.format(flags.keepFailed)}`
      )
    })
).pipe(
  Command.withDescription(
    "Run the history's maintenance now: create ranges ahead, reclaim what ended before the window"
  )
)

export const retention = Command.make("retention").pipe(
  Command.withDescription("Show and run the history's retention"),
  Command.withSubcommands([show, run])
)
