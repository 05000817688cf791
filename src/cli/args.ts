// Argument parsing for the CLI: node's parser in its lenient mode, every token checked here so
// each mistake gets a message written for people (what is wrong, what would be right).
import { parseArgs } from 'node:util'

export const BIN = 'mailchannels-webhooks'

export interface OptionSpec {
  type: 'string' | 'boolean'
  short?: string
  /** The placeholder in help and messages, e.g. `<n>`. */
  value?: string
}

/** A command: its options, its positional arguments and its help. */
export interface CommandSpec {
  options: Record<string, OptionSpec>
  /** Positional arguments: their name in messages, how many at least and at most. */
  args?: { name: string, min: number, max: number }
  help: (env: NodeJS.ProcessEnv) => string
}

export const HELP_OPTION: Record<string, OptionSpec> = { help: { type: 'boolean', short: 'h' } }
const VERSION_OPTION: Record<string, OptionSpec> = { version: { type: 'boolean', short: 'v' } }

export class UsageError extends Error {
  constructor (message: string, readonly command: string | null) {
    super(message)
  }
}

/** Edit distance, to suggest the option a typo meant. */
function distance (a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i)
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!
    row[0] = i
    for (let j = 1; j <= b.length; j++) {
      const keep = row[j]!
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1))
      prev = keep
    }
  }
  return row[b.length]!
}

export function suggest (word: string, candidates: string[]): string {
  const best = candidates.map((c) => [c, distance(word, c)] as const).sort((x, y) => x[1] - y[1])[0]
  return best !== undefined && best[1] <= Math.max(1, Math.floor(best[0].length / 3)) ? ` Did you mean ${best[0]}?` : ''
}

export interface Parsed {
  command: string | null
  values: Record<string, string | boolean>
  /** The command's positional arguments (the command name excluded). */
  args: string[]
}

/** Options that would put a secret on the command line, with what to do instead. */
const REFUSED: Record<string, string> = {
  'api-key': `the API key is read from the MAILCHANNELS_API_KEY environment variable only, so it never lands in your shell history: export MAILCHANNELS_API_KEY=... (or use --sandbox with a running sandbox).`,
}

export function parse (argv: string[], commands: Record<string, CommandSpec>): Parsed {
  const all: Record<string, { type: 'string' | 'boolean', short?: string }> = { ...VERSION_OPTION }
  for (const c of Object.values(commands)) Object.assign(all, c.options)
  // Refused options are parsed as strings so their value is never taken for a positional.
  for (const name of Object.keys(REFUSED)) all[name] ??= { type: 'string' }
  const { tokens } = parseArgs({ args: argv, options: all, strict: false, allowPositionals: true, tokens: true })
  const command = tokens.find((tk) => tk.kind === 'positional')?.value ?? null
  if (command !== null && !(command in commands)) {
    throw new UsageError(`unknown command '${command}'.${suggest(command, Object.keys(commands))}`, null)
  }
  const spec: Record<string, OptionSpec> = command === null
    ? { ...VERSION_OPTION, ...HELP_OPTION }
    : { ...commands[command]!.options, ...VERSION_OPTION }
  const values: Record<string, string | boolean> = {}
  const args: string[] = []
  let seenCommand = false
  let afterTerminator = false
  for (const tk of tokens) {
    if (tk.kind === 'option-terminator') {
      afterTerminator = true
      continue
    }
    if (tk.kind === 'positional') {
      if (!seenCommand && !afterTerminator) {
        seenCommand = true
        continue
      }
      args.push(tk.value)
      continue
    }
    const option = spec[tk.name]
    if (option === undefined) {
      if (command !== null && tk.name in REFUSED) throw new UsageError(`--${tk.name} is not accepted: ${REFUSED[tk.name]!}`, command)
      const names = Object.entries(spec).map(([name]) => `--${name}`)
      const where = command === null ? '' : ` for '${command}'`
      throw new UsageError(`unknown option ${tk.rawName}${where}.${tk.rawName.startsWith('--') ? suggest(tk.rawName, names) : ''}`, command)
    }
    const flag = `--${tk.name}`
    if (tk.name in values) throw new UsageError(`${flag} is given more than once.`, command)
    if (option.type === 'boolean') {
      if (tk.inlineValue === true) throw new UsageError(`${flag} does not take a value.`, command)
      values[tk.name] = true
      continue
    }
    // Lenient parsing takes the next argument as the value even when it is another option.
    if (tk.value === undefined || tk.value === '' || (tk.inlineValue !== true && /^--?[a-z]/i.test(tk.value))) {
      throw new UsageError(`${flag} needs a value: ${flag} ${option.value ?? '<value>'}.`, command)
    }
    values[tk.name] = tk.value
  }
  if (command !== null && values.help !== true && values.version !== true) {
    const want = commands[command]!.args ?? { name: '', min: 0, max: 0 }
    if (args.length > want.max) throw new UsageError(`unexpected argument '${args[want.max]}'.`, command)
    if (args.length < want.min) throw new UsageError(`missing ${want.name}: ${BIN} ${command} ${want.name}.`, command)
  }
  return { command, values, args }
}

/** A flag's value as a number, or a usage error naming the flag. */
export function numeric (value: string | boolean | undefined, flag: string, command: string): number | undefined {
  if (value === undefined || typeof value === 'boolean') return undefined
  const n = Number(value)
  if (value.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${flag} must be a number, got '${value}'.`, command)
  return n
}

/**
 * The options of a help text, aligned: each flag, then its text from one column for every
 * row (the widest flag's, or `minWidth`, plus two spaces); a text's further lines (`\n`) start
 * at that column.
 */
export function optionsHelp (rows: ReadonlyArray<readonly [string, string]>, minWidth = 0): string {
  const width = Math.max(minWidth, ...rows.map(([flag]) => flag.length))
  const pad = ' '.repeat(2 + width + 2)
  return rows.map(([flag, text]) => `  ${flag.padEnd(width)}  ${text.split('\n').join(`\n${pad}`)}`).join('\n')
}

/** `--<flag> <n>` as an integer from `min` to `max`, or a usage error naming the flag. */
export function integer (value: string | boolean | undefined, flag: string, command: string, min: number, max: number): number | undefined {
  const n = numeric(value, flag, command)
  if (n !== undefined && (!Number.isSafeInteger(n) || n < min || n > max)) {
    throw new UsageError(`--${flag} must be an integer from ${min} to ${max}, got '${String(value)}'.`, command)
  }
  return n
}
