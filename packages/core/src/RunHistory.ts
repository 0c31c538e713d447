/**
 * A run's history (`run_history`: stored rows plus what the run row records) read as a story: the attempts (each under its own fence and
 * owner, from claim to outcome), the suspensions and how each ended, the stale writes the fence
 * rejected, and operator actions. Pure: `leasehold runs show` prints it and the admin API sends it
 * to the console, so both read a history the same way.
 *
 * @since 0.1.0
 */
import type { RunEvent } from "./RunRecord.js"

/** How an attempt ended. `running` means it has not ended yet. */
export type AttemptOutcome =
  | "running"
  | "completed"
  | "failed"
  | "retry_scheduled"
  | "released"
  | "snoozed"
  | "suspended"
  | "lease_expired"
  | "cancelled"

/** One claim of the run: the fence it was granted, by whom, and what became of it. */
export interface Attempt {
  readonly fence: number
  readonly owner: string | null
  /** How the run was taken: a due run, an expired lease, or a suspension whose deadline passed. */
  readonly via: "claimed" | "reclaimed" | "signal_timed_out"
  readonly start: Date
  readonly end: Date | null
  readonly outcome: AttemptOutcome
  readonly detail: string | null
}

/** A wait for a signal, and how it ended. */
export interface Suspension {
  readonly fence: number
  readonly signal: string | null
  readonly deadline: string | null
  readonly suspendedAt: Date
  readonly endedAt: Date | null
  readonly outcome: "waiting" | "resumed" | "timed_out" | "cancelled"
  /** The resume payload, for a resumed suspension. */
  readonly payload: unknown
}

/** A write whose fence had been superseded, refused by the database. */
export interface RejectedWrite {
  readonly at: Date
  readonly operation: string
  readonly presentedFence: number
  readonly storedFence: number | null
}

/**
 * A transition an operator or the application made: cancel or retry (both advance the fence), or
 * a resume an operator made. `by` and `via`: who and from where (`OperatorActions.Actor`), null
 * when the application's code made it.
 */
export interface AdminAction {
  readonly at: Date
  readonly action: "cancelled" | "retried" | "resumed"
  readonly fence: number
  readonly by: string | null
  readonly via: string | null
}

export interface RunHistory {
  readonly attempts: ReadonlyArray<Attempt>
  readonly suspensions: ReadonlyArray<Suspension>
  readonly rejectedWrites: ReadonlyArray<RejectedWrite>
  readonly adminActions: ReadonlyArray<AdminAction>
}

const field = (detail: unknown, name: string): unknown =>
  typeof detail === "object" && detail !== null ? (detail as Record<string, unknown>)[name] : undefined

const errorMessage = (detail: unknown): string | null => {
  const error = field(detail, "error")
  const message = field(error, "message")
  return typeof message === "string" ? message : error === undefined || error === null ? null : JSON.stringify(error)
}

const textOrNull = (value: unknown): string | null => value === undefined || value === null ? null : String(value)

const actorOf = (detail: unknown) => ({
  by: textOrNull(field(detail, "by")),
  via: textOrNull(field(detail, "via"))
})

/** Reads the events (in the order they were written) into attempts, suspensions and rejections. */
export const fromEvents = (events: ReadonlyArray<RunEvent>): RunHistory => {
  const attempts: Array<Attempt> = []
  const suspensions: Array<Suspension> = []
  const rejectedWrites: Array<RejectedWrite> = []
  const adminActions: Array<AdminAction> = []
  let open: Omit<Attempt, "end" | "outcome" | "detail"> | undefined
  let waiting: Omit<Suspension, "endedAt" | "outcome" | "payload"> | undefined

  const endAttempt = (at: Date, outcome: AttemptOutcome, detail: string | null) => {
    if (open !== undefined) attempts.push({ ...open, end: at, outcome, detail })
    open = undefined
  }
  const endSuspension = (at: Date, outcome: Suspension["outcome"], payload: unknown) => {
    if (waiting !== undefined) suspensions.push({ ...waiting, endedAt: at, outcome, payload })
    waiting = undefined
  }

  for (const e of events) {
    switch (e.kind) {
      case "claimed":
      case "reclaimed":
      case "signal_timed_out": {
        if (e.kind === "signal_timed_out") endSuspension(e.at, "timed_out", null)
        // A reclaim supersedes a holder whose lease expired: its attempt ends here.
        endAttempt(e.at, "lease_expired", `reclaimed under fence ${e.fence}`)
        open = { fence: e.fence, owner: e.owner, via: e.kind, start: e.at }
        break
      }
      case "completed":
        endAttempt(e.at, "completed", null)
        break
      case "failed":
        // Either the holder's own failure (same fence), or the claim that found an expired
        // lease with no attempts left (a higher fence).
        if (open !== undefined && open.fence === e.fence) endAttempt(e.at, "failed", errorMessage(e.detail))
        else endAttempt(e.at, "lease_expired", "no attempts left: run failed")
        break
      case "retry_scheduled":
        endAttempt(e.at, "retry_scheduled", errorMessage(e.detail))
        break
      case "released":
        endAttempt(e.at, "released", null)
        break
      case "snoozed": {
        const runAt = textOrNull(field(e.detail, "runAt"))
        endAttempt(e.at, "snoozed", runAt === null ? null : `due again at ${runAt}`)
        break
      }
      case "suspended": {
        const signal = textOrNull(field(e.detail, "signal"))
        endAttempt(e.at, "suspended", signal === null ? null : `awaiting "${signal}"`)
        waiting = { fence: e.fence, signal, deadline: textOrNull(field(e.detail, "deadline")), suspendedAt: e.at }
        break
      }
      case "resumed":
        endSuspension(e.at, "resumed", field(e.detail, "payload") ?? null)
        // An operator's resume says who; a signal delivered by the application's code does not.
        if (field(e.detail, "by") !== undefined) {
          adminActions.push({ at: e.at, action: "resumed", fence: e.fence, ...actorOf(e.detail) })
        }
        break
      case "cancelled":
        endAttempt(e.at, "cancelled", `fence advanced to ${e.fence}`)
        endSuspension(e.at, "cancelled", null)
        adminActions.push({ at: e.at, action: "cancelled", fence: e.fence, ...actorOf(e.detail) })
        break
      case "retried":
        adminActions.push({ at: e.at, action: "retried", fence: e.fence, ...actorOf(e.detail) })
        break
      case "stale_write_rejected": {
        const stored = field(e.detail, "storedFence")
        rejectedWrites.push({
          at: e.at,
          operation: textOrNull(field(e.detail, "operation")) ?? "write",
          presentedFence: e.fence,
          storedFence: stored === null || stored === undefined ? null : Number(stored)
        })
        break
      }
    }
  }
  if (open !== undefined) attempts.push({ ...open, end: null, outcome: "running", detail: null })
  if (waiting !== undefined) suspensions.push({ ...waiting, endedAt: null, outcome: "waiting", payload: null })
  return { attempts, suspensions, rejectedWrites, adminActions }
}
