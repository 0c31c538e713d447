/**
 * The README and the guides cannot drift from the code: every TypeScript block they show is an
 * excerpt of a program in examples/ (which the build type-checks and test/examples.test.ts runs),
 * every shell block is run as written by test/doc-commands.test.ts or says why not, every link
 * leads to a file that exists, and each guide is one click from the README. Plain file reading,
 * no database.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import ts from "typescript"
import { assert, describe, it } from "vitest"
import {
  backticked,
  codeBlocks,
  exists,
  filesUnder,
  holdsSymbol,
  isExcerpt,
  mutantsInBranches,
  mutantsInHeader,
  read,
  readerDocs,
  repo,
  shellBlocks,
  shellBlocksInDocs,
  tableRows
} from "./support/docs.js"

const examples = filesUnder("examples", (name) => name.endsWith(".ts"))
const linked = [
  ...readerDocs(),
  ...filesUnder("packages", (name) => name === "README.md"),
  ...filesUnder("docs", (name) => name.endsWith(".md")),
  ...filesUnder("bench", (name) => name.endsWith(".md"))
]

describe("the README and the guides", () => {
  it("show TypeScript only as excerpts of the programs in examples/", () => {
    const problems: Array<string> = []
    let blocks = 0
    for (const file of readerDocs()) {
      for (const block of codeBlocks(file).filter((b) => b.lang === "ts")) {
        blocks++
        if (!examples.some((example) => isExcerpt(block.body, read(example)))) {
          problems.push(`${file}:${block.line}: this block is not an excerpt of any file in examples/`)
        }
      }
    }
    assert.isAtLeast(blocks, 12)
    assert.deepStrictEqual(problems, [])
  })

  it("show shell blocks that test/doc-commands.test.ts runs, or that say why not", () => {
    const inDocs = shellBlocksInDocs().map((b) => ({ file: b.file, firstLine: b.body.split("\n")[0]! }))
    const key = (b: { file: string; firstLine: string }) => `${b.file}: ${b.firstLine}`
    assert.sameMembers(
      inDocs.map(key),
      shellBlocks.map(key),
      "every shell block is listed in test/support/docs.ts (shellBlocks), and every listed one exists"
    )
  })

  it("link only to files that exist (and so do the ADRs, evidence and benchmark results)", () => {
    const problems: Array<string> = []
    for (const file of linked) {
      for (const [, target] of read(file).matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(target!) || target!.startsWith("#")) continue
        const relative = path.posix.normalize(path.posix.join(path.posix.dirname(file), target!.split("#")[0]!))
        // A file, or a folder (GitHub lists it).
        if (!fs.existsSync(path.join(repo, relative))) problems.push(`${file}: ${target} (${relative}) does not exist`)
      }
    }
    assert.deepStrictEqual(problems, [])
  })

  it("put every guide one click from a README of about 10 KB", () => {
    const readme = read("README.md")
    assert.isAtMost(
      Buffer.byteLength(readme),
      12_000,
      "the README stays a front door: pitch, quickstart, one example, the guides"
    )
    for (const guide of filesUnder("docs/guides", (name) => name.endsWith(".md"))) {
      assert.include(readme, `](${guide})`, `the README links ${guide}`)
    }
    assert.include(readme, "](docs/DEPLOYMENT.md)")
    assert.include(readme, "## Dependencies, and why each")
  })

  it("run every example: each program in examples/ is run by a test", () => {
    // The shell blocks test/doc-commands.test.ts runs count as runners too (a tasks module they name).
    const run = shellBlocksInDocs().filter((b) =>
      shellBlocks.some((s) => "run" in s && s.file === b.file && s.firstLine === b.body.split("\n")[0])
    )
    const runners = [read("test/examples.test.ts"), read("test/doc-commands.test.ts"), ...run.map((b) => b.body)].join(
      "\n"
    )
    for (const example of examples.filter((file) => !file.endsWith(".test.ts"))) {
      const name = path.posix.basename(example)
      assert.isTrue(
        runners.includes(`"${name}"`) || runners.includes(example) || exists(example.replace(/\.ts$/, ".test.ts")),
        `${example} is run by test/examples.test.ts, a shell block test/doc-commands.test.ts runs, or a test of its own`
      )
    }
  })
})

describe("the glossary", () => {
  it("points at code that exists: each linked file holds the symbol named after it", () => {
    const glossary = read("docs/GLOSSARY.md")
    const pointers = [...glossary.matchAll(/\]\((\.\.\/[^)]+)\) › `([^`]+)`/g)]
    assert.isAtLeast(pointers.length, 30)
    const problems = pointers.flatMap(([, link, symbol]) => {
      const file = path.posix.normalize(path.posix.join("docs", link!))
      return exists(file) && holdsSymbol(read(file), symbol!) ? [] : [`${file} › ${symbol}`]
    })
    assert.deepStrictEqual(problems, [])
  })

  it("is linked from the README and CONTRIBUTING", () => {
    assert.include(read("README.md"), "](docs/GLOSSARY.md)")
    assert.include(read("docs/CONTRIBUTING.md"), "](GLOSSARY.md)")
  })
})

describe("the tables that drift, checked against their source", () => {
  const contributing = read("docs/CONTRIBUTING.md")
  const testFiles = [
    ...filesUnder("test", (name) => name.endsWith(".test.ts")),
    ...filesUnder("examples", (name) => name.endsWith(".test.ts"))
  ]

  it("CONTRIBUTING's test projects are vitest.config.ts's, file for file", async () => {
    const config = (await import(pathToFileURL(path.join(repo, "vitest.config.ts")).href)).default as {
      test: { projects: Array<{ test: { name: string; include: Array<string> } }> }
    }
    const short = (file: string) => file.replace(/^test\//, "").replace(/\.test\.ts$/, "")
    const documented = new Map(tableRows(contributing, "project").map((row) => [backticked(row[0]!)[0]!, row[2]!]))
    const projects = config.test.projects.map((p) => p.test)
    assert.sameMembers([...documented.keys()], projects.map((p) => p.name), "one row per project")
    for (const project of projects) {
      // The project that takes every file the others do not is said so, not listed.
      if (project.include.some((file) => file.includes("*"))) {
        assert.include(documented.get(project.name), "every other file", `the ${project.name} row`)
        continue
      }
      assert.sameMembers(
        backticked(documented.get(project.name)!),
        project.include.map(short),
        `the ${project.name} row`
      )
    }
  })

  it("CONTRIBUTING says what each test file proves", () => {
    const suites = tableRows(contributing, "suite").flatMap((row) => backticked(row[0]!))
    assert.deepStrictEqual(
      testFiles.filter((file) => !suites.includes(file)),
      [],
      "a row of CONTRIBUTING's \"what it proves\" table names each test file"
    )
    assert.deepStrictEqual(
      suites.filter((file) => file.endsWith(".test.ts") && !exists(file)),
      [],
      "and only files that exist"
    )
  })

  it("the mutants: the script's header describes each mutant it applies, and CONTRIBUTING's table is that header", () => {
    const script = read("scripts/mutation-check.sh")
    const described = mutantsInHeader(script)
    assert.sameMembers(
      described.map((m) => m.name),
      mutantsInBranches(script),
      "the header names every mutant, and only those"
    )
    const expected = described.map((m) => `| \`${m.name}\` | ${m.text} |`).join("\n")
    const documented = tableRows(contributing, "mutant").map((row) => `| ${row.join(" | ")} |`).join("\n")
    assert.strictEqual(documented, expected, "CONTRIBUTING's mutants table, rewritten from the script's header")
  })

  it("the console's README names only routes the admin API serves", () => {
    const routes = new Set([...read("packages/http/src/Admin.ts").matchAll(/"(\/api\/[^"]*)"/g)].map((m) => m[1]!))
    const named = [...read("packages/http/src/console/README.md").matchAll(/(\/api\/[a-z:/-]*[a-z])/g)].map((m) =>
      m[1]!
    )
    assert.isAtLeast(named.length, 10)
    assert.deepStrictEqual([...new Set(named)].filter((route) => !routes.has(route)), [])
  })

  it("the documents read as current cite nothing under a git-ignored folder (.scratch)", () => {
    const current = [
      ...readerDocs(),
      ...filesUnder("packages", (name) => name === "README.md"),
      ...filesUnder("docs", (name) => name.endsWith(".md")).filter((file) =>
        !/docs\/(evidence|adr\/bench)\//.test(file)
      )
    ]
    assert.deepStrictEqual(current.filter((file) => read(file).includes(".scratch")), [])
  })

  it("DEPLOYMENT's upgrades name every migration that locks or alters an existing table", () => {
    const upgrades = read("docs/DEPLOYMENT.md").split("## Upgrades")[1]!.split("\n## ")[0]!
    // What makes writers wait, or older workers' plans change: an explicit lock, a change of
    // `runs`, an index built on it or dropped from it without CONCURRENTLY. The notes begin with
    // 0013, the first migration written after the first upgrade of a store in use (2026-12-01).
    const locking =
      /LOCK TABLE|ALTER TABLE "\{\{schema\}\}"\.runs |CREATE (UNIQUE )?INDEX \w+ ON "\{\{schema\}\}"\.runs |DROP INDEX "\{\{schema\}\}"\.runs/
    const migrations = filesUnder("packages/sql/migrations", (name) => /^\d{4}_.*\.sql$/.test(name))
      .map((file) => path.posix.basename(file, ".sql"))
      .filter((name) => name >= "0013")
    const named = migrations.filter((name) => locking.test(read(`packages/sql/migrations/${name}.sql`)))
    assert.isAtLeast(named.length, 7)
    assert.deepStrictEqual(named.filter((name) => !upgrades.includes(`\`${name}\``)), [], "each said in Upgrades")
  })

  it("the worker guide's options table names every key of WorkerOptions, and only those", () => {
    const file = path.join(repo, "packages/core/src/Worker.ts")
    // The one file parsed and checked alone: quick, and enough while the interface extends nothing.
    const program = ts.createProgram([file], { noEmit: true, noResolve: true, noLib: true, types: [] })
    const source = program.getSourceFile(file)!
    const options = source.statements.find((node): node is ts.InterfaceDeclaration =>
      ts.isInterfaceDeclaration(node) && node.name.text === "WorkerOptions"
    )
    assert.isDefined(options, "packages/core/src/Worker.ts declares WorkerOptions")
    assert.isUndefined(options!.heritageClauses, "WorkerOptions extends nothing (else resolve its imports here)")
    const keys = program.getTypeChecker().getTypeAtLocation(options!).getProperties().map((p) => p.name)
    const documented = tableRows(read("docs/guides/worker.md"), "option").flatMap((row) => backticked(row[0]!))
    assert.isAtLeast(keys.length, 18)
    assert.sameMembers(documented, keys)
  })
})

describe("the excerpt check", () => {
  const source = ["const a = 1", "const b = 2", "  const c = 3", "const d = 4", ""].join("\n")
  it("accepts whole consecutive lines, and text left out at a `// …` line", () => {
    assert.isTrue(isExcerpt("const b = 2\n  const c = 3", source))
    assert.isTrue(isExcerpt("const a = 1\n// …\nconst d = 4", source))
    assert.isFalse(isExcerpt("const a = 1\nconst c = 3", source), "not contiguous")
    assert.isFalse(isExcerpt("const c = 3", source), "not a whole line")
    assert.isFalse(isExcerpt("const d = 4\n// …\nconst a = 1", source), "out of order")
    assert.isFalse(isExcerpt("const e = 5", source))
  })
})

describe("the workflow conformance record", () => {
  it("docs/workflow-conformance.md quotes every table line of its record, and the workflows guide its totals", async () => {
    const record = JSON.parse(read("docs/workflow-conformance.json"))
    const { render } = await import(pathToFileURL(path.join(repo, "scripts/workflow-conformance/render.mjs")).href)
    const doc = read("docs/workflow-conformance.md")
    const lines: Array<string> = render(record).split("\n").filter((line: string) => line !== "")
    assert.isAtLeast(lines.length, record.tests.length + 4)
    assert.deepStrictEqual(lines.filter((line) => !doc.includes(line)), [])
    assert.include(doc, `\`${record.commit.slice(0, 7)}\``, "the doc names the commit the record was run at")
    const { tests, pass } = record.totals
    const guide = read("docs/guides/workflows.md")
    assert.include(guide, `${pass.leasehold} of ${tests}`)
    assert.include(guide, `${pass.effect} of ${tests}`)
  })
})
