// The sandbox's commands: `sandbox` (run one) and `rotate-key` (switch the running one's key).
import { createSandbox, type Sandbox, type SandboxBatch } from '../testing/index.js'
import type { EndpointAnswer } from '../testing/sandbox/answer.js'
import { removeState, runningStates, stateFilePath, writeState, type FoundSandbox, type SandboxState } from '../testing/sandbox/state-file.js'
import { BIN, HELP_OPTION, integer, numeric, optionsHelp, UsageError, type CommandSpec, type OptionSpec } from './args.js'
import { BOLD, DIM, GREEN, oneLine, painter, RED, seconds, YELLOW, type CliIo } from './io.js'
import { terminalText } from '../terminal-text.js'

/** The flag that picks one sandbox when several run (sandbox commands, operating commands, inspect, trigger). */
export const SANDBOX_PORT_OPTION: Record<string, OptionSpec> = { 'sandbox-port': { type: 'string', value: '<n>' } }
export const SANDBOX_PORT_HELP: [string, string] = ['--sandbox-port <n>', 'The running sandbox on this port (needed when several run)']

export const SANDBOX_COMMANDS: Record<string, CommandSpec> = {
  sandbox: {
    options: {
      target: { type: 'string', value: '<url>' },
      port: { type: 'string', value: '<n>' },
      rate: { type: 'string', value: '<n>' },
      'batch-size': { type: 'string', value: '<n>' },
      count: { type: 'string', value: '<n>' },
      'exit-after': { type: 'string', value: '<n>' },
      'customer-handle': { type: 'string', value: '<h>' },
      'api-key': { type: 'string', value: '<key>' },
      'tamper-every': { type: 'string', value: '<n>' },
      ...HELP_OPTION,
    },
    help: (env) => `Usage: ${BIN} sandbox [options]

Runs a local stand-in for MailChannels on 127.0.0.1: it signs webhook deliveries
exactly as MailChannels does and POSTs them to the enrolled endpoints, and serves
MailChannels' webhook API (public key, batch listing, enroll, list, delete,
validate, resend) for your verifier, your client and the other commands.

Options:
${optionsHelp([
  ['--target <url>', `The first endpoint to enroll: an http: URL on a loopback host
(e.g. http://127.0.0.1:3000/webhooks) or an https: URL.
Without it, enroll one later:
${BIN} enroll <url> --sandbox`],
  ['--port <n>', 'Port of the sandbox API (default 0: any free port)'],
  ['--rate <n>', 'Deliveries per second, up to 100 (default 1)'],
  ['--batch-size <n>', 'Events per delivery, 1 to 1000 (default 10: one of each type)'],
  ['--count <n>', `Send exactly n events in all, then stop sending and keep serving
the API (resend, batches, trigger) until Ctrl-C; the last
delivery carries the rest (default: send until Ctrl-C)`],
  ['--exit-after <n>', `Send exactly n events, as --count does, then exit once their
deliveries (retries included) are settled`],
  ['--customer-handle <h>', 'customer_handle of the events (default sandbox)'],
  ['--api-key <key>', 'X-Api-Key the sandbox API requires (default: a new random key)'],
  ['--tamper-every <n>', `Make every n-th delivery a tampered one: body, signature and
expired in turn; your receiver should reject them
(default 0: never)`],
  ['-h, --help', 'Show this help'],
])}

Each run signs with a new key id, so a receiver still holding the key of an earlier
run fetches the new one at once. The API key is printed, and kept while the sandbox
runs in a file readable by you only, one per sandbox (by its port):
  ${stateFilePath(env)}
where the other commands find it (with --sandbox, and --sandbox-port <n> when
several sandboxes run), '${BIN} trigger' and
'${BIN} rotate-key' too.
The API answers only requests addressed to 127.0.0.1, localhost or [::1].

A failed attempt's line shows the error code and message of the endpoint's JSON
answer; attempts that get no response for the same reason in a row (a receiver
that stopped) are shown once, with their count.

The inspector page (the printed link, which carries the API key) lists every
attempt live, shows its headers, body, signature base and the receiver's answer,
and sends batches of chosen event types, tampered, expired or replayed ones.

Point your verifier at the sandbox: baseUrl = the printed URL,
customerHandles = [the customer handle].`,
  },
  'rotate-key': {
    options: { ...SANDBOX_PORT_OPTION, ...HELP_OPTION },
    help: (env) => `Usage: ${BIN} rotate-key [options]

Switches the running sandbox to a new signing key with a new key id, as MailChannels
may do at any time. Deliveries signed before stay verifiable: the sandbox keeps
serving its last 5 keys. It reads the sandbox's address and API key from
${stateFilePath(env)}.

Options:
${optionsHelp([SANDBOX_PORT_HELP, ['-h, --help', 'Show this help']])}`,
  },
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

/** The message of a busy --port (sandbox and inspect). */
export const portInUse = (port: string): string => `port ${port} is in use: choose another with --port, or --port 0 for any free one.`

export function verdict (code: number | null): { word: string, colour: number } {
  if (code === null) return { word: 'no response', colour: RED }
  if (code >= 200 && code < 300) return { word: 'accepted', colour: GREEN }
  if (code >= 500) return { word: 'failed', colour: RED }
  if (code >= 300 && code < 400) return { word: 'redirected', colour: RED }
  return { word: 'rejected', colour: RED }
}

/** An endpoint's JSON error code and message, escaped and bounded, for one terminal line. */
export function answerText (answer: EndpointAnswer | null): string {
  if (answer === null) return ''
  const code = answer.code === null ? '' : oneLine(answer.code, 100)
  const message = answer.message === null ? '' : oneLine(answer.message, 300)
  return code !== '' && message !== '' ? `${code}: ${message}` : code + message
}

export async function runSandbox (values: Record<string, string | boolean>, io: CliIo, env: NodeJS.ProcessEnv): Promise<void> {
  const paint = painter(io.color === true)
  const str = (name: string): string | undefined => values[name] as string | undefined
  const count = integer(values.count, 'count', 'sandbox', 1, Number.MAX_SAFE_INTEGER)
  const exitAfter = integer(values['exit-after'], 'exit-after', 'sandbox', 1, Number.MAX_SAFE_INTEGER)
  if (count !== undefined && exitAfter !== undefined) throw new UsageError('give --count or --exit-after, not both: --exit-after n sends n events as --count n does, then exits.', 'sandbox')
  const total = count ?? exitAfter

  // Per batch: its event count and its last attempt, for the summary.
  const sent = new Map<number, { events: number, last: SandboxBatch | null }>()
  let attempts = 0
  // Attempts without response for one reason in a row (a receiver that stopped): shown once, with their count.
  let burst: { error: string, more: number, first: number, last: number } | null = null
  const tty = io.tty === true && typeof io.write === 'function'
  const burstText = (b: NonNullable<typeof burst>): string =>
    `  ${paint(YELLOW, `${terminalText(b.error)}: ${b.more} more ${b.more === 1 ? 'attempt' : 'attempts'} without response`)} (batch ${b.first}${b.last !== b.first ? ` to ${b.last}` : ''})`
  /** Ends the burst: its count line (on a terminal, the line drawn in place is finished). */
  const endBurst = (): void => {
    if (burst === null) return
    if (burst.more > 0) {
      if (tty) io.write!(`\r\u001b[K${burstText(burst)}\n`)
      else io.out(burstText(burst))
    }
    burst = null
  }
  let sandbox: Sandbox
  try {
    sandbox = await createSandbox({
      target: str('target'),
      port: numeric(values.port, 'port', 'sandbox'),
      rate: numeric(values.rate, 'rate', 'sandbox'),
      batchSize: numeric(values['batch-size'], 'batch-size', 'sandbox'),
      customerHandle: str('customer-handle'),
      apiKey: str('api-key'),
      tamperEvery: numeric(values['tamper-every'], 'tamper-every', 'sandbox'),
      onAttempt (batch, detail) {
        attempts++
        const entry = sent.get(batch.batch_id) ?? { events: batch.event_count, last: null }
        if (!detail.willRetry) entry.last = batch
        sent.set(batch.batch_id, entry)
        if (batch.status_code === null && detail.error !== null && burst !== null && burst.error === detail.error) {
          burst.more++
          burst.last = Math.max(burst.last, batch.batch_id)
          // On a terminal the count is redrawn in place; elsewhere it is printed once the burst ends.
          if (tty) io.write!(`\r\u001b[K${burstText(burst)}`)
          return
        }
        endBurst()
        if (batch.status_code === null && detail.error !== null) burst = { error: detail.error, more: 0, first: batch.batch_id, last: batch.batch_id }
        const { word, colour } = verdict(batch.status_code)
        const code = batch.status_code === null ? '---' : String(batch.status_code)
        // A receiver that accepts a spoiled delivery has a hole: say so, whatever the colour.
        const hole = detail.tamper !== null && detail.tamper !== 'replay' && batch.status === '2xx_response'
        const notes = [
          detail.resend ? 'resent on request' : '',
          detail.tamper !== null ? TAMPER_TEXT[detail.tamper] : '',
          hole ? paint(RED, 'your receiver should have rejected it') : '',
          answerText(detail.answer),
          detail.error !== null ? oneLine(detail.error, 200) : '',
          detail.retryInMs !== null ? paint(YELLOW, `will retry in ${seconds(detail.retryInMs)}`) : '',
        ].filter(Boolean).join(', ')
        io.out(`batch ${String(batch.batch_id).padEnd(4)} attempt ${detail.attempt}  ${code} ${paint(colour, word.padEnd(11))} ${String(batch.event_count).padStart(4)} events ${paint(DIM, `${String(batch.duration.value).padStart(5)} ms`)}${notes ? `  ${notes}` : ''}`)
      },
    })
  } catch (err) {
    // Option TypeErrors name the option (e.g. "batchSize must be ..."); show them as usage errors.
    if (err instanceof TypeError) throw new UsageError(`${err.message.replace(/^\w+/, (name) => FLAGS[name] ?? name)}.`, 'sandbox')
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new Error(portInUse(values.port as string))
    throw err
  }

  // One file per sandbox, by port: a second sandbox on the machine keeps its own.
  const file = stateFilePath(env, Number(new URL(sandbox.baseUrl).port))
  let saved = false
  try {
    const state: SandboxState = { baseUrl: sandbox.baseUrl, apiKey: sandbox.apiKey, customerHandle: sandbox.customerHandle, pid: process.pid }
    writeState(file, state)
    saved = true
  } catch (err) {
    io.err(`${BIN}: could not save the API key in ${file} (${(err as Error).message}); --sandbox, 'trigger' and 'rotate-key' will not find this sandbox.\n`)
  }
  const forget = (): void => { if (saved) removeState(file, process.pid, sandbox.baseUrl) }
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
    endBurst()
    const batches = [...sent.values()]
    // Each batch counted by its last attempt, in the words of the attempt lines (verdict()).
    const final: Record<string, number> = {}
    for (const b of batches) if (b.last !== null) final[verdict(b.last.status_code).word] = (final[verdict(b.last.status_code).word] ?? 0) + 1
    const extra = (word: string): string => ((final[word] ?? 0) > 0 ? `, ${final[word]} ${word}` : '')
    const unfinished = batches.filter((b) => b.last === null).length
    const events = batches.reduce((n, b) => n + b.events, 0)
    io.out(paint(BOLD, `summary: sent ${batches.length} ${batches.length === 1 ? 'batch' : 'batches'} (${events} events) in ${attempts} ${attempts === 1 ? 'attempt' : 'attempts'}: ` +
      `${final.accepted ?? 0} accepted, ${final.rejected ?? 0} rejected${extra('failed')}${extra('redirected')}, ${final['no response'] ?? 0} without response${unfinished > 0 ? `, ${unfinished} cut short by the stop` : ''}`))
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
  io.out(`  inspector page   ${sandbox.inspectorUrl}${paint(DIM, '  (open it in a browser on this machine)')}`)
  io.out(`  operate it       ${BIN} list --sandbox   (enroll, validate, batches, resend, reconcile too)`)
  io.out(`  send an event    ${BIN} trigger delivered`)
  io.out(`  rotate key       ${BIN} rotate-key`)
  io.out(`  your verifier    baseUrl: '${url}', customerHandles: ['${sandbox.customerHandle}']`)
  const what = total === undefined ? '' : `${total} ${total === 1 ? 'event' : 'events'}, `
  if (sandbox.target === null) {
    io.out(`No endpoint enrolled yet: enroll one with '${BIN} enroll <url> --sandbox'; deliveries${total === undefined ? '' : ` (${what.slice(0, -2)})`} start then. Press Ctrl-C to stop.`)
  } else {
    io.out(`Delivering ${what}to ${terminalText(sandbox.target)}. Press Ctrl-C to stop.`)
  }
  sandbox.start(total !== undefined ? { count: total } : {})
  if (exitAfter !== undefined) {
    void sandbox.finished().then(shutdown)
  } else if (count !== undefined) {
    // The batches stay listed and resendable: the API serves on until Ctrl-C.
    void sandbox.finished().then(() => {
      if (closing !== null) return
      endBurst()
      io.out(`Sent ${count} ${count === 1 ? 'event' : 'events'}; the API still serves (batches, resend, trigger). Press Ctrl-C to stop.`)
    })
  }
  // Resolves once the sandbox has closed (Ctrl-C, SIGTERM or --exit-after reached).
  await closed
}

/**
 * The running sandbox the other commands operate: the one on `port` when given, else the only
 * one running. Files left by sandboxes that no longer run are removed on the way. Says clearly
 * why there is none, or asks which one when several run.
 */
export function findSandbox (env: NodeJS.ProcessEnv, port: number | undefined, command: string): FoundSandbox {
  const { sandboxes } = runningStates(env)
  const ports = (list: typeof sandboxes): string => list.map((s) => s.port).join(', ')
  if (port !== undefined) {
    const found = sandboxes.find((s) => s.port === port)
    if (found !== undefined) return found
    const others = sandboxes.length === 0 ? '' : `; running: port ${ports(sandboxes)}`
    throw new Error(`no sandbox runs on port ${port} (${stateFilePath(env, port)} does not exist${others}). Start one with: ${BIN} sandbox --port ${port}`)
  }
  if (sandboxes.length === 0) throw new Error(`no running sandbox found (${stateFilePath(env)} does not exist). Start one with: ${BIN} sandbox`)
  if (sandboxes.length > 1) {
    throw new UsageError(`${sandboxes.length} sandboxes are running, on ports ${ports(sandboxes)}: choose one with --sandbox-port <n>, e.g. --sandbox-port ${sandboxes[0]!.port}.`, command)
  }
  return sandboxes[0]!
}

/** `--sandbox-port <n>`, checked. */
export function sandboxPort (values: Record<string, string | boolean>, command: string): number | undefined {
  return integer(values['sandbox-port'], 'sandbox-port', command, 1, 65535)
}

export async function runRotateKey (values: Record<string, string | boolean>, io: CliIo, env: NodeJS.ProcessEnv): Promise<void> {
  const state = findSandbox(env, sandboxPort(values, 'rotate-key'), 'rotate-key')
  let res: Response
  try {
    res = await fetch(`${state.baseUrl}/sandbox/rotate-key`, { method: 'POST', headers: { 'x-api-key': state.apiKey }, signal: AbortSignal.timeout(10_000), redirect: 'manual' })
  } catch {
    throw new Error(`the sandbox at ${state.baseUrl} does not answer; it may have stopped without cleaning up. Start one with: ${BIN} sandbox`)
  }
  const body = await res.json().catch(() => null) as { id?: string, key?: string, errors?: string[] } | null
  if (!res.ok) {
    const why = Array.isArray(body?.errors) ? oneLine(body.errors.join(' '), 500) : `HTTP ${res.status}`
    throw new Error(res.status === 401
      ? `the sandbox at ${state.baseUrl} refused the saved API key (another sandbox may have taken over the port). ${why}`
      : why)
  }
  io.out(`signing key rotated: new key id ${terminalText(String(body?.id))}`)
  io.out(`  public key  ${terminalText(String(body?.key))}`)
}
