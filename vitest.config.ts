import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "examples/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two cores: the database and the workers share them.
    maxWorkers: 2,
    reporters: ["default", "./test/support/skipsReporter.ts"]
  }
})
