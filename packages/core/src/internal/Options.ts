/** Option parsing that fails with `InvalidConfig` instead of throwing. */
import { Duration, Effect, Option } from "effect"
import { InvalidConfig } from "../Errors.js"

/** A duration option (`"30 seconds"`, millis, ...): finite and not negative. */
export const duration = (option: string, input: Duration.Input): Effect.Effect<Duration.Duration, InvalidConfig> => {
  const parsed = Option.filter(Duration.fromInput(input), (d) => Duration.isFinite(d) && Duration.toMillis(d) >= 0)
  return Option.isSome(parsed)
    ? Effect.succeed(parsed.value)
    : Effect.fail(
      new InvalidConfig({ option, issue: `${JSON.stringify(input)} is not a duration (for example "30 seconds")` })
    )
}

/** A whole number of at least `min`. */
export const integer = (option: string, value: number, min: number): Effect.Effect<number, InvalidConfig> =>
  Number.isInteger(value) && value >= min
    ? Effect.succeed(value)
    : Effect.fail(new InvalidConfig({ option, issue: `${value} is not a whole number of at least ${min}` }))

/** A share from 0 to 1. */
export const fraction = (option: string, value: number): Effect.Effect<number, InvalidConfig> =>
  Number.isFinite(value) && value >= 0 && value <= 1
    ? Effect.succeed(value)
    : Effect.fail(new InvalidConfig({ option, issue: `${value} is not a share from 0 to 1` }))
