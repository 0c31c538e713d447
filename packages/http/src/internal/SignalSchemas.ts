/**
 * The JSON Schema of the signal a suspended run waits for, from the Effect `Schema` its handler
 * declares (`Handler.signals`): the console builds the approval form's fields and checks from it.
 */
import type { Handler, RunRecord } from "@leasehold/core"
import { Schema } from "effect"

const documents = new WeakMap<object, unknown>()

/** The JSON Schema document of a signal schema, made once per schema. */
const documentOf = (schema: Schema.Codec<unknown, unknown>): unknown => {
  const known = documents.get(schema)
  if (known !== undefined) return known
  const document = Schema.toJsonSchemaDocument(schema)
  documents.set(schema, document)
  return document
}

/** The run with `signalSchema` (a JSON Schema document) when its handler declares its signal's schema. */
export const withSignalSchema = <A extends RunRecord>(registry: Handler.Registry, run: A): A | (A & { readonly signalSchema: unknown }) => {
  if (run.state !== "suspended" || run.signalName === null) return run
  const schema = registry.get(run.kind)?.signals?.[run.signalName]
  return schema === undefined ? run : { ...run, signalSchema: documentOf(schema) }
}
