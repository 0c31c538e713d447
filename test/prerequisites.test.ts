/**
 * A fresh machine's shape: chromium, faketime, pgbouncer, spin and gcc hidden from the programs
 * `scripts/prerequisites.mjs` searches (LEASEHOLD_PREREQUISITES_PATH: a folder holding only what
 * a fresh machine has). The README's `npm test` then fails at once with the one line naming the
 * command that installs them, before it builds or starts vitest; as root with an apt-get, the
 * missing packages are installed with it and said so in one line.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterEach, assert, describe, it } from "vitest"

const repo = fileURLToPath(new URL("..", import.meta.url))
const script = path.join(repo, "scripts", "prerequisites.mjs")
const hidden = ["chromium", "faketime", "pgbouncer", "spin", "gcc"]
const expectedLine =
  "npm test needs chromium, faketime, pgbouncer, spin, gcc: install them with `sudo apt-get install -y chromium faketime pgbouncer spin gcc` " +
  "(as root, npm test installs them itself)"

const temps: Array<string> = []
afterEach(() => {
  for (const dir of temps.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

/** A folder with what a fresh machine has of the searched programs: jq and pg_config, nothing else. */
const freshMachineBin = (): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-fresh-bin-"))
  temps.push(dir)
  for (const name of ["jq", "pg_config"]) {
    const found = (process.env.PATH ?? "").split(":").map((d) => path.join(d, name)).find((f) => fs.existsSync(f))
    assert.isDefined(found, `${name} is on this machine (a fresh one has it)`)
    fs.symlinkSync(found!, path.join(dir, name))
  }
  return dir
}

/** The environment of a child: no `npm_*` variables from an enclosing `npm test`. */
const childEnv = (extra: Record<string, string>): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) if (!key.toLowerCase().startsWith("npm_")) env[key] = value
  return { ...env, CHROMIUM_PATH: "", ...extra }
}

describe("npm test on a fresh machine's shape", () => {
  it("with chromium, faketime, pgbouncer, spin and gcc missing and no way to install them, `npm test` fails at once with the one line", () => {
    const bin = freshMachineBin()
    const started = Date.now()
    // The project named matches none: were the check ever to pass here, vitest would stop at once
    // instead of running the suite inside itself.
    const result = spawnSync("npm", ["test", "--", "--project", "fresh-machine-guard"], {
      cwd: repo,
      env: childEnv({ LEASEHOLD_PREREQUISITES_PATH: bin }),
      encoding: "utf8",
      timeout: 60_000
    })
    const seconds = (Date.now() - started) / 1000
    assert.notStrictEqual(result.status, 0, "npm test fails")
    const ours = result.stderr.split("\n").filter((line) => line.startsWith("npm test needs"))
    assert.deepStrictEqual(ours, [expectedLine])
    // Before the build and before vitest: nothing of either appears.
    assert.notMatch(result.stdout + result.stderr, /RUN\s+v\d|Test Files|error TS\d/)
    console.log(`npm test refused in ${seconds.toFixed(1)} s: ${ours[0]}`)
  })

  it("as root with apt-get: installs the missing packages with it, saying so in one line", () => {
    // Taken as root whoever runs it: the apt-get is a stand-in.
    const bin = freshMachineBin()
    // An apt-get that records what it is asked and "installs" a package as a program of its name.
    const calls = path.join(bin, "apt-get.calls")
    fs.writeFileSync(
      path.join(bin, "apt-get"),
      [
        "#!/bin/sh",
        `echo "$*" >> ${calls}`,
        `if [ "$1" = install ]; then for p in "$@"; do case "$p" in -*|install) ;; *) printf '#!/bin/sh\\n' > ${bin}/$p; chmod +x ${bin}/$p ;; esac; done; fi`
      ].join("\n") + "\n",
      { mode: 0o755 }
    )
    const result = spawnSync(process.execPath, [script], {
      env: childEnv({ LEASEHOLD_PREREQUISITES_PATH: bin, LEASEHOLD_PREREQUISITES_AS_ROOT: "1" }),
      encoding: "utf8"
    })
    assert.strictEqual(result.status, 0, result.stderr)
    const lines = result.stdout.trim().split("\n")
    assert.strictEqual(
      lines[0],
      "npm test: installing chromium faketime pgbouncer spin gcc with apt-get (running as root; they are missing) ..."
    )
    assert.match(lines[1]!, /^npm test: installed chromium faketime pgbouncer spin gcc in \d+ s$/)
    assert.deepStrictEqual(fs.readFileSync(calls, "utf8").trim().split("\n"), [
      "update -qq",
      "install -y -qq chromium faketime pgbouncer spin gcc"
    ])
    for (const name of hidden) assert.include(lines[2], `${name} (`, `the final line names where ${name} was found`)
    assert.include(lines[2], `chromium (${path.join(bin, "chromium")})`)
  })

  it("apt-get failing: the one line, and what apt-get said", () => {
    // Taken as root whoever runs it: the apt-get is a stand-in.
    const bin = freshMachineBin()
    fs.writeFileSync(
      path.join(bin, "apt-get"),
      "#!/bin/sh\necho 'E: Unable to locate package chromium' >&2\nexit 100\n",
      { mode: 0o755 }
    )
    const result = spawnSync(process.execPath, [script], {
      env: childEnv({ LEASEHOLD_PREREQUISITES_PATH: bin, LEASEHOLD_PREREQUISITES_AS_ROOT: "1" }),
      encoding: "utf8"
    })
    assert.strictEqual(result.status, 1)
    const [first, ...rest] = result.stderr.trim().split("\n")
    assert.strictEqual(first, `${expectedLine}; \`apt-get update -qq\` failed here:`)
    assert.deepStrictEqual(rest, ["E: Unable to locate package chromium"])
  })
})
