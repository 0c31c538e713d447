/**
 * The operators' audit from the CLI: a change to a queue, a schedule or a limit is recorded with
 * who made it (`--as`, else the OS user) once it is done (`RunStore.recordAction`).
 */
import { type OperatorActions, RunStore } from "@leasehold/core"
import { Effect } from "effect"

/** `effect`, then its audit line (`detail` from what it returned). */
export const recorded = <A, E, R>(
  actor: OperatorActions.Actor,
  action: string,
  target: string,
  effect: Effect.Effect<A, E, R>,
  detail: (a: A) => unknown = () => undefined
) =>
  Effect.tap(
    effect,
    (a) => RunStore.use((store) => store.recordAction({ actor, action, target, detail: detail(a) }))
  )
