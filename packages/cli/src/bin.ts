#!/usr/bin/env node
/**
 * Entry point of the `leasehold` command. A user's mistake gets one line on stderr and exit code
 * 2; a failure (unknown run, unreachable database, ...) one line and exit code 1.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Cause, Effect } from "effect"
import { CliOutput } from "effect/cli"
import { run } from "./Cli.js"
import { describeFailure } from "./Failure.js"

run.pipe(
  Effect.catchCause((cause) => {
    if (Cause.hasInterruptsOnly(cause)) return Effect.void
    const { code, message } = describeFailure(cause)
    return Effect.sync(() => {
      if (message !== undefined) process.stderr.write(`leasehold: ${message}\n`)
      process.exitCode = code
    })
  }),
  // A bad invocation is reported as one line below, not as the whole help page.
  Effect.provide(CliOutput.layerPresenter({
    present: (event) => event._tag === "InvalidInvocation" ? Effect.void : CliOutput.defaultPresenter.present(event)
  })),
  Effect.provide(NodeServices.layer),
  (effect) => effect as Effect.Effect<void>,
  NodeRuntime.runMain({ disableErrorReporting: true })
)
