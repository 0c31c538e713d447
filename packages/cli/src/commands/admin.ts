/**
 * `leasehold resume`, `cancel` and `retry`: the operator's transitions. Each is one guarded
 * statement in the store; a run in the wrong state or an unknown id fails with the reason and
 * writes nothing. Cancel and retry advance the fence, so a holder that was working on the run has
 * its writes rejected from then on.
 */
import { Client, RunStore } from "@leasehold/core"
import { Effect } from "effect"
import { Argument, Command } from "effect/cli"
import * as Connection from "../Connection.js"
import { connectionFlags, jsonFlag, payloadFlags, payloadOf } from "../Flags.js"
import * as Output from "../Output.js"

const runId = Argument.String("id").pipe(Argument.withDescription("the run's id"))

/** Prints the run's state and fence after a transition. */
const report = (id: string, json: boolean, text: (state: string, fence: number) => string) =>
  Effect.flatMap(RunStore.use((store) => store.get(id)), (run) =>
    json
      ? Output.json({ id: run.id, state: run.state, fence: run.fence })
      : Output.line(text(run.state, run.fence)))

export const resume = Command.make("resume", {
  ...connectionFlags,
  ...payloadFlags,
  target: Argument.String("id-or-token").pipe(Argument.withDescription("the run's id, or the token it awaits")),
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const payload = yield* payloadOf(flags, null)
    yield* Connection.withStore(
      flags,
      Effect.flatMap(Client.resume(flags.target, payload), (id) =>
        report(id, flags.json, (state) => `resumed run ${id} (now ${state}; a worker re-claims it under a higher fence)`)),
      { migrate: false }
    )
  })).pipe(Command.withDescription("Resume a suspended run with a payload (its signal's outcome)"))

export const cancel = Command.make("cancel", { ...connectionFlags, id: runId, json: jsonFlag }, (flags) =>
  Connection.withStore(
    flags,
    Effect.andThen(
      Client.cancel(flags.id),
      report(flags.id, flags.json, (_, fence) => `cancelled run ${flags.id} (fence now ${fence}: a holder's writes are rejected)`)
    ),
    { migrate: false }
  )).pipe(Command.withDescription("Cancel a run that has not finished"))

export const retry = Command.make("retry", { ...connectionFlags, id: runId, json: jsonFlag }, (flags) =>
  Connection.withStore(
    flags,
    Effect.andThen(
      Client.retry(flags.id),
      report(flags.id, flags.json, (state, fence) => `run ${flags.id} is ${state} again, with fresh attempts (fence now ${fence})`)
    ),
    { migrate: false }
  )).pipe(Command.withDescription("Run a failed or cancelled run again"))
