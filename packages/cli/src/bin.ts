#!/usr/bin/env node
/**
 * Entry point of the `leasehold` command. A user's mistake gets one line on stderr and exit code
 * 2; a failure (unknown run, unreachable database, ...) one line and exit code 1.
 */
// Deep imports: the package index loads its HTTP stack too (undici), which every command's start
// would pay for (ADR 0019).
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Cause, Effect, Exit } from "effect"
import { CliOutput } from "effect/cli"
import { invalidUtf8, joinDashValues } from "./Argv.js"
import { runWith } from "./Cli.js"
import { describeFailure } from "./Failure.js"
import * as Observability from "./Observability.js"

const args = process.argv.slice(2)
const notUtf8 = invalidUtf8(args)
if (notUtf8 !== undefined) {
  // Node has already put U+FFFD in its place: refused before anything reads it.
  process.stderr.write(`leasehold: ${notUtf8} is not valid UTF-8\n`)
  process.exit(2)
}

const exitCode: Effect.Effect<number> = runWith(joinDashValues(args)).pipe(
  Effect.as(0),
  Effect.catchCause((cause) => {
    if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause)
    const { code, message } = describeFailure(cause)
    return Effect.sync(() => {
      if (message !== undefined) process.stderr.write(`leasehold: ${message}\n`)
      return code
    })
  }),
  // A bad invocation is reported as one line below, not as the whole help page.
  Effect.provide(CliOutput.layerPresenter({
    present: (event) => event._tag === "InvalidInvocation" ? Effect.void : CliOutput.defaultPresenter.present(event)
  })),
  // OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; flushed when the command ends.
  Effect.provide(Observability.layer),
  Effect.provide(NodeServices.layer),
  (effect) => effect as Effect.Effect<number>
)

// A reader that stops early (`leasehold runs list | head`) closes the pipe: that ends the command
// quietly, as it does for other Unix tools, instead of an unhandled EPIPE.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(0)
  throw error
})

NodeRuntime.runMain(exitCode, {
  disableErrorReporting: true,
  // The code goes through the teardown, which exits with it.
  teardown: (exit, onExit) =>
    onExit(Exit.isSuccess(exit) ? exit.value as number : Cause.hasInterruptsOnly(exit.cause) ? 130 : 1)
})
