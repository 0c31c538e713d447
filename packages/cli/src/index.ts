/**
 * The `leasehold` command, as a library (for tests and embedding).
 *
 * @since 0.1.0
 */
export * as Cli from "./Cli.js"
export * as SampleTasks from "./SampleTasks.js"
