/** Progress on stderr: one updating line on a terminal, a line every few seconds otherwise. */
const tty = process.stderr.isTTY === true
let lastLineAt = 0
let open = false

export const status = (text: string): void => {
  if (tty) {
    process.stderr.write(`\r\x1b[2K${text}`)
    open = true
  } else if (Date.now() - lastLineAt > 5_000) {
    lastLineAt = Date.now()
    process.stderr.write(`${text}\n`)
  }
}

export const log = (text: string): void => {
  if (open) process.stderr.write("\r\x1b[2K")
  open = false
  process.stderr.write(`${text}\n`)
}
