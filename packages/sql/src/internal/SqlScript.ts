/**
 * A SQL script cut into its statements. The driver sends each statement on its own (the extended
 * protocol takes one at a time), so a migration file is split at the semicolons that end
 * statements: not those inside quotes, quoted names, dollar-quoted bodies or comments.
 */

/** The statements of `script`, in order, without their closing semicolons; comment-only parts are dropped. */
export const statements = (script: string): Array<string> => {
  const found: Array<string> = []
  let start = 0
  let i = 0
  const cut = (end: number) => {
    const text = script.slice(start, end).trim()
    if (withoutComments(text).trim() !== "") found.push(text)
    start = end + 1
  }
  while (i < script.length) {
    const c = script[i]!
    if (c === "'" || c === "\"") i = closing(script, i, c)
    else if (c === "-" && script[i + 1] === "-") i = lineEnd(script, i)
    else if (c === "/" && script[i + 1] === "*") i = commentEnd(script, i)
    else if (c === "$") i = dollarQuoteEnd(script, i)
    else if (c === ";") {
      cut(i)
      i += 1
    } else i += 1
  }
  cut(script.length)
  return found
}

// A quote closes at the next one not doubled ('' and "" stand for the character itself).
const closing = (script: string, at: number, quote: string): number => {
  let i = at + 1
  while (i < script.length) {
    if (script[i] === quote) {
      if (script[i + 1] === quote) i += 2
      else return i + 1
    } else i += 1
  }
  throw new Error(`SqlScript: ${quote} opened at offset ${at} is never closed`)
}

const lineEnd = (script: string, at: number): number => {
  const end = script.indexOf("\n", at)
  return end === -1 ? script.length : end + 1
}

const commentEnd = (script: string, at: number): number => {
  const end = script.indexOf("*/", at + 2)
  if (end === -1) throw new Error(`SqlScript: comment opened at offset ${at} is never closed`)
  return end + 2
}

// $tag$ … $tag$ (tag possibly empty); a $ not opening one (a parameter such as $1, or inside a
// name such as a$b, where PostgreSQL reads no quote either) is skipped.
const dollarQuoteEnd = (script: string, at: number): number => {
  if (at > 0 && /[A-Za-z0-9_]/.test(script[at - 1]!)) return at + 1
  const tag = /^\$([A-Za-z_][A-Za-z0-9_]*)?\$/.exec(script.slice(at))
  if (tag === null) return at + 1
  const end = script.indexOf(tag[0], at + tag[0].length)
  if (end === -1) throw new Error(`SqlScript: ${tag[0]} opened at offset ${at} is never closed`)
  return end + tag[0].length
}

const withoutComments = (text: string): string => text.replace(/--[^\n]*(\n|$)/g, "").replace(/\/\*[\s\S]*?\*\//g, "")
