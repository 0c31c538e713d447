/**
 * A real PostgreSQL for development and tests, started from npm packages: Leasehold's zero-install
 * default database, apart from the store so that only those who want it install its binaries.
 *
 * @since 0.1.0
 */
export * as EmbeddedPostgres from "./EmbeddedPostgres.js"
