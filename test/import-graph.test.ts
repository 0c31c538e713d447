/**
 * The packages' import graph, read from the sources (`packages/*\/src`, every import and export
 * specifier, `import type` and dynamic `import()` included): packages sit on floors and import only
 * from lower ones, each import of another package is declared in the importer's manifest and goes
 * through its exports (no relative path out of a package, no `internal/`), no published package
 * depends on a private one, and no module imports itself back through others.
 *
 * The floors are the architecture; a new package must be given one here.
 *
 * `@leasehold/core` has two entry points (ADR 0029): the top level for users, and
 * `@leasehold/core/store` for store implementers. Only packages that implement a store import the
 * second, no example or guide does, and nothing reachable from it is reachable from the top level.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import ts from "typescript"

const repo = path.resolve(import.meta.dirname, "..")

/** Packages that implement a store (`RunStore`, `WorkflowJournal`): the only importers of `@leasehold/core/store`. */
const storeImplementers: ReadonlySet<string> = new Set(["sql"])
const storeEntry = "@leasehold/core/store"

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

/** The declarations an entry point exports: each export, and each member of an `export * as` namespace. */
const declarationsOf = (checker: ts.TypeChecker, file: ts.SourceFile): Map<ts.Declaration, string> => {
  const found = new Map<ts.Declaration, string>()
  const resolve = (symbol: ts.Symbol) =>
    (symbol.flags & ts.SymbolFlags.Alias) !== 0 ? checker.getAliasedSymbol(symbol) : symbol
  for (const exported of checker.getExportsOfModule(checker.getSymbolAtLocation(file)!)) {
    const target = resolve(exported)
    for (const declaration of target.declarations ?? []) {
      if (ts.isSourceFile(declaration)) {
        for (const member of checker.getExportsOfModule(target)) {
          for (const d of resolve(member).declarations ?? []) found.set(d, `${exported.name}.${member.name}`)
        }
      } else {
        found.set(declaration, exported.name)
      }
    }
  }
  return found
}

describe("@leasehold/core's entry points: users' and store implementers'", () => {
  it("only packages that implement a store import @leasehold/core/store; no example, no guide", () => {
    // The store entry point's modules, also reachable one by one through core's `./*` export.
    const storeModules = [...sources.get("packages/core/src/store.ts")!.matchAll(/from "\.\/(\w+)\.js"/g)].map((m) =>
      `@leasehold/core/${m[1]}`
    )
    assert.include(storeModules, "@leasehold/core/RunStorage")
    const forImplementers = new Set([storeEntry, ...storeModules])
    const problems: Array<string> = []
    for (const { from, specifier } of graph.imports) {
      if (forImplementers.has(specifier) && !storeImplementers.has(packageOf(from)!)) {
        problems.push(`${from} imports ${specifier}`)
      }
    }
    const examples = sourceFiles(path.join(repo, "examples"))
    for (const file of examples) {
      for (const specifier of specifiersOf(fs.readFileSync(file, "utf8"))) {
        if (forImplementers.has(specifier)) problems.push(`${path.relative(repo, file)} imports ${specifier}`)
      }
    }
    const guides = [
      "README.md",
      ...fs.readdirSync(path.join(repo, "docs/guides")).map((f) => `docs/guides/${f}`),
      ...packageNames.map((name) => `packages/${name}/README.md`).filter((f) => fs.existsSync(path.join(repo, f)))
    ]
    for (const guide of guides) {
      if (fs.readFileSync(path.join(repo, guide), "utf8").includes(`from "${storeEntry}"`)) {
        problems.push(`${guide} shows an import of ${storeEntry}`)
      }
    }
    assert.isAbove(examples.length, 5)
    assert.isTrue(
      graph.imports.some((i) => i.specifier === storeEntry && packageOf(i.from) === "sql"),
      "the SQL store imports the store entry point (the check above reads it)"
    )
    assert.deepStrictEqual(problems, [])
  })

  it("the top level re-exports nothing the store entry point exports, and the manifest maps both", () => {
    const src = path.join(repo, "packages/core/src")
    const options: ts.CompilerOptions = {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      noEmit: true,
      // Core's own modules only (effect's are not read): enough to tell which declaration each export is.
      noResolve: true,
      types: []
    }
    const program = ts.createProgram(sourceFiles(src), options)
    const checker = program.getTypeChecker()
    const top = declarationsOf(checker, program.getSourceFile(path.join(src, "index.ts"))!)
    const store = declarationsOf(checker, program.getSourceFile(path.join(src, "store.ts"))!)
    const storeNames = [...store.values()]
    for (const name of ["RunStorage.uniqueStates", "ClaimPosition.Positions", "ThroughputStorage.summarize"]) {
      assert.include(storeNames, name, "the store entry point's exports are read")
    }
    assert.include([...top.values()], "Handler.make", "the top level's exports are read")
    const both = [...store].filter(([declaration]) => top.has(declaration)).map(([d, name]) =>
      `${name} (top level: ${top.get(d)})`
    )
    assert.deepStrictEqual(both, [], "store helpers also exported by the top level")
    const exportsMap = readJson(path.join(repo, "packages/core/package.json")).exports
    assert.deepInclude(exportsMap, {
      ".": { types: "./dist/index.d.ts", default: "./dist/index.js" },
      "./store": { types: "./dist/store.d.ts", default: "./dist/store.js" }
    })
  })
})
