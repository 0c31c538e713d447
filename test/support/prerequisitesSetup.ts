/**
 * The Debian programs a project's tests drive, before any of its tests run: the same step `npm
 * test` starts with (`scripts/prerequisites.mjs`), so `npx vitest run --project external` also
 * installs them as root, or fails at once with the one line naming the command.
 */
import * as path from "node:path"
import { pathToFileURL } from "node:url"

interface Prerequisites {
  readonly provision: (
    log?: (line: string) => void
  ) => ReadonlyArray<{ readonly name: string; readonly found: string | undefined }>
  readonly PrerequisitesMissing: new(message: string) => Error
}

export default async function setup() {
  const module = pathToFileURL(path.resolve(import.meta.dirname, "../../scripts/prerequisites.mjs")).href
  const { PrerequisitesMissing, provision } = (await import(module)) as Prerequisites
  try {
    provision()
  } catch (error) {
    // The one line alone, without a stack: it names the command that fixes it.
    if (error instanceof PrerequisitesMissing) throw Object.assign(new Error(error.message), { stack: error.message })
    throw error
  }
}
