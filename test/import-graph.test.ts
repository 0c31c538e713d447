/**
 * The packages' import graph, read from the sources (`packages/*\/src`, every import and export
 * specifier, `import type` and dynamic `import()` included): packages sit on floors and import only
 * from lower ones, each import of another package is declared in the importer's manifest and goes
 * through its exports (no relative path out of a package, no `internal/`), no published package
 * depends on a private one, and no module imports itself back through others.
 *
 * The floors are the architecture; a new package must be given one here.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import ts from "typescript"

const repo = path.resolve(import.meta.dirname, "..")

/** Lower floors first; a package imports only from floors below its own. */
const floors: Readonly<Record<string, number>> = {
  core: 0,
  embedded: 0,
  sql: 1,
  http: 1,
  workflow: 2,
  cli: 3,
  testing: 4
}

interface Import {
  readonly from: string
  readonly specifier: string
}

interface Graph {
  /** Module (repository-relative path) to the modules it imports. */
  readonly edges: ReadonlyMap<string, ReadonlyArray<string>>
  readonly imports: ReadonlyArray<Import>
}

const sourceFiles = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    return entry.isDirectory() ? sourceFiles(full) : entry.name.endsWith(".ts") ? [full] : []
  })

/** Every specifier a module names: imports and re-exports (`type` ones too), `import()` and `import("x").T`. */
const specifiersOf = (source: string): Array<string> => {
  const specifiers: Array<string> = []
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier !== undefined) {
      if (ts.isStringLiteral(node.moduleSpecifier)) specifiers.push(node.moduleSpecifier.text)
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [argument] = node.arguments
      if (argument !== undefined && ts.isStringLiteralLike(argument)) specifiers.push(argument.text)
    } else if (
      ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)
    ) {
      specifiers.push(node.argument.literal.text)
    }
    ts.forEachChild(node, visit)
  }
  visit(ts.createSourceFile("module.ts", source, ts.ScriptTarget.Latest, false))
  return specifiers
}

/** A relative specifier's module: `./x.js` is the source `./x.ts` (NodeNext). */
const resolveRelative = (from: string, specifier: string): string =>
  path.relative(repo, path.resolve(path.dirname(path.join(repo, from)), specifier.replace(/\.js$/, ".ts")))

const readGraph = (sources: ReadonlyMap<string, string>): Graph => {
  const edges = new Map<string, Array<string>>()
  const imports: Array<Import> = []
  for (const [file, source] of sources) {
    const targets: Array<string> = []
    for (const specifier of specifiersOf(source)) {
      imports.push({ from: file, specifier })
      if (specifier.startsWith(".")) targets.push(resolveRelative(file, specifier))
    }
    edges.set(file, targets)
  }
  return { edges, imports }
}

/** Strongly connected components of more than one module (or a module importing itself), sorted. */
const circlesOf = (edges: ReadonlyMap<string, ReadonlyArray<string>>): Array<Array<string>> => {
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const circles: Array<Array<string>> = []
  const visit = (module: string) => {
    index.set(module, counter)
    low.set(module, counter)
    counter++
    stack.push(module)
    onStack.add(module)
    for (const target of edges.get(module) ?? []) {
      if (!edges.has(target)) continue
      if (!index.has(target)) {
        visit(target)
        low.set(module, Math.min(low.get(module)!, low.get(target)!))
      } else if (onStack.has(target)) {
        low.set(module, Math.min(low.get(module)!, index.get(target)!))
      }
    }
    if (low.get(module) === index.get(module)) {
      const component: Array<string> = []
      let member: string
      do {
        member = stack.pop()!
        onStack.delete(member)
        component.push(member)
      } while (member !== module)
      if (component.length > 1 || (edges.get(module) ?? []).includes(module)) circles.push(component.sort())
    }
  }
  for (const module of edges.keys()) if (!index.has(module)) visit(module)
  return circles.sort((a, b) => a[0]!.localeCompare(b[0]!))
}

/** The package a repository-relative path belongs to (`packages/<name>/...`). */
const packageOf = (file: string): string | undefined => /^packages\/([^/]+)\//.exec(file)?.[1]

/** `@leasehold/<name>` and the subpath after it, for a specifier of one of ours. */
const leaseholdTarget = (specifier: string): { readonly name: string; readonly subpath: string } | undefined => {
  const match = /^@leasehold\/([^/]+)(?:\/(.*))?$/.exec(specifier)
  return match === null ? undefined : { name: match[1]!, subpath: match[2] ?? "" }
}

const readJson = (file: string) => JSON.parse(fs.readFileSync(file, "utf8"))

const packageNames = fs.readdirSync(path.join(repo, "packages")).filter((name) =>
  fs.existsSync(path.join(repo, "packages", name, "src"))
)
const sources = new Map(
  packageNames.flatMap((name) =>
    sourceFiles(path.join(repo, "packages", name, "src")).map((file) =>
      [path.relative(repo, file), fs.readFileSync(file, "utf8")] as const
    )
  )
)
const graph = readGraph(sources)

describe("the import graph of packages/*/src", () => {
  it("reads every kind of import: static, `import type`, re-exports, `import()` and import types, not strings", () => {
    const read = readGraph(
      new Map([[
        "packages/x/src/A.ts",
        [
          `import { b } from "./B.js"`,
          `import type { C } from "./internal/C.js"`,
          `export * as D from "./D.js"`,
          `const e = () => import("@leasehold/e")`,
          `type F = import("./F.js").F`,
          `const text = "import nothing from './not-an-import.js'"`
        ].join("\n")
      ]])
    )
    assert.deepStrictEqual(read.imports.map((i) => i.specifier), [
      "./B.js",
      "./internal/C.js",
      "./D.js",
      "@leasehold/e",
      "./F.js"
    ])
    assert.deepStrictEqual(
      read.edges.get("packages/x/src/A.ts"),
      ["packages/x/src/B.ts", "packages/x/src/internal/C.ts", "packages/x/src/D.ts", "packages/x/src/F.ts"]
    )
    // A circle of three, and one module importing itself, are found; a chain is not a circle.
    assert.deepStrictEqual(
      circlesOf(new Map([["a", ["b"]], ["b", ["c"]], ["c", ["a"]], ["d", ["d"]], ["e", ["a"]]])),
      [["a", "b", "c"], ["d"]]
    )
  })

  it("every package under packages/ has a floor, and its sources are read", () => {
    assert.sameMembers(
      packageNames,
      Object.keys(floors),
      "every package under packages/ has a floor, and every floor a package"
    )
    assert.isAbove(sources.size, 100)
    assert.isAbove(graph.imports.filter((i) => leaseholdTarget(i.specifier) !== undefined).length, 50)
  })

  it("no module imports itself back through others", () => {
    assert.deepStrictEqual(circlesOf(graph.edges), [], "modules that import themselves back through others")
  })

  it("a package imports only from packages on lower floors, through their exports, as declared in its manifest", () => {
    const problems: Array<string> = []
    for (const { from, specifier } of graph.imports) {
      const own = packageOf(from)!
      if (specifier.startsWith(".")) {
        const target = resolveRelative(from, specifier)
        if (!target.startsWith(`packages/${own}/src/`)) problems.push(`${from}: ${specifier} leaves @leasehold/${own}`)
        continue
      }
      const target = leaseholdTarget(specifier)
      if (target === undefined || target.name === own) {
        if (target?.name === own) problems.push(`${from}: imports its own package by name (${specifier})`)
        continue
      }
      const floor = floors[target.name]
      if (floor === undefined) problems.push(`${from}: ${specifier} is no package of packages/`)
      else if (floor >= floors[own]!) {
        problems.push(`${from}: ${specifier} is not below @leasehold/${own} (floor ${floor} >= ${floors[own]})`)
      }
      if (target.subpath.split("/").includes("internal")) {
        problems.push(`${from}: ${specifier} reaches another package's internals`)
      }
      const manifest = readJson(path.join(repo, "packages", own, "package.json"))
      const declared = { ...manifest.dependencies, ...manifest.peerDependencies }
      if (!(`@leasehold/${target.name}` in declared)) {
        problems.push(
          `${from}: @leasehold/${target.name} is in neither dependencies nor peerDependencies of @leasehold/${own}`
        )
      }
    }
    assert.deepStrictEqual(problems, [])
  })

  it("no published package depends on a private one", () => {
    const workspaces: ReadonlyArray<string> = readJson(path.join(repo, "package.json")).workspaces
    const manifests = workspaces.map((dir) => readJson(path.join(repo, dir, "package.json")))
    const privateNames = new Set(manifests.filter((m) => m.private === true).map((m) => m.name as string))
    assert.isTrue(privateNames.has("@leasehold/testing"), "@leasehold/testing is private")
    const problems: Array<string> = []
    for (const manifest of manifests.filter((m) => m.private !== true)) {
      for (const field of ["dependencies", "peerDependencies", "optionalDependencies"]) {
        for (const name of Object.keys(manifest[field] ?? {})) {
          if (privateNames.has(name)) problems.push(`${manifest.name} ${field}: ${name}`)
        }
      }
    }
    assert.deepStrictEqual(problems, [])
  })
})
