/**
 * Durable Effect workflows on Leasehold.
 *
 * @since 0.1.0
 */
export * as LeaseholdWorkflows from "./LeaseholdWorkflows.js"

/**
 * Effect's `PersistedQueue` store (behind `DurableQueue`) over Leasehold runs.
 *
 * @since 0.1.0
 */
export * as LeaseholdQueueStore from "./LeaseholdQueueStore.js"
