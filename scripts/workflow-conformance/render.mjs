/**
 * The Markdown tables of a conformance record (docs/workflow-conformance.json): printed by
 * scripts/workflow-conformance.mjs, quoted by docs/workflow-conformance.md, and compared with that
 * document by test/docs.test.ts.
 */

const label = { leasehold: "Leasehold", effect: "Effect, same adaptation", asWritten: "Effect, as written" }

/** A test that ran in a column with an engine module and built no engine there: it never touches one. */
export const engineFree = (test) =>
  Object.keys(test.engine).length > 0 && Object.values(test.engine).every((kinds) => kinds.length === 0)

const engineCell = (test) => engineFree(test) ? "none" : [...new Set(Object.values(test.engine).flat())].join(", ")

/** The summary table (one row a file, and the totals), then the table of every test. */
export const render = (record) => {
  const columns = Object.keys(record.columns)
  const head = columns.map((c) => label[c]).join(" | ")
  const rule = columns.map(() => "---").join(" | ")
  const lines = [`| file | tests | engine-free | ${head} |`, `| --- | --- | --- | ${rule} |`]
  for (const f of record.files) {
    const cells = columns.map((c) => f.columns.includes(c) ? f.pass[c] : "not run").join(" | ")
    lines.push(`| \`${f.id}\` | ${f.tests} | ${f.engineFree} | ${cells} |`)
  }
  const t = record.totals
  lines.push(
    `| all (variants apart) | ${t.tests} | ${t.engineFree} | ${columns.map((c) => t.pass[c]).join(" | ")} |`,
    ""
  )
  lines.push(`| file | test | engine | ${head} |`, `| --- | --- | --- | ${rule} |`)
  for (const test of record.tests) {
    const cells = columns.map((c) => test.results[c]?.status ?? "not run").join(" | ")
    lines.push(`| \`${test.file}\` | ${test.test.replaceAll("|", "\\|")} | ${engineCell(test)} | ${cells} |`)
  }
  for (const e of record.loadErrors) lines.push("", `Not loaded: \`${e.file}\` (${e.column}): ${e.message}`)
  return lines.join("\n") + "\n"
}
