/**
 * The `leasehold` command tree.
 *
 * @since 0.1.0
 */
import { Command } from "effect/cli"
import { demo } from "./commands/demo.js"
import { worker } from "./commands/worker.js"

export const leasehold = Command.make("leasehold").pipe(
  Command.withDescription("Durable runs with leases and fencing on PostgreSQL"),
  Command.withSubcommands([worker, demo])
)

export const run = Command.run(leasehold, { version: "0.1.0" })
