/**
 * `npm run chaos -- [--minutes N | --seconds N] [--seed N] [--runs N] [--workers N] [--skew +7m]`: the
 * randomized fault run. Prints the seed (give it back to replay the same schedule), the faults
 * injected and the checker's verdict; exits 0 only on PASS.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { parseArgs } from "node:util"
import * as Chaos from "./Chaos.js"
import * as Plan from "./Plan.js"

const { values } = parseArgs({
  options: {
    minutes: { type: "string" },
    seconds: { type: "string" },
    seed: { type: "string" },
    runs: { type: "string" },
    workers: { type: "string" },
    skew: { type: "string", default: "+7m" }
  }
})

const number = (name: string, value: string | undefined, fallback: number) => {
  if (value === undefined) return fallback
  const n = Number(value)
  if (!Number.isFinite(n) || n <= 0) {
    process.stderr.write(`chaos: --${name} must be a positive number, got "${value}"\n`)
    process.exit(2)
  }
  return n
}

const faultSeconds = values.minutes !== undefined
  ? number("minutes", values.minutes, 1) * 60
  : number("seconds", values.seconds, 40)
const result = await Chaos.run({
  seed: number("seed", values.seed, Effect.runSync(Plan.freshSeed)),
  // About as much work as the workers get through while the nemesis acts.
  runs: number("runs", values.runs, Math.max(2000, Math.round(faultSeconds * 20))),
  workers: Math.max(3, number("workers", values.workers, 3)),
  faultSeconds,
  skew: values.skew!,
  log: (line) => process.stderr.write(`${new Date().toISOString().slice(11, 23)} ${line}\n`)
})
for (const line of Chaos.describe(result)) process.stdout.write(line + "\n")
process.exitCode = result.ok ? 0 : 1
