/** Flags shared by every command, and the error for a user's mistake. */
import { Data } from "effect"
import { Flag } from "effect/cli"

/** A mistake in how the command was called: one line, exit code 2. */
export class UsageError extends Data.TaggedError("UsageError")<{ readonly message: string }> {}

export const connectionFlags = {
  databaseUrl: Flag.String("database-url").pipe(
    Flag.optional,
    Flag.withDescription("PostgreSQL URL (default: $DATABASE_URL, else the embedded server)")
  ),
  schema: Flag.String("schema").pipe(Flag.withDefault("leasehold"), Flag.withDescription("Postgres schema of the store"))
} as const

/** The demo's own check against the database failed. */
export class DemoFailed extends Data.TaggedError("DemoFailed")<{ readonly message: string }> {}
