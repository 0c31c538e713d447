/**
 * Leasehold core: leased, fenced runs on Effect 4. What a store implementation shares with the
 * others (checks, encodings, plans) is in `@leasehold/core/store`, not here.
 *
 * @since 0.1.0
 */
export * as AttemptLogs from "./AttemptLogs.js"
export * as Client from "./Client.js"
export * from "./CurrentRun.js"
export * from "./Errors.js"
export * from "./Fence.js"
export * as Handler from "./Handler.js"
export * as Json from "./Json.js"
export * as KeyLimits from "./KeyLimits.js"
export * as Limits from "./Limits.js"
export * as MemoryRunStore from "./MemoryRunStore.js"
export * as OperatorActions from "./OperatorActions.js"
export * as RateLimits from "./RateLimits.js"
export * as Retention from "./Retention.js"
export * as Run from "./Run.js"
export * as RunHistory from "./RunHistory.js"
export * from "./RunRecord.js"
export * from "./RunStore.js"
export * as Schedules from "./Schedules.js"
export * as ScheduleTicker from "./ScheduleTicker.js"
export * as Telemetry from "./Telemetry.js"
export * as Throughput from "./Throughput.js"
export * as Worker from "./Worker.js"
export * as WorkerEvents from "./WorkerEvents.js"
export * as WorkerMetrics from "./WorkerMetrics.js"
export * as WorkerRegistry from "./WorkerRegistry.js"
export * as WorkflowJournal from "./WorkflowJournal.js"
