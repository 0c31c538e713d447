/**
 * One error style across the packages: every error class in `packages/*\/src` is a
 * `Schema.TaggedError`, so each carries its `_tag` and fields alike, is yieldable, and can be told
 * apart by `Effect.catchTag` whichever package made it. Read from the sources: neither
 * `Data.TaggedError` nor a class with a hand-written `_tag`.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"

const repo = path.resolve(import.meta.dirname, "..")

/** None left: the fenced transaction's wrappers became Schema errors with the storage redesign. */
const knownExceptions = new Set<string>()

const sourceFiles = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    return entry.isDirectory() ? sourceFiles(full) : entry.name.endsWith(".ts") ? [full] : []
  })

/** Classes declared another way than `Schema.TaggedError`, as `file: Class`. */
const otherStyles = (file: string, source: string): Array<string> => {
  const found: Array<string> = []
  for (const match of source.matchAll(/class (\w+)(?:<[^>]*>)? extends Data\.(?:TaggedError|Error)\b/g)) {
    found.push(`${file}: ${match[1]}`)
  }
  for (const match of source.matchAll(/class (\w+)(?:<[^>]*>)?[^{]*\{\s*readonly _tag = "/g)) {
    found.push(`${file}: ${match[1]}`)
  }
  return found
}

describe("error style", () => {
  it("finds both other styles in a sample, and not Schema.TaggedError", () => {
    const sample = [
      `export class A extends Data.TaggedError("A")<{ readonly message: string }> {}`,
      `class B<E> {\n  readonly _tag = "B"\n  constructor(readonly error: E) {}\n}`,
      `export class C extends Schema.TaggedError<C>()("C", { message: Schema.String }) {}`
    ].join("\n")
    assert.deepStrictEqual(otherStyles("x.ts", sample), ["x.ts: A", "x.ts: B"])
  })

  it("every error class of the packages is a Schema.TaggedError", () => {
    const packages = fs.readdirSync(path.join(repo, "packages")).filter((name) =>
      fs.existsSync(path.join(repo, "packages", name, "src"))
    )
    const files = packages.flatMap((name) => sourceFiles(path.join(repo, "packages", name, "src")))
    const found = files.flatMap((file) => otherStyles(path.relative(repo, file), fs.readFileSync(file, "utf8")))
    assert.deepStrictEqual(found.filter((f) => !knownExceptions.has(f)), [])
    assert.deepStrictEqual(
      [...knownExceptions].filter((f) => !found.includes(f)),
      [],
      "exceptions that are gone: remove them"
    )
    const tagged = files.reduce(
      (n, file) => n + (fs.readFileSync(file, "utf8").match(/extends Schema\.TaggedError</g)?.length ?? 0),
      0
    )
    assert.isAtLeast(tagged, 20)
  })
})
