// Completes the console in dist/console/ after tsc has compiled its TypeScript there: copies its
// static files (HTML, CSS, icon) and the installed preact package's ES modules (vendor/), so the
// browser loads every file from this server and no bundler is needed. Run by `npm run build` and
// this package's prepack.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const source = join(here, "..", "src", "console")
const target = join(here, "..", "dist", "console")
mkdirSync(join(target, "vendor"), { recursive: true })

for (const file of ["index.html", "console.css", "favicon.svg"]) copyFileSync(join(source, file), join(target, file))

const require = createRequire(import.meta.url)
const preactRoot = dirname(require.resolve("preact/package.json"))
copyFileSync(join(preactRoot, "dist", "preact.mjs"), join(target, "vendor", "preact.js"))
copyFileSync(join(preactRoot, "LICENSE"), join(target, "vendor", "LICENSE-preact"))
// preact/hooks imports the bare name "preact", which a browser cannot resolve without an import
// map (an inline script, refused by the CSP): point it at the file beside it.
const hooks = readFileSync(join(preactRoot, "hooks", "dist", "hooks.mjs"), "utf8")
const bare = /from\s*"preact"/g
const found = hooks.match(bare)?.length ?? 0
if (found !== 1) {
  throw new Error(
    `console-assets: expected one import of "preact" in preact/hooks, found ${found}: check the preact version`
  )
}
writeFileSync(join(target, "vendor", "hooks.js"), hooks.replace(bare, `from"./preact.js"`))
