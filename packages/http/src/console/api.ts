// The admin API as the console calls it: JSON reads, and writes that carry the CSRF header.

export type RunState = "pending" | "running" | "suspended" | "completed" | "failed" | "cancelled"
export const STATES: ReadonlyArray<RunState> = ["pending", "running", "suspended", "completed", "failed", "cancelled"]
/** The states `/api/stats` counts (ADR 0030): ended runs are counted per minute by `/api/throughput`. */
export const LIVE_STATES: ReadonlyArray<RunState> = ["pending", "running", "suspended"]

export interface Awaited {
  readonly name: string
  readonly forPerson: boolean
  readonly wakeAt: string | null
}

export interface Run {
  readonly id: string
  readonly queue: string
  readonly kind: string
  readonly payload: unknown
  readonly priority: number
  readonly runAt: string
  readonly state: RunState
  readonly attempt: number
  readonly maxAttempts: number
  readonly fence: number
  readonly leaseOwner: string | null
  readonly leaseExpiresAt: string | null
  readonly checkpoint: unknown
  readonly result: unknown
  readonly error: unknown
  readonly signalName: string | null
  readonly signalToken: string | null
  readonly suspendDeadline: string | null
  readonly idempotencyKey: string | null
  readonly concurrencyKey: string | null
  readonly waitingForKey: boolean
  readonly traceParent: string | null
  /** The attempt timeout set at enqueue (ms), overriding its handler's; null: the handler's, if any. */
  readonly attemptTimeoutMs: number | null
  /** When the run fails for good if it has not finished, by the store's clock. */
  readonly deadline: string | null
  readonly createdAt: string
  readonly updatedAt: string
  readonly finishedAt: string | null
  readonly workflow?: {
    readonly execution: string
    readonly awaiting: ReadonlyArray<Awaited>
    readonly outcome?: WorkflowOutcome | null
  }
  /** The JSON Schema document of the signal it waits for, when its handler declares one. */
  readonly signalSchema?: JsonSchemaDocument
}

export interface JsonSchemaDocument {
  readonly schema: JsonSchema
  readonly definitions?: Readonly<Record<string, JsonSchema>>
}

export interface JsonSchema {
  readonly type?: string | ReadonlyArray<string>
  readonly properties?: Readonly<Record<string, JsonSchema>>
  readonly required?: ReadonlyArray<string>
  readonly enum?: ReadonlyArray<unknown>
  readonly anyOf?: ReadonlyArray<JsonSchema>
  readonly oneOf?: ReadonlyArray<JsonSchema>
  readonly minimum?: number
  readonly maximum?: number
  readonly exclusiveMinimum?: number
  readonly exclusiveMaximum?: number
  readonly minLength?: number
  readonly maxLength?: number
  readonly description?: string
  readonly title?: string
  readonly $ref?: string
}

export interface Attempt {
  readonly fence: number
  readonly owner: string | null
  readonly via: string
  readonly start: string
  readonly end: string | null
  readonly outcome: string
  readonly detail: string | null
}

export interface Suspension {
  readonly fence: number
  readonly signal: string | null
  readonly suspendedAt: string
  readonly deadline: string | null
  readonly endedAt: string | null
  readonly outcome: string
  readonly payload: unknown
  /** A workflow's suspension: what it waited for (its signal, `wake/<fence>`, names nothing). */
  readonly waitedFor?: string
}

/** A workflow run's result as its workflow's outcome (core WorkflowJournal.outcomeOf). */
export type WorkflowOutcome =
  | { readonly _tag: "Succeeded"; readonly value: unknown }
  | { readonly _tag: "Failed"; readonly error: unknown }
  | { readonly _tag: "Died"; readonly defect: unknown }
  | { readonly _tag: "Interrupted" }

export interface RunEvent {
  readonly id: string
  readonly kind: string
  readonly fence: number
  readonly owner: string | null
  readonly detail: unknown
  readonly at: string
}

export type JournalEntry =
  | {
    readonly type: "activity"
    readonly name: string
    readonly attempt: number
    readonly fence: number
    readonly exit: unknown
    readonly at: string
  }
  | {
    readonly type: "deferred"
    readonly name: string
    readonly exit: unknown
    readonly done: boolean
    readonly at: string
  }
  | { readonly type: "clock"; readonly name: string; readonly wakeAt: string; readonly fired: boolean }

export interface RunDetail {
  readonly run: Run
  readonly history: {
    readonly attempts: ReadonlyArray<Attempt>
    readonly suspensions: ReadonlyArray<Suspension>
    readonly rejectedWrites: ReadonlyArray<
      {
        readonly at: string
        readonly operation: string
        readonly presentedFence: number
        readonly storedFence: number | null
      }
    >
    readonly adminActions: ReadonlyArray<
      {
        readonly at: string
        readonly action: string
        readonly fence: number
        readonly by: string | null
        readonly via: string | null
      }
    >
    readonly events: ReadonlyArray<RunEvent>
  }
  readonly journal: ReadonlyArray<JournalEntry> | null
  /** The handler's kept log lines, one entry per attempt that kept any, oldest claim first. */
  readonly attemptLogs?: ReadonlyArray<AttemptLog>
  /** A workflow run's child workflows (their runs), oldest first; null for other runs. */
  readonly children?: ReadonlyArray<ChildRun> | null
  /** The signed URLs the run holds, as shown (signature masked); `POST .../signed-urls` gives them whole. */
  readonly signedUrls?: ReadonlyArray<string>
}

export interface AttemptLog {
  readonly fence: number
  readonly attempt: number
  readonly outcome: string
  readonly dropped: number
  readonly at: string
  readonly lines: ReadonlyArray<LogLine>
}

export interface LogLine {
  readonly level: string
  readonly at: string
  readonly message: string
  readonly annotations: Readonly<Record<string, string>>
  readonly cut: number
}

export interface ChildRun {
  readonly id: string
  readonly kind: string
  readonly state: string
  readonly execution: string | null
  readonly createdAt: string
  readonly finishedAt: string | null
}

export interface Lease {
  readonly owner: string
  readonly runId: string
  readonly fence: number
  readonly kind: string
  readonly queue: string
  readonly attempt: number
  readonly expiresInMs: number
}

export interface Worker {
  readonly owner: string
  readonly registered: boolean
  readonly host?: string
  readonly pid?: number
  readonly version?: string
  readonly queues?: ReadonlyArray<string>
  readonly kinds?: ReadonlyArray<string>
  readonly concurrency?: number
  readonly runsHeld?: number
  readonly startedAt?: string
  readonly lastHeartbeatAt?: string
  readonly expiresAt?: string
  /** Dead (its heartbeat stopped, it never retired) and still remembered by the registry. */
  readonly gone?: boolean
  readonly leases: ReadonlyArray<Lease>
}

export interface Stats {
  readonly byStateAndQueue: ReadonlyArray<{ readonly queue: string; readonly state: RunState; readonly count: number }>
  readonly liveLeases: number
  readonly oldestPendingSeconds: number | null
  readonly fenceRejections: number
  readonly reclaims: number
}

/** `/api/history`: what history the store keeps (ADR 0028); runs and bytes are the catalog's estimates. */
export interface History {
  readonly ranges: ReadonlyArray<
    { readonly table: string; readonly from: string; readonly to: string; readonly createdAt: string }
  >
  readonly runs: number
  readonly bytes: number
  readonly oldestKeptAt: string | null
}

export interface Percentiles {
  readonly p50: number
  readonly p95: number
  readonly p99: number
}

export interface Throughput {
  readonly since: string
  readonly minutes: number
  readonly series: ReadonlyArray<{
    readonly queue: string
    readonly minute: string
    readonly completed: number
    readonly failed: number
    readonly waitMs: Percentiles | null
    readonly runMs: Percentiles | null
  }>
  readonly truncated: boolean
}

export interface Queue {
  readonly queue: string
  readonly counts: Readonly<Record<RunState, number>>
  readonly paused: boolean
  readonly pausedSince: string | null
  readonly due: number
  readonly oldestDueSeconds: number | null
  readonly completedPerMinute: number
  readonly failedPerMinute: number
  readonly workers: number
}

export interface Schedule {
  readonly name: string
  readonly cron: string
  readonly timeZone: string
  readonly kind: string
  readonly queue: string
  readonly missed: "skip" | "once" | "all"
  readonly maxBackfill: number
  readonly backfillWindowMs: number
  readonly paused: boolean
  readonly nextTick: string
  readonly lastTick: string | null
  readonly nextTicks: ReadonlyArray<string>
  readonly lastRun: { readonly id: string; readonly state: RunState; readonly finishedAt: string | null } | null
}

export interface KeyLimit {
  readonly scope: "queue" | "kind"
  readonly name: string
  readonly perKey: number
  readonly keysRunning: number
  readonly keyedDue: number
  readonly keys: ReadonlyArray<
    {
      readonly key: string
      readonly held: number
      readonly waiting: number
      readonly oldestWaitingSeconds: number | null
    }
  >
}

export interface RateLimit {
  readonly scope: "queue" | "kind"
  readonly name: string
  readonly limit: number
  readonly intervalMs: number
  readonly perKey: boolean
  readonly startedInWindow: number
  readonly due: number
}

export interface Session {
  readonly csrfToken: string
  readonly readOnly: boolean
  readonly traceUrl: string | null
}

export class ApiError extends Error {
  constructor(readonly status: number, message: string) {
    super(message)
  }
}

const readError = async (response: Response): Promise<string> => {
  try {
    const body = (await response.json()) as { message?: unknown; error?: unknown }
    return typeof body.message === "string"
      ? body.message
      : typeof body.error === "string"
      ? body.error
      : JSON.stringify(body)
  } catch {
    return response.statusText || `HTTP ${response.status}`
  }
}

export const get = async <A>(path: string): Promise<A> => {
  const response = await fetch(path, { headers: { accept: "application/json" }, credentials: "same-origin" })
  if (!response.ok) throw new ApiError(response.status, await readError(response))
  return (await response.json()) as A
}

let session: Promise<Session> | undefined

/** The server's session facts (CSRF token, read-only, trace URL), asked for once. */
export const getSession = (): Promise<Session> => {
  session ??= get<Session>("/api/session").catch((error: unknown) => {
    session = undefined
    throw error
  })
  return session
}

/** The CSRF token: from the page's meta tag when the server filled it in, else from GET /api/session. */
const csrf = async (): Promise<string> => {
  const meta = document.querySelector("meta[name=\"leasehold-csrf\"]")?.getAttribute("content")
  if (meta) return meta
  return (await getSession()).csrfToken
}

export const post = async <A = unknown>(path: string, body: unknown = {}): Promise<A | null> => {
  const response = await fetch(path, {
    method: "POST",
    headers: { accept: "application/json", "content-type": "application/json", "x-leasehold-csrf": await csrf() },
    credentials: "same-origin",
    body: JSON.stringify(body)
  })
  if (!response.ok) throw new ApiError(response.status, await readError(response))
  return response.status === 204 ? null : ((await response.json().catch(() => null)) as A | null)
}

/** A DELETE with the CSRF header; throws `ApiError` on a refusal. */
export const remove = async <A = unknown>(path: string): Promise<A | null> => {
  const response = await fetch(path, {
    method: "DELETE",
    headers: { accept: "application/json", "x-leasehold-csrf": await csrf() },
    credentials: "same-origin"
  })
  if (!response.ok) throw new ApiError(response.status, await readError(response))
  return (await response.json().catch(() => null)) as A | null
}

export interface RunsQuery {
  readonly state?: string
  readonly kind?: string
  readonly queue?: string
  readonly id?: string
  readonly key?: string
  readonly error?: string
  readonly from?: string
  readonly to?: string
  readonly field?: string
  readonly value?: string
  readonly field2?: string
  readonly value2?: string
  readonly limit?: number
  readonly before?: string
  readonly after?: string
}

export const runsPath = (query: RunsQuery): string => {
  const params = new URLSearchParams()
  for (
    const name of ["state", "kind", "queue", "id", "key", "error", "from", "to", "limit", "before", "after"] as const
  ) {
    const value = query[name]
    if (value !== undefined && value !== "") params.set(name, String(value))
  }
  // Payload fields, each compared as text (several are all required: `payload.a=1&payload.b=2`).
  for (const [field, value] of [[query.field, query.value], [query.field2, query.value2]] as const) {
    if (field && value !== undefined && value !== "") params.append(`payload.${field}`, value)
  }
  return `/api/runs?${params}`
}

export const runPath = (id: string) => `/api/runs/${encodeURIComponent(id)}`

/** One line of the operators' audit (`GET /api/actions`). */
export interface OperatorAction {
  readonly id: string
  readonly at: string
  readonly by: string
  readonly via: string
  readonly action: string
  readonly target: string
  readonly detail: unknown
}
