/**
 * The admin API under `/api`: runs, their history, enqueue, cancel / retry / resume (one run or in
 * bulk), stats, workers and a server-sent event stream of store notifications.
 *
 * Access: `Authorization: Bearer <token>` or basic auth with the token as password. Without a
 * token the API is open, which is allowed only on a loopback address. In read-only mode every
 * state-changing route answers 403. State-changing requests that do not carry a bearer token
 * (basic auth, which browsers send on their own, or none) must send the header
 * `x-leasehold-csrf` with the server's CSRF token (`GET /api/session`).
 *
 * @since 0.1.0
 */
import {
  Client,
  type DeleteCountChanged,
  InvalidConfig,
  type InvalidPayload,
  type InvalidTransition,
  isForPerson,
  isWorkflowRun,
  Limits,
  type LiveLease,
  OperatorActions,
  type PayloadFieldFilter,
  RateLimits,
  type RunFilter,
  RunHistory,
  RunNotFound as RunNotFoundError,
  type RunRecord,
  type RunsBusy,
  RunState,
  RunStore,
  type ScheduleNotFound,
  Schedules,
  type SignalTokenNotFound,
  type StoreError,
  type StoreNotification,
  type UniqueWindow,
  type UnknownKind,
  type UnstorableValue,
  WorkflowJournal
} from "@leasehold/core"
import { ByteSize, Clock, Duration, Effect, Redacted, Schema, Stream } from "effect"
import { Sse } from "effect/encoding"
import { HttpIncomingMessage, HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { PrometheusMetrics } from "effect/observability"
import { randomBytes } from "node:crypto"
import { type Credential, minSecretLength, singleTokenName } from "./Credentials.js"
import { Handlers } from "./Handlers.js"
import { type Access, admit, unauthorized, wrongHost } from "./internal/Auth.js"
import * as EventHub from "./internal/EventHub.js"
import { constantTimeEqualText } from "./internal/Hmac.js"
import { isJsonContentType, json, problem, secure, securityHeaders, storeFailureResponse } from "./internal/Http.js"
import * as Queues from "./internal/Queues.js"
import * as RunSearch from "./internal/RunSearch.js"
import { encodeDecision, personDeferred, withSignalSchema } from "./internal/SignalSchemas.js"
import * as SignedUrls from "./internal/SignedUrls.js"
import * as StoreGauges from "./internal/StoreGauges.js"

/** @category models */
export interface AdminOptions {
  /** `LEASEHOLD_ADMIN_TOKEN`: bearer token, or basic-auth password; a read-write credential named `admin`. */
  readonly token?: Redacted.Redacted<string> | undefined
  /**
   * Named credentials (`Credentials`, `LEASEHOLD_ADMIN_TOKENS`), beside `token`: each request's
   * secret names who acts (recorded with every write it makes), and a read-only one gets 403 on
   * every write.
   */
  readonly credentials?: ReadonlyArray<Credential> | undefined
  /** Every state-changing route answers 403. */
  readonly readOnly?: boolean | undefined
  /**
   * The address the server is bound to. Without a token only a loopback address is allowed
   * (`127.0.0.1`, `::1`, `localhost`); anything else fails with `InvalidConfig`.
   */
  readonly host: string
  /** The CSRF token; a random one per process by default. */
  readonly csrfToken?: string | undefined
  /** Largest accepted request body in bytes. Default 1 MiB. */
  readonly maxBodySize?: number | undefined
  /**
   * Open `/api/events` streams at once (default `defaultMaxEventStreams`); one more is answered
   * 503 with `Retry-After`. Every stream shares the server's one LISTEN connection.
   */
  readonly maxEventStreams?: number | undefined
  /** Workflows' journals (`WorkflowDecisions`); without it a suspended workflow is only refused as an approval. */
  readonly workflows?: WorkflowDecisions | undefined
  /**
   * Where a run's trace is shown (Jaeger, Tempo, Honeycomb): a URL with `{traceId}` (and
   * optionally `{spanId}`) in it, which the console fills in from the run's stored `traceparent`.
   * For example `http://localhost:16686/trace/{traceId}`. Without it the trace id is shown unlinked.
   */
  readonly traceUrl?: string | undefined
}

/**
 * What the admin API reads and writes of workflows' journals (`@leasehold/sql` WorkflowJournal:
 * `awaiting`, and `deferredDone` with the decision as the deferred's success): with it, a run
 * page names the deferreds and clocks a suspended workflow waits on, and a workflow that awaits a
 * deferred meant for a person (`isForPerson`) is an approval whose Approve completes that deferred.
 *
 * @category models
 */
export interface WorkflowDecisions {
  readonly awaiting: (
    executions: ReadonlyArray<string>
  ) => Effect.Effect<
    ReadonlyArray<{ readonly execution: string; readonly name: string; readonly wakeAt: Date | null }>,
    StoreError
  >
  /** Completes the deferred with `value` as its success; false when it was done already. */
  readonly decide: (execution: string, deferred: string, value: unknown) => Effect.Effect<boolean, StoreError>
  /** The execution's journal (`WorkflowJournal.journal`), shown on its run's page. */
  readonly journal?: ((execution: string) => Effect.Effect<ReadonlyArray<unknown>, StoreError>) | undefined
  /**
   * The deferreds meant for a person (`DurableDeferred.make("person/...", { success })`): the
   * approval form of a workflow awaiting one is built from its success schema, and a decision that
   * does not decode with it is refused (400, nothing written). Without it the form is
   * `{ approved, note }` and the decision is recorded as sent.
   */
  readonly deferreds?: ReadonlyArray<{ readonly name: string; readonly successSchema: Schema.Top }> | undefined
}

/** A workflow run's page lists at most this many child workflows (the oldest first). @category constants */
export const maxChildrenShown = 100

/** Open event streams a server allows by default. @category constants */
export const defaultMaxEventStreams = 64

/** Whether `host` is a loopback address. @category predicates */
export const isLoopback = (host: string): boolean =>
  host === "localhost" || host === "::1" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host)

/** The header that carries the CSRF token. @category constants */
export const csrfHeader = "x-leasehold-csrf"

type Failure =
  | DeleteCountChanged
  | RunsBusy
  | RunNotFoundError
  | ScheduleNotFound
  | SignalTokenNotFound
  | InvalidTransition
  | InvalidPayload
  | UnknownKind
  | InvalidConfig
  | UnstorableValue
  | StoreError
  | BadRequest

/** A request the API cannot act on, answered with `status` (the problem's `error` code and `message`). */
class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", {
  error: Schema.String,
  message: Schema.String,
  status: Schema.Number
}) {}

const badRequest = (error: string, message: string, status = 400) => new BadRequest({ error, message, status })

const badInput = {
  InvalidPayload: "invalid-payload",
  UnknownKind: "unknown-kind",
  InvalidConfig: "invalid-option",
  UnstorableValue: "unstorable"
} as const

const answer = (error: unknown): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  const failure = error as Failure
  switch (failure._tag) {
    case "BadRequest":
      return Effect.succeed(problem(failure.status, failure.error, failure.message))
    case "RunNotFound":
    case "ScheduleNotFound":
    case "SignalTokenNotFound":
      return Effect.succeed(problem(404, "not-found", failure.message))
    case "InvalidTransition":
      return Effect.succeed(problem(409, "invalid-transition", failure.message))
    case "DeleteCountChanged":
      return Effect.succeed(problem(409, "count-changed", failure.message))
    case "RunsBusy":
      return Effect.succeed(problem(409, "runs-running", failure.message))
    case "InvalidPayload":
    case "UnknownKind":
    case "InvalidConfig":
    case "UnstorableValue":
      return Effect.succeed(problem(400, badInput[failure._tag], failure.message))
    case "StoreError":
      return storeFailureResponse(failure, "admin request", "the store failed; try again")
    default:
      // Not one of the reasons above: a fault, reported as such without its details.
      return Effect.as(Effect.logError("admin request failed", error), problem(500, "internal", "internal error"))
  }
}

/**
 * The body decoded with `schema` (415 unless its content type is JSON, 413 past `limit`, 400 when
 * not JSON or not matching).
 */
const body = <S extends Schema.Constraint & { readonly DecodingServices: never }>(schema: S, limit: number) =>
  Effect.andThen(
    jsonContentType,
    HttpServerRequest.schemaBodyJson(schema).pipe(
      Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(limit)),
      Effect.mapError((error) =>
        error._tag === "SchemaError"
          ? badRequest("invalid-request", error.message.split("\n").join(" "))
          : error.reason._tag === "RequestParseError" && error.reason.reason === "BodyTooLarge"
          ? badRequest("body-too-large", `the body is larger than ${limit} bytes`, 413)
          : badRequest("invalid-json", "the body is not JSON")
      )
    ) as Effect.Effect<S["Type"], BadRequest, HttpServerRequest.HttpServerRequest>
  )

/** 415 unless the request declares a JSON body. */
const jsonContentType: Effect.Effect<void, BadRequest, HttpServerRequest.HttpServerRequest> = Effect.flatMap(
  HttpServerRequest.HttpServerRequest,
  (request) =>
    isJsonContentType(request.headers["content-type"])
      ? Effect.void
      : Effect.fail(
        badRequest(
          "unsupported-media-type",
          "the body must be JSON: content-type application/json (or application/<x>+json), UTF-8",
          415
        )
      )
)

const isRunState = Schema.is(RunState)

const EnqueueBody = Schema.Struct({
  kind: Schema.String,
  payload: Schema.optional(Schema.Unknown),
  queue: Schema.optional(Schema.String),
  priority: Schema.optional(Schema.Number),
  delayMs: Schema.optional(Schema.Number),
  maxAttempts: Schema.optional(Schema.Number),
  attemptTimeoutMs: Schema.optional(Schema.Number),
  /** The run's deadline as an ISO 8601 time; or `deadlineAfterMs`, from the enqueue. */
  deadlineAt: Schema.optional(Schema.String),
  deadlineAfterMs: Schema.optional(Schema.Number),
  idempotencyKey: Schema.optional(Schema.String),
  concurrencyKey: Schema.optional(Schema.String),
  /** A uniqueness window (core `UniqueWindow`): its states are checked by the enqueue, which names a bad one. */
  unique: Schema.optional(Schema.Struct({
    key: Schema.optional(Schema.String),
    states: Schema.optional(Schema.Array(Schema.String)),
    periodMs: Schema.optional(Schema.Number)
  }))
})

const ResumeBody = Schema.Struct({ payload: Schema.optional(Schema.Unknown) })

/** Most runs one bulk enqueue may carry (`POST /api/runs/bulk/enqueue`). @category constants */
export const maxBulkEnqueue = 10_000

/** A bulk enqueue's body: the runs, each as `POST /api/runs` takes one (at most `maxBulkEnqueue`). */
const BulkEnqueueBody = Schema.Struct({
  runs: Schema.Array(EnqueueBody).check(Schema.isMinLength(1), Schema.isMaxLength(maxBulkEnqueue))
})

/** Most runs a bulk action may name by id. @category constants */
export const maxBulkIds = 1000

const BulkBody = Schema.Struct({
  state: Schema.optional(RunState),
  kind: Schema.optional(Schema.String),
  queue: Schema.optional(Schema.String),
  /** The runs selected, by id (at most `maxBulkIds`). */
  ids: Schema.optional(Schema.Array(Schema.String).check(Schema.isMaxLength(maxBulkIds))),
  /** `{ "<field>": "<value>" }`: as `payload.<field>=<value>` in the runs list. */
  payload: Schema.optional(Schema.Record(Schema.String, Schema.String))
})

/**
 * A delete by filter: `dryRun` counts (`{ count, busy }`); `expected`, the count confirmed, deletes.
 * Beside the bulk actions' filter, the runs list's search fields (`key`, `error`, `from`, `to`).
 */
const DeleteBody = Schema.Struct({
  ...BulkBody.fields,
  key: Schema.optional(Schema.String),
  error: Schema.optional(Schema.String),
  from: Schema.optional(Schema.String),
  to: Schema.optional(Schema.String),
  dryRun: Schema.optional(Schema.Boolean),
  expected: Schema.optional(Schema.Number)
})

/** A bulk action's filter from its body: at least one selection, and ids that are run ids. */
const bulkFilter = (
  action: string,
  requested: typeof BulkBody.Type,
  search: Partial<RunFilter> = {}
): Effect.Effect<RunFilter, BadRequest> => {
  const { ids, kind, queue, state } = requested
  const payload = Object.entries(requested.payload ?? {}).map(([field, value]) => ({ path: field.split("."), value }))
  if (
    state === undefined && kind === undefined && queue === undefined && payload.length === 0 && ids === undefined &&
    Object.keys(search).length === 0
  ) {
    return Effect.fail(
      badRequest("invalid-request", `bulk ${action} needs ids, or a state, kind, queue or payload filter`)
    )
  }
  const badId = ids?.find((id) => !/^[0-9]{1,18}$/.test(id))
  if (badId !== undefined) {
    return Effect.fail(badRequest("invalid-request", `ids: ${JSON.stringify(badId)} is not a run id (digits)`))
  }
  return Effect.succeed({ ...search, state, kind, queue, payload, ids })
}

const ScheduleBody = Schema.Struct({
  cron: Schema.String,
  kind: Schema.String,
  timeZone: Schema.optional(Schema.String),
  queue: Schema.optional(Schema.String),
  payload: Schema.optional(Schema.Record(Schema.String, Schema.Unknown)),
  missed: Schema.optional(Schema.Literals(["skip", "once", "all"])),
  maxBackfill: Schema.optional(Schema.Number),
  /** Milliseconds. */
  backfillWindowMs: Schema.optional(Schema.Number)
})

/** A rate limit's body (`PUT /api/rate-limits/:scope/:name`): starts per interval, in milliseconds. */
const RateLimitBody = Schema.Struct({
  limit: Schema.Number,
  intervalMs: Schema.Number,
  perKey: Schema.optional(Schema.Boolean)
})

/** The documented limit of each path parameter that names something (`Limits`); ids and scopes are checked where used. */
const paramLimits: Readonly<Record<string, number>> = {
  queue: Limits.maxQueueBytes,
  // A schedule's name, or a rate limit's queue or kind: 255 bytes each.
  name: Limits.maxScheduleNameBytes,
  token: Limits.maxSignalTokenBytes
}

/** A path parameter; one over its documented limit is a 400 (`invalid-option`) naming it, before anything is read or written. */
const param = (name: string) =>
  Effect.flatMap(HttpRouter.params, (params) => {
    const value = params[name] ?? ""
    const max = paramLimits[name]
    const issue = max === undefined ? undefined : Limits.textIssue(value, max)
    // The store's own error for the same value, so a path and a body are refused alike.
    return issue === undefined ? Effect.succeed(value) : Effect.fail(new InvalidConfig({ option: name, issue }))
  })

const single = (value: string | ReadonlyArray<string> | undefined): string | undefined =>
  typeof value === "string" ? value : value?.[0]

const wholeNumber = (name: string, text: string | undefined, fallback: number, min: number, max: number) => {
  if (text === undefined) return Effect.succeed(fallback)
  const n = Number(text)
  return Number.isInteger(n) && n >= min && n <= max
    ? Effect.succeed(n)
    : Effect.fail(badRequest("invalid-request", `${name} must be a whole number from ${min} to ${max}`))
}

const sseEvent = (event: string, data: string) => Sse.encoder.write({ _tag: "Event", event, id: undefined, data })

const eventName: Record<StoreNotification["_tag"], string> = {
  Subscribed: "ready",
  RunsAvailable: "runs-available",
  RunCancelled: "run-cancelled",
  SchedulesChanged: "schedules-changed"
}

/** Who a request is: how it authenticated, and the actor its writes are recorded under. */
interface Who {
  readonly access: Access
  readonly actor: OperatorActions.Actor
}

/** The actor of a request to a server without credentials (open, on loopback only). @category constants */
export const openServerActor = "local"

/**
 * The admin routes, added to the application's `HttpRouter`. Requires `RunStore` and `Handlers`
 * (enqueue checks kinds and payloads against them). Fails with `InvalidConfig` when there is no
 * token and the host is not a loopback address.
 *
 * @category layers
 */
export const layer = (options: AdminOptions) =>
  HttpRouter.use(Effect.fnUntraced(function*(router) {
    if (options.token !== undefined && Redacted.value(options.token).length < minSecretLength) {
      return yield* new InvalidConfig({
        option: "LEASEHOLD_ADMIN_TOKEN",
        issue: `needs at least ${minSecretLength} characters`
      })
    }
    const credentials: ReadonlyArray<Credential> = [
      ...(options.token === undefined ? [] : [{ name: singleTokenName, scope: "rw" as const, secret: options.token }]),
      ...(options.credentials ?? [])
    ]
    for (const c of options.credentials ?? []) {
      const issue = OperatorActions.actorNameIssue(c.name) ??
        (Redacted.value(c.secret).length < minSecretLength
          ? `its secret needs at least ${minSecretLength} characters`
          : undefined)
      if (issue !== undefined) {
        return yield* new InvalidConfig({ option: "LEASEHOLD_ADMIN_TOKENS", issue: `credential ${c.name}: ${issue}` })
      }
    }
    if (new Set(credentials.map((c) => c.name)).size < credentials.length) {
      return yield* new InvalidConfig({ option: "LEASEHOLD_ADMIN_TOKENS", issue: "two credentials have the same name" })
    }
    if (credentials.length === 0 && !isLoopback(options.host)) {
      return yield* new InvalidConfig({
        option: "LEASEHOLD_ADMIN_TOKEN",
        issue: `is required when the admin API is bound to ${options.host}, not a loopback address`
      })
    }
    const readOnly = options.readOnly ?? false
    const csrfToken = options.csrfToken ?? randomBytes(32).toString("base64url")
    const limit = options.maxBodySize ?? 1024 * 1024
    const maxEventStreams = options.maxEventStreams ?? defaultMaxEventStreams
    if (!Number.isInteger(maxEventStreams) || maxEventStreams < 1) {
      return yield* new InvalidConfig({
        option: "maxEventStreams",
        issue: `${maxEventStreams} is not a whole number of at least 1`
      })
    }
    // One LISTEN connection for every event stream of this server, opened by the first of them.
    const hub = yield* EventHub.make(maxEventStreams)

    /**
     * Authentication, read-only mode and CSRF, then the route with who is asking; failures become
     * their status.
     */
    const guard = <R>(
      write: boolean,
      handler: (who: Who) => Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, R>
    ) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const admitted = admit(request.headers, credentials)
        if (admitted === undefined) return unauthorized()
        if (admitted === "wrong-host") return wrongHost()
        const access = admitted.access
        if (write && readOnly) return problem(403, "read-only", "this server is read-only")
        if (write && admitted.credential?.scope === "ro") {
          return problem(403, "read-only-token", `the credential ${admitted.credential.name} is read-only`)
        }
        if (write && access !== "bearer") {
          const presented = request.headers[csrfHeader]
          if (presented === undefined || !constantTimeEqualText(presented, csrfToken)) {
            return problem(403, "csrf", `state-changing requests need the ${csrfHeader} header (GET /api/session)`)
          }
        }
        // A bearer token is a program's (the API's); basic auth, or none, a browser's (the console's).
        const actor: OperatorActions.Actor = {
          name: admitted.credential?.name ?? openServerActor,
          via: access === "bearer" ? "api" : "console"
        }
        return yield* Effect.catch(handler({ access, actor }), answer)
      }).pipe(Effect.map(secure))

    const ok = (id: string) => json(200, { id })
    /** An action not about one run, in the audit (`RunStore.recordAction`). */
    const audit = (actor: OperatorActions.Actor, action: string, target: string, detail: unknown) =>
      Effect.flatMap(RunStore, (store) => store.recordAction({ actor, action, target, detail }))
    const deferredSchemas = new Map((options.workflows?.deferreds ?? []).map((d) => [d.name, d.successSchema] as const))

    // What suspended workflows wait on, by execution (none without `workflows`).
    const workflowViews = (runs: ReadonlyArray<RunRecord>) =>
      Effect.gen(function*() {
        const executions = runs.filter((r) => r.state === "suspended" && isWorkflowRun(r)).map((r) => r.idempotencyKey!)
        const views = new Map<string, Array<{ name: string; forPerson: boolean; wakeAt: Date | null }>>()
        if (executions.length === 0 || options.workflows === undefined) return views
        for (const a of yield* options.workflows.awaiting(executions)) {
          views.set(a.execution, [...(views.get(a.execution) ?? []), {
            name: a.name,
            forPerson: isForPerson(a.name) && a.wakeAt === null,
            wakeAt: a.wakeAt
          }])
        }
        return views
      })
    const withWorkflow = (
      run: RunRecord,
      views: Map<string, ReadonlyArray<{ readonly name: string; readonly forPerson: boolean }>>
    ) =>
      isWorkflowRun(run)
        ? {
          ...run,
          workflow: {
            execution: run.idempotencyKey,
            awaiting: views.get(run.idempotencyKey!) ?? [],
            // Its result as its workflow's outcome (Effect's encoded `Workflow.Result` is in `result`).
            outcome: WorkflowJournal.outcomeOf(run.result) ?? null
          }
        }
        : run

    /** A run with its history read into attempts, suspensions and refused writes, its journal and children. */
    const runDetail = (id: string) =>
      Effect.gen(function*() {
        const store = yield* RunStore
        const run = yield* store.get(id)
        const events = yield* store.history(id)
        // The handler's own lines of its attempts (AttemptLogs): user data, rendered as text.
        const attemptLogs = yield* store.attemptLogs(id)
        const views = yield* workflowViews([run])
        const journal = isWorkflowRun(run) && options.workflows?.journal !== undefined
          ? yield* options.workflows.journal(run.idempotencyKey!)
          : null
        // A workflow's children: the runs whose payload names its execution as their parent
        // (what a child wakes when it ends), enqueued after it, so read forward from its id.
        const children = isWorkflowRun(run)
          ? (yield* store.list({
            payload: [{ path: ["parent"], value: run.idempotencyKey! }],
            after: run.id,
            limit: maxChildrenShown
          }))
            .map((child) => ({
              id: child.id,
              kind: child.kind,
              state: child.state,
              execution: child.idempotencyKey,
              createdAt: child.createdAt,
              finishedAt: child.finishedAt
            }))
            .reverse()
          : null
        const registry = yield* Handlers
        // Read as attempts, suspensions and refused writes here, as `leasehold runs show` reads
        // it: the console shows this story, and the raw events beside it.
        const history = RunHistory.fromEvents(events)
        // A workflow's suspensions are named by what they waited for, not by the run's `wake/<fence>`.
        const waits = views.get(run.idempotencyKey ?? "") ?? []
        const suspensions = isWorkflowRun(run)
          ? history.suspensions.map((s) => ({
            ...s,
            waitedFor: s.outcome === "waiting"
              ? waits.length === 0 ? "its journal" : waits.map((w) => w.name).join(", ")
              : WorkflowJournal.waitEndedBy(s)
          }))
          : history.suspensions
        const attempts = isWorkflowRun(run)
          ? history.attempts.map((a) => {
            const suspension = a.outcome === "suspended" ? suspensions.find((s) => s.fence === a.fence) : undefined
            return suspension !== undefined && "waitedFor" in suspension
              ? { ...a, detail: `waiting on ${suspension.waitedFor}` }
              : a
          })
          : history.attempts
        return {
          run: withSignalSchema(registry, deferredSchemas, withWorkflow(run, views)),
          history: { ...history, attempts, suspensions, events },
          attemptLogs,
          journal,
          children
        }
      })

    yield* router.addAll([
      HttpRouter.route(
        "GET",
        "/api/session",
        guard(
          false,
          ({ access, actor }) =>
            Effect.succeed(
              json(200, { csrfToken, readOnly, auth: access, as: actor.name, traceUrl: options.traceUrl ?? null })
            )
        )
      ),

      HttpRouter.route(
        "GET",
        "/api/runs",
        guard(false, () =>
          Effect.gen(function*() {
            const query = yield* HttpServerRequest.ParsedSearchParams
            const stateText = single(query.state)
            if (stateText !== undefined && !isRunState(stateText)) {
              const states = RunState.literals.join(", ")
              return yield* Effect.fail(badRequest("invalid-request", `state must be one of ${states}`))
            }
            const state = stateText
            const kind = single(query.kind)
            const queue = single(query.queue)
            for (
              const [name, value, max] of [["kind", kind, Limits.maxKindBytes], [
                "queue",
                queue,
                Limits.maxQueueBytes
              ]] as const
            ) {
              const issue = value === undefined ? undefined : Limits.textIssue(value, max)
              if (issue !== undefined) return yield* Effect.fail(badRequest("invalid-request", `${name} ${issue}`))
            }
            const pageSize = yield* wholeNumber("limit", single(query.limit), 50, 1, 500)
            const offset = yield* wholeNumber("offset", single(query.offset), 0, 0, 1_000_000)
            // Keyset cursors: the runs older (`before`) or newer (`after`) than a run id.
            const before = single(query.before)
            const after = single(query.after)
            for (const [name, cursor] of [["before", before], ["after", after]] as const) {
              if (cursor !== undefined && !/^[0-9]{1,18}$/.test(cursor)) {
                return yield* Effect.fail(badRequest("invalid-request", `${name} must be a run id (digits)`))
              }
            }
            const payload: Array<PayloadFieldFilter> = []
            for (const [key, value] of Object.entries(query)) {
              if (!key.startsWith("payload.")) continue
              const path = key.slice("payload.".length).split(".")
              if (path.some((part) => part === "")) {
                return yield* Effect.fail(badRequest("invalid-request", `${key} is not payload.<field>`))
              }
              for (const v of typeof value === "string" ? [value] : value) payload.push({ path, value: v })
            }
            const search = yield* Effect.mapError(
              RunSearch.fromQuery(query),
              (issue) => badRequest("invalid-request", issue)
            )
            const store = yield* RunStore
            // A search by error text or payload without `from` looks back a window (ADR 0030),
            // said in the answer's `createdFrom`.
            const filter = RunSearch.withDefaultWindow({
              state,
              kind,
              queue,
              payload,
              limit: pageSize,
              offset,
              before,
              after,
              ...search
            }, yield* Clock.currentTimeMillis)
            const runs = yield* store.list(filter)
            const views = yield* workflowViews(runs)
            // `next`: the cursor of the older page (the last id of a full page).
            const next = runs.length === pageSize ? runs.at(-1)!.id : null
            const registry = yield* Handlers
            return json(
              200,
              SignedUrls.mask({
                runs: runs.map((run) => withSignalSchema(registry, deferredSchemas, withWorkflow(run, views))),
                limit: pageSize,
                offset,
                before: before ?? null,
                after: after ?? null,
                createdFrom: filter.createdFrom?.toISOString() ?? null,
                next
              }).value
            )
          }))
      ),

      HttpRouter.route(
        "POST",
        "/api/runs",
        guard(true, () =>
          Effect.gen(function*() {
            const { deadlineAt, kind, payload, unique, ...options } = yield* body(EnqueueBody, limit)
            const registry = yield* Handlers
            const enqueued = yield* Client.enqueueUnknown(registry, kind, payload ?? {}, {
              ...options,
              // A time that does not parse is an invalid date, refused by the store's check (400).
              ...(deadlineAt === undefined ? {} : { deadlineAt: new Date(deadlineAt) }),
              ...(unique === undefined ? {} : { unique: unique as UniqueWindow })
            })
            return json(enqueued.created ? 201 : 200, enqueued)
          }))
      ),

      // All or nothing: every run is checked (kind, payload, options) before the one statement
      // that writes them; the first that fails is named by its index and nothing is written.
      HttpRouter.route(
        "POST",
        "/api/runs/bulk/enqueue",
        guard(true, () =>
          Effect.gen(function*() {
            const { runs } = yield* body(BulkEnqueueBody, limit)
            const enqueued = yield* Client.enqueueUnknownMany(
              yield* Handlers,
              runs.map(({ deadlineAt, payload, unique, ...run }) => ({
                ...run,
                payload: payload ?? {},
                ...(deadlineAt === undefined ? {} : { deadlineAt: new Date(deadlineAt) }),
                ...(unique === undefined ? {} : { unique: unique as UniqueWindow })
              }))
            )
            return json(enqueued.some((e) => e.created) ? 201 : 200, { runs: enqueued })
          }))
      ),

      // Signatures masked: a read must not hand out what resumes a run (SignedUrls).
      HttpRouter.route(
        "GET",
        "/api/runs/:id",
        guard(false, () =>
          Effect.gen(function*() {
            const { urls, value } = SignedUrls.mask(yield* runDetail(yield* param("id")))
            return json(200, { ...(value as object), signedUrls: urls.map((u) => u.masked) })
          }))
      ),

      // The run's signed URLs whole, each beside its masked form: a write, so read-only servers
      // refuse it and a browser sends the CSRF header (the console's "Copy" on a run page).
      HttpRouter.route(
        "POST",
        "/api/runs/:id/signed-urls",
        guard(true, () =>
          Effect.gen(function*() {
            const { urls } = SignedUrls.mask(yield* runDetail(yield* param("id")))
            return json(200, { urls })
          }))
      ),

      HttpRouter.route(
        "POST",
        "/api/runs/:id/cancel",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const id = yield* param("id")
            yield* Client.cancel(id, actor)
            return ok(id)
          }))
      ),

      HttpRouter.route(
        "POST",
        "/api/runs/:id/retry",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const id = yield* param("id")
            yield* Client.retry(id, actor)
            return ok(id)
          }))
      ),

      HttpRouter.route(
        "POST",
        "/api/runs/:id/resume",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const id = yield* param("id")
            const { payload } = yield* body(ResumeBody, limit)
            // A workflow waits on its journal: resuming its run would only replay it and suspend
            // again, with the deferred it waits on still not done.
            const target = yield* Effect.flatMap(RunStore, (store) => store.get(id))
            if (target.state === "suspended" && isWorkflowRun(target)) {
              // Approve completes the one deferred meant for a person it waits on (isForPerson).
              const awaited = (yield* workflowViews([target])).get(target.idempotencyKey!) ?? []
              const forPerson = awaited.filter((a) => a.forPerson)
              const deferred = personDeferred({ ...target, workflow: { awaiting: awaited } })
              if (deferred !== undefined && options.workflows !== undefined) {
                // Only what decodes with the deferred's schema is recorded, in its encoded form.
                const value = yield* encodeDecision(deferredSchemas, target, deferred, payload ?? null)
                const done = yield* options.workflows.decide(target.idempotencyKey!, deferred, value)
                if (done) {
                  yield* Effect.flatMap(
                    RunStore,
                    (store) =>
                      store.recordAction({
                        actor,
                        action: "workflow.decide",
                        target: `run ${id}`,
                        detail: { deferred }
                      })
                  )
                }
                if (!done) {
                  return yield* Effect.fail(
                    badRequest("already-decided", `deferred "${deferred}" of run ${id} was completed already`, 409)
                  )
                }
                return json(200, { id, deferred })
              }
              return yield* Effect.fail(badRequest(
                "workflow-run",
                forPerson.length > 1
                  ? `run ${id} is a workflow waiting on several deferreds meant for a person (${
                    forPerson.map((a) => a.name).join(", ")
                  }): complete the one you mean (DurableDeferred.done)`
                  : `run ${id} is a workflow waiting on its journal (a deferred or a durable clock), not on a person: ` +
                    "complete the deferred it waits on (DurableDeferred.done, or its callback URL); resuming the run would only replay it",
                409
              ))
            }
            // A handler that declares the signal's schema gets only what decodes with it (400 otherwise).
            return ok(yield* Client.resume(id, payload ?? null, { handlers: yield* Handlers, actor }))
          }))
      ),

      HttpRouter.route(
        "POST",
        "/api/tokens/:token/resume",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const signalToken = yield* param("token")
            const { payload } = yield* body(ResumeBody, limit)
            return ok(yield* Client.resumeByToken(signalToken, payload ?? null, { handlers: yield* Handlers, actor }))
          }))
      ),

      ...(["cancel", "retry"] as const).map((action) =>
        HttpRouter.route(
          "POST",
          `/api/runs/bulk/${action}`,
          guard(true, ({ actor }) =>
            Effect.gen(function*() {
              const filter = yield* bulkFilter(action, yield* body(BulkBody, limit))
              const store = yield* RunStore
              const affected = yield* (action === "cancel"
                ? store.cancelMany(filter, actor)
                : store.retryMany(filter, actor))
              return json(200, { affected })
            }))
        )
      ),

      // Deletes: a count first (dryRun), then the delete of that many (409 count-changed when the
      // filter selects another count now, nothing deleted; 409 runs-running while one is running).
      HttpRouter.route(
        "POST",
        "/api/runs/bulk/delete",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const requested = yield* body(DeleteBody, limit)
            const { error, from, key, to } = requested
            const search = yield* Effect.mapError(
              RunSearch.fromQuery({ key, error, from, to }),
              (issue) => badRequest("invalid-request", issue)
            )
            const filter = yield* bulkFilter("delete", requested, search)
            const store = yield* RunStore
            if (requested.dryRun === true) return json(200, yield* store.countDeletable(filter))
            const expected = requested.expected
            if (expected === undefined || !Number.isInteger(expected) || expected < 0) {
              return yield* Effect.fail(badRequest(
                "invalid-request",
                "a delete needs expected: the count a dryRun answered (a whole number), or dryRun: true"
              ))
            }
            return json(200, yield* store.deleteRuns({ filter, expected, actor }))
          }))
      ),

      HttpRouter.route(
        "DELETE",
        "/api/runs/:id",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const id = yield* param("id")
            const store = yield* RunStore
            if (!/^[0-9]{1,18}$/.test(id)) return yield* Effect.fail(new RunNotFoundError({ runId: id }))
            const deleted = yield* store.deleteRuns({ filter: { ids: [id] }, expected: 1, actor }).pipe(
              Effect.catchTag("DeleteCountChanged", () => Effect.fail(new RunNotFoundError({ runId: id }))),
              Effect.catchTag("RunsBusy", () =>
                Effect.fail(
                  badRequest("run-running", `run ${id} is running: cancel it first, then delete it`, 409)
                ))
            )
            return json(200, { id, ...deleted })
          }))
      ),

      // The operators' audit, newest first: actions not about one run, and deletes.
      HttpRouter.route(
        "GET",
        "/api/actions",
        guard(false, () =>
          Effect.gen(function*() {
            const query = yield* HttpServerRequest.ParsedSearchParams
            const pageSize = yield* wholeNumber("limit", single(query.limit), 50, 1, 500)
            const before = single(query.before)
            if (before !== undefined && !/^[0-9]{1,18}$/.test(before)) {
              return yield* Effect.fail(badRequest("invalid-request", "before must be an action id (digits)"))
            }
            const store = yield* RunStore
            const actions = yield* store.actions({ limit: pageSize, before })
            return json(200, { actions, next: actions.length === pageSize ? actions.at(-1)!.id : null })
          }))
      ),

      HttpRouter.route(
        "GET",
        "/api/queues/paused",
        guard(false, () =>
          Effect.gen(function*() {
            const store = yield* RunStore
            return json(200, { paused: yield* store.pausedQueues })
          }))
      ),

      ...(["pause", "resume"] as const).map((action) =>
        HttpRouter.route(
          "POST",
          `/api/queues/:queue/${action}`,
          guard(true, ({ actor }) =>
            Effect.gen(function*() {
              const queue = yield* param("queue")
              const changed = yield* (action === "pause" ? Client.pauseQueue(queue) : Client.resumeQueue(queue))
              yield* audit(actor, `queue.${action}`, queue, { changed })
              return json(200, { queue, paused: action === "pause", changed })
            }))
        )
      ),

      HttpRouter.route(
        "GET",
        "/api/schedules",
        guard(false, () =>
          Effect.gen(function*() {
            const store = yield* RunStore
            const schedules = yield* Effect.forEach(yield* store.schedules, (s) =>
              Effect.gen(function*() {
                // The last tick's run, by its idempotency key (one index lookup per schedule).
                const [lastRun] = s.lastTick === null
                  ? []
                  : yield* store.list({ idempotencyKey: Schedules.tickKey(s.name, s.lastTick), limit: 1 })
                return {
                  ...s,
                  nextTicks: s.paused ? [] : [s.nextTick, ...Schedules.upcoming(s, s.nextTick, 2)],
                  lastRun: lastRun === undefined
                    ? null
                    : { id: lastRun.id, state: lastRun.state, finishedAt: lastRun.finishedAt }
                }
              }))
            return json(200, SignedUrls.mask({ schedules }).value)
          }))
      ),

      HttpRouter.route(
        "PUT",
        "/api/schedules/:name",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const name = yield* param("name")
            const { backfillWindowMs, ...definition } = yield* body(ScheduleBody, limit)
            const store = yield* RunStore
            const [registered] = yield* store.registerSchedules([{
              ...definition,
              name,
              backfillWindow: backfillWindowMs === undefined ? undefined : Duration.millis(backfillWindowMs)
            }])
            // The definition without its payload (a schedule's payload may carry data).
            yield* audit(actor, "schedule.register", name, {
              outcome: registered!.outcome,
              cron: definition.cron,
              kind: definition.kind
            })
            return json(registered!.outcome === "created" ? 201 : 200, registered)
          }))
      ),

      ...(["pause", "resume"] as const).map((action) =>
        HttpRouter.route(
          "POST",
          `/api/schedules/:name/${action}`,
          guard(true, ({ actor }) =>
            Effect.gen(function*() {
              const name = yield* param("name")
              const store = yield* RunStore
              const changed = yield* (action === "pause" ? store.pauseSchedule(name) : store.resumeSchedule(name))
              yield* audit(actor, `schedule.${action}`, name, { changed })
              return json(200, { name, paused: action === "pause", changed })
            }))
        )
      ),

      HttpRouter.route(
        "GET",
        "/api/stats",
        guard(false, () =>
          Effect.gen(function*() {
            const store = yield* RunStore
            return json(200, yield* store.stats)
          }))
      ),

      // Prometheus's text format, behind the same access rules as the API: the store's live runs
      // and paused queues sampled at each scrape (from indexes only), then this process's own
      // metric registry.
      HttpRouter.route(
        "GET",
        "/metrics",
        guard(false, () =>
          Effect.gen(function*() {
            const store = yield* RunStore
            const [sample, paused, history] = yield* Effect.all([
              store.sample,
              store.pausedQueues,
              store.historyStatus
            ])
            const own = StoreGauges.withoutSampled(yield* PrometheusMetrics.format())
            const now = yield* Clock.currentTimeMillis
            return HttpServerResponse.text(StoreGauges.format(sample, paused, history, now) + own, {
              status: 200,
              contentType: "text/plain; version=0.0.4; charset=utf-8"
            })
          }))
      ),

      // Every worker process the registry lists (idle ones too), each with the leases it holds;
      // then the dead ones it still remembers (`gone: true`: killed, never retired), so a worker
      // killed with SIGKILL does not vanish without a trace; then owners of live leases that no
      // registry row names (a claim made by hand, a worker of an older version), `registered: false`.
      HttpRouter.route(
        "GET",
        "/api/workers",
        guard(false, () =>
          Effect.gen(function*() {
            const store = yield* RunStore
            const [leases, alive, gone] = yield* Effect.all([store.leases, store.workers, store.goneWorkers])
            const registered = [
              ...alive.map((w) => ({ ...w, gone: false })),
              ...gone.map((w) => ({ ...w, gone: true }))
            ]
            const byOwner = new Map<string, Array<LiveLease>>()
            for (const lease of leases) byOwner.set(lease.owner, [...(byOwner.get(lease.owner) ?? []), lease])
            const known = new Set(registered.map((w) => w.owner))
            return json(200, {
              workers: [
                ...registered.map((w) => ({ ...w, registered: true, leases: byOwner.get(w.owner) ?? [] })),
                ...[...byOwner].filter(([owner]) => !known.has(owner)).map(([owner, held]) => ({
                  owner,
                  registered: false,
                  leases: held
                }))
              ]
            })
          }))
      ),

      // Per queue: runs by state, the oldest due run's wait, whether it is paused, and the
      // completions and failures of the last minutes (RunStore.throughput).
      HttpRouter.route(
        "GET",
        "/api/queues",
        guard(false, () =>
          Effect.gen(function*() {
            const store = yield* RunStore
            const [stats, paused, registered, throughput] = yield* Effect.all([
              store.stats,
              store.pausedQueues,
              store.workers,
              store.throughput({ minutes: 5 })
            ])
            return json(200, { queues: Queues.overview(stats, paused, registered, throughput) })
          }))
      ),

      // What history the store keeps (ADR 0028): its ranges, the runs and bytes they hold by the
      // catalog's estimates, and since when the oldest one kept was created.
      HttpRouter.route(
        "GET",
        "/api/history",
        guard(false, () =>
          Effect.gen(function*() {
            const store = yield* RunStore
            return json(200, yield* store.historyStatus)
          }))
      ),

      HttpRouter.route(
        "GET",
        "/api/throughput",
        guard(false, () =>
          Effect.gen(function*() {
            const query = yield* HttpServerRequest.ParsedSearchParams
            const minutes = yield* wholeNumber("minutes", single(query.minutes), 60, 1, 1440)
            const store = yield* RunStore
            return json(200, yield* store.throughput({ minutes }))
          }))
      ),

      // Declared key limits, each with the keys waiting longest (RunStore.keyUsage).
      HttpRouter.route(
        "GET",
        "/api/limits",
        guard(false, () =>
          Effect.gen(function*() {
            const query = yield* HttpServerRequest.ParsedSearchParams
            const top = yield* wholeNumber("top", single(query.top), 10, 1, 100)
            const store = yield* RunStore
            const limits = yield* Effect.forEach(
              yield* store.keyLimits,
              (limit) => Effect.map(store.keyUsage(limit.scope, limit.name, top), (keys) => ({ ...limit, keys }))
            )
            return json(200, { limits, rateLimits: yield* store.rateLimits })
          }))
      ),

      // Rate limits (RateLimits): declared or replaced by PUT, removed by DELETE; a bad limit is a
      // 400 naming the option, and nothing is written.
      HttpRouter.route(
        "PUT",
        "/api/rate-limits/:scope/:name",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const scope = yield* param("scope")
            const name = yield* param("name")
            const { intervalMs, limit: perInterval, perKey } = yield* body(RateLimitBody, limit)
            const checked = yield* RateLimits.check({
              scope: scope as RateLimits.RateLimitScope,
              name,
              limit: perInterval,
              interval: intervalMs,
              perKey
            })
            const store = yield* RunStore
            yield* store.setRateLimits([{ ...checked, interval: checked.intervalMs }])
            yield* audit(actor, "rate-limit.set", `${checked.scope}:${checked.name}`, {
              limit: checked.limit,
              intervalMs: checked.intervalMs,
              perKey: checked.perKey
            })
            return json(200, checked)
          }))
      ),

      HttpRouter.route(
        "DELETE",
        "/api/rate-limits/:scope/:name",
        guard(true, ({ actor }) =>
          Effect.gen(function*() {
            const scope = yield* param("scope")
            const name = yield* param("name")
            if (scope !== "queue" && scope !== "kind") {
              return yield* Effect.fail(
                new InvalidConfig({ option: "scope", issue: `"${scope}" is not queue or kind` })
              )
            }
            const store = yield* RunStore
            const removed = yield* store.removeRateLimit(scope, name)
            yield* audit(actor, "rate-limit.remove", `${scope}:${name}`, { removed })
            return json(200, { scope, name, removed })
          }))
      ),

      HttpRouter.route(
        "GET",
        "/api/events",
        guard(false, () =>
          Effect.gen(function*() {
            const store = yield* RunStore
            const notifications = hub.subscribe(store)
            if (notifications === undefined) {
              return problem(
                503,
                "too-many-streams",
                `this server holds ${maxEventStreams} event streams already; try again later`,
                {
                  "retry-after": "10"
                }
              )
            }
            const events = notifications.pipe(
              Stream.map((note) => sseEvent(eventName[note._tag], JSON.stringify(note))),
              // An event now and then keeps proxies from closing a quiet stream.
              Stream.merge(Stream.map(Stream.drop(Stream.tick("15 seconds"), 1), () => sseEvent("ping", ""))),
              Stream.encodeText
            )
            return HttpServerResponse.stream(events, {
              contentType: "text/event-stream",
              headers: { ...securityHeaders, "cache-control": "no-store", "x-accel-buffering": "no" }
            })
          }))
      )
    ])
  }))
