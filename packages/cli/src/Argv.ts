/**
 * The command line before effect/cli reads it: a flag's value that starts with `-` kept as its
 * value, and arguments that are not valid UTF-8 refused.
 *
 * @since 0.1.0
 */
import * as fs from "node:fs"

/**
 * The flags that take no value (every command's, and effect/cli's built-in ones). Every other
 * `--name` takes the next argument as its value, as getopt does: effect/cli would otherwise read
 * `--delay "-1 hour"` as the short flags `-1`, `- `, `-h`, ... and print the help.
 */
export const switches: ReadonlySet<string> = new Set([
  "help",
  "version",
  "json",
  "callbacks-only",
  "read-only",
  "unique-by-payload",
  "yes",
  // A switch of `limits rate set`; `limits set --per-key -1` is a negative number, read as a value anyway.
  "per-key"
])

/**
 * `--name value` written as `--name=value` where the value starts with `-`, so it cannot be read
 * as flags. Nothing after `--` changes.
 */
export const joinDashValues = (args: ReadonlyArray<string>): Array<string> => {
  const out: Array<string> = []
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === "--") return [...out, ...args.slice(i)]
    const next = args[i + 1]
    const name = /^--([^=]+)$/.exec(arg)?.[1]
    if (name !== undefined && !switches.has(name) && next !== undefined && next.startsWith("-") && next !== "--") {
      out.push(`${arg}=${next}`)
      i++
    } else {
      out.push(arg)
    }
  }
  return out
}

/** What an argument is to the user: the flag it is the value of, or the argument itself. */
const describe = (args: ReadonlyArray<string>, index: number): string => {
  const arg = args[index]!
  const inline = /^(--[^=]+)=/.exec(arg)
  if (inline !== null) return `the value of ${inline[1]}`
  const previous = index > 0 ? args[index - 1]! : undefined
  if (previous !== undefined && /^--[^=]+$/.test(previous) && !switches.has(previous.slice(2))) {
    return `the value of ${previous}`
  }
  return `argument ${index + 1}`
}

/**
 * The raw bytes of this process's arguments (`/proc/self/cmdline`, Linux): Node decodes `argv`
 * replacing invalid UTF-8 with U+FFFD, which would then be stored. `undefined` where not readable.
 */
const rawArgs = (count: number): ReadonlyArray<Buffer> | undefined => {
  try {
    const raw = fs.readFileSync("/proc/self/cmdline")
    const parts: Array<Buffer> = []
    let start = 0
    for (let i = 0; i < raw.length; i++) {
      if (raw[i] === 0) {
        parts.push(raw.subarray(start, i))
        start = i + 1
      }
    }
    return parts.length >= count ? parts.slice(parts.length - count) : undefined
  } catch {
    return undefined
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true })

/** The first argument that is not valid UTF-8, described by the flag it belongs to; else `undefined`. */
export const invalidUtf8 = (args: ReadonlyArray<string>): string | undefined => {
  // Only an argument Node had to repair can be invalid: a U+FFFD typed on purpose is valid.
  if (!args.some((arg) => arg.includes("\uFFFD"))) return undefined
  const raw = rawArgs(args.length)
  if (raw === undefined) return undefined
  for (let i = 0; i < raw.length; i++) {
    try {
      utf8.decode(raw[i])
    } catch {
      return describe(args, i)
    }
  }
  return undefined
}
