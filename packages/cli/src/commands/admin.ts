/**
 * `leasehold resume`, `cancel` and `retry`: the operator's transitions. Each is one guarded
 * statement in the store; a run in the wrong state or an unknown id fails with the reason and
 * writes nothing. Cancel and retry advance the fence, so a holder that was working on the run has
 * its writes rejected from then on.
 */
import { Client, Handler, RunStore } from "@leasehold/core"
import { Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { actorFlag, actorOf, connectionFlags, jsonFlag, payloadFlags, payloadOf, UsageError } from "../Flags.js"
import * as Output from "../Output.js"
import * as Tasks from "../Tasks.js"

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
  id: Argument.String("id").pipe(Argument.withDescription("the run's id (or give --token instead)"), Argument.optional),
  token: Flag.String("token").pipe(
    Flag.optional,
    Flag.withDescription("the signal token the run awaits, instead of its id")
  ),
  as: actorFlag,
  tasks: Tasks.tasksFlag,
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    // By id or by token, never a guess between the two: a token may look like another run's id.
    if (Option.isSome(flags.id) === Option.isSome(flags.token)) {
      return yield* new UsageError({ message: "resume takes a run id or --token <token>, not both or neither" })
    }
    const payload = yield* payloadOf(flags, null)
    const actor = yield* actorOf(flags)
    // The payload is checked against the schema the run's handler declares for its signal.
    const handlers = yield* Handler.registry(yield* Tasks.fromFlag(flags.tasks))
    const resumed: Effect.Effect<
      string,
      Effect.Error<ReturnType<typeof Client.resume | typeof Client.resumeByToken>>,
      RunStore
    > = Option.isSome(flags.id)
      ? Client.resume(flags.id.value, payload, { handlers, actor })
      : Client.resumeByToken(Option.getOrThrow(flags.token), payload, { handlers, actor })
    yield* Connection.withStore(
      flags,
      Effect.flatMap(resumed, (id) =>
        report(id, flags.json, (state) =>
          `resumed run ${id} (now ${state}; a worker re-claims it under a higher fence)`)),
      { migrate: false }
    )
  })).pipe(
    Command.withDescription(
      "Resume a suspended run, by id or by --token, with a payload (its signal's outcome, checked against the schema its handler declares)"
    )
  )

export const cancel = Command.make(
  "cancel",
  { ...connectionFlags, id: runId, as: actorFlag, json: jsonFlag },
  (flags) =>
    Connection.withStore(
      flags,
      Effect.andThen(
        Effect.flatMap(actorOf(flags), (actor) => Client.cancel(flags.id, actor)),
        report(
          flags.id,
          flags.json,
          (_, fence) => `cancelled run ${flags.id} (fence now ${fence}: a holder's writes are rejected)`
        )
      ),
      { migrate: false }
    )
).pipe(Command.withDescription("Cancel a run that has not finished"))

export const retry = Command.make(
  "retry",
  { ...connectionFlags, id: runId, as: actorFlag, json: jsonFlag },
  (flags) =>
    Connection.withStore(
      flags,
      Effect.andThen(
        Effect.flatMap(actorOf(flags), (actor) => Client.retry(flags.id, actor)),
        report(
          flags.id,
          flags.json,
          (state, fence) => `run ${flags.id} is ${state} again, with fresh attempts (fence now ${fence})`
        )
      ),
      { migrate: false }
    )
).pipe(Command.withDescription("Run a failed or cancelled run again"))
