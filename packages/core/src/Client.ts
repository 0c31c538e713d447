/**
 * The application's side: enqueue runs with validated payloads, resume suspended runs, cancel and
 * retry. Thin over `RunStore`, with the handler registry to check kinds and payloads up front so
 * nothing invalid is written.
 *
 * @since 0.1.0
 */
import { Effect, Exit, Metric, Option } from "effect"
import { InvalidConfig, InvalidPayload, UnknownKind } from "./Errors.js"
import * as Handler from "./Handler.js"
import type { Actor } from "./OperatorActions.js"
import { checkEnqueueRequest, type Enqueued, type EnqueueRequest } from "./RunRecord.js"
import { type ResumeCheck, RunStore } from "./RunStore.js"
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
  const [enqueued] = yield* write([{ handler, payload: encoded, options }], handler.kind, options?.queue)
  return enqueued as Enqueued
})

/** Options of a batch, applied to each of its runs (an idempotency key is per run: `enqueueUnknownMany`). @category models */
export type EnqueueManyOptions = Omit<EnqueueOptions, "idempotencyKey">

/**
 * Enqueues a batch of runs of one handler's kind in one store call (one statement on PostgreSQL;
 * one transaction when a key limit or unique windows apply): every payload is encoded
 * through the handler's schema first, and one that does not encode fails the call with
 * `InvalidPayload` (naming its index) before anything is written. The batch is all or nothing:
 * inside the caller's transaction (`sql.withTransaction`) it commits or rolls back with it.
 * Returns one `Enqueued` per payload, in order.
 *
 * @category writes
 */
export const enqueueMany = Effect.fn("Client.enqueueMany")(function*<P>(
  handler: Handler.Handler<P>,
  payloads: ReadonlyArray<P>,
  options?: EnqueueManyOptions
) {
  const requests = yield* Effect.forEach(payloads, (payload, index) =>
    Handler.encodePayload(handler, payload).pipe(
      Effect.map((encoded): Pending => ({ handler, payload: encoded, options })),
      Effect.mapError((error) => new InvalidPayload({ kind: error.kind, issue: `payload ${index}: ${error.issue}` }))
    ))
  return yield* write(requests, handler.kind, options?.queue)
})

/** One run of a batch given as data (a line of a file, an element of a request body). @category models */
export interface UnknownRequest extends EnqueueOptions {
  readonly kind: string
  readonly payload: unknown
}

/**
 * Enqueues a batch given as data (the admin API's and the CLI's bulk enqueue) in one statement:
 * each kind must be registered, each payload must decode with its schema and each run's options
 * must pass `checkEnqueueRequest`, or the call fails naming the run's index and nothing is written.
 *
 * @category writes
 */
export const enqueueUnknownMany = Effect.fn("Client.enqueueUnknownMany")(function*(
  registry: Handler.Registry,
  requests: ReadonlyArray<UnknownRequest>
) {
  const pending: Array<Pending> = []
  for (const [index, { kind, payload, ...options }] of requests.entries()) {
    const checked = yield* Effect.gen(function*() {
      const handler = yield* Handler.lookup(registry, kind)
      const decoded = yield* Handler.decodePayload(handler, payload)
      yield* checkEnqueueRequest({ kind, payload, ...options })
      return { handler, payload: yield* Handler.encodePayload(handler, decoded), options }
    }).pipe(Effect.mapError((error) =>
      error._tag === "InvalidPayload"
        ? new InvalidPayload({ kind: error.kind, issue: `run ${index}: ${error.issue}` })
        : error._tag === "InvalidConfig"
        ? new InvalidConfig({ option: `runs[${index}].${error.option}`, issue: error.issue })
        : new UnknownKind({ kind: error.kind, known: error.known, index })
    ))
    pending.push(checked)
  }
  const kinds = [...new Set(requests.map((r) => r.kind))].join(",")
  const queues = [...new Set(requests.map((r) => r.queue ?? "default"))]
  return yield* write(pending, kinds, queues.length === 1 ? queues[0] : queues.join(","))
})

/** A run checked and encoded, not yet written. */
interface Pending {
  readonly handler: Handler.Handler
  readonly payload: unknown
  readonly options: EnqueueOptions | undefined
}

/** Writes checked runs in one store call, traced as one producer span when runs are traced. */
const write = Effect.fnUntraced(function*(runs: ReadonlyArray<Pending>, kind: string, queue: string | undefined) {
  const store = yield* RunStore
  const metered = yield* Telemetry.RecordMetrics
  const insert = (traceParent: string | undefined) =>
    store.enqueue(runs.map(({ handler, options, payload }) => ({
      ...options,
      kind: handler.kind,
      payload,
      maxAttempts: options?.maxAttempts ?? handler.maxAttempts,
      traceParent: options?.traceParent ?? traceParent
    }))).pipe(
      Effect.tap((enqueued) =>
        metered
          ? Effect.forEach(enqueued, (e, i) =>
            e.created
              ? Metric.update(
                Metric.withAttributes(WorkerMetrics.metrics.enqueued, {
                  queue: runs[i]!.options?.queue ?? "default",
                  kind: runs[i]!.handler.kind
                }),
                1
              )
              : Effect.void, { discard: true })
          : Effect.void
      )
    )
  if (!(yield* Telemetry.TraceRuns)) return yield* insert(undefined)
  // A producer span whose trace context travels with the runs to their consumer spans.
  return yield* Effect.flatMap(
    Effect.option(Effect.currentSpan),
    (span) => insert(Option.isSome(span) ? Telemetry.traceParentOf(span.value) : undefined)
  ).pipe(
    Effect.tap((enqueued) =>
      runs.length === 1
        ? Effect.annotateCurrentSpan({ "leasehold.run_id": enqueued[0]!.id, "leasehold.created": enqueued[0]!.created })
        : Effect.annotateCurrentSpan({ "messaging.batch.message_count": runs.length })
    ),
    Effect.withSpan(`leasehold.enqueue ${kind}`, {
      kind: "producer",
      attributes: {
        "messaging.system": "leasehold",
        "messaging.operation": "publish",
        "leasehold.kind": kind,
        "leasehold.queue": queue ?? "default"
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

/** Options of a resume. @category models */
export interface ResumeOptions {
  /**
   * The handlers to check the payload with: when the run's handler declares a schema for the
   * signal the run awaits, a payload that does not decode with it fails with `InvalidPayload`
   * and nothing is written (the store holds the run still between the check and the write).
   */
  readonly handlers?: Handler.Registry | undefined
  /** An operator's (`OperatorActions`): recorded with the run's `resumed` event. */
  readonly actor?: Actor | undefined
}

/**
 * Resumes the suspended run with this id; `payload` becomes the outcome its `Run.awaitSignal`
 * returns. Returns the run id. With `handlers`, the payload is checked against the schema the
 * run's handler declares for its signal first.
 *
 * @category writes
 */
export const resume = Effect.fn("Client.resume")(function*(runId: string, payload: unknown, options?: ResumeOptions) {
  const store = yield* RunStore
  return yield* store.resumeById(runId, payload, options?.actor, signalCheck(options?.handlers, payload))
})

/**
 * Resumes the suspended run that holds this signal token (the `token` of its `Run.awaitSignal`):
 * what a webhook or an approval link knows. Returns the run id. `handlers` as for `resume`.
 *
 * @category writes
 */
export const resumeByToken = Effect.fn("Client.resumeByToken")(function*(
  token: string,
  payload: unknown,
  options?: ResumeOptions
) {
  const store = yield* RunStore
  return yield* store.resumeByToken(token, payload, options?.actor, signalCheck(options?.handlers, payload))
})

/**
 * The check a resume runs against the run it would resume: the payload must decode with the
 * schema the run's handler declares for the signal it awaits (none declared: any JSON).
 *
 * @category validation
 */
export const signalCheck = (registry: Handler.Registry | undefined, payload: unknown): ResumeCheck | undefined =>
  registry === undefined ? undefined : ({ kind, signal }) => {
    const handler = registry.get(kind)
    return handler === undefined ? Exit.void : Handler.signalDecoder(handler, signal)(payload)
  }

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
