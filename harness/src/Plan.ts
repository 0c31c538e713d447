/**
 * The chaos run's plan, drawn up front from its seed with Effect's seeded `Random`
 * (`Random.withSeed`): the mix of runs to enqueue and the nemesis's schedule of faults. The plan
 * is a pure function of the seed and the options, so the same seed replays the same mix and the
 * same schedule, however the run's timing goes.
 *
 * @since 0.1.0
 */
import { Effect, Random } from "effect"

export type Fault = "kill" | "pause" | "partition" | "reset" | "restart-db"

export const faults: ReadonlyArray<Fault> = ["kill", "pause", "partition", "reset", "restart-db"]

export interface Request {
  readonly kind: string
  readonly payload: unknown
  readonly maxAttempts: number
}

/**
 * One nemesis step: wait `waitMs`, then inflict `fault` on worker slot `slot`. `ms` is how long
 * the fault lasts: how long a killed worker stays dead, a paused one stopped, a partition stands
 * or the database stays down (0 for a connection reset).
 */
export interface Step {
  readonly waitMs: number
  readonly fault: Fault
  readonly slot: number
  readonly ms: number
}

export interface Plan {
  readonly seed: number
  readonly requests: ReadonlyArray<Request>
  /** More steps than the nemesis can take in `faultSeconds` (each waits at least `minWaitMs`). */
  readonly steps: ReadonlyArray<Step>
}

export interface PlanOptions {
  readonly seed: number
  readonly runs: number
  readonly workers: number
  readonly faultSeconds: number
}

/** The shortest wait before a step. */
export const minWaitMs = 300

/** One of the values, with probability proportional to its weight. */
const pick = <A>(weighted: ReadonlyArray<readonly [A, number]>): Effect.Effect<A> =>
  Effect.map(Random.next, (next) => {
    let roll = next * weighted.reduce((sum, [, w]) => sum + w, 0)
    for (const [value, weight] of weighted) {
      roll -= weight
      if (roll < 0) return value
    }
    return weighted[weighted.length - 1]![0]
  })

const request: Effect.Effect<Request> = Effect.gen(function*() {
  const workMs = yield* Random.nextIntBetween(100, 600)
  const shape = yield* pick<string>([["plain", 65], ["checkpoint", 10], ["flaky", 10], ["doomed", 3], ["approval", 12]])
  switch (shape) {
    case "approval":
      return { kind: "approval", payload: {}, maxAttempts: 10 }
    case "doomed":
      return { kind: "chaos-step", payload: { workMs: 20, failAttempts: 99 }, maxAttempts: 2 }
    case "flaky":
      return {
        kind: "chaos-step",
        payload: { workMs, failAttempts: yield* Random.nextIntBetween(1, 2) },
        maxAttempts: 10
      }
    default:
      return { kind: "chaos-step", payload: { workMs, checkpoint: shape === "checkpoint" }, maxAttempts: 10 }
  }
})

/** How long each kind of fault lasts, in milliseconds. */
const duration = (fault: Fault): Effect.Effect<number> => {
  switch (fault) {
    case "kill":
      return Random.nextIntBetween(200, 1500)
    case "pause":
      return Random.nextIntBetween(1700, 3500) // longer than the chaos run's 1.5 s TTL
    case "partition":
      return Random.nextIntBetween(500, 4000)
    case "reset":
      return Effect.succeed(0)
    case "restart-db":
      return Random.nextIntBetween(300, 2000)
  }
}

/**
 * The plan for `options.seed`. Every kind of fault comes once first (in seeded order), so even a
 * short run covers them all; then faults are drawn by weight. The schedule is drawn before the
 * runs, so it depends only on the seed and the number of workers: a longer run with the same seed
 * (`--minutes 10 --seed N`) starts with the short run's schedule.
 */
export const make = (options: PlanOptions): Effect.Effect<Plan> =>
  Effect.gen(function*() {
    const firsts = yield* Random.shuffle(faults)
    const count = Math.ceil((options.faultSeconds * 1000) / minWaitMs) + 1
    const steps: Array<Step> = []
    for (let i = 0; i < count; i++) {
      const waitMs = yield* Random.nextIntBetween(minWaitMs, 1500)
      const fault = firsts[i] ??
        (yield* pick<Fault>([["kill", 25], ["pause", 20], ["partition", 25], ["reset", 10], ["restart-db", 20]]))
      const slot = yield* Random.nextIntBetween(0, options.workers - 1)
      steps.push({ waitMs, fault, slot, ms: yield* duration(fault) })
    }
    const requests = yield* Effect.replicateEffect(request, options.runs)
    return { seed: options.seed, requests, steps }
  }).pipe(Random.withSeed(options.seed))

/** A seed for a new schedule (printed, so the run can be replayed). */
export const freshSeed: Effect.Effect<number> = Random.nextIntBetween(1, 2 ** 31 - 1)
