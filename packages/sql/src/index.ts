/**
 * Leasehold's PostgreSQL store.
 *
 * @since 0.1.0
 */
export * as Database from "./Database.js"
export * as Migrations from "./Migrations.js"
export * as PgRunStore from "./PgRunStore.js"
export * as StoreSchema from "./StoreSchema.js"
export * as WorkflowJournal from "./WorkflowJournal.js"
