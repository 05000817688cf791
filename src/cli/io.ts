// Where the CLI writes, and small output helpers shared by its commands.
import { terminalExcerpt, terminalOutput } from '../terminal-text.js'

/** Where the command writes and what it may use; the real process by default, a buffer in tests. */
export interface CliIo {
  out: (line: string) => void
  err: (text: string) => void
  /**
   * Colour the output.
   * @default false (the program: true only when stdout is a terminal and `NO_COLOR` is not set)
   */
  color?: boolean
  /**
   * Stdout is a terminal: progress is drawn as a bar rewritten in place (plain lines otherwise).
   * @default false (the program: whether stdout is a TTY)
   */
  tty?: boolean
  /**
   * Writes without a newline (the progress bar); needed only with `tty`.
   * @default none
   */
  write?: (text: string) => void
  /**
   * Asks a yes/no question; `undefined` when nobody can answer (stdin or stdout is not a terminal).
   * @default undefined (the program: a prompt on the terminal)
   */
  confirm?: (question: string) => Promise<boolean>
  /**
   * The environment the command reads (`MAILCHANNELS_API_KEY`, `XDG_STATE_HOME`).
   * @default process.env
   */
  env?: NodeJS.ProcessEnv
  /**
   * Called with a function to run when the user presses Ctrl-C while a long command runs
   * (reconcile stops between batches); returns the function that removes it.
   * @default none (the program: SIGINT)
   */
  onInterrupt?: (stop: () => void) => () => void
}

export type Paint = (code: number, text: string) => string
export const painter = (on: boolean): Paint => (code, text) => (on ? `\u001b[${code}m${text}\u001b[0m` : text)
export const GREEN = 32
export const RED = 31
export const YELLOW = 33
export const DIM = 2
export const BOLD = 1

/** Colour only on a terminal, never with `NO_COLOR` (any non-empty value) or `TERM=dumb`. */
export function useColor (stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv): boolean {
  return stream.isTTY === true && (env.NO_COLOR ?? '') === '' && env.TERM !== 'dumb'
}

export const seconds = (ms: number): string => (ms < 1000 ? `${ms} ms` : `${Math.round(ms / 100) / 10} s`)

export const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`

/**
 * Text from elsewhere (an endpoint's answer) for one terminal line: line ends and tabs as one
 * space, other unsafe characters (terminal-text.ts) as visible escapes, cut to `max` characters
 * with `...` (never inside an escape).
 */
export function oneLine (text: string, max: number): string {
  return terminalExcerpt(text, max)
}

// The CLI's own escape sequences: the painter's colours and the progress bar's "return, erase
// the line". Text from outside never brings them: it is passed through terminalText first.
const OWN_SEQUENCES = /\u001b\[(?:0|1|2|31|32|33)m|\r\u001b\[K/g

/** Every human-readable line the CLI writes, through the one terminal filter (terminal-text.ts), its own colour and bar codes kept. */
function filtered (text: string): string {
  let out = ''
  let last = 0
  for (const m of text.matchAll(OWN_SEQUENCES)) {
    out += terminalOutput(text.slice(last, m.index)) + m[0]
    last = m.index + m[0].length
  }
  return out + terminalOutput(text.slice(last))
}

/** `io` with every write filtered for the terminal (main() wraps the io it is given, so no command can bypass it). */
export function filteredIo (io: CliIo): CliIo {
  const write = io.write
  return {
    ...io,
    out: (line) => io.out(filtered(line)),
    err: (text) => io.err(filtered(text)),
    ...(write !== undefined ? { write: (text: string) => write(filtered(text)) } : {}),
    ...(io.confirm !== undefined ? { confirm: (question: string) => io.confirm!(filtered(question)) } : {}),
  }
}

/**
 * The widest a table column is padded to. A longer cell (a long endpoint URL, a shortened
 * hostile value) pushes the rest of its own row only, not every row of the table.
 */
export const TABLE_MAX_WIDTH = 120

/** Aligns rows into columns (the last column is not padded; none is padded past TABLE_MAX_WIDTH). */
export function table (rows: string[][], rightAligned: ReadonlySet<number> = new Set()): string[] {
  const widths: number[] = []
  for (const row of rows) row.forEach((cell, i) => { widths[i] = Math.max(widths[i] ?? 0, Math.min(cell.length, TABLE_MAX_WIDTH)) })
  return rows.map((row) => row.map((cell, i) => {
    if (i === row.length - 1) return cell
    return rightAligned.has(i) ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)
  }).join('  ').trimEnd())
}
