#!/usr/bin/env node
// The `mailchannels-webhooks` command. The one place in the package that prints to stdout.
import { readFileSync, realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { createSandbox, type Sandbox, type SandboxBatch } from './testing/index.js'
import { readState, removeState, stateFilePath, writeState, type SandboxState } from './testing/sandbox/state-file.js'

const BIN = 'mailchannels-webhooks'

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
   * The environment the command reads (`XDG_STATE_HOME`, for where the API key is kept).
   * @default process.env
   */
  env?: NodeJS.ProcessEnv
}

/** Colour only on a terminal, never with `NO_COLOR` (any non-empty value) or `TERM=dumb`. */
export function useColor (stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv): boolean {
  return stream.isTTY === true && (env.NO_COLOR ?? '') === '' && env.TERM !== 'dumb'
}

const processIo: CliIo = {
  out: (line) => { process.stdout.write(`${line}\n`) },
  err: (text) => { process.stderr.write(text) },
  color: useColor(process.stdout, process.env),
  env: process.env,
}

type Paint = (code: number, text: string) => string
const painter = (on: boolean): Paint => (code, text) => (on ? `\u001b[${code}m${text}\u001b[0m` : text)
const GREEN = 32
const RED = 31
const YELLOW = 33
const DIM = 2
const BOLD = 1

export function version (): string {
  // ../package.json from both src/cli.ts and dist/cli.js.
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version
}

interface OptionSpec {
  type: 'string' | 'boolean'
  short?: string
  /** The placeholder in help and messages, e.g. `<n>`. */
  value?: string
}

interface Command {
  options: Record<string, OptionSpec>
  help: (env: NodeJS.ProcessEnv) => string
}

const HELP_OPTION = { help: { type: 'boolean', short: 'h' } } as const

export const MAIN_HELP = `Usage: ${BIN} <command> [options]

Test a MailChannels webhook receiver on your machine, without an account.

Commands:
  sandbox      Sign webhook deliveries exactly as MailChannels does and POST them to
               your endpoint; serve the signing keys and the batch listing on 127.0.0.1
  batches      List the batches the running sandbox has sent
  rotate-key   Switch the running sandbox to a new signing key

Options:
  -h, --help      Show this help; after a command, that command's options
  -v, --version   Show the version

Run '${BIN} <command> --help' for a command's options.
Output is coloured on a terminal only, and never when NO_COLOR is set.`

const COMMANDS: Record<string, Command> = {
  sandbox: {
    options: {
      target: { type: 'string', value: '<url>' },
      port: { type: 'string', value: '<n>' },
      rate: { type: 'string', value: '<n>' },
      'batch-size': { type: 'string', value: '<n>' },
      count: { type: 'string', value: '<n>' },
      'customer-handle': { type: 'string', value: '<h>' },
      'api-key': { type: 'string', value: '<key>' },
      'tamper-every': { type: 'string', value: '<n>' },
      ...HELP_OPTION,
    },
    help: (env) => `Usage: ${BIN} sandbox [options]

Runs a local stand-in for MailChannels on 127.0.0.1: it signs webhook deliveries
exactly as MailChannels does and POSTs them to your endpoint, and serves
GET /tx/v1/webhook/public-key and GET /tx/v1/webhook-batch for your verifier and client.

Options:
  --target <url>           Where to POST deliveries: an http: URL on a loopback host
                           (e.g. http://127.0.0.1:3000/webhooks) or an https: URL.
                           Without it, only the API is served.
  --port <n>               Port of the sandbox API (default 0: any free port)
  --rate <n>               Deliveries per second, up to 100 (default 1)
  --batch-size <n>         Events per delivery, 1 to 1000 (default 10: one of each type)
  --count <n>              Send exactly n events in all, then stop; the last delivery
                           carries the rest (default: run until Ctrl-C)
  --customer-handle <h>    customer_handle of the events (default sandbox)
  --api-key <key>          X-Api-Key the sandbox API requires (default: a new random key)
  --tamper-every <n>       Make every n-th delivery a tampered one: body, signature and
                           expired in turn; your receiver should reject them (default 0: never)
  -h, --help               Show this help

Each run signs with a new key id, so a receiver still holding the key of an earlier
run fetches the new one at once. The API key is printed, and kept while the sandbox
runs in ${stateFilePath(env)} (readable by you only), where '${BIN} batches'
and '${BIN} rotate-key' find it. The API answers only requests addressed to
127.0.0.1, localhost or [::1].

Point your verifier at the sandbox: baseUrl = the printed URL,
customerHandles = [the customer handle].`,
  },
  batches: {
    options: {
      statuses: { type: 'string', value: '<list>' },
      limit: { type: 'string', value: '<n>' },
      json: { type: 'boolean' },
      ...HELP_OPTION,
    },
    help: (env) => `Usage: ${BIN} batches [options]

Lists the batches the running sandbox has sent, oldest first (a retry keeps its
batch number). It reads the sandbox's address and API key from
${stateFilePath(env)}.

Options:
  --statuses <list>   Only these results, comma-separated: 1xx, 2xx, 3xx, 4xx, 5xx,
                      no_response (e.g. --statuses 4xx,5xx,no_response)
  --limit <n>         At most n batches, 1 to 500 (default 500)
  --json              Print the listing as the API returns it
  -h, --help          Show this help`,
  },
  'rotate-key': {
    options: { ...HELP_OPTION },
    help: (env) => `Usage: ${BIN} rotate-key

Switches the running sandbox to a new signing key with a new key id, as MailChannels
may do at any time. Deliveries signed before stay verifiable: the sandbox keeps
serving its last 5 keys. It reads the sandbox's address and API key from
${stateFilePath(env)}.

Options:
  -h, --help   Show this help`,
  },
}

class UsageError extends Error {
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

function suggest (word: string, candidates: string[]): string {
  const best = candidates.map((c) => [c, distance(word, c)] as const).sort((x, y) => x[1] - y[1])[0]
  return best !== undefined && best[1] <= Math.max(1, Math.floor(best[0].length / 3)) ? ` Did you mean ${best[0]}?` : ''
}

interface Parsed {
  command: string | null
  values: Record<string, string | boolean>
}

/**
 * Reads the arguments with node's parser in its lenient mode and checks every token ourselves,
 * so each mistake gets a message written for people (what is wrong, what would be right).
 */
function parse (argv: string[]): Parsed {
  const all: Record<string, { type: 'string' | 'boolean', short?: string }> = { version: { type: 'boolean', short: 'v' } }
  for (const c of Object.values(COMMANDS)) Object.assign(all, c.options)
  const { tokens } = parseArgs({ args: argv, options: all, strict: false, allowPositionals: true, tokens: true })
  const command = tokens.find((tk) => tk.kind === 'positional')?.value ?? null
  if (command !== null && !(command in COMMANDS)) {
    throw new UsageError(`unknown command '${command}'.${suggest(command, Object.keys(COMMANDS))}`, null)
  }
  const spec: Record<string, OptionSpec> = command === null
    ? { version: { type: 'boolean', short: 'v' }, ...HELP_OPTION }
    : { ...COMMANDS[command]!.options, version: { type: 'boolean', short: 'v' } }
  const values: Record<string, string | boolean> = {}
  let positionals = 0
  for (const tk of tokens) {
    if (tk.kind === 'option-terminator') continue
    if (tk.kind === 'positional') {
      if (++positionals > 1) throw new UsageError(`unexpected argument '${tk.value}'.`, command)
      continue
    }
    const option = spec[tk.name]
    if (option === undefined) {
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
  return { command, values }
}

function numeric (value: string | boolean | undefined, flag: string): number | undefined {
  if (value === undefined || typeof value === 'boolean') return undefined
  const n = Number(value)
  if (value.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${flag} must be a number, got '${value}'.`, 'sandbox')
  return n
}

// The library names options in camelCase; the command's user knows the flags.
const FLAGS: Record<string, string> = {
  target: '--target',
  port: '--port',
  rate: '--rate',
  batchSize: '--batch-size',
  customerHandle: '--customer-handle',
  apiKey: '--api-key',
  tamperEvery: '--tamper-every',
}

const TAMPER_TEXT = {
  body: 'tampered: body changed after signing',
  signature: 'tampered: signed with a key the sandbox does not serve',
  expired: 'tampered: signed an hour ago',
  replay: 'tampered: an exact copy of an earlier delivery',
} as const

function verdict (batch: SandboxBatch): { word: string, colour: number } {
  const code = batch.status_code
  if (code === null) return { word: 'no response', colour: RED }
  if (code >= 200 && code < 300) return { word: 'accepted', colour: GREEN }
  if (code >= 500) return { word: 'failed', colour: RED }
  if (code >= 300 && code < 400) return { word: 'redirected', colour: RED }
  return { word: 'rejected', colour: RED }
}

const seconds = (ms: number): string => (ms < 1000 ? `${ms} ms` : `${Math.round(ms / 100) / 10} s`)

async function runSandbox (values: Record<string, string | boolean>, io: CliIo, env: NodeJS.ProcessEnv): Promise<void> {
  const paint = painter(io.color === true)
  const str = (name: string): string | undefined => values[name] as string | undefined
  const count = numeric(values.count, 'count')
  if (count !== undefined && (!Number.isSafeInteger(count) || count < 1)) throw new UsageError('--count must be a positive integer.', 'sandbox')
  if (count !== undefined && str('target') === undefined) throw new UsageError('--count needs --target: without a target nothing is sent.', 'sandbox')

  // Per batch: its event count and its last attempt, for the summary.
  const sent = new Map<number, { events: number, last: SandboxBatch | null }>()
  let attempts = 0
  let sandbox: Sandbox
  try {
    sandbox = await createSandbox({
      target: str('target'),
      port: numeric(values.port, 'port'),
      rate: numeric(values.rate, 'rate'),
      batchSize: numeric(values['batch-size'], 'batch-size'),
      customerHandle: str('customer-handle'),
      apiKey: str('api-key'),
      tamperEvery: numeric(values['tamper-every'], 'tamper-every'),
      onAttempt (batch, detail) {
        attempts++
        const entry = sent.get(batch.batch_id) ?? { events: batch.event_count, last: null }
        if (!detail.willRetry) entry.last = batch
        sent.set(batch.batch_id, entry)
        const { word, colour } = verdict(batch)
        const code = batch.status_code === null ? '---' : String(batch.status_code)
        // A receiver that accepts a spoiled delivery has a hole: say so, whatever the colour.
        const hole = detail.tamper !== null && detail.tamper !== 'replay' && batch.status === '2xx_response'
        const notes = [
          detail.tamper !== null ? TAMPER_TEXT[detail.tamper] : '',
          hole ? paint(RED, 'your receiver should have rejected it') : '',
          detail.error ?? '',
          detail.retryInMs !== null ? paint(YELLOW, `will retry in ${seconds(detail.retryInMs)}`) : '',
        ].filter(Boolean).join(', ')
        io.out(`batch ${String(batch.batch_id).padEnd(4)} attempt ${detail.attempt}  ${code} ${paint(colour, word.padEnd(11))} ${String(batch.event_count).padStart(4)} events ${paint(DIM, `${String(batch.duration.value).padStart(5)} ms`)}${notes ? `  ${notes}` : ''}`)
      },
    })
  } catch (err) {
    // Option TypeErrors name the option (e.g. "batchSize must be ..."); show them as usage errors.
    if (err instanceof TypeError) throw new UsageError(`${err.message.replace(/^\w+/, (name) => FLAGS[name] ?? name)}.`, 'sandbox')
    throw err
  }

  const file = stateFilePath(env)
  let saved = false
  try {
    const state: SandboxState = { baseUrl: sandbox.baseUrl, apiKey: sandbox.apiKey, customerHandle: sandbox.customerHandle, pid: process.pid }
    writeState(file, state)
    saved = true
  } catch (err) {
    io.err(`${BIN}: could not save the API key in ${file} (${(err as Error).message}); '${BIN} batches' and 'rotate-key' will not find this sandbox.\n`)
  }
  const forget = (): void => { if (saved) removeState(file) }
  process.once('exit', forget)

  let closing: Promise<void> | null = null
  let markClosed!: () => void
  const closed = new Promise<void>((resolve) => { markClosed = resolve })
  let signals = 0
  const onSignal = (signal: NodeJS.Signals): void => {
    // A second Ctrl-C while closing: stop waiting for deliveries in flight.
    if (++signals > 1) process.exit(signal === 'SIGINT' ? 130 : 143)
    void shutdown()
  }
  const shutdown = (): Promise<void> => (closing ??= sandbox.close().then(() => {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
    process.off('exit', forget)
    forget()
    const batches = [...sent.values()]
    const finalOf = (test: (b: SandboxBatch) => boolean): number => batches.filter((b) => b.last !== null && test(b.last)).length
    const accepted = finalOf((b) => b.status === '2xx_response')
    const noResponse = finalOf((b) => b.status === 'no_response')
    const rejected = finalOf((b) => b.status !== '2xx_response' && b.status !== 'no_response')
    const unfinished = batches.filter((b) => b.last === null).length
    const events = batches.reduce((n, b) => n + b.events, 0)
    io.out(paint(BOLD, `summary: sent ${batches.length} ${batches.length === 1 ? 'batch' : 'batches'} (${events} events) in ${attempts} ${attempts === 1 ? 'attempt' : 'attempts'}: ` +
      `${accepted} accepted, ${rejected} rejected, ${noResponse} without response${unfinished > 0 ? `, ${unfinished} cut short by the stop` : ''}`))
    io.out('sandbox closed')
    markClosed()
  }))
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)

  const url = sandbox.baseUrl
  io.out(`${paint(BOLD, 'MailChannels sandbox listening on')} ${url}`)
  io.out(`  customer handle  ${sandbox.customerHandle}`)
  io.out(`  signing key id   ${sandbox.keyId} (new for each run)`)
  io.out(`  API key          ${sandbox.apiKey}${saved ? paint(DIM, `  (kept in ${file} while running)`) : ''}`)
  io.out(`  public key       curl '${url}/tx/v1/webhook/public-key?id=${sandbox.keyId}'`)
  io.out(`  batches          ${BIN} batches   or   curl -H 'X-Api-Key: ${sandbox.apiKey}' '${url}/tx/v1/webhook-batch'`)
  io.out(`  rotate key       ${BIN} rotate-key`)
  io.out(`  your verifier    baseUrl: '${url}', customerHandles: ['${sandbox.customerHandle}']`)
  if (sandbox.target === null) {
    io.out('No --target given: serving the API only. Press Ctrl-C to stop.')
  } else {
    const what = count === undefined ? '' : `${count} ${count === 1 ? 'event' : 'events'}, `
    io.out(`Delivering ${what}to ${sandbox.target}. Press Ctrl-C to stop.`)
    sandbox.start(count !== undefined ? { count } : {})
    if (count !== undefined) void sandbox.finished().then(shutdown)
  }
  // Resolves once the sandbox has closed (Ctrl-C, SIGTERM or --count reached).
  await closed
}

/** Reads the running sandbox's address and key, or says clearly why there is none. */
function runningSandbox (env: NodeJS.ProcessEnv): SandboxState {
  const file = stateFilePath(env)
  const state = readState(file)
  if (state === null) throw new Error(`no running sandbox found (${file} does not exist). Start one with: ${BIN} sandbox`)
  return state
}

async function callSandbox (state: SandboxState, method: string, path: string): Promise<unknown> {
  let res: Response
  try {
    res = await fetch(`${state.baseUrl}${path}`, { method, headers: { 'x-api-key': state.apiKey }, signal: AbortSignal.timeout(10_000), redirect: 'manual' })
  } catch {
    throw new Error(`the sandbox at ${state.baseUrl} does not answer; it may have stopped without cleaning up. Start one with: ${BIN} sandbox`)
  }
  const body = await res.json().catch(() => null) as { errors?: string[] } | null
  if (!res.ok) {
    const why = Array.isArray(body?.errors) ? body.errors.join(' ') : `HTTP ${res.status}`
    throw new Error(res.status === 401
      ? `the sandbox at ${state.baseUrl} refused the saved API key (another sandbox may have taken over the port). ${why}`
      : why)
  }
  return body
}

async function runBatches (values: Record<string, string | boolean>, io: CliIo, env: NodeJS.ProcessEnv): Promise<void> {
  const paint = painter(io.color === true)
  const query = new URLSearchParams()
  if (typeof values.statuses === 'string') query.set('statuses', values.statuses)
  if (typeof values.limit === 'string') query.set('limit', values.limit)
  const state = runningSandbox(env)
  let body: { webhook_batches: SandboxBatch[] }
  try {
    body = await callSandbox(state, 'GET', `/tx/v1/webhook-batch${query.size > 0 ? `?${query}` : ''}`) as { webhook_batches: SandboxBatch[] }
  } catch (err) {
    // The API validates the query; its message names the parameter, which is the flag's name.
    if (/^(statuses|limit)\b/.test((err as Error).message)) throw new UsageError((err as Error).message.replace(/^(statuses|limit)/, '--$1'), 'batches')
    throw err
  }
  if (values.json === true) {
    io.out(JSON.stringify(body, null, 2))
    return
  }
  const list = body.webhook_batches
  for (const b of list) {
    const { word, colour } = verdict(b)
    io.out(`batch ${String(b.batch_id).padEnd(4)} ${b.created_at}  ${b.status_code ?? '---'} ${paint(colour, word.padEnd(11))} ${String(b.event_count).padStart(4)} events ${paint(DIM, `${String(b.duration.value).padStart(5)} ms`)}  ${b.webhook}`)
  }
  io.out(`${list.length} ${list.length === 1 ? 'batch' : 'batches'} listed from ${state.baseUrl}`)
}

async function runRotateKey (io: CliIo, env: NodeJS.ProcessEnv): Promise<void> {
  const state = runningSandbox(env)
  const body = await callSandbox(state, 'POST', '/sandbox/rotate-key') as { id: string, key: string }
  io.out(`signing key rotated: new key id ${body.id}`)
  io.out(`  public key  ${body.key}`)
}

/** Runs the command; resolves with the exit code once it is done (for `sandbox`, once the sandbox has closed). */
export async function main (argv: string[], io: CliIo = processIo): Promise<number> {
  const env = io.env ?? process.env
  let parsed: Parsed
  try {
    parsed = parse(argv)
  } catch (err) {
    if (!(err instanceof UsageError)) throw err
    return usageError(io, err)
  }
  const { command, values } = parsed
  if (values.version === true) {
    io.out(version())
    return 0
  }
  if (values.help === true) {
    io.out(command === null ? MAIN_HELP : COMMANDS[command]!.help(env))
    return 0
  }
  if (command === null) return usageError(io, new UsageError('missing command.', null))
  try {
    if (command === 'sandbox') await runSandbox(values, io, env)
    else if (command === 'batches') await runBatches(values, io, env)
    else await runRotateKey(io, env)
    return 0
  } catch (err) {
    if (err instanceof UsageError) return usageError(io, err)
    io.err(`${BIN} ${command}: ${(err as Error).message}\n`)
    return 1
  }
}

function usageError (io: CliIo, err: UsageError): number {
  const where = err.command === null ? BIN : `${BIN} ${err.command}`
  io.err(`${where}: ${err.message}\nRun '${where} --help' for the usage.\n`)
  return 2
}

// Run only as the program (the bin, or `node --import tsx src/cli.ts`), not when imported by a test.
const invoked = process.argv[1] !== undefined ? realpathSync(process.argv[1]) : ''
if (invoked === realpathSync(fileURLToPath(import.meta.url))) process.exitCode = await main(process.argv.slice(2))
