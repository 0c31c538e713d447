#!/usr/bin/env node
/**
 * `npm run conformance`: runs Effect's own workflow-engine tests against Leasehold's engine and, in
 * the same run, against Effect's own engines, and writes the record docs/workflow-conformance.md
 * quotes (docs/workflow-conformance.json) and a Markdown table on stdout.
 *
 * Nothing of Effect's is in this repository: each test file is read from a snapshot of Effect's
 * repository at a pinned commit (`git show`, the `mirror` files) or from a copy of the code index's
 * stored version placed under the index folder (the `index` files, checked by their length and
 * SHA-256), adapted by the named substitutions below, and written under /tmp. Columns:
 * - `leasehold`: the adapted test, every engine layer it provides replaced by `leaseholdEngine()`
 *   (scripts/workflow-conformance/leasehold.ts: PostgreSQL, a fresh schema, serving);
 * - `effect`: the same adapted test on Effect's own engine, the one the test names
 *   (scripts/workflow-conformance/effect.ts);
 * - `asWritten`: the test with only its import paths mapped to effect 4.1's, on Effect's engine.
 * One vitest run per column, one file at a time, one worker.
 *
 * Options: --only id,id (files), --columns leasehold,effect,asWritten, --out FILE (the JSON; default
 * docs/workflow-conformance.json), --work DIR (default /tmp/workflow-conformance).
 * Environment: EFFECT_MIRROR, EFFECT_SMOL_MIRROR (git directories of the snapshots),
 * EFFECT_INDEX_DIR (default /tmp/effect-workflow-index: <repo>/<commit>/<path>), DATABASE_URL.
 */
import { execFileSync, spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { engineFree, render } from "./workflow-conformance/render.mjs"

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

const mirrors = {
  "Effect-TS/effect": process.env.EFFECT_MIRROR ?? "/work/.mirror/Effect-TS+effect/repo",
  "Effect-TS/effect-smol": process.env.EFFECT_SMOL_MIRROR ?? "/work/.mirror/Effect-TS+effect-smol/repo"
}
const indexDir = process.env.EFFECT_INDEX_DIR ?? "/tmp/effect-workflow-index"

/** The named adaptations: each a list of substitutions; a file lists the ones it gets. */
const adaptations = {
  imports: {
    what: "import paths of effect 4.1: `effect/unstable/X` becomes `effect/X` (`httpapi` becomes `http-api`); "
      + "names imported from the `WorkflowEngine` or `rpc/RpcTest` subpaths, which 4.1 does not export, are taken "
      + "from `effect/workflow`'s `WorkflowEngine` and `effect/rpc`'s `RpcTest`",
    substitutions: [
      [
        /import \{([^}]*)\} from "effect\/(?:unstable\/)?workflow\/WorkflowEngine"/g,
        "import { WorkflowEngine as WorkflowEngineModule } from \"effect/workflow\"\nconst {$1} = WorkflowEngineModule"
      ],
      [/import \* as (\w+) from "effect\/unstable\/rpc\/(\w+)"/g, "import { $2 as $1 } from \"effect/rpc\""],
      [/"effect\/unstable\/httpapi"/g, "\"effect/http-api\""],
      [/"effect\/unstable\/(workflow|cluster|persistence|http|rpc)"/g, "\"effect/$1\""]
    ]
  },
  engine: {
    what: "the engine layer goes through the column's engine module: `WorkflowEngine.layerMemory` becomes "
      + "`ConformanceEngine.memory`, the test's cluster engine layer `ConformanceEngine.cluster(<it>)`, "
      + "`yield* Sharding.Sharding` (used only for `pollStorage`) `yield* ConformanceEngine.sharding`",
    substitutions: [
      [/WorkflowEngine\.layerMemory/g, "ConformanceEngine.memory"],
      [/(?<![\w.])(?<!const )TestWorkflowEngine\b/g, "ConformanceEngine.cluster(TestWorkflowEngine)"],
      [/\["cluster", clusterLayer\]/g, "[\"cluster\", ConformanceEngine.cluster(clusterLayer)]"],
      [/yield\* Sharding\.Sharding\b/g, "yield* ConformanceEngine.sharding"]
    ]
  },
  clock: {
    what: "real time instead of `TestClock` (Leasehold's leases and polls run on the database's clock): "
      + "`it.effect` becomes `it.live`, `TestClock.adjust(d)` becomes `Effect.sleep(d)`, `.pipe(TestClock.withLive)` "
      + "is dropped, `describe.concurrent` becomes `describe` (one test at a time), a test's own 20 s timeout "
      + "becomes 120 s",
    substitutions: [
      [/\bit\.effect\(/g, "it.live("],
      [/TestClock\.adjust\(/g, "Effect.sleep("],
      [/\.pipe\(TestClock\.withLive\)/g, ""],
      [/describe\.concurrent\(/g, "describe("],
      [/\b20_000\b/g, "120_000"]
    ]
  }
}

/**
 * Only for the storage variant of the cluster suite: its six tests that read the cluster engine's own
 * message journal (`MessageStorage.MemoryDriver`) with those reads and the assertions on them removed,
 * the execution id taken from the workflow instead of the first envelope. The trace test keeps its
 * check that the caller's `WorkflowEngine.deferredDone` span exists.
 */
const storageAdaptation = {
  what: "the `MessageStorage.MemoryDriver` reads removed: `const driver = yield* MessageStorage.MemoryDriver`, "
    + "every `expect(driver.requests.size)…`, the reply-encoding checks of the interrupted workflow, and each "
    + "envelope's lookup with the assertions on it (delivery time, shard group, trace ids); an execution id "
    + "read from `driver.journal[0]` becomes `yield* EmailWorkflow.executionId(<the test's payload>)`",
  substitutions: [
    [/\n\s*const driver = yield\* MessageStorage\.MemoryDriver/g, ""],
    [/\n\s*expect\(driver\.requests\.size\)\.toEqual\(\d+\)/g, ""],
    [
      /const executionId = driver\.journal\[0\]\.address\.entityId/g,
      "const executionId = yield* EmailWorkflow.executionId({ id: \"test-email-1\", to: \"bob@example.com\" })"
    ],
    [
      /const envelope = driver\.journal\[0\]\n\s*const executionId = envelope\.address\.entityId/g,
      "const executionId = yield* EmailWorkflow.executionId({ id: \"test-email-2\", to: \"bob@example.com\" })"
    ],
    [
      /\n\s*const result = driver\.requests\.get\(envelope\.requestId\)!(?:(?!\n  it\.)[\s\S])*?value\.exit\._tag === "Failure"\)/g,
      ""
    ],
    [
      /\n\s*const envelope = driver\.journal\.find\((?:(?!\n  it\.)[\s\S])*?assert\.strictEqual\(deliverAt, [^\n]*\)/g,
      ""
    ],
    [/\n\s*const journalLength = driver\.journal\.length/g, ""],
    [
      /\n\s*const envelope = driver\.journal\.slice\(journalLength\)(?:(?!\n  it\.)[\s\S])*?assert\(callerSpan\)(?:(?!\n  it\.)[\s\S])*?assert\.strictEqual\(envelope\.sampled, callerSpan\.sampled\)/g,
      "\n      assert(callerSpan)"
    ],
    [
      /\n\s*const envelope = driver\.journal\.slice\(journalLength\)(?:(?!\n  it\.)[\s\S])*?assert\.strictEqual\(envelope\.address\.shardId\.group, "workflow"\)/g,
      ""
    ],
    // Only these six run in this variant (the other twenty are the suite's own rows).
    [
      /it\.live\(("|\n\s*")(executes, resumes|interrupts a suspended workflow and|routes |propagates trace)/g,
      "it.live.only($1$2"
    ]
  ]
}
adaptations.storage = storageAdaptation

const effectMain = { repo: "Effect-TS/effect", commit: "1144032cedda7b5eacc1ebf980d06957c7a59ddf" }
const smolMain = { repo: "Effect-TS/effect-smol", commit: "3a1128c7684e04d34d9f541f77adaac38a513056" }
const withEngine = ["imports", "engine", "clock"]

/**
 * Every workflow test file found in Effect's repositories (the `fetch` snapshots and the code index),
 * run or not. `chars` and `sha256` pin an index copy; a mirror file is pinned by its commit.
 */
const files = [
  {
    id: "effect/cluster",
    ...effectMain,
    source: "mirror",
    path: "packages/effect/test/cluster/ClusterWorkflowEngine.test.ts",
    adapt: withEngine
  },
  {
    id: "effect/WorkflowEngine",
    ...effectMain,
    source: "mirror",
    path: "packages/effect/test/unstable/workflow/WorkflowEngine.test.ts",
    adapt: withEngine
  },
  {
    id: "effect/DurableQueue",
    ...effectMain,
    source: "mirror",
    path: "packages/effect/test/unstable/workflow/DurableQueue.test.ts",
    adapt: withEngine
  },
  {
    id: "effect/cluster-no-storage",
    ...effectMain,
    source: "mirror",
    path: "packages/effect/test/cluster/ClusterWorkflowEngine.test.ts",
    adapt: [...withEngine, "storage"],
    columns: ["leasehold", "effect"]
  },
  {
    id: "smol/cluster",
    ...smolMain,
    source: "mirror",
    path: "packages/effect/test/cluster/ClusterWorkflowEngine.test.ts",
    adapt: withEngine
  },
  {
    id: "smol/WorkflowEngine",
    ...smolMain,
    source: "mirror",
    path: "packages/effect/test/unstable/workflow/WorkflowEngine.test.ts",
    adapt: withEngine
  },
  {
    id: "smol/DurableQueue",
    ...smolMain,
    source: "mirror",
    path: "packages/effect/test/unstable/workflow/DurableQueue.test.ts",
    adapt: withEngine
  },
  {
    id: "4.1/WorkflowEngine",
    repo: "Effect-TS/effect",
    commit: "021939a31326752a1ff7d22c356d2cde261f7b2c",
    source: "index",
    path: "packages/effect/test/workflow/WorkflowEngine.test.ts",
    chars: 24437,
    sha256: "b3e548d8d2678f95",
    adapt: ["engine", "clock"]
  },
  {
    id: "4.1/DurableQueue",
    repo: "Effect-TS/effect",
    commit: "1b4461ec3a17e527dd39576f1783f73354187f1f",
    source: "index",
    path: "packages/effect/test/workflow/DurableQueue.test.ts",
    chars: 3507,
    sha256: "4b2ffb29beb032c3",
    adapt: ["engine", "clock"]
  },
  {
    id: "4.1/Workflow",
    repo: "Effect-TS/effect",
    commit: "8e960bab9764c04f52715d8e2e5d37233575fa22",
    source: "index",
    path: "packages/effect/test/workflow/Workflow.test.ts",
    chars: 1588,
    sha256: "0c2822f1df342e58",
    adapt: ["imports"]
  },
  {
    id: "ActivityInterruption",
    repo: "Effect-TS/effect",
    commit: "39b984f7bb79c8bca75cc8b4086c9ae95a40eedc",
    source: "index",
    path: "packages/effect/test/unstable/workflow/ActivityInterruption.test.ts",
    chars: 7935,
    sha256: "1786a1bd39c8ea3b",
    adapt: withEngine
  },
  {
    id: "DurableClock.boundary",
    repo: "Effect-TS/effect",
    commit: "cd25bfa8b5ee27481190951df260ee321a13e190",
    source: "index",
    path: "packages/effect/test/unstable/workflow/DurableClock.boundary.test.ts",
    chars: 1845,
    sha256: "3794357baf87fea6",
    adapt: ["imports"]
  },
  {
    id: "DeferredServices",
    repo: "Effect-TS/effect",
    commit: "7e585f940187dabe9408c6ccba78ef44a080a133",
    source: "index",
    path: "packages/effect/test/unstable/workflow/DeferredServices.test.ts",
    chars: 4127,
    sha256: "18f47b524654e19b",
    adapt: ["imports", "clock"],
    // Its engine is in the fixture it imports, copied beside it under its own name.
    support: [{
      path: "packages/effect/test/unstable/workflow/DeferredServices.fixture.ts",
      chars: 2610,
      sha256: "bd6de7f901841054",
      adapt: ["imports", "engine"]
    }]
  },
  {
    id: "WorkflowProxy",
    repo: "Effect-TS/effect",
    commit: "2f03e83948e6dc5ffd0cf95cc793145a977451a5",
    source: "index",
    path: "packages/effect/test/unstable/workflow/WorkflowProxy.test.ts",
    chars: 2092,
    sha256: "84e8269e0c2b652e",
    adapt: ["imports", "engine"]
  }
]

/** Found and not run, with why (docs/workflow-conformance.md lists them from here). */
const notRun = [
  {
    repo: "Effect-TS/effect",
    commit: "1144032cedda7b5eacc1ebf980d06957c7a59ddf",
    source: "mirror",
    path: "packages/platform/node/test/cluster-integration/Workflow.test.ts",
    why: "needs Effect's multi-runner cluster harness (`./harness.ts`: runners, a backend, shard storage), which has "
      + "no counterpart on Leasehold's engine; its control would need that harness's backends too"
  },
  {
    repo: "Effect-TS/effect",
    commit: "8d2c7b3f9f56870302e50c35bd4f0e5f1226b219",
    source: "index",
    path: "packages/effect/test/cluster/ClusterWorkflowEngine.handover.test.ts",
    why: "builds two cluster engines over one shared `MessageStorage` with `makeTestWorkflowEngine` from "
      + "`TestWorkflowEngine.ts` (another index file); mapping \"a fresh owner over the shared storage\" onto "
      + "Leasehold is a rewrite, not a substitution; not copied in this run"
  },
  ...[
    ["packages/effect/test/cluster/ClusterWorkflowEngine.cleanup.test.ts", "56daea2826885fa10f2e830ca428e4127aa0b868"],
    ["packages/effect/test/cluster/ClusterWorkflowEngine.context.test.ts", "42f8364629871f67b812eb7ae104e4c4b786e190"],
    [
      "packages/effect/test/cluster/ClusterWorkflowEngine.lifecycle.test.ts",
      "24245161f3f16863db32e75b69f03e160085761b"
    ],
    ["packages/effect/test/cluster/duplicateWorkflowRegistration.test.ts", "35b8d487d2c427fe9a47df18988713da854d47a3"],
    ["packages/effect/test/unstable/workflow/Workflow.test.ts", "88093b57951a1b597599fe4772ab690b36a95818"],
    ["packages/effect/test/unstable/workflow/WorkflowEngine.test.ts", "2ddf025f87fc916fc6722bedb835e99a2f82c176"],
    ["packages/effect/test/unstable/workflow/DurableQueue.test.ts", "2ddf025f87fc916fc6722bedb835e99a2f82c176"],
    ["packages/effect/test/cluster/ClusterWorkflowEngine.test.ts", "2ddf025f87fc916fc6722bedb835e99a2f82c176"]
  ].map(([p, commit]) => ({
    repo: "Effect-TS/effect",
    commit,
    source: "index",
    path: p,
    why: "in the code index only (its commit is in no snapshot); not copied in this run"
  })),
  ...[
    ["packages/effect/test/unstable/workflow/WorkflowEngine.test.ts", "6cd6b39f1f47019180a7b5da14ad6c6668a28ced"],
    ["packages/effect/test/cluster/ClusterWorkflowEngine.test.ts", "38c580824db1e9c985132192e7a6c2cf0084fc55"]
  ].map(([p, commit]) => ({
    repo: "Effect-TS/effect-smol",
    commit,
    source: "index",
    path: p,
    why: "in the code index only (its commit is in no snapshot); not copied in this run"
  }))
]

const columns = {
  leasehold: { engine: "leasehold.ts", adapted: true, database: true },
  effect: { engine: "effect.ts", adapted: true, database: false },
  asWritten: { engine: undefined, adapted: false, database: false }
}

const args = process.argv.slice(2)
const option = (name) => {
  const at = args.indexOf(name)
  return at === -1 ? undefined : args[at + 1]
}
const only = option("--only")?.split(",")
const chosenColumns = option("--columns")?.split(",") ?? Object.keys(columns)
const out = path.resolve(option("--out") ?? path.join(repoRoot, "docs/workflow-conformance.json"))
const work = path.resolve(option("--work") ?? "/tmp/workflow-conformance")
for (const column of chosenColumns) {
  if (!(column in columns)) throw new Error(`unknown column ${column}`)
}
const chosen = files.filter((file) => only === undefined || only.includes(file.id))
if (only !== undefined && chosen.length !== only.length) throw new Error(`unknown file id in ${only.join(",")}`)

const sha = (text) => createHash("sha256").update(text).digest("hex")

const source = (file) => {
  if (file.source === "mirror") {
    const gitDir = mirrors[file.repo]
    return execFileSync("git", ["--git-dir", gitDir, "show", `${file.commit}:${file.path}`], { encoding: "utf8" })
  }
  const at = path.join(indexDir, file.repo, file.commit, file.path)
  if (!fs.existsSync(at)) {
    throw new Error(
      `${at} is missing: copy the code index's stored version (read_file repo ${file.repo}, path ${file.path}, commit ${file.commit}) there`
    )
  }
  const text = fs.readFileSync(at, "utf8")
  if (text.length !== file.chars || !sha(text).startsWith(file.sha256)) {
    throw new Error(
      `${at}: ${text.length} characters, sha256 ${sha(text).slice(0, 16)}; expected ${file.chars}, ${file.sha256}`
    )
  }
  return text
}

/** The file with the named adaptations applied, and how many places each substitution changed. */
const adapt = (file, text, names) => {
  const counts = {}
  for (const name of names) {
    counts[name] = []
    for (const [pattern, replacement] of adaptations[name].substitutions) {
      const matches = text.match(pattern)?.length ?? 0
      counts[name].push(matches)
      text = text.replace(pattern, replacement)
    }
    if (counts[name].every((n) => n === 0)) throw new Error(`${file.id}: adaptation ${name} changes nothing`)
  }
  return { text, counts }
}

const fileName = (file) => `${file.id.replace(/[^\w.]+/g, "-")}.test.ts`
const git = (...a) => execFileSync("git", ["-C", repoRoot, ...a], { encoding: "utf8" }).trim()

const prepared = chosen.map((file) => {
  const text = source(file)
  return { file, text, chars: text.length, sha256: sha(text) }
})

const runs = {}
for (const column of chosenColumns) {
  const spec = columns[column]
  const dir = path.join(work, column)
  fs.rmSync(dir, { recursive: true, force: true })
  fs.mkdirSync(dir, { recursive: true })
  fs.symlinkSync(path.join(repoRoot, "node_modules"), path.join(dir, "node_modules"))
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ type: "module" }))
  for (const { file, text } of prepared) {
    if (file.columns !== undefined && !file.columns.includes(column)) continue
    const names = spec.adapted ? file.adapt : file.adapt.filter((name) => name === "imports")
    let adapted = names.length === 0 ? text : adapt(file, text, names).text
    if (names.includes("engine")) {
      const engine = path.join(repoRoot, "scripts/workflow-conformance", spec.engine)
      adapted = `import * as ConformanceEngine from ${JSON.stringify(engine)}\n` + adapted
    }
    fs.writeFileSync(path.join(dir, fileName(file)), adapted)
    for (const support of file.support ?? []) {
      const part = { ...file, ...support, id: `${file.id} ${path.basename(support.path)}` }
      const partNames = spec.adapted ? part.adapt : part.adapt.filter((name) => name === "imports")
      let text = adapt(part, source(part), partNames).text
      if (partNames.includes("engine")) {
        const engine = path.join(repoRoot, "scripts/workflow-conformance", spec.engine)
        text = `import * as ConformanceEngine from ${JSON.stringify(engine)}\n` + text
      }
      fs.writeFileSync(path.join(dir, path.basename(support.path)), text)
    }
  }
  fs.writeFileSync(
    path.join(dir, "vitest.config.mjs"),
    `export default {\n  test: {\n    include: ["*.test.ts"],\n${
      spec.database ? `    globalSetup: [${JSON.stringify(path.join(repoRoot, "test/support/globalSetup.ts"))}],\n` : ""
    }    maxWorkers: 1,\n    fileParallelism: false,\n    testTimeout: 60_000,\n    hookTimeout: 60_000\n  }\n}\n`
  )
  const log = path.join(dir, "engine-builds.jsonl")
  const results = path.join(dir, "results.json")
  const start = { at: new Date().toISOString(), load: os.loadavg()[0] }
  const t0 = Date.now()
  process.stderr.write(`workflow-conformance: ${column}: vitest in ${dir}\n`)
  spawnSync(
    process.execPath,
    [
      path.join(repoRoot, "node_modules/vitest/vitest.mjs"),
      "run",
      "--config",
      "vitest.config.mjs",
      "--reporter=json",
      `--outputFile=${results}`,
      "--reporter=dot"
    ],
    { cwd: dir, stdio: ["ignore", "inherit", "inherit"], env: { ...process.env, CONFORMANCE_ENGINE_LOG: log } }
  )
  const end = { at: new Date().toISOString(), load: os.loadavg()[0] }
  const builds = fs.existsSync(log)
    ? fs.readFileSync(log, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))
    : []
  runs[column] = {
    start,
    end,
    seconds: Math.round((Date.now() - t0) / 1000),
    report: JSON.parse(fs.readFileSync(results, "utf8")),
    builds
  }
}

const firstLine = (message) =>
  (message ?? "").split("\n").find((line) => line.trim() !== "")?.trim().slice(0, 200) ?? ""

const tests = []
const loadErrors = []
for (const { file } of prepared) {
  const name = fileName(file)
  const byTest = new Map()
  for (const column of chosenColumns) {
    if (file.columns !== undefined && !file.columns.includes(column)) continue
    const { report, builds } = runs[column]
    const result = report.testResults.find((r) => path.basename(r.name) === name)
    if (result === undefined || result.assertionResults.length === 0) {
      loadErrors.push({ file: file.id, column, message: firstLine(result?.message) || "no result" })
      continue
    }
    for (const a of result.assertionResults.filter((a) => a.status !== "skipped")) {
      const test = [...a.ancestorTitles, a.title].join(" > ")
      const row = byTest.get(test) ?? { file: file.id, test, results: {}, engine: {} }
      row.results[column] = {
        status: a.status === "passed" ? "pass" : a.status === "failed" ? "FAIL" : a.status,
        ...(a.status === "failed" ? { message: firstLine(a.failureMessages?.[0]) } : {})
      }
      if (columns[column].engine !== undefined) {
        row.engine[column] = [
          ...new Set(
            builds.filter((b) => path.basename(b.file ?? "") === name && b.test === test).map((b) => b.kind)
          )
        ]
      }
      byTest.set(test, row)
    }
  }
  tests.push(...byTest.values())
}

// The totals are the suites': a variant (a file run in some columns only) is counted in its own row alone.
const variants = new Set(chosen.filter((file) => file.columns !== undefined).map((file) => file.id))
const inTotals = tests.filter((t) => !variants.has(t.file))
const count = (fileId, column) =>
  (fileId === undefined ? inTotals : tests.filter((t) => t.file === fileId))
    .filter((t) => t.results[column]?.status === "pass").length

const record = {
  generated: new Date().toISOString(),
  commit: git("rev-parse", "HEAD"),
  dirty: git("status", "--porcelain", "--untracked-files=no") !== "",
  command: `npm run conformance${args.length > 0 ? ` -- ${args.join(" ")}` : ""}`,
  database: process.env.DATABASE_URL === undefined ? "embedded" : "DATABASE_URL",
  cores: os.cpus().length,
  columns: Object.fromEntries(
    chosenColumns.map((c) => [c, { start: runs[c].start, end: runs[c].end, seconds: runs[c].seconds }])
  ),
  adaptations: Object.fromEntries(
    Object.entries(adaptations).map((
      [name, a]
    ) => [name, { what: a.what, substitutions: a.substitutions.map(([p, r]) => `${p} -> ${r}`) }])
  ),
  files: prepared.map(({ file, chars, sha256 }) => ({
    id: file.id,
    repo: file.repo,
    commit: file.commit,
    path: file.path,
    source: file.source,
    columns: file.columns ?? chosenColumns,
    chars,
    sha256,
    adaptations: Object.fromEntries(file.adapt.map((name) => [name, adapt(file, source(file), [name]).counts[name]])),
    support: (file.support ?? []).map((support) => {
      const part = { ...file, ...support }
      const text = source(part)
      return {
        path: support.path,
        chars: text.length,
        sha256: sha(text),
        adaptations: Object.fromEntries(support.adapt.map((name) => [name, adapt(part, text, [name]).counts[name]]))
      }
    }),
    tests: tests.filter((t) => t.file === file.id).length,
    engineFree: tests.filter((t) => t.file === file.id && engineFree(t)).length,
    pass: Object.fromEntries(chosenColumns.map((c) => [c, count(file.id, c)]))
  })),
  notRun,
  loadErrors,
  totals: {
    tests: inTotals.length,
    engineFree: inTotals.filter(engineFree).length,
    pass: Object.fromEntries(chosenColumns.map((c) => [c, count(undefined, c)]))
  },
  tests
}
fs.writeFileSync(out, JSON.stringify(record, null, 2) + "\n")

process.stdout.write(render(record))
