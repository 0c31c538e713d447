/**
 * The decision records' index and statuses (docs/adr/README.md): what test/adr.test.ts checks,
 * as a function of the texts, so the test can also show each problem it must find.
 */

/**
 * A record's status, as its third line says it: `Status: Proposed` (a decision not yet built, with
 * the figures that will decide it), `Accepted`, `Amended by NNNN[, NNNN]`, `Superseded by NNNN`.
 */
export type Status =
  | { readonly kind: "Proposed" }
  | { readonly kind: "Accepted" }
  | { readonly kind: "Amended by" | "Superseded by"; readonly by: ReadonlyArray<string> }

const statusLine = /^Status: (.*)$/

/** Reads a status from its text (links reduced to their numbers); undefined when it is none of the four. */
export const parseStatus = (text: string): Status | undefined => {
  const plain = text.replace(/\[(\d{4})\]\([^)]*\)/g, "$1").trim()
  if (plain === "Accepted") return { kind: "Accepted" }
  if (plain === "Proposed") return { kind: "Proposed" }
  const match = /^(Amended by|Superseded by) (\d{4}(?:, \d{4})*)$/.exec(plain)
  return match === null
    ? undefined
    : { kind: match[1] as "Amended by" | "Superseded by", by: match[2]!.split(", ") }
}

export const showStatus = (status: Status): string =>
  status.kind === "Accepted" || status.kind === "Proposed" ? status.kind : `${status.kind} ${status.by.join(", ")}`

/** A row of the index: `| [NNNN](file) | decision | status | relationship |`. */
export interface IndexRow {
  readonly number: string
  readonly file: string
  readonly status: string
  readonly relationship: string
}

export const indexRows = (index: string): Array<IndexRow> =>
  [...index.matchAll(/^\| \[(\d{4})\]\(([^)]+)\) \|.*\| ([^|]*) \| ([^|]*) \|$/gm)].map((m) => ({
    number: m[1]!,
    file: m[2]!,
    status: m[3]!.trim(),
    relationship: m[4]!.trim()
  }))

/** Headings of what belongs in notes beside a record, not in it. */
const planHeading = /^#+ .*(as built|as planned|next session|step \d|what .* build).*$/im

/**
 * Every problem of the records against their index: a record missing from the index (or the
 * index naming a missing one), a record with no status or an unknown one on its third line, a
 * status that disagrees with the index's, an amendment or supersession the later record's
 * relationship does not claim (and a claim the earlier record's status does not say), and a plan
 * or build log left in a record.
 */
export const adrProblems = (records: ReadonlyMap<string, string>, index: string): Array<string> => {
  const problems: Array<string> = []
  const rows = indexRows(index)
  const byNumber = new Map(rows.map((row) => [row.number, row]))
  const statuses = new Map<string, Status>()
  for (const [file, text] of records) {
    const number = file.slice(0, 4)
    const line = text.split("\n")[2] ?? ""
    const match = statusLine.exec(line)
    const status = match === null ? undefined : parseStatus(match[1]!)
    if (match === null) problems.push(`${file}: no "Status:" on its third line`)
    else if (status === undefined) problems.push(`${file}: unknown status "${match[1]}"`)
    else statuses.set(number, status)
    const row = byNumber.get(number)
    if (row === undefined) problems.push(`${file}: not in the index`)
    else {
      if (row.file !== file) problems.push(`${file}: the index links ${row.file}`)
      if (status !== undefined && row.status !== showStatus(status)) {
        problems.push(`${file}: status "${showStatus(status)}", the index says "${row.status}"`)
      }
    }
    const plan = planHeading.exec(text)
    if (plan !== null) problems.push(`${file}: "${plan[0]}" belongs in notes/ beside the record`)
  }
  for (const row of rows) {
    if (![...records.keys()].some((file) => file.startsWith(row.number))) {
      problems.push(`index: ${row.number} names no record`)
    }
  }
  const claims = (row: IndexRow | undefined, verb: "Amends" | "Supersedes") =>
    new Set(
      (row?.relationship ?? "").split(/;\s*/).flatMap((part) =>
        part.startsWith(`${verb} `) ? part.slice(verb.length + 1).split(", ") : []
      )
    )
  for (const [number, status] of statuses) {
    if (status.kind === "Accepted" || status.kind === "Proposed") continue
    const verb = status.kind === "Amended by" ? "Amends" : "Supersedes"
    for (const later of status.by) {
      if (!statuses.has(later)) problems.push(`${number}: ${status.kind} ${later}, which is no record`)
      else if (!claims(byNumber.get(later), verb).has(number)) {
        problems.push(`${number}: ${status.kind} ${later}, whose relationship does not say "${verb} ${number}"`)
      }
    }
  }
  for (const row of rows) {
    for (const verb of ["Amends", "Supersedes"] as const) {
      const kind = verb === "Amends" ? "Amended by" : "Superseded by"
      for (const earlier of claims(row, verb)) {
        const status = statuses.get(earlier)
        if (status === undefined || status.kind !== kind || !status.by.includes(row.number)) {
          problems.push(`${row.number}: ${verb} ${earlier}, whose status does not say "${kind} ${row.number}"`)
        }
      }
    }
  }
  return problems
}
