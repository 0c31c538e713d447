/**
 * Tracing runs from enqueue to completion. Off by default: then nothing is stored and no span is
 * made for a run. On (`Telemetry.layer()`, or `Worker.run({ traces: true })` for the worker side):
 * `Client.enqueue` runs in a producer span whose W3C `traceparent` is stored with the run (a
 * caller-supplied one wins), and each attempt runs in a consumer span: a child of the enqueue span
 * on the run's first claim, a new trace linked to it on every later one (a retry, a reclaim, a
 * resume after a suspension). Export with `effect/observability` (`Otlp`, `OtlpTracer`).
 *
 * @since 0.1.0
 */
import { Context, Layer, Option, type Tracer } from "effect"
import { Headers, HttpTraceContext } from "effect/http"

/** Whether runs are traced. @category references */
export const TraceRuns = Context.Reference<boolean>("@leasehold/core/Telemetry/TraceRuns", {
  defaultValue: () => false
})

/**
 * Whether metrics are recorded: workers (`WorkerMetrics`, unless `Worker.run({ metrics })` says
 * otherwise) and `Client.enqueue` / `Client.cancel` (runs enqueued and cancelled).
 *
 * @category references
 */
export const RecordMetrics = Context.Reference<boolean>("@leasehold/core/Telemetry/RecordMetrics", {
  defaultValue: () => false
})

/** Turns run tracing and metrics on (or off) for what the layer provides to. @category layers */
export const layer = (
  options: { readonly traces?: boolean | undefined; readonly metrics?: boolean | undefined } = {}
): Layer.Layer<never> =>
  Layer.mergeAll(
    Layer.succeed(TraceRuns, options.traces ?? true),
    Layer.succeed(RecordMetrics, options.metrics ?? true)
  )

/** The W3C `traceparent` of a span. @category encoding */
export const traceParentOf = (span: Tracer.Span): string | undefined => HttpTraceContext.toHeaders(span)["traceparent"]

/** The span a stored `traceparent` names, or none when it is absent or malformed. @category decoding */
export const spanOf = (traceParent: string | null | undefined): Tracer.ExternalSpan | undefined =>
  traceParent === null || traceParent === undefined
    ? undefined
    : Option.getOrUndefined(HttpTraceContext.w3c(Headers.fromInput({ traceparent: traceParent })))
