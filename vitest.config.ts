import { defineConfig } from "vitest/config"

/**
 * Test projects by what they need (docs/CONTRIBUTING.md, "Tests"). `unit` needs nothing but Node: no database,
 * no globalSetup. `pg` needs a PostgreSQL (embedded, or DATABASE_URL): every test file not named
 * below. `processes` also starts worker processes, the `leasehold` binary or npm. `external` also
 * drives Debian programs that `npm test` provisions (Chromium, PgBouncer, a standby built with
 * PostgreSQL's server binaries, faketime, Spin and gcc).
 */
const unit = [
  "test/docs.test.ts",
  "test/adr.test.ts",
  "test/mutants.test.ts",
  "examples/testing-handlers.test.ts",
  "examples/testing-workflows.test.ts",
  "test/invariants.test.ts",
  "test/worker-clock.test.ts",
  "test/contract-memory.test.ts",
  "test/attempt-logs-memory.test.ts",
  "test/schedules-plan.test.ts",
  "test/chaos-plan.test.ts",
  "test/prerequisites.test.ts",
  "test/skips-reporter.test.ts",
  "test/database-url.test.ts",
  "test/schedule-ticker.test.ts",
  "test/import-graph.test.ts",
  "test/error-style.test.ts",
  "test/migrations.test.ts"
]
const processes = [
  "test/sql-enqueue.test.ts",
  "test/unique-process.test.ts",
  "test/examples.test.ts",
  "test/doc-commands.test.ts",
  "test/cli.test.ts",
  "test/demo.test.ts",
  "test/keys-process.test.ts",
  "test/rate-process.test.ts",
  "test/robustness.test.ts",
  "test/tracing.test.ts",
  "test/workflow-process.test.ts",
  "test/reclaim-process.test.ts",
  "test/timeouts-process.test.ts",
  "test/worker-logs.test.ts",
  "test/bench-smoke.test.ts",
  "test/pack.test.ts",
  "test/embedded-private-dir.test.ts",
  "test/embedded-encoding.test.ts",
  "test/failure-output.test.ts"
]
const external = [
  "test/console.browser.test.ts",
  "test/workflow-approvals.test.ts",
  "test/failover.test.ts",
  "test/pooler.test.ts",
  "test/fencing.test.ts",
  "test/it-leases-fencing.test.ts",
  "test/silent-holder.test.ts",
  "test/schedules-process.test.ts",
  "test/chaos.test.ts",
  "test/model-spin.test.ts"
]

// One PostgreSQL for every project that needs one (the setup shares the server between them).
const database = "test/support/globalSetup.ts"
// Finds the Debian programs (installs them as root), or fails with the one line naming the command.
const prerequisites = "test/support/prerequisitesSetup.ts"

export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two cores: the database and the workers share them. One pool for all projects.
    maxWorkers: 2,
    reporters: ["default", "./test/support/skipsReporter.ts"],
    // A database error is reported as one line with the server's message, not serialized whole.
    setupFiles: ["./test/support/errorOutput.ts"],
    // @effect/vitest also logs a failed test's error whole, fields and causes: for a database error
    // the report above says it in one line already.
    onConsoleLog: (log) =>
      !/^\S* ?\[[\d:.]+\] ERROR \(#\d+\): Error \[effect\/sql\/SqlError\]/.test(log.trimStart()) && undefined,
    projects: [
      { extends: true, test: { name: "unit", include: unit } },
      {
        extends: true,
        test: {
          name: "pg",
          include: ["test/**/*.test.ts", "examples/**/*.test.ts"],
          exclude: [...unit, ...processes, ...external, "**/node_modules/**"],
          globalSetup: [database]
        }
      },
      { extends: true, test: { name: "processes", include: processes, globalSetup: [prerequisites, database] } },
      { extends: true, test: { name: "external", include: external, globalSetup: [prerequisites, database] } }
    ]
  }
})
