/**
 * Reading the repository's documents as data, for the tests that keep them true: the sections of
 * docs/INVARIANTS.md, the code blocks of the guides, the titles of the tests. Plain text work on
 * files; nothing here needs a database.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

export const repo = fileURLToPath(new URL("../..", import.meta.url))

export const read = (file: string): string => fs.readFileSync(path.join(repo, file), "utf8")

export const exists = (file: string): boolean =>
  fs.existsSync(path.join(repo, file)) && fs.statSync(path.join(repo, file)).isFile()

/** Every file under `dir` (repo-relative) whose name passes `keep`, repo-relative, sorted. */
export const filesUnder = (dir: string, keep: (name: string) => boolean): Array<string> => {
  const out: Array<string> = []
  const walk = (relative: string) => {
    for (const entry of fs.readdirSync(path.join(repo, relative), { withFileTypes: true })) {
      const child = path.posix.join(relative, entry.name)
      if (entry.isDirectory()) {
        if (entry.name !== "node_modules" && entry.name !== "dist" && !entry.name.startsWith(".")) walk(child)
      } else if (keep(entry.name)) out.push(child)
    }
  }
  walk(dir)
  return out.sort()
}

// --- docs/INVARIANTS.md ----------------------------------------------------------------------

/** One reference of an invariant: a file, the symbols it must hold, the test names it must have. */
export interface Reference {
  readonly line: number
  readonly text: string
  readonly file: string | undefined
  readonly symbols: ReadonlyArray<string>
  readonly testNames: ReadonlyArray<string>
}

export interface Invariant {
  readonly id: string
  readonly title: string
  readonly line: number
  readonly statement: string
  readonly enforcedBy: ReadonlyArray<Reference>
  readonly provedBy: ReadonlyArray<Reference>
}

/** `I12`, or `I-NEW-<topic>` for a row added on a branch (the lead renumbers at merge). */
export const invariantId = /^I(?:\d+|-NEW-[A-Za-z0-9-]+)$/

/**
 * The head of a reference: its text up to the first ": " outside backticks and quotes. What
 * follows is free prose, not checked.
 */
const headOf = (text: string): string => {
  let inCode = false
  let inQuote = false
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (c === "`" && !inQuote) inCode = !inCode
    else if (c === "\"" && !inCode) inQuote = !inQuote
    else if (c === ":" && text[i + 1] === " " && !inCode && !inQuote) return text.slice(0, i)
  }
  return text
}

const parseReference = (text: string, line: number): Reference => {
  const head = headOf(text)
  const code = [...head.matchAll(/`([^`]+)`/g)].map((m) => m[1]!)
  const startsWithFile = head.trimStart().startsWith("`")
  return {
    line,
    text,
    file: startsWithFile ? code[0] : undefined,
    symbols: startsWithFile ? code.slice(1) : code,
    testNames: [...head.matchAll(/"([^"]+)"/g)].map((m) => m[1]!)
  }
}

/** The sections of docs/INVARIANTS.md, in order, each with its statement and its two lists. */
export const parseInvariants = (markdown: string): Array<Invariant> => {
  const lines = markdown.split("\n")
  const sections: Array<Invariant> = []
  let current:
    | {
      id: string
      title: string
      line: number
      statement: Array<string>
      enforcedBy: Array<Reference>
      provedBy: Array<Reference>
    }
    | undefined
  let list: "statement" | "enforcedBy" | "provedBy" = "statement"
  let item: { text: string; line: number } | undefined
  const endItem = () => {
    if (current !== undefined && item !== undefined && list !== "statement") {
      current[list].push(parseReference(item.text, item.line))
    }
    item = undefined
  }
  const endSection = () => {
    endItem()
    if (current !== undefined) sections.push({ ...current, statement: current.statement.join(" ").trim() })
    current = undefined
  }
  let fenced = false
  lines.forEach((text, index) => {
    const line = index + 1
    // A fenced block (the template at the top) is text, not sections.
    if (text.startsWith("```")) fenced = !fenced
    if (fenced || text.startsWith("```")) {
      if (current !== undefined && list === "statement") current.statement.push(text)
      return
    }
    const heading = /^## (\S+) — (.+)$/.exec(text)
    if (heading !== null) {
      endSection()
      current = { id: heading[1]!, title: heading[2]!, line, statement: [], enforcedBy: [], provedBy: [] }
      list = "statement"
      return
    }
    if (text.startsWith("## ") || text.startsWith("# ")) {
      endSection()
      return
    }
    if (current === undefined) return
    if (text === "Enforced by:" || text === "Proved by:") {
      endItem()
      list = text === "Enforced by:" ? "enforcedBy" : "provedBy"
      return
    }
    if (list === "statement") {
      current.statement.push(text)
    } else if (text.startsWith("- ")) {
      endItem()
      item = { text: text.slice(2), line }
    } else if (text.startsWith("  ") && item !== undefined) {
      item.text += ` ${text.trim()}`
    } else if (text.trim() !== "") {
      endItem()
      current.statement.push(text)
    }
  })
  endSection()
  return sections
}

// --- Test titles -----------------------------------------------------------------------------

/**
 * The titles a test file gives its suites and tests: the first argument of `describe`, `it`,
 * `test` (and their modifiers, `it.live`, `it.effect`, `layer(...)(...)`), as written. A
 * template's `${...}` parts stand for anything.
 */
export const testTitles = (source: string): Array<string> => {
  const titles: Array<string> = []
  const call = /\b(?:describe|it|test)(?:\.\w+(?:\([^)]*\))?)*\(\s*(["'`])((?:\\.|(?!\1)[\s\S])*?)\1/g
  for (const m of source.matchAll(call)) titles.push(m[2]!.replace(/\\(.)/g, "$1"))
  // `layer(SomeLayer)("suite", (it) => ...)`: a suite sharing one layer.
  for (const m of source.matchAll(/\blayer\([^()]*(?:\([^()]*\)[^()]*)*\)\(\s*(["'`])((?:\\.|(?!\1)[\s\S])*?)\1/g)) {
    titles.push(m[2]!)
  }
  return titles
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/** A title as a pattern: its `${...}` parts match anything. */
const titlePattern = (title: string): RegExp =>
  new RegExp(`^${title.split(/\$\{[^}]*\}/).map(escape).join("[\\s\\S]*")}$`)

/**
 * Whether a name as the documents write it matches one of the titles. "…" stands for text left
 * out (at the start, the end or inside); " › " separates a suite's title from a test's, each of
 * which must match a title.
 */
export const matchesTitle = (name: string, titles: ReadonlyArray<string>): boolean =>
  name.split(" › ").every((part) => {
    const fragments = part.split("…").map((f) => f.trim())
    const pattern = new RegExp(
      `^${part.startsWith("…") ? "[\\s\\S]*" : ""}${fragments.filter((f) => f !== "").map(escape).join("[\\s\\S]*")}${
        part.endsWith("…") ? "[\\s\\S]*" : ""
      }$`
    )
    return titles.some((title) =>
      pattern.test(title) ||
      // A title written as a template matches the documents' reading of it.
      (title.includes("${") && titlePattern(title).test(fragments.join(" ")))
    )
  })

/** Whether `symbol` occurs in `source`: an identifier (its last dotted part) as a word, anything else as written. */
export const holdsSymbol = (source: string, symbol: string): boolean => {
  if (/^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*(\(\))?$/.test(symbol)) {
    const last = symbol.replace(/\(\)$/, "").split(".").pop()!
    return new RegExp(`(^|[^\\w$])${escape(last)}($|[^\\w$])`).test(source)
  }
  return source.includes(symbol)
}

// --- Code blocks -----------------------------------------------------------------------------

export interface CodeBlock {
  readonly file: string
  readonly line: number
  readonly lang: string
  readonly body: string
}

/** The fenced code blocks of a markdown file, with the line each opens on. */
export const codeBlocks = (file: string): Array<CodeBlock> => {
  const blocks: Array<CodeBlock> = []
  const lines = read(file).split("\n")
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i]!)
    if (open === null) continue
    const start = i
    const body: Array<string> = []
    for (i++; i < lines.length && lines[i] !== "```"; i++) body.push(lines[i]!)
    blocks.push({ file, line: start + 1, lang: open[1]!, body: body.join("\n") })
  }
  return blocks
}

// --- The documents a reader follows ----------------------------------------------------------

/** The README, the guides and the reference pages a reader follows (evidence files are records). */
export const readerDocs = (): Array<string> => [
  "README.md",
  ...filesUnder("docs/guides", (name) => name.endsWith(".md")),
  "docs/DEPLOYMENT.md",
  "docs/CONTRIBUTING.md"
]

/**
 * Every shell block those documents show, by its first line: run as written by
 * test/doc-commands.test.ts, or why not. A block not listed here fails test/docs.test.ts.
 */
export const shellBlocks: ReadonlyArray<
  { readonly file: string; readonly firstLine: string; readonly run: true } | {
    readonly file: string
    readonly firstLine: string
    readonly notRun: string
  }
> = [
  {
    file: "README.md",
    firstLine: "npm install   # the packages, and Node 24 as a dev dependency (the machine's own Node may be older)",
    notRun:
      "`npm install` ran before the tests could; `npm test` is the suite itself; `npm start` is run as written by test/doc-commands.test.ts › \"the README's npm start runs the demo from a folder of the clone\""
  },
  {
    file: "docs/guides/cli.md",
    firstLine: "npx leasehold migrate                                     # create or upgrade the store's schema",
    run: true
  },
  {
    file: "docs/guides/http.md",
    firstLine: "# With DATABASE_URL set: the worker, the ingress and these commands share one server.",
    run: true
  },
  { file: "docs/guides/enqueue-from-sql.md", firstLine: "npx leasehold migrate", run: true },
  {
    file: "docs/guides/packages.md",
    firstLine:
      "npm run build && npm pack -w packages/core -w packages/embedded -w packages/sql -w packages/http -w packages/workflow -w packages/cli",
    notRun: "test/pack.test.ts packs the same workspaces"
  },
  {
    file: "docs/guides/packages.md",
    firstLine: "npm install ./leasehold-core-0.1.0.tgz ./leasehold-embedded-0.1.0.tgz ./leasehold-sql-0.1.0.tgz \\",
    notRun: "test/pack.test.ts installs the tarballs into a fresh project outside the repository"
  },
  {
    file: "docs/CONTRIBUTING.md",
    firstLine:
      "npm test                # everything: provisions, checks the format and lint, builds, runs all four projects",
    notRun: "the suite itself"
  },
  {
    file: "docs/CONTRIBUTING.md",
    firstLine:
      "npm run bench            # Leasehold, graphile-worker and pg-boss against the same PostgreSQL (full profile)",
    notRun: "the full profile takes about 15 minutes; test/bench-smoke.test.ts runs the quick one"
  }
]

/** The shell blocks of the reader's documents, as they stand. */
export const shellBlocksInDocs = (): Array<CodeBlock> =>
  readerDocs().flatMap((file) => codeBlocks(file).filter((b) => b.lang === "sh"))

/**
 * Whether `block` is an excerpt of `source`: its lines, in order and contiguous, except where a
 * line of the block is only `// …` (text left out there).
 */
export const isExcerpt = (block: string, source: string): boolean => {
  const pieces = block.split(/^[ \t]*\/\/ …[ \t]*$\n?/m).map((p) => p.replace(/\n+$/, "")).filter((p) =>
    p.trim() !== ""
  )
  let from = 0
  for (const piece of pieces) {
    const at = source.indexOf(piece, from)
    if (at < 0) return false
    // Whole lines: the piece starts at a line's start and ends at a line's end.
    if (at > 0 && source[at - 1] !== "\n") return false
    const end = at + piece.length
    if (end < source.length && source[end] !== "\n") return false
    from = end
  }
  return pieces.length > 0
}

/** A mutant of scripts/mutation-check.sh as its header describes it: its name and what it removes. */
export interface Mutant {
  readonly name: string
  readonly text: string
}

/**
 * The mutants the script's header describes, in its order: `#   scripts/mutation-check.sh NAME  text`
 * (the first, with no name, is `fence`, the default), each continued on the indented lines below.
 */
export const mutantsInHeader = (script: string): Array<Mutant> => {
  const mutants: Array<{ name: string; text: string }> = []
  for (const line of script.split("\n").slice(1)) {
    if (!line.startsWith("#")) break
    const entry = /^# {3}scripts\/mutation-check\.sh(?: ([a-z0-9-]+))?\s+(.*)$/.exec(line)
    if (entry !== null) mutants.push({ name: entry[1] ?? "fence", text: entry[2]! })
    else if (mutants.length > 0 && /^# {10,}\S/.test(line)) {
      mutants[mutants.length - 1]!.text += ` ${line.slice(1).trim()}`
    }
  }
  return mutants.map((m) => ({ name: m.name, text: m.text.replace(/;$/, "") }))
}

/** The mutants the script applies: the names its branches test, and `fence`, its default. */
export const mutantsInBranches = (script: string): Array<string> => [
  "fence",
  ...new Set([...script.matchAll(/"\$mutation" = "([a-z0-9-]+)"/g)].map((m) => m[1]!))
]

/** The rows of a Markdown table whose header row starts with `| <first> |`, each split into cells. */
export const tableRows = (markdown: string, first: string): Array<Array<string>> => {
  const lines = markdown.split("\n")
  const start = lines.findIndex((line) => line.startsWith(`| ${first} |`))
  if (start < 0) return []
  const rows: Array<Array<string>> = []
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith("|")) break
    rows.push(line.slice(1, -1).split(" | ").map((cell) => cell.trim()))
  }
  return rows
}

/** The names a table cell lists in backticks: "`metrics`, `traces`" is both. */
export const backticked = (cell: string): Array<string> => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!)
