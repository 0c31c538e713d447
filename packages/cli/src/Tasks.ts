/**
 * The handlers a command works with: those a tasks module exports (`--tasks`), or the sample
 * tasks. `worker` runs them; `enqueue` uses them to check a kind and its payload before writing.
 *
 * @since 0.1.0
 */
import type { Handler } from "@leasehold/core"
import { Effect, Option } from "effect"
import { Flag } from "effect/cli"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { UsageError } from "./Flags.js"

export const tasksFlag = Flag.String("tasks").pipe(
  Flag.optional,
  Flag.withDescription("module exporting `handlers` (default: the sample tasks)")
)

/** Loads `handlers` (or the default export) from a tasks module. */
export const load = (modulePath: string): Effect.Effect<ReadonlyArray<Handler.Handler>, UsageError> =>
  Effect.tryPromise({
    try: async () => {
      const mod = await import(pathToFileURL(path.resolve(modulePath)).href)
      const handlers = mod.handlers ?? mod.default
      if (!Array.isArray(handlers) || handlers.length === 0) throw new Error("it exports no `handlers` array")
      return handlers as ReadonlyArray<Handler.Handler>
    },
    catch: (e) =>
      new UsageError({ message: `cannot load tasks module ${modulePath}: ${firstLine((e as Error).message)}` })
  })

/** The handlers of `--tasks`, or the sample tasks when the flag is absent. */
export const fromFlag = (tasks: Option.Option<string>): Effect.Effect<ReadonlyArray<Handler.Handler>, UsageError> =>
  Option.isSome(tasks)
    ? load(tasks.value)
    : Effect.map(Effect.promise(() => import("./SampleTasks.js")), (mod) => mod.handlers)

const firstLine = (text: string) => text.split("\n")[0] ?? text
