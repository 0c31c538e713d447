/**
 * The consumer span of one attempt (docs/adr/0011-run-tracing.md): a child of the enqueue span on
 * the run's first claim (fence 1), a new trace linked to it on every later claim. Attributes follow
 * the OpenTelemetry messaging conventions plus the run's id, kind, queue, attempt, fence and owner.
 * The span is kept on the lease entry, so the heartbeat can record a lost lease on it.
 */
import { Clock, Context, Effect, Exit, Option } from "effect"
import type { RunStore } from "../RunStore.js"
import * as Telemetry from "../Telemetry.js"
import type { LeaseEntry } from "./InFlight.js"

export const consumer = <A, E, R>(
  entry: LeaseEntry,
  owner: string,
  attempt: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const run = entry.run
  const enqueued = Telemetry.spanOf(run.traceParent)
  // The first claim of a run: fence 1, or a promoted server's floor (a multiple of 2^32, ADR 0016),
  // which also makes the first claim on a new timeline a child of the enqueue span.
  const first = run.fence === 1 || run.fence % 2 ** 32 === 0
  // Made and ended here rather than by Effect.withSpan: an attempt abandoned (its lease lost, its
  // final write refused) ends as an interruption or a success, which would leave the span's status
  // unset or ok; it is ended as an error with the reason instead.
  return Effect.flatMap(
    Effect.makeSpan(`leasehold.run ${run.kind}`, {
      kind: "consumer",
      ...(enqueued === undefined
        ? {}
        : first
        ? { parent: enqueued }
        : { root: true, links: [{ span: enqueued, attributes: { "leasehold.link": "enqueued" } }] }),
      attributes: {
        "messaging.system": "leasehold",
        "messaging.operation": "process",
        "messaging.destination.name": run.queue,
        "leasehold.run_id": run.id,
        "leasehold.kind": run.kind,
        "leasehold.queue": run.queue,
        "leasehold.attempt": run.attempt,
        "leasehold.fence": run.fence,
        "leasehold.owner": owner,
        "leasehold.via": run.via
      }
    }),
    (span) => {
      entry.span = span
      return Effect.onExit(
        Effect.withParentSpan(attempt, span),
        (exit) =>
          Effect.clockWith((clock) =>
            Effect.sync(() =>
              span.end(
                clock.currentTimeNanosUnsafe(),
                entry.abandoned === undefined ? exit : Exit.fail(new AttemptAbandoned(entry.abandoned))
              )
            )
          )
      )
    }
  )
}

/** The error an abandoned attempt's span ends with: its message is the reason. */
class AttemptAbandoned extends Error {
  override readonly name = "AttemptAbandoned"
}

/**
 * `effect` with no span of its own and none of its statements' spans, recorded afterwards as one
 * root span named `name` only when `worth(exit)`: a poll that found nothing makes no trace (an
 * idle worker polls every second), one that took runs or failed makes one. The span is made
 * after the fact with its real start, so its statements' own spans are not in it.
 */
export const recordedIf = <A, E, R>(
  name: string,
  attributes: Record<string, unknown>,
  worth: (exit: Exit.Exit<A, E>) => boolean,
  annotate: (value: A) => Record<string, unknown>,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.flatMap(
    Clock.currentTimeNanos,
    (startTime) =>
      Effect.flatMap(Effect.exit(Effect.withTracerEnabled(effect, false)), (exit) =>
        !worth(exit) ?
          exit :
          Effect.flatMap(Effect.tracer, (tracer) =>
            Effect.flatMap(Clock.currentTimeNanos, (endTime) => {
              const span = tracer.span({
                name,
                parent: Option.none(),
                annotations: Context.empty(),
                links: [],
                startTime,
                kind: "internal",
                root: true,
                sampled: true
              })
              for (const [key, value] of Object.entries(attributes)) {
                span.attribute(key, value)
              }
              if (Exit.isSuccess(exit)) {
                for (const [key, value] of Object.entries(annotate(exit.value))) span.attribute(key, value)
              }
              span.end(endTime, exit)
              return exit
            })))
  )

/** The runtime's claim with no trace at all: spans are made by `runtimeStatements` only. */
export const untracedClaim = (store: RunStore["Service"]): RunStore["Service"] => ({
  ...store,
  claim: (request) => Effect.withTracerEnabled(store.claim(request), false)
})

/**
 * The store with the runtime's batch statements (claim, renew, completion) each in a span; a
 * claim only when it took runs or failed. Their SQL makes no span of its own (a batch's span says
 * what it did), and neither does the rest of the runtime's background work (registry, schedules):
 * database spans are those of traced runs and of the client.
 */
export const runtimeStatements = (store: RunStore["Service"]): RunStore["Service"] => ({
  ...store,
  claim: (request) =>
    recordedIf(
      "leasehold.claim",
      { "leasehold.limit": request.limit, "leasehold.sweep": request.dueOnly !== true },
      (exit) => Exit.isFailure(exit) || exit.value.length > 0,
      (claimed) => ({ "leasehold.batch_size": claimed.length }),
      store.claim(request)
    ),
  renew: (owner, leases, ttl) =>
    Effect.tap(
      Effect.withTracerEnabled(store.renew(owner, leases, ttl), false),
      (renewed) => Effect.annotateCurrentSpan("leasehold.renewed", renewed.length)
    ).pipe(
      Effect.withSpan("leasehold.renew", { attributes: { "leasehold.batch_size": leases.length } })
    ),
  completeBatch: (items, next) =>
    Effect.withTracerEnabled(store.completeBatch(items, next), false).pipe(
      Effect.withSpan("leasehold.complete", { attributes: { "leasehold.batch_size": items.length } })
    )
})

/**
 * Which runs are traced at `rate`: decided from the run id (a multiplicative hash), so every
 * attempt of a run is traced or none is, and the decision costs no random draw.
 */
export const sampler = (rate: number): (runId: string) => boolean => {
  if (rate >= 1) return () => true
  if (rate <= 0) return () => false
  const threshold = Math.floor(rate * 2 ** 32)
  return (runId) => (Math.imul(Number(runId) | 0, 0x9e3779b1) >>> 0) < threshold
}
