// `inspect`: a receiving endpoint that verifies each delivery with the library and shows it,
// with its verdict, on a local page (and one line per delivery here).
import { DEFAULT_BASE_URL } from '../base-url.js'
import { createInspector, type Inspector, type InspectedSummary } from '../testing/inspector/index.js'
import { BIN, HELP_OPTION, numeric, optionsHelp, UsageError, type CommandSpec } from './args.js'
import { BOLD, DIM, GREEN, oneLine, painter, RED, YELLOW, type CliIo } from './io.js'
import { findSandbox, portInUse, SANDBOX_PORT_HELP, SANDBOX_PORT_OPTION, sandboxPort } from './sandbox-commands.js'
import { terminalText } from '../terminal-text.js'

export const INSPECT_COMMANDS: Record<string, CommandSpec> = {
  inspect: {
    options: {
      port: { type: 'string', value: '<n>' },
      'public-key': { type: 'string', value: '<key>' },
      'base-url': { type: 'string', value: '<url>' },
      sandbox: { type: 'boolean' },
      ...SANDBOX_PORT_OPTION,
      'customer-handle': { type: 'string', value: '<h>' },
      ...HELP_OPTION,
    },
    help: () => `Usage: ${BIN} inspect [options]

Runs a webhook endpoint on 127.0.0.1 that verifies every delivery with this library
(digest, signature, freshness, customers, replays) and answers as a receiver built
on it would, and a page that shows each delivery with its verdict: the headers, the
body, the signature base and the reason of a rejection. Point the sandbox at it, or
the real service through a tunnel; deliveries are taken on any path.

Options:
${optionsHelp([
  ['--port <n>', 'Port on 127.0.0.1 (default 0: any free port)'],
  ['--public-key <key>', `Verify with this key (base64 SPKI, as the public-key endpoint
serves it); no key is fetched`],
  ['--base-url <url>', `Fetch signing keys from this origin
(default ${DEFAULT_BASE_URL})`],
  ['--sandbox', 'Fetch keys from the running sandbox, and accept its customer'],
  SANDBOX_PORT_HELP,
  ['--customer-handle <h>', 'Accept only these customers (comma-separated; default: any)'],
  ['-h, --help', 'Show this help'],
])}

The page is for this machine's browser only: it answers requests addressed to
127.0.0.1, localhost or [::1] that no proxy relayed, and its data needs the key in
the printed link (new for each run). Ctrl-C stops it and prints a summary.`,
  },
}

/** Runs the inspector until Ctrl-C (or SIGTERM); resolves once it has closed. */
export async function runInspect (values: Record<string, string | boolean>, io: CliIo, env: NodeJS.ProcessEnv): Promise<void> {
  const paint = painter(io.color === true)
  const str = (name: string): string | undefined => values[name] as string | undefined
  const port = sandboxPort(values, 'inspect')
  // --sandbox-port <n> is --sandbox for the sandbox on that port.
  if (port !== undefined) values = { ...values, sandbox: true }
  const sources = ['public-key', 'base-url', 'sandbox'].filter((name) => values[name] !== undefined)
  if (sources.length > 1) throw new UsageError(`give one of --public-key, --base-url and --sandbox, not ${sources.map((s) => `--${s}`).join(' and ')}.`, 'inspect')
  let baseUrl = str('base-url')
  let handles = str('customer-handle')?.split(',').map((h) => h.trim())
  if (handles !== undefined && handles.some((h) => h === '')) throw new UsageError('--customer-handle must be a comma-separated list of customer handles, e.g. --customer-handle acme,globex.', 'inspect')
  if (values.sandbox === true) {
    const state = findSandbox(env, port, 'inspect')
    baseUrl = state.baseUrl
    handles ??= [state.customerHandle]
  }

  const counts = { accepted: 0, duplicate: 0, rejected: 0, failed: 0 }
  let inspector: Inspector
  try {
    inspector = await createInspector({
      port: numeric(values.port, 'port', 'inspect'),
      ...(str('public-key') !== undefined ? { publicKey: str('public-key') } : {}),
      ...(baseUrl !== undefined ? { baseUrl } : {}),
      ...(handles !== undefined ? { customerHandles: handles } : {}),
      onDelivery: (d) => {
        counts[d.outcome === 'accepted' ? 'accepted' : d.outcome === 'duplicate' ? 'duplicate' : d.outcome === 'failed' ? 'failed' : 'rejected']++
        io.out(line(d, paint))
      },
    })
  } catch (err) {
    if (err instanceof TypeError) {
      const flag = /^(publicKey|baseUrl|port)\b/.exec(err.message)?.[1]
      const flags: Record<string, string> = { publicKey: '--public-key', baseUrl: '--base-url', port: '--port' }
      throw new UsageError(`${flag === undefined ? err.message : err.message.replace(flag, flags[flag]!)}.`, 'inspect')
    }
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new Error(portInUse(values.port as string))
    throw err
  }

  let closing: Promise<void> | null = null
  let markClosed!: () => void
  const closed = new Promise<void>((resolve) => { markClosed = resolve })
  const onSignal = (): void => { void shutdown() }
  const shutdown = (): Promise<void> => (closing ??= inspector.close().then(() => {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
    const total = counts.accepted + counts.duplicate + counts.rejected + counts.failed
    io.out(paint(BOLD, `summary: received ${total} ${total === 1 ? 'delivery' : 'deliveries'}: ${counts.accepted} accepted, ${counts.duplicate} ${counts.duplicate === 1 ? 'duplicate' : 'duplicates'}, ${counts.rejected} rejected, ${counts.failed} failed`))
    io.out('inspector closed')
    markClosed()
  }))
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)

  const verifyWith = str('public-key') !== undefined ? 'the public key given' : `keys from ${baseUrl ?? DEFAULT_BASE_URL}`
  io.out(`${paint(BOLD, 'Webhook inspector listening on')} ${inspector.url}`)
  io.out(`  deliveries       POST ${inspector.url}/<any path>, e.g. ${inspector.url}/webhooks`)
  io.out(`  verifying with   ${terminalText(verifyWith)}`)
  io.out(`  customers        ${handles === undefined ? 'any' : terminalText(handles.join(', '))}`)
  io.out(`  page             ${inspector.pageUrl}${paint(DIM, '  (open it in a browser on this machine; the key is new for each run)')}`)
  if (values.sandbox === true) io.out(`  from the sandbox ${BIN} enroll ${inspector.url}/webhooks --sandbox`)
  io.out('Press Ctrl-C to stop.')
  await closed
}

function line (d: InspectedSummary, paint: ReturnType<typeof painter>): string {
  const good = d.outcome === 'accepted' || d.outcome === 'duplicate'
  const word = d.outcome === 'no_response' ? 'no response' : d.outcome
  const events = d.eventCount === null ? '' : `${String(d.eventCount).padStart(4)} events`
  const reason = d.reason === null ? '' : `  ${oneLine(d.reason.type, 40)}: ${oneLine(d.reason.message, 160)}`
  return `#${String(d.seq).padEnd(4)} POST ${oneLine(d.endpoint, 60).padEnd(12)} ${d.statusCode ?? '---'} ${paint(good ? GREEN : d.outcome === 'failed' ? YELLOW : RED, word.padEnd(9))} ${events} ${paint(DIM, `${String(d.durationMs).padStart(4)} ms`)}${reason}`
}
