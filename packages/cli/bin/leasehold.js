#!/usr/bin/env node
// The `leasehold` command. The package's `bin` points at this file rather than at dist/bin.js
// because npm links a bin only if its target exists at install time: in a fresh clone of the
// repository `npm install` runs before the first build, and would leave `npx leasehold` unlinked.
import { existsSync } from "node:fs"
import module from "node:module"

// Compiled modules are cached on disk (Node >= 22.1), which every command's start pays less for (ADR 0019).
module.enableCompileCache?.()

const entry = new URL("../dist/bin.js", import.meta.url)
if (!existsSync(entry)) {
  process.stderr.write("leasehold: the command is not built yet: run `npm run build` (or `npm start`) first\n")
  process.exit(1)
}
await import(entry.href)
