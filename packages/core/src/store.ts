/**
 * Leasehold core for store implementers (`@leasehold/core/store`): what a `RunStore` or a
 * `WorkflowJournal` implementation shares with the others so they decide alike (checks, encodings,
 * tick plans, claim positions). The contract itself (`RunStore`, its role interfaces and their
 * models) is on the top level, `@leasehold/core`, with everything a user needs; nothing here is.
 *
 * @since 0.1.0
 */
export * as AttemptLogStorage from "./AttemptLogStorage.js"
export * as ClaimPosition from "./ClaimPosition.js"
export * as RateWakes from "./RateWakes.js"
export * as RunStorage from "./RunStorage.js"
export * as ScheduleStorage from "./ScheduleStorage.js"
export * as ThroughputStorage from "./ThroughputStorage.js"
