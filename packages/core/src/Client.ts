/**
 * The application's side: enqueue runs with validated payloads, resume suspended runs, cancel and
 * retry. Thin over `RunStore`, with the handler registry to check kinds and payloads up front so
 * nothing invalid is written.
 *
 * @since 0.1.0
 */
import { Effect, Metric, Option } from "effect"
import * as Handler from "./Handler.js"
import type { Actor } from "./OperatorActions.js"
import type { Enqueued, EnqueueRequest } from "./RunRecord.js"
import { RunStore } from "./RunStore.js"
import * as Telemetry from "./Telemetry.js"
import * as WorkerMetrics from "./WorkerMetrics.js"

/** Options of one enqueue, beside kind and payload. @category models */
export type EnqueueOptions = Omit<EnqueueRequest, "kind" | "payload">

/**
 * Enqueues a run of a handler's kind with a typed payload (encoded through the handler's schema).
 *
 * @category writes
 */
export const enqueue = Effect.fn("Client.enqueue")(function*<P>(
  handler: Handler.Handler<P>,
  payload: P,
  options?: EnqueueOptions
) {
  const encoded = yield* Handler.encodePayload(handler, payload)
  const store = yield* RunStore
  const metered = yield* Telemetry.RecordMetrics
  const write = (traceParent: string | undefined) =>
    Effect.map(
      store.enqueue([{
        ...options,
        kind: handler.kind,
        payload: encoded,
        maxAttempts: options?.maxAttempts ?? handler.maxAttempts,
        traceParent: options?.traceParent ?? traceParent
      }]),
      ([enqueued]) => enqueued as Enqueued
    ).pipe(
      Effect.tap((enqueued) =>
        metered && enqueued.created
          ? Metric.update(
            Metric.withAttributes(WorkerMetrics.metrics.enqueued, {
              queue: options?.queue ?? "default",
              kind: handler.kind
            }),
            1
          )
          : Effect.void
      )
    )
  if (!(yield* Telemetry.TraceRuns)) return yield* write(undefined)
  // A producer span whose trace context travels with the run to its consumer spans.
  return yield* Effect.flatMap(
    Effect.option(Effect.currentSpan),
    (span) => write(Option.isSome(span) ? Telemetry.traceParentOf(span.value) : undefined)
  ).pipe(
    Effect.tap((enqueued) =>
      Effect.annotateCurrentSpan({ "leasehold.run_id": enqueued.id, "leasehold.created": enqueued.created })
    ),
    Effect.withSpan(`leasehold.enqueue ${handler.kind}`, {
      kind: "producer",
      attributes: {
        "messaging.system": "leasehold",
        "messaging.operation": "publish",
        "leasehold.kind": handler.kind,
        "leasehold.queue": options?.queue ?? "default"
      }
    })
  )
})

/**
 * Enqueues a run from untyped input (a CLI flag, an HTTP body): the kind must be registered and
 * the payload must decode with its schema, or nothing is written.
 *
 * @category writes
 */
export const enqueueUnknown = Effect.fn("Client.enqueueUnknown")(function*(
  registry: Handler.Registry,
  kind: string,
  input: unknown,
  options?: EnqueueOptions
) {
  const handler = yield* Handler.lookup(registry, kind)
  const decoded = yield* Handler.decodePayload(handler, input)
  return yield* enqueue(handler, decoded, options)
})

/**
 * Resumes the suspended run with this id; `payload` becomes the outcome its `Run.awaitSignal`
 * returns. Returns the run id.
 *
 * @category writes
 */
export const resume = Effect.fn("Client.resume")(function*(runId: string, payload: unknown, actor?: Actor) {
  const store = yield* RunStore
  return yield* store.resumeById(runId, payload, actor)
})

/**
 * Resumes the suspended run that holds this signal token (the `token` of its `Run.awaitSignal`):
 * what a webhook or an approval link knows. Returns the run id.
 *
 * @category writes
 */
export const resumeByToken = Effect.fn("Client.resumeByToken")(
  function*(token: string, payload: unknown, actor?: Actor) {
    const store = yield* RunStore
    return yield* store.resumeByToken(token, payload, actor)
  }
)

/** Cancels a run; `actor`, an operator's, is recorded in its history. @category writes */
export const cancel = Effect.fn("Client.cancel")(function*(runId: string, actor?: Actor) {
  const store = yield* RunStore
  yield* store.cancel(runId, actor)
  if (yield* Telemetry.RecordMetrics) yield* Metric.update(WorkerMetrics.metrics.cancelled, 1)
})

/** Retries a failed or cancelled run; `actor`, an operator's, is recorded in its history. @category writes */
export const retry = Effect.fn("Client.retry")(function*(runId: string, actor?: Actor) {
  const store = yield* RunStore
  yield* store.retry(runId, actor)
})

/**
 * Pauses a queue: no claim takes anything from it until `resumeQueue`; runs already running
 * finish. False when it was paused already.
 *
 * @category writes
 */
export const pauseQueue = Effect.fn("Client.pauseQueue")(function*(queue: string) {
  const store = yield* RunStore
  return yield* store.pauseQueue(queue)
})

/**
 * Resumes a paused queue; idle workers are woken. False when it was not paused.
 *
 * @category writes
 */
export const resumeQueue = Effect.fn("Client.resumeQueue")(function*(queue: string) {
  const store = yield* RunStore
  return yield* store.resumeQueue(queue)
})
