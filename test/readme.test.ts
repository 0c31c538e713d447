/**
 * The README's Effect code compiles against the packages as they are: every TypeScript block of
 * "Using it from Effect code" is type-checked together (strict, NodeNext), so an API change that
 * the README does not follow fails here.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))

const tsBlocks = (markdown: string, from: string, to: string): Array<string> => {
  const section = markdown.slice(markdown.indexOf(from), markdown.indexOf(to))
  return [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!)
}

describe("README", () => {
  it.live("the Effect examples type-check against the current packages", () =>
    Effect.sync(() => {
      const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
      const blocks = tsBlocks(readme, "## Using it from Effect code", "## The `leasehold` command")
      assert.isAtLeast(blocks.length, 3)
      // Each block after the first is a fragment of the same program: imports that repeat a name
      // already imported are dropped, and a second `worker` is renamed.
      const [main, ...rest] = blocks
      const imported = new Set([...main!.matchAll(/import \{([^}]*)\}/g)].flatMap((m) => m[1]!.split(",").map((n) => n.trim())))
      const fragments = rest.map((block, i) =>
        block
          .replace(/import \{([^}]*)\} from ("[^"]+")/g, (_, names: string, from: string) => {
            const fresh = names.split(",").map((n) => n.trim()).filter((n) => n !== "" && !imported.has(n))
            return fresh.length === 0 ? "" : `import { ${fresh.join(", ")} } from ${from}`
          })
          .replace(/\bconst worker\b/g, `const worker${i + 1}`)
      )
      const dir = path.join(root, ".scratch", "readme-check")
      fs.mkdirSync(dir, { recursive: true })
      fs.writeFileSync(path.join(dir, "readme.ts"), [main, ...fragments].join("\n"))
      fs.writeFileSync(
        path.join(dir, "tsconfig.json"),
        JSON.stringify({
          extends: "../../tsconfig.base.json",
          compilerOptions: { noEmit: true, composite: false, declaration: false, declarationMap: false, noUnusedLocals: false },
          files: ["readme.ts"]
        })
      )
      const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc")
      try {
        execFileSync(process.execPath, [tsc, "-p", dir], { encoding: "utf8", stdio: "pipe" })
      } catch (error) {
        assert.fail(`the README's code does not compile:\n${(error as { stdout?: string }).stdout ?? String(error)}`)
      }
    }))
})
