/**
 * The demo's terminal output: event lines scroll, and on a terminal a status block (progress bar
 * and a small table) is redrawn in place below them. Without a terminal (CI, a pipe) the status
 * block is printed only when asked, so the log stays readable.
 *
 * @since 0.1.0
 */
export interface LiveView {
  readonly log: (line: string) => void
  readonly status: (lines: ReadonlyArray<string>) => void
  /** Leaves the last status block on screen (or prints it, without a terminal). */
  readonly finish: () => void
}

export const make = (out: NodeJS.WriteStream = process.stdout): LiveView => {
  const tty = out.isTTY === true
  let block: ReadonlyArray<string> = []
  let drawn = 0
  const erase = () => {
    if (drawn > 0) out.write(`\x1b[${drawn}A\x1b[0J`)
    drawn = 0
  }
  const draw = () => {
    if (!tty) return
    for (const line of block) out.write(line + "\n")
    drawn = block.length
  }
  return {
    log: (line) => {
      erase()
      out.write(line + "\n")
      draw()
    },
    status: (lines) => {
      block = lines
      erase()
      draw()
    },
    finish: () => {
      if (!tty) { for (const line of block) out.write(line + "\n") }
      block = []
      drawn = 0
    }
  }
}

/** A text progress bar: `[########------------] 12/30`. */
export const bar = (done: number, total: number, width = 30): string => {
  const filled = total === 0 ? width : Math.round((done / total) * width)
  return `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${done}/${total}`
}
