/**
 * `leasehold enqueue --file runs.jsonl`: a batch of runs, one JSON object a line. Every line is
 * checked (JSON, kind, payload against its schema, options) before a connection is opened; the
 * first bad one is named by its line and nothing is written. The batch is then one statement
 * (`Client.enqueueUnknownMany`): all of it is written, or none.
 */
import { checkEnqueueRequest, Client, Handler, type UniqueWindow } from "@leasehold/core"
import { Duration, Effect, Option, Schema } from "effect"
import * as fs from "node:fs"
import * as Connection from "../Connection.js"
import { UsageError } from "../Flags.js"
import * as Output from "../Output.js"
import * as Tasks from "../Tasks.js"

/** One line: a run as `POST /api/runs` takes it. */
const Line = Schema.Struct({
  kind: Schema.String,
  payload: Schema.optional(Schema.Unknown),
  queue: Schema.optional(Schema.String),
  priority: Schema.optional(Schema.Number),
  delayMs: Schema.optional(Schema.Number),
  maxAttempts: Schema.optional(Schema.Number),
  idempotencyKey: Schema.optional(Schema.String),
  concurrencyKey: Schema.optional(Schema.String),
  unique: Schema.optional(Schema.Struct({
    key: Schema.optional(Schema.String),
    states: Schema.optional(Schema.Array(Schema.String)),
    periodMs: Schema.optional(Schema.Number)
  }))
})
const decodeLine = Schema.decodeUnknownExit(Line)

/** The flags of `enqueue` that `--file` reads. */
interface FileFlags extends Connection.ConnectionFlags {
  readonly kind: Option.Option<string>
  readonly payload: Option.Option<unknown>
  readonly payloadFile: Option.Option<unknown>
  readonly tasks: Option.Option<string>
  readonly queue: string
  readonly priority: number
  readonly delay: Option.Option<Duration.Duration>
  readonly maxAttempts: Option.Option<number>
  readonly idempotencyKey: Option.Option<string>
  readonly concurrencyKey: Option.Option<string>
  readonly uniqueKey: Option.Option<string>
  readonly uniqueStates: Option.Option<string>
  readonly uniqueFor: Option.Option<Duration.Duration>
  readonly uniqueByPayload: boolean
  readonly json: boolean
}

const oneLine = (text: string) => text.split("\n").join(" ")

export const enqueueFile = (flags: FileFlags, file: string) =>
  Effect.gen(function*() {
    const perRun = [
      ["the kind argument", Option.isSome(flags.kind)],
      ["--payload", Option.isSome(flags.payload)],
      ["--payload-file", Option.isSome(flags.payloadFile)],
      ["--idempotency-key", Option.isSome(flags.idempotencyKey)],
      ["--concurrency-key", Option.isSome(flags.concurrencyKey)],
      ["--unique-key", Option.isSome(flags.uniqueKey)],
      ["--unique-states", Option.isSome(flags.uniqueStates)],
      ["--unique-for", Option.isSome(flags.uniqueFor)],
      ["--unique-by-payload", flags.uniqueByPayload]
    ] as const
    const given = perRun.find(([, isGiven]) => isGiven)
    if (given !== undefined) {
      return yield* new UsageError({ message: `${given[0]} is not taken with --file: each line gives its own` })
    }
    const text = yield* Effect.try({
      try: () => fs.readFileSync(file, "utf8"),
      catch: (e) => new UsageError({ message: `cannot read ${file}: ${oneLine((e as Error).message)}` })
    })
    const registry = yield* Handler.registry(yield* Tasks.fromFlag(flags.tasks))
    // Defaults from the flags for what a line does not say.
    const defaults = {
      queue: flags.queue,
      priority: flags.priority,
      delayMs: Option.getOrUndefined(Option.map(flags.delay, Duration.toMillis)),
      maxAttempts: Option.getOrUndefined(flags.maxAttempts)
    }
    const runs: Array<Client.UnknownRequest> = []
    for (const [at, raw] of text.split("\n").entries()) {
      if (raw.trim() === "") continue
      const bad = (issue: string) => new UsageError({ message: `${file} line ${at + 1}: ${oneLine(issue)}` })
      const parsed = yield* Effect.try({
        try: () => JSON.parse(raw) as unknown,
        catch: (e) => bad(`not JSON (${(e as Error).message})`)
      })
      const line = decodeLine(parsed)
      if (line._tag === "Failure") return yield* bad(`not a run (${String(line.cause).split("\n")[0]})`)
      const { unique, payload, ...options } = line.value
      const run: Client.UnknownRequest = {
        ...defaults,
        ...options,
        payload: payload ?? {},
        ...(unique === undefined ? {} : { unique: unique as UniqueWindow })
      }
      yield* Effect.gen(function*() {
        const handler = yield* Handler.lookup(registry, run.kind)
        yield* Handler.decodePayload(handler, run.payload)
        yield* checkEnqueueRequest(run)
      }).pipe(Effect.mapError((error) => bad(error.message)))
      runs.push(run)
    }
    if (runs.length === 0) return yield* new UsageError({ message: `${file} holds no runs (one JSON object a line)` })
    const enqueued = yield* Connection.withStore(flags, Client.enqueueUnknownMany(registry, runs))
    if (flags.json) return yield* Output.json({ runs: enqueued })
    const created = enqueued.filter((e) => e.created).length
    yield* Output.line(
      `enqueued ${created} run${created === 1 ? "" : "s"} from ${file}` +
        (created === enqueued.length ? "" : ` (${enqueued.length - created} already existed: not enqueued again)`)
    )
  })
