/**
 * `leasehold audit`: the operators' audit, newest first: who paused or resumed a queue, changed
 * a schedule or a limit, or deleted runs, from where and when (`RunStore.actions`). Actions on
 * one run (resume, cancel, retry) are in that run's history (`leasehold runs show`).
 */
import { RunStore } from "@leasehold/core"
import { Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, jsonFlag, UsageError } from "../Flags.js"
import * as Output from "../Output.js"

export const audit = Command.make("audit", {
  ...connectionFlags,
  limit: Flag.Int("limit").pipe(
    Flag.filter((n: number) => n >= 1 && n <= 500, () => "a whole number from 1 to 500"),
    Flag.withDefault(50),
    Flag.withDescription("lines per page (1 to 500)")
  ),
  before: Flag.String("before").pipe(Flag.optional, Flag.withDescription("only lines older than this line id")),
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const before = Option.getOrUndefined(flags.before)
    if (before !== undefined && !/^[0-9]{1,18}$/.test(before)) {
      return yield* new UsageError({ message: `--before: ${JSON.stringify(before)} is not a line id (digits)` })
    }
    const actions = yield* Connection.withStore(
      flags,
      RunStore.use((store) => store.actions({ limit: flags.limit, before })),
      { migrate: false }
    )
    const next = actions.length === flags.limit ? actions.at(-1)!.id : null
    if (flags.json) {
      return yield* Output.json({ actions: actions.map((a) => ({ ...a, at: Output.isoTime(a.at) })), next })
    }
    if (actions.length === 0) return yield* Output.line("no operator actions recorded")
    yield* Output.lines(Output.table(
      ["ID", "AT", "BY", "VIA", "ACTION", "TARGET", "DETAIL"],
      actions.map((a) => [
        a.id,
        Output.time(a.at),
        a.by,
        a.via,
        a.action,
        Output.brief(a.target, 60),
        a.detail === null ? "" : Output.brief(a.detail, 80)
      ])
    ))
    if (next !== null) yield* Output.line(`(more with --before ${next})`)
  })).pipe(Command.withDescription("The operators' audit: queue, schedule and limit changes and deletes, newest first"))
