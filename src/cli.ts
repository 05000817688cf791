#!/usr/bin/env node
// The `mailchannels-webhooks` command. The one place in the package that prints to stdout.
import { realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { createSandbox, type Sandbox } from './testing/index.js'

export const HELP = `Usage: mailchannels-webhooks sandbox [options]

Runs a local stand-in for MailChannels on 127.0.0.1: it signs webhook deliveries
exactly as MailChannels does and POSTs them to your endpoint, and serves
GET /tx/v1/webhook/public-key and GET /tx/v1/webhook-batch for your verifier and client.

Options:
  --target <url>           Where to POST deliveries: an http: URL on a loopback host
                           (e.g. http://127.0.0.1:3000/webhooks) or an https: URL.
                           Without it, only the API is served.
  --port <n>               Port of the sandbox API (default 0: any free port)
  --rate <n>               Deliveries per second (default 1)
  --batch-size <n>         Events per delivery, 1 to 1000 (default 10: one of each type)
  --customer-handle <h>    customer_handle of the events (default sandbox)
  --api-key <key>          X-Api-Key the sandbox API requires (default sandbox-api-key)
  --count <n>              Stop after n deliveries (default: run until Ctrl-C)
  --tamper-every <n>       Make every n-th delivery a tampered one (default 0: never)
  -h, --help               Show this help

Point your verifier at the sandbox with baseUrl = the printed URL and
customerHandles = [the customer handle]. Rotate the signing key with
  curl -X POST -H 'X-Api-Key: <key>' <url>/sandbox/rotate-key
`

const OPTIONS = {
  target: { type: 'string' },
  port: { type: 'string' },
  rate: { type: 'string' },
  'batch-size': { type: 'string' },
  'customer-handle': { type: 'string' },
  'api-key': { type: 'string' },
  count: { type: 'string' },
  'tamper-every': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const

class UsageError extends Error {}

const FLAGS: Record<string, string> = {
  target: '--target',
  port: '--port',
  rate: '--rate',
  batchSize: '--batch-size',
  customerHandle: '--customer-handle',
  apiKey: '--api-key',
  tamperEvery: '--tamper-every',
}

function numeric (value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined
  const n = Number(value)
  if (value.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${flag} must be a number, got '${value}'`)
  return n
}

/** Where the command writes; the real streams by default, a buffer in tests. */
export interface CliIo {
  out: (line: string) => void
  err: (text: string) => void
}

const processIo: CliIo = {
  out: (line) => { process.stdout.write(`${line}\n`) },
  err: (text) => { process.stderr.write(text) },
}

async function runSandbox (values: Record<string, string | boolean | undefined>, io: CliIo): Promise<void> {
  const str = (name: string): string | undefined => values[name] as string | undefined
  const count = numeric(str('count'), 'count')
  if (count !== undefined && (!Number.isInteger(count) || count < 1)) throw new UsageError('--count must be a positive integer')
  let delivered = 0
  let sandbox: Sandbox
  try {
    sandbox = await createSandbox({
      target: str('target'),
      port: numeric(str('port'), 'port'),
      rate: numeric(str('rate'), 'rate'),
      batchSize: numeric(str('batch-size'), 'batch-size'),
      customerHandle: str('customer-handle'),
      apiKey: str('api-key'),
      tamperEvery: numeric(str('tamper-every'), 'tamper-every'),
      onAttempt (batch, detail) {
        const code = batch.status_code ?? '---'
        const extra = [
          detail.tamper !== null ? `tampered (${detail.tamper})` : '',
          detail.error ?? '',
          detail.willRetry ? 'will retry' : '',
        ].filter(Boolean).join(', ')
        io.out(`batch ${batch.batch_id}  ${code} ${batch.status}  ${batch.duration.value} ms  ${batch.event_count} events  attempt ${detail.attempt}${extra ? `  (${extra})` : ''}`)
        if (!detail.willRetry && count !== undefined && ++delivered >= count) void shutdown()
      },
    })
  } catch (err) {
    // Option TypeErrors name the option (e.g. "batchSize must be ..."); show them as usage errors.
    if (err instanceof TypeError) throw new UsageError(err.message.replace(/^\w+/, (name) => FLAGS[name] ?? name))
    throw err
  }
  let closing: Promise<void> | null = null
  let markClosed!: () => void
  const sandboxClosed = new Promise<void>((resolve) => { markClosed = resolve })
  const onSignal = (): void => { void shutdown() }
  const shutdown = (): Promise<void> => (closing ??= sandbox.close().then(() => {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
    io.out('sandbox closed')
    markClosed()
  }))
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)

  io.out(`MailChannels sandbox listening on ${sandbox.baseUrl}`)
  io.out(`  customer handle: ${sandbox.customerHandle}`)
  io.out(`  signing key:     ${sandbox.keyId} ${sandbox.publicKey}`)
  io.out(`  public key:      curl '${sandbox.baseUrl}/tx/v1/webhook/public-key?id=${sandbox.keyId}'`)
  io.out(`  batches:         curl -H 'X-Api-Key: ${sandbox.apiKey}' '${sandbox.baseUrl}/tx/v1/webhook-batch'`)
  io.out(`  rotate key:      curl -X POST -H 'X-Api-Key: ${sandbox.apiKey}' '${sandbox.baseUrl}/sandbox/rotate-key'`)
  if (sandbox.target === null) {
    io.out('No --target given: serving the API only. Press Ctrl-C to stop.')
  } else {
    io.out(`Delivering to ${sandbox.target}. Press Ctrl-C to stop.`)
    sandbox.start()
  }
  // Resolves once the sandbox has closed (Ctrl-C, SIGTERM or --count reached).
  await sandboxClosed
}

/** Runs the command; resolves with the exit code once it is done (for `sandbox`, once the sandbox has closed). */
export async function main (argv: string[], io: CliIo = processIo): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true })
  } catch (err) {
    io.err(`${(err as Error).message}\n\n${HELP}`)
    return 2
  }
  const { values, positionals } = parsed
  if (values.help === true) {
    io.out(HELP.trimEnd())
    return 0
  }
  if (positionals.length !== 1 || positionals[0] !== 'sandbox') {
    io.err(`${positionals.length === 0 ? 'Missing command.' : `Unknown command '${positionals.join(' ')}'.`}\n\n${HELP}`)
    return 2
  }
  try {
    await runSandbox(values, io)
    return 0
  } catch (err) {
    io.err(`mailchannels-webhooks: ${(err as Error).message}\n`)
    return err instanceof UsageError ? 2 : 1
  }
}

// Run only as the program (the bin, or `node --import tsx src/cli.ts`), not when imported by a test.
const invoked = process.argv[1] !== undefined ? realpathSync(process.argv[1]) : ''
if (invoked === realpathSync(fileURLToPath(import.meta.url))) process.exitCode = await main(process.argv.slice(2))
