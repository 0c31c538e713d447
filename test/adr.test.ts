/**
 * The decision records keep a status that the index agrees with (docs/adr/README.md): every
 * record indexed, each with Accepted, Amended by or Superseded by on its third line, the same in
 * the index, each amendment claimed by the record that makes it, and no plan or build log left in
 * a record (those go in docs/adr/notes/). Plain file reading, no database.
 */
import * as path from "node:path"
import { assert, describe, it } from "vitest"
import { adrProblems } from "./support/adr.js"
import { filesUnder, read } from "./support/docs.js"

const records = new Map(
  filesUnder("docs/adr", (name) => /^\d{4}-.*\.md$/.test(name))
    .filter((file) => path.posix.dirname(file) === "docs/adr")
    .map((file) => [path.posix.basename(file), read(file)] as const)
)

describe("the decision records", () => {
  it("are each in the index, with a status the index agrees with, and no plan left in them", () => {
    assert.isAtLeast(records.size, 22)
    assert.deepStrictEqual(adrProblems(records, read("docs/adr/README.md")), [])
  })

  it("have their notes indexed", () => {
    const index = read("docs/adr/notes/README.md")
    for (const note of filesUnder("docs/adr/notes", (name) => name.endsWith(".md") && name !== "README.md")) {
      assert.include(index, `](${path.posix.basename(note)})`, `docs/adr/notes/README.md links ${note}`)
    }
  })
})

describe("the records' check", () => {
  const record = (number: string, status: string, extra = "") =>
    [
      `${number}-x.md`,
      `# ${number} — x\n\n${status}\n\n## Context\n${extra}`
    ] as const
  const index = (...rows: ReadonlyArray<string>) =>
    ["| # | decision | status | relationship |", "| --- | --- | --- | --- |", ...rows].join("\n")
  const good = new Map([record("0001", "Status: Amended by [0002](0002-x.md)"), record("0002", "Status: Accepted")])
  const goodIndex = index(
    "| [0001](0001-x.md) | one | Amended by 0002 |  |",
    "| [0002](0002-x.md) | two | Accepted | Amends 0001 |"
  )

  it("passes records that agree with their index", () => {
    assert.deepStrictEqual(adrProblems(good, goodIndex), [])
  })

  it("finds a record missing from the index", () => {
    const records = new Map([...good, record("0003", "Status: Accepted")])
    assert.deepStrictEqual(adrProblems(records, goodIndex), ["0003-x.md: not in the index"])
  })

  it("finds a missing or unknown status", () => {
    const missing = new Map([...good, record("0002", "Accepted, mostly")])
    assert.include(adrProblems(missing, goodIndex), "0002-x.md: no \"Status:\" on its third line")
    const unknown = new Map([...good, record("0002", "Status: Drafted")])
    assert.include(adrProblems(unknown, goodIndex), "0002-x.md: unknown status \"Drafted\"")
  })

  it("finds a status that disagrees with the index", () => {
    const records = new Map([...good, record("0002", "Status: Superseded by [0001](0001-x.md)")])
    assert.include(
      adrProblems(records, goodIndex),
      "0002-x.md: status \"Superseded by 0001\", the index says \"Accepted\""
    )
  })

  it("finds an amendment the amending record does not claim, and a claim the amended one does not say", () => {
    const unclaimed = index(
      "| [0001](0001-x.md) | one | Amended by 0002 |  |",
      "| [0002](0002-x.md) | two | Accepted |  |"
    )
    assert.deepStrictEqual(adrProblems(good, unclaimed), [
      "0001: Amended by 0002, whose relationship does not say \"Amends 0001\""
    ])
    const records = new Map([record("0001", "Status: Accepted"), record("0002", "Status: Accepted")])
    const claimed = index(
      "| [0001](0001-x.md) | one | Accepted |  |",
      "| [0002](0002-x.md) | two | Accepted | Amends 0001 |"
    )
    assert.deepStrictEqual(adrProblems(records, claimed), [
      "0002: Amends 0001, whose status does not say \"Amended by 0002\""
    ])
  })

  it("finds a plan or build log left in a record", () => {
    const records = new Map([...good, record("0002", "Status: Accepted", "\n## As built (step 2)\n")])
    assert.deepStrictEqual(adrProblems(records, goodIndex), [
      "0002-x.md: \"## As built (step 2)\" belongs in notes/ beside the record"
    ])
  })
})
