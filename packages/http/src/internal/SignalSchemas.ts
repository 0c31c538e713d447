/**
 * The JSON Schema of the signal a suspended run waits for, from the Effect `Schema` its handler
 * declares (`Handler.signals`), or, for a workflow's run, from the success schema of the deferred
 * meant for a person it awaits (`WorkflowDecisions.deferreds`): the console builds the approval
 * form's fields and checks from it, and the server decodes the decision with the same schema.
 */
import { type Handler, InvalidPayload, isWorkflowRun, type RunRecord } from "@leasehold/core"
import { Effect, Schema } from "effect"

const documents = new WeakMap<object, unknown>()

/** The JSON Schema document of a signal schema, made once per schema. */
const documentOf = (schema: Schema.Top): unknown => {
  const known = documents.get(schema)
  if (known !== undefined) return known
  const document = Schema.toJsonSchemaDocument(schema)
  documents.set(schema, document)
  return document
}

/** Success schemas of deferreds meant for a person, by deferred name. */
export type DeferredSchemas = ReadonlyMap<string, Schema.Top>

/** A workflow run's view as the admin API shows it: what its execution awaits. */
interface WithWorkflow {
  readonly workflow?: { readonly awaiting: ReadonlyArray<{ readonly name: string; readonly forPerson: boolean }> }
}

/** The one deferred meant for a person a suspended workflow's run awaits, when there is exactly one. */
export const personDeferred = (run: RunRecord & WithWorkflow): string | undefined => {
  const forPerson = (run.workflow?.awaiting ?? []).filter((a) => a.forPerson)
  return forPerson.length === 1 ? forPerson[0]!.name : undefined
}

/**
 * The run with `signalSchema` (a JSON Schema document) when its handler declares its signal's
 * schema, or when it is a workflow's run awaiting one deferred for a person whose schema is known.
 */
export const withSignalSchema = <A extends RunRecord & WithWorkflow>(
  registry: Handler.Registry,
  deferreds: DeferredSchemas,
  run: A
): A | (A & { readonly signalSchema: unknown }) => {
  if (run.state !== "suspended") return run
  if (isWorkflowRun(run)) {
    const name = personDeferred(run)
    const schema = name === undefined ? undefined : deferreds.get(name)
    return schema === undefined ? run : { ...run, signalSchema: documentOf(schema) }
  }
  if (run.signalName === null) return run
  const schema = registry.get(run.kind)?.signals?.[run.signalName]
  return schema === undefined ? run : { ...run, signalSchema: documentOf(schema) }
}

/**
 * A decision for a workflow's deferred, checked with the deferred's success schema and returned in
 * its encoded form (what the journal records); unchecked when the schema is not known.
 */
export const encodeDecision = (
  deferreds: DeferredSchemas,
  run: RunRecord,
  deferred: string,
  input: unknown
): Effect.Effect<unknown, InvalidPayload> => {
  const schema = deferreds.get(deferred) as Schema.Codec<unknown, unknown> | undefined
  if (schema === undefined) return Effect.succeed(input)
  return Schema.decodeUnknownEffect(schema)(input).pipe(
    Effect.flatMap(Schema.encodeEffect(schema)),
    Effect.mapError((error) =>
      new InvalidPayload({
        kind: `${run.kind} (deferred ${deferred})`,
        issue: String(error.message).split("\n").join(" ")
      })
    )
  )
}
