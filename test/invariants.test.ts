/**
 * docs/INVARIANTS.md against the code, without a database: each section has a statement, what
 * enforces it and what proves it; every file a reference names exists, holds every symbol the
 * reference names after it, and every test name it quotes is a test of that file. And where a
 * guarantee is provided in several places (each statement that raises a fence), every such place
 * in the code is named by its invariant, so a new place cannot go unlisted.
 */
import { assert, describe, it } from "vitest"
import {
  exists,
  filesUnder,
  holdsSymbol,
  type Invariant,
  invariantId,
  matchesTitle,
  parseInvariants,
  read,
  testTitles
} from "./support/docs.js"

const document = "docs/INVARIANTS.md"
const invariants = parseInvariants(read(document))
const at = (invariant: Invariant, line: number) => `${document}:${line} (${invariant.id})`

/**
 * Code that provides a guarantee in more than one place: every source file matching `pattern`
 * must be named in the invariant's "Enforced by". Add a row when a guarantee gets a new kind of
 * enforcement point.
 */
const everyPlace: ReadonlyArray<{ readonly invariant: string; readonly what: string; readonly pattern: RegExp }> = [
  // `fence = fence + 1`, `fence = greatest(r.fence + 1, …)`, `fence = CASE … greatest(r.fence + 1 …`, `run.fence += 1`
  { invariant: "I1", what: "raises a fence", pattern: /(^|[^\w])fence = [^,\n]*\bfence \+ 1|\.fence \+= 1/m },
  {
    invariant: "I2",
    what: "claims a run (fence raised to at least the floor)",
    pattern: /greatest\(r\.fence \+ 1, f\.floor\)/
  },
  { invariant: "I50", what: "reads the timeline's fence floor", pattern: /fenceFloor\(sql|fence_floor\(\)/ }
]

const sources = [...filesUnder("packages", (name) => name.endsWith(".ts") && !name.endsWith(".d.ts"))]
  .filter((file) => file.includes("/src/"))

describe("docs/INVARIANTS.md", () => {
  it("has one section per invariant, each with a statement, what enforces it and what proves it", () => {
    assert.isAtLeast(invariants.length, 56)
    const seen = new Set<string>()
    for (const invariant of invariants) {
      const where = at(invariant, invariant.line)
      assert.match(invariant.id, invariantId, `${where}: an id is I<number> or I-NEW-<topic>`)
      assert.isFalse(seen.has(invariant.id), `${where}: ${invariant.id} appears twice`)
      seen.add(invariant.id)
      assert.isNotEmpty(invariant.statement, `${where}: no statement`)
      assert.isNotEmpty(invariant.enforcedBy, `${where}: no "Enforced by:" list`)
      assert.isNotEmpty(invariant.provedBy, `${where}: no "Proved by:" list`)
    }
    const numbers = invariants.map((i) => i.id).filter((id) => /^I\d+$/.test(id)).map((id) => Number(id.slice(1)))
    assert.deepStrictEqual(numbers, [...numbers].sort((a, b) => a - b), "numbered sections are in order")
    // Every invariant another section names exists.
    for (const invariant of invariants) {
      const text = [
        invariant.statement,
        ...invariant.enforcedBy.map((r) => r.text),
        ...invariant.provedBy.map((r) => r.text)
      ].join(" ")
      for (const [named] of text.matchAll(/\bI\d+\b/g)) {
        assert.isTrue(seen.has(named), `${at(invariant, invariant.line)} names ${named}, which has no section`)
      }
    }
  })

  it("every file a section names exists and holds the symbols named after it", () => {
    const problems: Array<string> = []
    for (const invariant of invariants) {
      for (const reference of [...invariant.enforcedBy, ...invariant.provedBy]) {
        const where = at(invariant, reference.line)
        if (reference.file === undefined) {
          problems.push(
            `${where}: a reference starts with the file it names, in backticks: ${reference.text.slice(0, 80)}`
          )
          continue
        }
        if (!exists(reference.file)) {
          problems.push(`${where}: ${reference.file} does not exist`)
          continue
        }
        const source = read(reference.file)
        for (const symbol of reference.symbols) {
          if (!holdsSymbol(source, symbol)) problems.push(`${where}: ${reference.file} has no \`${symbol}\``)
        }
      }
    }
    assert.deepStrictEqual(problems, [])
  })

  it("every test a section quotes is a test of the file it names", () => {
    const problems: Array<string> = []
    let quoted = 0
    for (const invariant of invariants) {
      for (const reference of [...invariant.enforcedBy, ...invariant.provedBy]) {
        if (reference.file === undefined || !exists(reference.file) || reference.testNames.length === 0) continue
        const source = read(reference.file)
        const titles = testTitles(source)
        for (const name of reference.testNames) {
          quoted++
          // A file without tests (the chaos checker, a script) is quoted by the names it prints.
          const found = titles.length > 0
            ? matchesTitle(name, titles)
            : source.includes(name.replaceAll("…", "").trim())
          if (!found) problems.push(`${at(invariant, reference.line)}: ${reference.file} has no test "${name}"`)
        }
      }
    }
    assert.isAtLeast(quoted, 150)
    assert.deepStrictEqual(problems, [])
  })

  it("every place in the code that provides a guarantee in several places is named by its invariant", () => {
    const problems: Array<string> = []
    for (const rule of everyPlace) {
      const invariant = invariants.find((i) => i.id === rule.invariant)
      assert.isDefined(invariant, `${rule.invariant} has a section`)
      const named = new Set(invariant!.enforcedBy.map((r) => r.file))
      const places = sources.filter((file) => rule.pattern.test(read(file)))
      assert.isNotEmpty(places, `some source file ${rule.what}`)
      for (const file of places) {
        if (!named.has(file)) {
          problems.push(`${file} ${rule.what}, and ${rule.invariant}'s "Enforced by" does not name it`)
        }
      }
    }
    assert.deepStrictEqual(problems, [])
  })
})

describe("the parsing of docs/INVARIANTS.md", () => {
  // The checks above are only as good as what the parser finds: it must find what is written.
  const sample = [
    "## I7 — A sample",
    "",
    "What holds.",
    "",
    "Enforced by:",
    "- `packages/sql/src/internal/statements/guarded.ts` › `completeInTransaction`, `fence = fence + 1`: prose `ignored`",
    "  continued.",
    "",
    "Proved by:",
    "- `test/fencing.test.ts` › \"a batch…\"; \"…rejected\": prose \"not a name\"",
    "",
    "## I-NEW-sample — Another",
    "",
    "Second.",
    "",
    "Enforced by:",
    "- `a.ts`",
    "",
    "Proved by:",
    "- `b.test.ts`"
  ].join("\n")

  it("reads each section's id, statement, files, symbols and quoted names, and ignores the prose after a colon", () => {
    const [first, second] = parseInvariants(sample)
    assert.deepInclude(first, { id: "I7", title: "A sample", statement: "What holds." })
    assert.deepInclude(first!.enforcedBy[0], {
      file: "packages/sql/src/internal/statements/guarded.ts",
      symbols: ["completeInTransaction", "fence = fence + 1"],
      testNames: []
    })
    assert.include(first!.enforcedBy[0]!.text, "continued.")
    assert.deepInclude(first!.provedBy[0], { file: "test/fencing.test.ts", testNames: ["a batch…", "…rejected"] })
    assert.deepInclude(second, { id: "I-NEW-sample", statement: "Second." })
  })

  it("matches quoted names against titles, with … for text left out, and finds titles in every form", () => {
    const titles = testTitles([
      "describe(\"suite\", () => {",
      "  it.live(\"a batch with one stale item commits the others\", () => {})",
      "  it.effect('under TestClock', () => {})",
      "  test(`contract for ${target.name}`, () => {})",
      "})",
      "layer(Store.layer({ a: 1 }))(\"shared layer\", (it) => {})"
    ].join("\n"))
    assert.deepStrictEqual(titles, [
      "suite",
      "a batch with one stale item commits the others",
      "under TestClock",
      "contract for ${target.name}",
      "shared layer"
    ])
    assert.isTrue(matchesTitle("a batch…", titles))
    assert.isTrue(matchesTitle("…one stale item…", titles))
    assert.isTrue(matchesTitle("a batch … the others", titles))
    assert.isTrue(matchesTitle("suite › a batch…", titles))
    assert.isTrue(matchesTitle("contract for PgRunStore", titles))
    assert.isFalse(matchesTitle("a batch", titles), "a name without … is the whole title")
    assert.isFalse(matchesTitle("a stale batch…", titles))
    assert.isTrue(holdsSymbol("const claimAll = () =>", "claimAll"))
    assert.isFalse(holdsSymbol("const claimAllNext = () =>", "claimAll"), "an identifier is a whole word")
    assert.isTrue(holdsSymbol("export const x = Heartbeat.renewOnce", "Heartbeat.renewOnce"))
    assert.isTrue(holdsSymbol("SET fence = fence + 1,", "fence = fence + 1"))
    assert.isFalse(holdsSymbol("SET fence = fence + 2,", "fence = fence + 1"))
  })
})
