/**
 * Issue 39, item 4: the batch ledger's concurrency protocol (`packages/sql/model/ledger.pml`,
 * mapped to the code in `packages/sql/model/MAPPING.md`) checked exhaustively by Spin, Debian's
 * `spin` with the machine's gcc, both provisioned by `npm test`. Each check works on a copy of the
 * model in a temporary folder: pan writes its C sources, binary and trails beside the model.
 *
 * The protocol as fixed keeps invariants 1–4 in every interleaving; with today's completion
 * restored (-DSNAPSHOT_BUG) the shortest counterexample is defect 1, and with today's renewal
 * (-DRENEWAL_BUG) defect 2. Probes show the model reaches the outcomes the invariants speak of,
 * so a pass is not a model that does nothing.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterEach, assert, describe, it } from "vitest"

const model = fileURLToPath(new URL("../packages/sql/model/ledger.pml", import.meta.url))

const temps: Array<string> = []
afterEach(() => {
  for (const dir of temps.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

const run = (cwd: string, command: string, args: ReadonlyArray<string>) => {
  const result = spawnSync(command, [...args], { cwd, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 })
  assert.isUndefined(result.error, `${command} could not be started: ${result.error?.message}`)
  assert.strictEqual(result.status, 0, `${command} ${args.join(" ")} failed:\n${result.stdout}${result.stderr}`)
  return result.stdout
}

interface Verification {
  readonly errors: number
  readonly stored: number
  readonly transitions: number
  readonly depth: number
  /** pan's own elapsed time, printed only. */
  readonly seconds: number
  /** The counterexample replayed: the lines the model prints at each step, in order. */
  readonly story: ReadonlyArray<string>
}

/**
 * Generates, compiles and runs the verifier. `defines` go to spin (the model's switches), `search`
 * to gcc: safety properties only (assertions, invalid end states), depth-first unless told.
 */
const verify = (defines: ReadonlyArray<string>, search: ReadonlyArray<string> = []): Verification => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-spin-"))
  temps.push(dir)
  fs.copyFileSync(model, path.join(dir, "ledger.pml"))
  run(dir, "spin", [...defines, "-a", "ledger.pml"])
  run(dir, "gcc", ["-O2", "-DSAFETY", ...search, "-o", "pan", "pan.c"])
  // A hash table of 2^20 slots: the fixed model's states fit it, without pan's default 128 MB.
  const out = run(dir, "./pan", ["-w20"])
  const number = (pattern: RegExp) => {
    const match = out.match(pattern)
    assert.isNotNull(match, `pan's report has ${pattern}:\n${out}`)
    return Number(match![1])
  }
  const trail = fs.existsSync(path.join(dir, "ledger.pml.trail"))
  const story = trail
    ? run(dir, "spin", [...defines, "-t", "ledger.pml"]).split("\n").map((line) => line.trim())
      .filter((line) => /^(Complete|Hold|Renew|Clock|Sweep|INVARIANT|REACHED)/.test(line))
    : []
  return {
    errors: number(/errors: (\d+)/),
    stored: number(/(\d+) states, stored/),
    transitions: number(/(\d+) transitions/),
    depth: number(/depth reached (\d+)/),
    seconds: number(/elapsed time ([\d.e+-]+) seconds/),
    story
  }
}

const report = (name: string, v: Verification) =>
  console.log(
    `${name}: ${v.errors} errors, ${v.stored} states stored, ${v.transitions} transitions, depth ${v.depth}, ${v.seconds} s` +
      (v.story.length === 0 ? "" : `\n  ${v.story.join("\n  ")}`)
  )

describe("the batch ledger's protocol, checked by Spin", () => {
  it("as fixed: three completions (one a retry after a lost connection), a hold, a renewal, expiry and the sweep keep invariants 1-4 in every interleaving", () => {
    const v = verify([])
    report("fixed", v)
    assert.strictEqual(v.errors, 0, v.story.join("\n"))
    // The whole space, not a search cut short: the model checked has about half a million states.
    assert.isAbove(v.stored, 300_000)
  })

  it("with today's completion (-DSNAPSHOT_BUG): the shortest counterexample completes a (run, fence) twice or settles a batch with a run open (defect 1)", () => {
    // Breadth-first: the first violation found is a shortest one.
    const v = verify(["-DSNAPSHOT_BUG"], ["-DBFS"])
    report("SNAPSHOT_BUG", v)
    assert.strictEqual(v.errors, 1)
    const violated = v.story.find((line) => line.startsWith("INVARIANT"))
    assert.match(violated ?? "", /^INVARIANT [12] violated/, v.story.join("\n"))
    // The first attempt and its retry, each from a snapshot taken before the other committed, both
    // complete runs 0 and 1 (the set 3).
    assert.strictEqual(v.story.filter((line) => line === "Complete(3): snapshot of the completion rows").length, 2)
    assert.strictEqual(v.story.filter((line) => line.startsWith("Complete(3): completes 3,")).length, 2)
  })

  it("with today's renewal (-DRENEWAL_BUG): a lease still open in its batch is answered lost (defect 2)", () => {
    const v = verify(["-DRENEWAL_BUG"])
    report("RENEWAL_BUG", v)
    assert.strictEqual(v.errors, 1)
    assert.match(
      v.story.find((line) => line.startsWith("INVARIANT")) ?? "",
      /^INVARIANT 4 violated/,
      v.story.join("\n")
    )
    assert.include(v.story, "Renew: B moved meanwhile, not renewed")
  })

  it("reaches what the invariants speak of: a held run completed on its row, a reclaim under fence 2, a batch settled by both paths, all runs completed in the ledger", () => {
    for (const probe of [1, 2, 3, 4]) {
      // Unoptimised: each probe's search is short, its compilation the longer part.
      const v = verify([`-DPROBE=${probe}`], ["-O0"])
      assert.strictEqual(v.errors, 1, `probe ${probe} is reached`)
      assert.include(v.story, "REACHED", `probe ${probe}`)
      assert.notInclude(v.story.join("\n"), "INVARIANT", `probe ${probe}: reached without a violation on the way`)
    }
  })
})
