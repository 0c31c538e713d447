/**
 * `leasehold runs list` and `leasehold runs show <id>`: what is in the store, newest first, and one
 * run's story (its attempts under their fences, suspensions, rejected stale writes).
 */
import {
  AttemptLogs,
  attemptSeen,
  isForPerson,
  isWorkflowRun,
  KeyLimits,
  RunHistory,
  type RunRecord,
  RunState,
  RunStore
} from "@leasehold/core"
import { WorkflowJournal } from "@leasehold/sql"
import { Duration, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Connection from "../Connection.js"
import { actorFlag, actorOf, connectionFlags, jsonFlag, UsageError } from "../Flags.js"
import * as Output from "../Output.js"
import * as RunJson from "../RunJson.js"

/** A deferred a workflow awaits: a durable clock with its deadline, one meant for a person, or another. */
const describeAwaited = (a: WorkflowJournal.Awaited): string =>
  a.wakeAt !== null
    ? `clock "${a.name}" until ${Output.time(a.wakeAt)}`
    : isForPerson(a.name)
    ? `deferred "${a.name}" (for a person: approve it)`
    : `deferred "${a.name}"`

/** A workflow run's result as its workflow's outcome, briefly; undefined for any other run's. */
const workflowOutcome = (run: RunRecord, width?: number): string | undefined => {
  const outcome = isWorkflowRun(run) ? WorkflowJournal.outcomeOf(run.result) : undefined
  switch (outcome?._tag) {
    case undefined:
      return undefined
    case "Succeeded":
      return `succeeded with ${Output.brief(outcome.value, width)}`
    case "Failed":
      return `failed with ${Output.brief(outcome.error, width)}`
    case "Died":
      return `died of ${Output.brief(outcome.defect, width)}`
    case "Interrupted":
      return "interrupted"
  }
}

/** What a person wants to know first about a run in each state. */
const note = (run: RunRecord): string => {
  switch (run.state) {
    case "running":
      return `owner ${run.leaseOwner ?? "-"}, lease until ${Output.time(run.leaseExpiresAt)}`
    case "suspended":
      return isWorkflowRun(run)
        ? `a workflow waiting on its journal (execution ${run.idempotencyKey})`
        : `awaiting "${run.signalName}" (token ${run.signalToken})`
    case "pending":
      return run.attempt > 0 ? `retry due ${Output.time(run.runAt)}` : `due ${Output.time(run.runAt)}`
    case "failed":
      return Output.brief((run.error as { message?: unknown } | null)?.message ?? run.error)
    case "completed":
      return workflowOutcome(run) ?? Output.brief(run.result)
    case "cancelled":
      return ""
  }
}

const positive = Flag.filter((n: number) => n >= 1, () => "at least 1")

const list = Command.make("list", {
  ...connectionFlags,
  state: Flag.Literals("state", RunState.literals).pipe(Flag.optional, Flag.withDescription("only runs in this state")),
  queue: Flag.String("queue").pipe(Flag.optional, Flag.withDescription("only runs on this queue")),
  kind: Flag.String("kind").pipe(Flag.optional, Flag.withDescription("only runs of this kind")),
  // The admin API's bounds (`GET /api/runs`): the CLI lists no more than it would.
  limit: Flag.Int("limit").pipe(
    Flag.filter((n: number) => n >= 1 && n <= 500, () => "a whole number from 1 to 500"),
    Flag.withDefault(20),
    Flag.withDescription("runs per page (1 to 500)")
  ),
  page: Flag.Int("page").pipe(positive, Flag.optional, Flag.withDescription("page number, from 1")),
  offset: Flag.Int("offset").pipe(
    Flag.filter((n) => n >= 0 && n <= 1_000_000, () => "a whole number from 0 to 1000000"),
    Flag.optional,
    Flag.withDescription("runs to skip (instead of --page)")
  ),
  before: Flag.String("before").pipe(
    Flag.optional,
    Flag.withDescription(
      "only runs older than this run id: the next page after one ending at it (read from an index, however deep)"
    )
  ),
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    if (Option.isSome(flags.page) && Option.isSome(flags.offset)) {
      return yield* Effect.fail(new UsageError({ message: "give either --page or --offset, not both" }))
    }
    const before = Option.getOrUndefined(flags.before)
    if (before !== undefined && (Option.isSome(flags.page) || Option.isSome(flags.offset))) {
      return yield* Effect.fail(new UsageError({ message: "give either --before or --page/--offset, not both" }))
    }
    if (before !== undefined && !/^[0-9]{1,18}$/.test(before)) {
      return yield* Effect.fail(
        new UsageError({ message: `--before: ${JSON.stringify(before)} is not a run id (digits)` })
      )
    }
    const offset = Option.isSome(flags.page)
      ? (flags.page.value - 1) * flags.limit
      : Option.getOrElse(flags.offset, () => 0)
    const runs = yield* Connection.withStore(
      flags,
      RunStore.use((store) =>
        store.list({
          state: Option.getOrUndefined(flags.state),
          queue: Option.getOrUndefined(flags.queue),
          kind: Option.getOrUndefined(flags.kind),
          limit: flags.limit,
          offset,
          before
        })
      ),
      { migrate: false }
    )
    // The cursor of the next page: the last id of a full one.
    const next = runs.length === flags.limit ? runs.at(-1)!.id : null
    if (flags.json) {
      return yield* Output.json({
        offset,
        limit: flags.limit,
        before: before ?? null,
        next,
        runs: runs.map(RunJson.run)
      })
    }
    if (runs.length === 0) {
      return yield* Output.line(
        before !== undefined
          ? `no runs before ${before}`
          : offset === 0
          ? "no runs"
          : `no runs after the first ${offset}`
      )
    }
    yield* Output.lines(Output.table(
      ["ID", "KIND", "QUEUE", "STATE", "FENCE", "ATTEMPT", "CREATED", "NOTE"],
      runs.map((run) => [
        run.id,
        run.kind,
        run.queue,
        run.state,
        String(run.fence),
        `${attemptSeen(run)}/${run.maxAttempts}`,
        Output.time(run.createdAt),
        note(run)
      ])
    ))
    if (next !== null) {
      yield* Output.line(
        Option.isSome(flags.page)
          ? `(runs ${offset + 1}-${offset + runs.length}; more with --page ${flags.page.value + 1})`
          : Option.isSome(flags.offset)
          ? `(runs ${offset + 1}-${offset + runs.length}; more with --offset ${offset + runs.length})`
          : `(more with --before ${next})`
      )
    }
  })).pipe(Command.withDescription("List runs, newest first; filter by state, queue, kind"))

const attemptRows = (attempts: ReadonlyArray<RunHistory.Attempt>) =>
  Output.table(
    ["FENCE", "OWNER", "VIA", "START", "END", "OUTCOME"],
    attempts.map((a) => [
      String(a.fence),
      a.owner ?? "-",
      a.via,
      Output.time(a.start),
      Output.time(a.end),
      a.detail === null ? a.outcome : `${a.outcome}: ${a.detail}`
    ])
  )

// A log line is the handler's text: control characters (a terminal's escape sequences) are shown
// escaped, never sent to the terminal; a message's own line breaks are indented under it.
const printable = (text: string): string =>
  text.replace(
    /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`
  ).replaceAll("\n", "\n      ")

const attemptLogRows = (log: AttemptLogs.AttemptLog): ReadonlyArray<string> => [
  `  fence ${log.fence}, attempt ${log.attempt}, ${log.outcome}: ${log.lines.length} line${
    log.lines.length === 1 ? "" : "s"
  }${log.dropped > 0 ? ` (${log.dropped} earlier left out)` : ""}`,
  ...log.lines.map((line) => `    ${printable(AttemptLogs.lineText(line))}`)
]

/**
 * What a workflow's suspension waited for: what it waits on now while it waits, else what ended it
 * (its run's signal, `wake/<fence>`, names neither).
 */
const waitedFor = (s: RunHistory.Suspension, awaited: ReadonlyArray<WorkflowJournal.Awaited>): string =>
  s.outcome === "waiting"
    ? awaited.length === 0 ? "its journal" : awaited.map(describeAwaited).join(", ")
    : WorkflowJournal.waitEndedBy(s)

/** A workflow's attempts that suspended, each named by what its suspension waited for. */
const namedSuspendedAttempts = (history: RunHistory.RunHistory, awaited: ReadonlyArray<WorkflowJournal.Awaited>) =>
  history.attempts.map((a) => {
    const suspension = a.outcome === "suspended" ? history.suspensions.find((s) => s.fence === a.fence) : undefined
    return suspension === undefined ? a : { ...a, detail: `waiting on ${waitedFor(suspension, awaited)}` }
  })

const suspensionRows = (
  suspensions: ReadonlyArray<RunHistory.Suspension>,
  workflow: ReadonlyArray<WorkflowJournal.Awaited> | undefined
) =>
  Output.table(
    ["FENCE", workflow === undefined ? "SIGNAL" : "WAITED FOR", "SUSPENDED", "DEADLINE", "ENDED", "OUTCOME"],
    suspensions.map((s) => [
      String(s.fence),
      workflow === undefined ? s.signal ?? "-" : waitedFor(s, workflow),
      Output.time(s.suspendedAt),
      Output.time(s.deadline),
      Output.time(s.endedAt),
      s.outcome === "resumed" ? `resumed with ${Output.brief(s.payload)}` : s.outcome
    ])
  )

const rejectedRows = (rejected: ReadonlyArray<RunHistory.RejectedWrite>) =>
  Output.table(
    ["AT", "OPERATION", "PRESENTED FENCE", "STORED FENCE"],
    rejected.map((r) => [Output.time(r.at), r.operation, String(r.presentedFence), String(r.storedFence ?? "-")])
  )

const historyJson = (history: RunHistory.RunHistory, workflow: ReadonlyArray<WorkflowJournal.Awaited> | undefined) => ({
  attempts: history.attempts.map((a) => ({
    fence: a.fence,
    owner: a.owner,
    via: a.via,
    start: Output.isoTime(a.start),
    end: Output.isoTime(a.end),
    outcome: a.outcome,
    detail: a.detail
  })),
  suspensions: history.suspensions.map((s) => ({
    fence: s.fence,
    signal: s.signal,
    suspendedAt: Output.isoTime(s.suspendedAt),
    deadline: Output.isoTime(s.deadline),
    endedAt: Output.isoTime(s.endedAt),
    outcome: s.outcome,
    payload: s.payload ?? null,
    ...(workflow === undefined ? {} : { waitedFor: waitedFor(s, workflow) })
  })),
  rejectedWrites: history.rejectedWrites.map((r) => ({
    at: Output.isoTime(r.at),
    operation: r.operation,
    presentedFence: r.presentedFence,
    storedFence: r.storedFence
  })),
  adminActions: history.adminActions.map((a) => ({
    at: Output.isoTime(a.at),
    action: a.action,
    fence: a.fence,
    by: a.by,
    via: a.via
  }))
})

const show = Command.make("show", {
  ...connectionFlags,
  id: Argument.String("id").pipe(Argument.withDescription("the run's id")),
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const { attemptLogs, awaited, events, limits, rates, run, workers } = yield* Connection.withStore(
      flags,
      Effect.gen(function*() {
        const store = yield* RunStore
        const run = yield* store.get(flags.id)
        const events = yield* store.history(flags.id)
        const attemptLogs = yield* store.attemptLogs(flags.id)
        const limits = run.concurrencyKey === null ? [] : yield* store.keyLimits
        const rates = yield* store.rateLimits
        // A suspended workflow waits on its journal: the deferreds and durable clocks it awaits.
        const awaited = run.state === "suspended" && isWorkflowRun(run)
          ? yield* Effect.flatMap(WorkflowJournal.make({ schema: flags.schema }), (journal) =>
            journal.awaiting([run.idempotencyKey!]))
          : []
        // Live workers (the registry) that would claim it: none is what leaves a pending run waiting for ever.
        const workers = run.state === "pending"
          ? (yield* store.workers).filter((w) =>
            w.queues.includes(run.queue) && w.kinds.includes(run.kind)
          ).length
          : null
        return { run, events, attemptLogs, limits, rates, awaited, workers }
      }),
      { migrate: false }
    )
    const history = RunHistory.fromEvents(events)
    // The limit its key is counted under (`KeyLimits.governing`: its kind's, else its queue's).
    const declared = (scope: KeyLimits.KeyLimitScope) =>
      limits.find((l) => l.scope === scope && l.name === (scope === "queue" ? run.queue : run.kind))?.perKey
    const governing = KeyLimits.governing({ kind: declared("kind"), queue: declared("queue") })
    const keyLimits = governing === undefined
      ? []
      : [{ scope: governing.scope, name: governing.scope === "queue" ? run.queue : run.kind, perKey: governing.perKey }]
    // The rate limit its starts are counted under: its kind's, else its queue's.
    const rateLimit = rates.find((l) => l.scope === "kind" && l.name === run.kind) ??
      rates.find((l) => l.scope === "queue" && l.name === run.queue)
    if (flags.json) {
      const workflow = isWorkflowRun(run)
        ? {
          workflow: {
            execution: run.idempotencyKey,
            awaiting: awaited.map((a) => ({
              name: a.name,
              forPerson: isForPerson(a.name) && a.wakeAt === null,
              wakeAt: Output.isoTime(a.wakeAt)
            })),
            outcome: WorkflowJournal.outcomeOf(run.result) ?? null
          }
        }
        : {}
      return yield* Output.json({
        run: { ...RunJson.run(run), keyLimits, rateLimit: rateLimit ?? null, workersServing: workers },
        ...workflow,
        ...historyJson(history, isWorkflowRun(run) ? awaited : undefined),
        attemptLogs: attemptLogs.map(RunJson.attemptLog),
        events: events.map(RunJson.event)
      })
    }
    yield* Output.lines(Output.fields([
      ["run", `${run.id} (${run.kind} on queue ${run.queue})`],
      [
        "state",
        run.state + (run.state !== "suspended"
          ? ""
          : isWorkflowRun(run)
          ? `, a workflow waiting on ${
            awaited.length === 0 ? "its journal" : awaited.map(describeAwaited).join(", ")
          } (execution ${run.idempotencyKey})`
          : `, awaiting "${run.signalName}" (token ${run.signalToken})`)
      ],
      ...(workers === 0
        ? [
          [
            "workers",
            `none: no live worker serves queue ${run.queue} with kind ${run.kind}, so nothing will claim it`
          ] as const
        ]
        : []),
      ["fence", String(run.fence)],
      ["attempt", `${attemptSeen(run)} of ${run.maxAttempts}`],
      ...(run.concurrencyKey === null ? [] : [
        [
          "key",
          `${run.concurrencyKey} (${
            keyLimits[0] === undefined
              ? "no limit declared"
              : `at most ${keyLimits[0].perKey} running per key in ${keyLimits[0].scope} ${keyLimits[0].name}`
          })${
            run.keySlot !== null ? `, holds slot ${run.keySlot}` : run.waitingForKey ? ", waiting for a free slot" : ""
          }`
        ] as const
      ]),
      ...(rateLimit === undefined ? [] : [
        [
          "rate limit",
          `at most ${rateLimit.limit} started per ${Duration.format(Duration.millis(rateLimit.intervalMs))}${
            rateLimit.perKey ? " per key" : ""
          } in ${rateLimit.scope} ${rateLimit.name}` +
          ` (${rateLimit.startedInWindow} started in the last interval, ${rateLimit.due} due waiting)`
        ] as const
      ]),
      ...(run.leaseOwner === null
        ? []
        : [["lease", `${run.leaseOwner} until ${Output.time(run.leaseExpiresAt)}`] as const]),
      ...(run.attemptTimeoutMs === null
        ? []
        : [["attempt timeout", `${Duration.format(Duration.millis(run.attemptTimeoutMs))} (set at enqueue)`] as const]),
      ...(run.deadline === null ? [] : [["deadline", Output.time(run.deadline)] as const]),
      ...(RunJson.traceIdOf(run.traceParent) === null ? [] : [["trace", RunJson.traceIdOf(run.traceParent)!] as const]),
      ["created", Output.time(run.createdAt)],
      ["finished", Output.time(run.finishedAt)],
      ["payload", Output.brief(run.payload, 100)],
      ["checkpoint", Output.brief(run.checkpoint, 100)],
      ["result", workflowOutcome(run, 100) ?? Output.brief(run.result, 100)],
      ["error", Output.brief(run.error, 100)]
    ]))
    yield* Output.line()
    yield* Output.line("attempts")
    yield* Output.lines(
      history.attempts.length === 0
        ? ["  none yet"]
        : attemptRows(
          isWorkflowRun(run) ? namedSuspendedAttempts(history, awaited) : history.attempts
        ).map((l) => `  ${l}`)
    )
    if (attemptLogs.length > 0) {
      yield* Output.line()
      yield* Output.line("attempt logs")
      yield* Output.lines(attemptLogs.flatMap(attemptLogRows))
    }
    if (history.suspensions.length > 0) {
      yield* Output.line()
      yield* Output.line("suspensions")
      yield* Output.lines(
        suspensionRows(history.suspensions, isWorkflowRun(run) ? awaited : undefined).map((l) => `  ${l}`)
      )
    }
    if (history.adminActions.length > 0) {
      yield* Output.line()
      yield* Output.line("operator actions")
      yield* Output.lines(
        Output.table(
          ["AT", "ACTION", "FENCE", "BY", "VIA"],
          history.adminActions.map((a) => [Output.time(a.at), a.action, String(a.fence), a.by ?? "-", a.via ?? "-"])
        ).map((l) => `  ${l}`)
      )
    }
    yield* Output.line()
    yield* Output.line("rejected stale writes")
    yield* Output.lines(
      history.rejectedWrites.length === 0 ? ["  none"] : rejectedRows(history.rejectedWrites).map((l) => `  ${l}`)
    )
  })).pipe(Command.withDescription("Show a run and its history: attempts, suspensions, rejected stale writes"))

/**
 * `leasehold runs delete`: one run by id, or the runs a filter selects (as `runs list` filters).
 * It counts first and prints the count; only with `--yes` does it delete, and then only that
 * many (`RunStore.deleteRuns`: another count now, or a running run, deletes nothing, exit 2).
 */
const remove = Command.make("delete", {
  ...connectionFlags,
  id: Argument.String("id").pipe(Argument.withDescription("the run's id (or give a filter)"), Argument.optional),
  state: Flag.Literals("state", RunState.literals).pipe(Flag.optional, Flag.withDescription("runs in this state")),
  queue: Flag.String("queue").pipe(Flag.optional, Flag.withDescription("runs on this queue")),
  kind: Flag.String("kind").pipe(Flag.optional, Flag.withDescription("runs of this kind")),
  yes: Flag.Boolean("yes").pipe(
    Flag.withDefault(false),
    Flag.withDescription("delete the runs counted (without it: the count only, and nothing deleted)")
  ),
  as: actorFlag,
  json: jsonFlag
}, (flags) =>
  Effect.gen(function*() {
    const id = Option.getOrUndefined(flags.id)
    const filter = {
      ids: id === undefined ? undefined : [id],
      state: Option.getOrUndefined(flags.state),
      queue: Option.getOrUndefined(flags.queue),
      kind: Option.getOrUndefined(flags.kind)
    }
    if (Object.values(filter).every((v) => v === undefined)) {
      return yield* new UsageError({ message: "delete takes a run id, or a filter: --state, --queue, --kind" })
    }
    if (id !== undefined && !/^[0-9]{1,18}$/.test(id)) {
      return yield* new UsageError({ message: `${JSON.stringify(id)} is not a run id (digits)` })
    }
    const actor = yield* actorOf(flags)
    const outcome = yield* Connection.withStore(
      flags,
      Effect.gen(function*() {
        const store = yield* RunStore
        const counted = yield* store.countDeletable(filter)
        if (!flags.yes || counted.count === 0 || counted.busy > 0) return { ...counted, deleted: 0 }
        return { ...counted, ...(yield* store.deleteRuns({ filter, expected: counted.count, actor })) }
      }),
      { migrate: false }
    )
    const runsText = (n: number) => `${n} run${n === 1 ? "" : "s"}`
    if (flags.json) yield* Output.json(outcome)
    else if (outcome.deleted > 0) yield* Output.line(`deleted ${runsText(outcome.deleted)}`)
    else yield* Output.line(`the filter selects ${runsText(outcome.count)}`)
    if (outcome.busy > 0) {
      return yield* new UsageError({
        message: `${runsText(outcome.busy)} of them running: cancel them first (leasehold cancel <id>); nothing deleted`
      })
    }
    if (!flags.yes && outcome.count > 0) {
      return yield* new UsageError({ message: "nothing deleted: run it again with --yes to delete them" })
    }
  })).pipe(Command.withDescription("Delete a run, or the runs a filter selects (counted first; --yes deletes them)"))

export const runs = Command.make("runs").pipe(
  Command.withDescription("Inspect and delete runs"),
  Command.withSubcommands([list, show, remove])
)
