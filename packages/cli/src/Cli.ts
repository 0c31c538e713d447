/**
 * The `leasehold` command tree.
 *
 * @since 0.1.0
 */
import { Command } from "effect/cli"
import { cancel, resume, retry } from "./commands/admin.js"
import { audit } from "./commands/audit.js"
import { enqueue } from "./commands/enqueue.js"
import { limits } from "./commands/limits.js"
import { migrate } from "./commands/migrate.js"
import { queues } from "./commands/queues.js"
import { retention } from "./commands/retention.js"
import { runs } from "./commands/runs.js"
import { schedules } from "./commands/schedules.js"
import { serve } from "./commands/serve.js"
import { stats } from "./commands/stats.js"
import { worker } from "./commands/worker.js"

export const leasehold = Command.make("leasehold").pipe(
  Command.withDescription("Durable runs with leases and fencing on PostgreSQL"),
  Command.withSubcommands([
    migrate,
    enqueue,
    runs,
    queues,
    limits,
    schedules,
    resume,
    cancel,
    retry,
    audit,
    retention,
    stats,
    worker,
    serve
  ])
)

export const run = Command.run(leasehold, { version: "0.1.0" })

/** The command on the given arguments (`process.argv.slice(2)`), as the `leasehold` binary runs it. */
export const runWith = Command.runWith(leasehold, { version: "0.1.0" })
