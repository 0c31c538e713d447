/** Flags shared by several commands, and the error for a user's mistake. */
import { StoreSchema } from "@leasehold/sql"
import { Duration, Effect, Option, Schema } from "effect"
import { Flag } from "effect/cli"

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

/** A JSON document given inline or in a file; parsed while the command line is parsed. */
export const payloadFlags = {
  payload: Flag.String("payload").pipe(
    Flag.mapTryCatch((text) => JSON.parse(text) as unknown, (e) => `valid JSON (${(e as Error).message})`),
    Flag.optional,
    Flag.withDescription("JSON payload, e.g. '{\"order\":\"A-1\"}'")
  ),
  payloadFile: Flag.FileParse("payload-file", { format: "json" }).pipe(
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
