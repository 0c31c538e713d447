// The decision form of a suspended run, built from the JSON Schema of the signal it waits for
// (`run.signalSchema`, from the handler's Effect Schema, or a workflow's deferred's success
// schema): a field per property, checked as the
// schema says before it is sent (the server checks it again with the Effect Schema). An
// `approved` boolean becomes the Approve and Reject buttons. Without a schema: Approve / Reject
// with a note, `{ approved, note }`.
import { type JsonSchema, type JsonSchemaDocument, post, type Run } from "./api.js"
import { shortId } from "./format.js"
import * as Live from "./live.js"
import { ErrorBox } from "./ui.js"
import { useState } from "./vendor/hooks.js"
import { Fragment, h } from "./vendor/preact.js"

type FieldKind =
  | { readonly type: "boolean" }
  | { readonly type: "number"; readonly integer: boolean; readonly min?: number; readonly max?: number }
  | { readonly type: "enum"; readonly options: ReadonlyArray<string> }
  | { readonly type: "string"; readonly minLength?: number; readonly maxLength?: number }
  | { readonly type: "json" }

interface Field {
  readonly name: string
  readonly kind: FieldKind
  readonly required: boolean
  readonly description: string | undefined
}

const resolve = (schema: JsonSchema, document: JsonSchemaDocument): JsonSchema => {
  const ref = schema.$ref
  if (ref === undefined) return schema
  const name = ref.split("/").at(-1) ?? ""
  return document.definitions?.[name] ?? schema
}

/**
 * What a property asks for. Effect writes a number as `anyOf [number, "Infinity" | "-Infinity" |
 * "NaN"]` and an optional field as `anyOf [T, null]`: the first branch that is not one of those
 * is the field.
 */
const kindOf = (raw: JsonSchema, document: JsonSchemaDocument): FieldKind => {
  const schema = resolve(raw, document)
  const branches = schema.anyOf ?? schema.oneOf
  if (branches !== undefined) {
    const main = branches.map((b) => resolve(b, document)).find((b) =>
      b.type !== "null" &&
      !(b.type === "string" && b.enum?.every((v) => v === "Infinity" || v === "-Infinity" || v === "NaN"))
    )
    return main === undefined ? { type: "json" } : kindOf(main, document)
  }
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== "null") : schema.type
  if (schema.enum !== undefined && schema.enum.every((v) => typeof v === "string")) {
    return { type: "enum", options: schema.enum as ReadonlyArray<string> }
  }
  if (type === "boolean") return { type: "boolean" }
  if (type === "number" || type === "integer") {
    const min = schema.minimum ?? schema.exclusiveMinimum
    const max = schema.maximum ?? schema.exclusiveMaximum
    return {
      type: "number",
      integer: type === "integer",
      ...(min === undefined ? {} : { min }),
      ...(max === undefined ? {} : { max })
    }
  }
  if (type === "string") {
    return {
      type: "string",
      ...(schema.minLength === undefined ? {} : { minLength: schema.minLength }),
      ...(schema.maxLength === undefined ? {} : { maxLength: schema.maxLength })
    }
  }
  return { type: "json" }
}

export const fieldsOf = (document: JsonSchemaDocument): ReadonlyArray<Field> => {
  const root = resolve(document.schema, document)
  const required = new Set(root.required ?? [])
  return Object.entries(root.properties ?? {}).map(([name, schema]) => ({
    name,
    kind: kindOf(schema, document),
    required: required.has(name),
    description: resolve(schema, document).description
  }))
}

const label = (name: string) =>
  name.replace(/([a-z])([A-Z])/g, "$1 $2").replace(/[_-]/g, " ").replace(/^./, (c) => c.toUpperCase())

/** The field's value from its text, or the reason it is refused. */
const read = (
  field: Field,
  text: string,
  checked: boolean,
  unreadable: boolean
): { readonly value?: unknown; readonly issue?: string } => {
  const k = field.kind
  if (k.type === "boolean") return { value: checked }
  // A number field holding text that is not a number reads as "" (the browser's `badInput`).
  if (unreadable) return { issue: "must be a number" }
  if (text === "") return field.required ? { issue: "is required" } : {}
  switch (k.type) {
    case "number": {
      const n = Number(text)
      if (!Number.isFinite(n)) return { issue: "must be a number" }
      if (k.integer && !Number.isInteger(n)) return { issue: "must be a whole number" }
      if (k.min !== undefined && n < k.min) return { issue: `must be at least ${k.min}` }
      if (k.max !== undefined && n > k.max) return { issue: `must be at most ${k.max}` }
      return { value: n }
    }
    case "enum":
      return k.options.includes(text) ? { value: text } : { issue: `must be one of ${k.options.join(", ")}` }
    case "string":
      if (k.minLength !== undefined && text.length < k.minLength) {
        return { issue: `must be at least ${k.minLength} characters` }
      }
      if (k.maxLength !== undefined && text.length > k.maxLength) {
        return { issue: `must be at most ${k.maxLength} characters` }
      }
      return { value: text }
    case "json":
      try {
        return { value: JSON.parse(text) }
      } catch {
        return { issue: "must be JSON" }
      }
  }
}

const defaultDocument: JsonSchemaDocument = {
  schema: {
    type: "object",
    properties: { approved: { type: "boolean" }, note: { type: "string" } },
    required: ["approved"]
  }
}

/** Approve / reject (or send) a suspended run's signal: POST /api/runs/:id/resume { payload }. */
export const DecisionForm = ({ run, onDone }: { readonly run: Run; readonly onDone: (approved: boolean) => void }) => {
  const schemaDocument = run.signalSchema ?? defaultDocument
  const fromSchema = run.signalSchema !== undefined
  const fields = fieldsOf(schemaDocument)
  const hasApproved = fields.some((f) => f.name === "approved" && f.kind.type === "boolean")
  const [texts, setTexts] = useState<Record<string, string>>({})
  const [checks, setChecks] = useState<Record<string, boolean>>({})
  const [unreadable, setUnreadable] = useState<Record<string, boolean>>({})
  const [issues, setIssues] = useState<Record<string, string>>({})
  const [message, setMessage] = useState("")
  const [busy, setBusy] = useState(false)
  const [failure, setFailure] = useState<unknown>(undefined)
  const id = (name: string) => `field-${run.id}-${name}`

  const submit = async (event: SubmitEvent) => {
    event.preventDefault()
    const approved = (event.submitter as HTMLButtonElement | null)?.value !== "reject"
    const payload: Record<string, unknown> = {}
    const found: Record<string, string> = {}
    for (const field of fields) {
      if (hasApproved && field.name === "approved") {
        payload.approved = approved
        continue
      }
      const { issue, value } = read(
        field,
        texts[field.name] ?? "",
        checks[field.name] ?? false,
        unreadable[field.name] ?? false
      )
      if (issue !== undefined) found[field.name] = `${label(field.name)} ${issue}`
      else if (value !== undefined) payload[field.name] = value
    }
    if (!fromSchema && payload.note === undefined) payload.note = ""
    setIssues(found)
    if (Object.keys(found).length > 0) {
      setMessage("")
      focusSoon(id(Object.keys(found)[0]!))
      return
    }
    setBusy(true)
    setFailure(undefined)
    setMessage(hasApproved ? (approved ? "Approving…" : "Rejecting…") : "Sending…")
    try {
      await post(`/api/runs/${encodeURIComponent(run.id)}/resume`, { payload })
      const done = hasApproved
        ? approved ? "Approved: the run is resuming." : "Rejected: the run is resuming with the rejection."
        : "Sent: the run is resuming."
      setMessage(done)
      Live.announce(`${hasApproved ? (approved ? "Approved" : "Rejected") : "Sent"} run ${shortId(run.id)}`)
      onDone(approved)
    } catch (error) {
      setBusy(false)
      setMessage("")
      setFailure(error)
    }
  }

  return (
    <form
      class="decision"
      aria-label={`Decision on run ${run.id}`}
      onSubmit={(e) => void submit(e as SubmitEvent)}
      noValidate
    >
      {fields.filter((f) => !(hasApproved && f.name === "approved")).map((field) => {
        const k = field.kind
        const text = texts[field.name] ?? ""
        const issue = issues[field.name]
        const common = {
          id: id(field.name),
          name: field.name,
          "aria-invalid": issue !== undefined,
          "aria-describedby": issue === undefined ? undefined : `${id(field.name)}-issue`,
          disabled: busy
        }
        const fieldLabel = fromSchema ? `${label(field.name)}${field.required ? "" : " (optional)"}` : "Note (optional)"
        return (
          <div class={k.type === "boolean" ? "field check" : "field"} key={field.name} data-field={field.name}>
            {k.type === "boolean"
              ? (
                <Fragment>
                  <input
                    type="checkbox"
                    {...common}
                    checked={checks[field.name] ?? false}
                    onChange={(e) =>
                      setChecks({ ...checks, [field.name]: (e.currentTarget as HTMLInputElement).checked })}
                  />
                  <label for={id(field.name)}>{fieldLabel}</label>
                </Fragment>
              )
              : <label for={id(field.name)}>{fieldLabel}</label>}
            {k.type === "number"
              ? (
                <input
                  type="number"
                  inputMode="decimal"
                  step={k.integer ? "1" : "any"}
                  {...common}
                  value={text}
                  min={k.min === undefined ? undefined : String(k.min)}
                  max={k.max === undefined ? undefined : String(k.max)}
                  required={field.required}
                  onInput={(e) => {
                    const input = e.currentTarget as HTMLInputElement
                    setTexts({ ...texts, [field.name]: input.value })
                    setUnreadable({ ...unreadable, [field.name]: input.validity.badInput })
                  }}
                />
              )
              : k.type === "enum"
              ? (
                <select
                  {...common}
                  value={text}
                  required={field.required}
                  onChange={(e) => setTexts({ ...texts, [field.name]: (e.currentTarget as HTMLSelectElement).value })}
                >
                  <option value="">{field.required ? "choose…" : "none"}</option>
                  {k.options.map((o) => <option key={o} value={o}>{o}</option>)}
                </select>
              )
              // A schema's string is one line of text; JSON, and the default form's free note, take several.
              : k.type === "string" && fromSchema
              ? (
                <input
                  type="text"
                  {...common}
                  value={text}
                  required={field.required}
                  minLength={k.minLength}
                  maxLength={k.maxLength}
                  onInput={(e) => setTexts({ ...texts, [field.name]: (e.currentTarget as HTMLInputElement).value })}
                />
              )
              : k.type === "string" || k.type === "json"
              ? (
                <textarea
                  rows={k.type === "json" ? 3 : 2}
                  {...common}
                  value={text}
                  required={field.required}
                  onInput={(e) => setTexts({ ...texts, [field.name]: (e.currentTarget as HTMLTextAreaElement).value })}
                />
              )
              : null}
            {field.description !== undefined ? <span class="muted small">{field.description}</span> : null}
            {issue !== undefined ? <span class="field-issue" id={`${id(field.name)}-issue`}>{issue}</span> : null}
          </div>
        )
      })}
      <div class="buttons">
        {hasApproved
          ? (
            <Fragment>
              <button type="submit" name="decision" value="approve" class="approve" disabled={busy}>Approve</button>
              <button type="submit" name="decision" value="reject" class="danger" disabled={busy}>Reject</button>
            </Fragment>
          )
          : <button type="submit" name="decision" value="send" disabled={busy}>Send</button>}
      </div>
      {message !== "" ? <p class="form-message" role="status">{message}</p> : null}
      {failure !== undefined ? <ErrorBox error={failure} /> : null}
    </form>
  )
}

const focusSoon = (elementId: string) => setTimeout(() => document.getElementById(elementId)?.focus(), 0)
