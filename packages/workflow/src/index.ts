/**
 * Durable Effect workflows on Leasehold.
 *
 * @since 0.1.0
 */
export * as LeaseholdWorkflows from "./LeaseholdWorkflows.js"
