/**
 * JSON text for values the store keeps (results, checkpoints, payloads). Encoding happens before a
 * value reaches a statement, so a value JSON cannot hold is a typed failure of its own run or
 * call, never a failed statement that takes others down with it.
 *
 * @since 0.1.0
 */
import { Exit } from "effect"
import { UnstorableValue } from "./Errors.js"

/**
 * The JSON text of `value` (`undefined` and functions become `null`), or `UnstorableValue`
 * naming what it was and why (a BigInt, a cycle, a throwing `toJSON`).
 *
 * @category encoding
 */
export const encode = (value: unknown, what: string, runId?: string): Exit.Exit<string, UnstorableValue> => {
  try {
    return Exit.succeed(JSON.stringify(value) ?? "null")
  } catch (error) {
    return Exit.fail(
      new UnstorableValue({ what, ...(runId === undefined ? {} : { runId }), issue: error instanceof Error ? error.message : String(error) })
    )
  }
}
