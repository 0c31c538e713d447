/**
 * The runs list's search fields beyond state, kind, queue and payload: a run id, a concurrency
 * key, text in the error, and a creation time range (`RunFilter`).
 */
import { Limits, type RunFilter } from "@leasehold/core"
import { Effect } from "effect"

type Query = Readonly<Record<string, string | ReadonlyArray<string> | undefined>>

const single = (value: string | ReadonlyArray<string> | undefined): string | undefined =>
  typeof value === "string" ? value : value?.[0]

/** Longest error text searched for, in bytes. */
export const maxErrorTextBytes = 200

/**
 * How far back a search by error text or by a payload field looks when it names no `from`: the
 * runs created in the last hour (ADR 0030). Such a search reads each run of its window, so its
 * cost follows the window's runs, never the whole history; a `from` widens or narrows it.
 */
export const defaultSearchWindowMs = 60 * 60 * 1000

/**
 * The filter with the default window applied: a search by error text or payload without a
 * creation start looks back `defaultSearchWindowMs` from `now`.
 */
export const withDefaultWindow = <F extends Partial<RunFilter>>(filter: F, now: number): F =>
  filter.createdFrom === undefined && (filter.errorText !== undefined || (filter.payload ?? []).length > 0)
    ? { ...filter, createdFrom: new Date(now - defaultSearchWindowMs) }
    : filter

const time = (name: string, text: string | undefined): Effect.Effect<Date | undefined, string> => {
  if (text === undefined || text === "") return Effect.succeed(undefined)
  const at = new Date(text)
  return Number.isNaN(at.getTime())
    ? Effect.fail(`${name} must be a date and time (ISO 8601), not ${JSON.stringify(text)}`)
    : Effect.succeed(at)
}

/**
 * `id`, `key`, `error`, `from`, `to` of a runs query, checked: the issue in one line, for a 400.
 * An empty field is no filter.
 */
export const fromQuery = (query: Query): Effect.Effect<Partial<RunFilter>, string> =>
  Effect.gen(function*() {
    const id = single(query.id)?.trim()
    if (id !== undefined && id !== "" && !/^#?[0-9]{1,18}$/.test(id)) {
      return yield* Effect.fail(`id must be a run id (digits), not ${JSON.stringify(id)}`)
    }
    const key = single(query.key)
    const keyIssue = key === undefined || key === "" ? undefined : Limits.textIssue(key, Limits.maxConcurrencyKeyBytes)
    if (keyIssue !== undefined) return yield* Effect.fail(`key ${keyIssue}`)
    const error = single(query.error)
    const errorIssue = error === undefined || error === "" ? undefined : Limits.textIssue(error, maxErrorTextBytes)
    if (errorIssue !== undefined) return yield* Effect.fail(`error ${errorIssue}`)
    const createdFrom = yield* time("from", single(query.from))
    const createdTo = yield* time("to", single(query.to))
    return {
      ...(id === undefined || id === "" ? {} : { ids: [id.replace(/^#/, "")] }),
      ...(key === undefined || key === "" ? {} : { concurrencyKey: key }),
      ...(error === undefined || error === "" ? {} : { errorText: error }),
      ...(createdFrom === undefined ? {} : { createdFrom }),
      ...(createdTo === undefined ? {} : { createdTo })
    }
  })
