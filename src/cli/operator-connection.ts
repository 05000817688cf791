// What every operator command shares: its context, the connection to the API (or the running
// sandbox), and how a failed call or a result is printed. The API key comes from
// MAILCHANNELS_API_KEY only and is never printed.
import { parseBaseUrl } from '../base-url.js'
import { isTimeoutError } from '../client/http.js'
import { MailChannels } from '../client/mailchannels.js'
import type { ErrorResponse } from '../errors.js'
import { terminalJson, terminalText } from '../terminal-text.js'
import { BIN, UsageError } from './args.js'
import type { CliIo, painter } from './io.js'
import { findSandbox, sandboxPort } from './sandbox-commands.js'

export const DEFAULT_BASE_URL = 'https://api.mailchannels.net'

/** One run of an operator command: what the user typed, where to print, and how. */
export interface Context {
  command: string
  values: Record<string, string | boolean>
  args: string[]
  io: CliIo
  env: NodeJS.ProcessEnv
  json: boolean
  paint: ReturnType<typeof painter>
}

/** The API a command talks to: MailChannels' or the running sandbox's. */
export interface Connection {
  client: MailChannels
  baseUrl: string
  sandbox: boolean
}

const API_KEY = /^[\x21-\x7e]+$/

/** The client: `--sandbox` (the running sandbox's address and key) or `--base-url` with MAILCHANNELS_API_KEY. */
export function connect (c: Context): Connection {
  const port = sandboxPort(c.values, c.command)
  if (c.values.sandbox === true || port !== undefined) {
    if (c.values['base-url'] !== undefined) throw new UsageError('give --sandbox or --base-url, not both: --sandbox uses the running sandbox\'s address.', c.command)
    const state = findSandbox(c.env, port, c.command)
    return { client: new MailChannels(state.apiKey, { baseUrl: state.baseUrl }), baseUrl: state.baseUrl, sandbox: true }
  }
  // What the user typed is checked before the key: a wrong flag is named even without a key.
  const baseUrl = typeof c.values['base-url'] === 'string' ? c.values['base-url'] : DEFAULT_BASE_URL
  try {
    parseBaseUrl(baseUrl)
  } catch (err) {
    throw new UsageError(`--base-url ${(err as Error).message.replace(/^baseUrl /, '')}.`, c.command)
  }
  const key = (c.env.MAILCHANNELS_API_KEY ?? '').trim()
  if (key === '') {
    throw new UsageError('MAILCHANNELS_API_KEY is not set. Set it to your MailChannels API key (export MAILCHANNELS_API_KEY=...), or use --sandbox with a running sandbox.', c.command)
  }
  // The message never quotes the key.
  if (!API_KEY.test(key)) throw new UsageError('MAILCHANNELS_API_KEY must be printable ASCII without spaces or control characters; check what it is set to.', c.command)
  try {
    return { client: new MailChannels(key, { baseUrl }), baseUrl, sandbox: false }
  } catch (err) {
    throw new UsageError(`--base-url ${(err as Error).message.replace(/^baseUrl /, '')}.`, c.command)
  }
}

/** What to do about an error, in the operator's terms. */
export function advice (error: ErrorResponse, conn: Connection, command: string): string | null {
  if (error.type === 'authentication_error' || error.type === 'permission_error') {
    return conn.sandbox
      ? 'The sandbox refused its saved key: another sandbox may have taken over its port. Restart it.'
      : `The API refused the key (HTTP ${error.statusCode}): check MAILCHANNELS_API_KEY and its permissions.`
  }
  if (error.type === 'rate_limit_error') return 'The API is rate-limiting this key: wait a minute, then try again.'
  if (error.type === 'listing_repeated') return 'The API answers the same page again and again: try a narrower window (--after and --before); if it persists, report it.'
  if (error.type === 'listing_limit_reached') {
    return `Narrow the window (--since, --after, --before) or the filters (--status, --webhook), ${command === 'reconcile' ? 'or raise --max-batches' : 'or give --limit <n> to see the first n'}.`
  }
  if (error.type === 'conflict_error' && command === 'enroll') return `See the enrolled endpoints with '${BIN} list'; '${BIN} delete --yes' removes every one.`
  if (error.type === 'not_found' && command === 'validate') return `Enroll an endpoint first: ${BIN} enroll <url>`
  if (error.type === 'not_found' && command === 'resend') return `List failed batches with '${BIN} batches --status 4xx,5xx,no_response'; batches older than the API keeps cannot be resent.`
  if (error.type === 'application_error') {
    if (/aborted/.test(error.message)) return null
    if (isTimeoutError(error)) return `${conn.baseUrl} did not answer in time: check your network (or --base-url), then try again.`
    if (/redirect/.test(error.message)) return `Check --base-url: ${conn.baseUrl} answered with a redirect.`
    return `Could not reach ${conn.baseUrl}: check your network (or --base-url${conn.sandbox ? '; is the sandbox still running?' : ''}), then try again.`
  }
  if (error.statusCode !== null && error.statusCode >= 500) return 'The MailChannels API failed: try again in a minute.'
  if (error.type === 'api_error') return 'The API answered something unexpected: try again; if it persists, report it.'
  return null
}

// The client's option names, as the flags the user typed.
const FLAG_NAMES: Array<[RegExp, string]> = [
  [/^statuses: /, '--status: '],
  [/'createdAfter'/, '--after'],
  [/'createdBefore'/, '--before'],
  [/\bcreatedBefore\b/g, '--before'],
  [/\bcreatedAfter\b/g, '--after'],
  [/^The webhook value/, 'The --webhook value'],
  [/^The requestId/, 'The --request-id'],
  [/^The endpoint/, 'The endpoint <url>'],
  [/^The customerHandle/, 'The --customer-handle value'],
]

/** Reports a failed call; returns the exit code (2 for what the user typed, 1 otherwise). */
export function fail (c: Context, conn: Connection | null, error: ErrorResponse): number {
  if (error.type === 'validation_error') {
    const message = FLAG_NAMES.reduce((m, [from, to]) => m.replace(from, to), error.message)
    if (c.json) c.io.out(terminalJson(JSON.stringify({ data: null, error: { ...error, message } }, null, 2)))
    c.io.err(`${BIN} ${c.command}: ${terminalText(message)}\nRun '${BIN} ${c.command} --help' for the usage.\n`)
    return 2
  }
  if (c.json) c.io.out(terminalJson(JSON.stringify({ data: null, error }, null, 2)))
  const todo = conn === null ? null : advice(error, conn, c.command)
  let message = error.message
  if (error.type === 'listing_limit_reached') {
    // The library's advice names its option; the advice line below names the flags.
    message = message.replace(/; maxBatches \((\d+)\) stops it here\..*$/, (_all, n: string) => (c.command === 'reconcile' ? `; --max-batches (${n}) stops it here.` : `; ${c.command} stops at ${n} entries.`))
  }
  c.io.err(`${BIN} ${c.command}: ${terminalText(message)}${todo === null ? '' : `\n  ${todo}`}\n`)
  return 1
}

export function printJson (c: Context, data: unknown): void {
  // Exact JSON; the characters JSON.stringify leaves raw (C1, bidi) as \u escapes.
  c.io.out(terminalJson(JSON.stringify({ data, error: null }, null, 2)))
}
