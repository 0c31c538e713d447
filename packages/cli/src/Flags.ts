/** Flags shared by several commands, and the error for a user's mistake. */
import { OperatorActions } from "@leasehold/core"
import { StoreSchema } from "@leasehold/sql"
import { Duration, Effect, Option, Schema } from "effect"
import { Flag } from "effect/cli"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/** A mistake in how the command was called: one line, exit code 2. */
export class UsageError extends Schema.TaggedError<UsageError>()("UsageError", { message: Schema.String }) {}

export const connectionFlags = {
  databaseUrl: Flag.String("database-url").pipe(
    Flag.optional,
    Flag.withDescription("PostgreSQL URL (default: $DATABASE_URL, else the embedded server)")
  ),
  // Checked while parsing, so a bad name is a usage error (exit 2) before anything connects.
  schema: Flag.String("schema").pipe(
    Flag.mapTryCatch((name) => StoreSchema.make(name).schema, (e) => (e as Error).message),
    Flag.withDefault("leasehold"),
    Flag.withDescription("Postgres schema of the store")
  )
} as const

/** `--json`: stable JSON on stdout for scripts instead of the human table. */
export const jsonFlag = Flag.Boolean("json").pipe(
  Flag.withDefault(false),
  Flag.withDescription("print stable JSON on stdout (for scripts)")
)

/**
 * The largest payload the CLI takes, in bytes of JSON text: the HTTP API's default body limit
 * (`maxBodySize`), so the CLI stores nothing the API would refuse.
 */
export const maxPayloadBytes = 1024 * 1024

const utf8 = new TextDecoder("utf-8", { fatal: true })

const parsePayload = (text: string): unknown => {
  const bytes = Buffer.byteLength(text, "utf8")
  if (bytes > maxPayloadBytes) {
    throw new Error(`at most ${maxPayloadBytes} bytes of JSON (the HTTP API's limit), not ${bytes}`)
  }
  return JSON.parse(text) as unknown
}

/** A payload file's JSON, read as bytes: invalid UTF-8 is refused rather than stored as U+FFFD. */
const readPayloadFile = (file: string): unknown => {
  const absolute = path.resolve(file)
  if (!fs.existsSync(absolute)) throw new Error(`File does not exist: ${absolute}`)
  const size = fs.statSync(absolute).size
  // Checked before reading: a huge file is refused without loading it.
  if (size > maxPayloadBytes) {
    throw new Error(`at most ${maxPayloadBytes} bytes of JSON (the HTTP API's limit), not ${size}`)
  }
  let text: string
  try {
    text = utf8.decode(fs.readFileSync(absolute))
  } catch {
    throw new Error(`the file is not valid UTF-8: ${absolute}`)
  }
  try {
    return JSON.parse(text) as unknown
  } catch (error) {
    throw new Error(`Failed to parse '.json' file content: ${error}`, { cause: error })
  }
}

/** A JSON document given inline or in a file; parsed while the command line is parsed. */
export const payloadFlags = {
  payload: Flag.String("payload").pipe(
    Flag.mapTryCatch(
      parsePayload,
      (e) => e instanceof SyntaxError ? `valid JSON (${e.message})` : (e as Error).message
    ),
    Flag.optional,
    Flag.withDescription("JSON payload, e.g. '{\"order\":\"A-1\"}'")
  ),
  payloadFile: Flag.String("payload-file").pipe(
    Flag.mapTryCatch(readPayloadFile, (e) => (e as Error).message),
    Flag.optional,
    Flag.withDescription("file holding the JSON payload")
  )
} as const

/** The payload from `--payload` or `--payload-file` (not both), else `fallback`. */
export const payloadOf = (
  flags: { readonly payload: Option.Option<unknown>; readonly payloadFile: Option.Option<unknown> },
  fallback: unknown
): Effect.Effect<unknown, UsageError> =>
  Option.isSome(flags.payload) && Option.isSome(flags.payloadFile)
    ? Effect.fail(new UsageError({ message: "give either --payload or --payload-file, not both" }))
    : Effect.succeed(Option.getOrElse(Option.orElse(flags.payload, () => flags.payloadFile), () => fallback))

/** A duration such as "5 seconds" or "250 millis"; finite and not negative. */
export const durationFlag = (name: string) =>
  Flag.String(name).pipe(
    Flag.filterMap(
      (text) =>
        Option.filter(
          Duration.fromInput(text as Duration.Input),
          (d) => Duration.isFinite(d) && Duration.toMillis(d) >= 0
        ),
      () => `a duration such as "5 seconds" or "250 millis"`
    )
  )

/** `--as`: who acts, recorded with the action (default: the OS user running the command). */
export const actorFlag = Flag.String("as").pipe(
  Flag.optional,
  Flag.withDescription("the name recorded as who did this (default: your OS user name)")
)

/** The OS user's name, or `$USER`, or "unknown" where neither can be read. */
const osUser = (): string => {
  try {
    return os.userInfo().username
  } catch {
    return process.env.USER ?? "unknown"
  }
}

/** The actor of a command (`--as`, else the OS user), from the CLI; a bad `--as` is a usage error. */
export const actorOf = (flags: { readonly as: Option.Option<string> }) => {
  const name = Option.getOrElse(flags.as, osUser)
  const issue = OperatorActions.actorNameIssue(name)
  return issue === undefined
    ? Effect.succeed<OperatorActions.Actor>({ name, via: "cli" })
    : Effect.fail(new UsageError({ message: `--as: the name ${issue}` }))
}
