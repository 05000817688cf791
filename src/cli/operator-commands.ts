// The commands that operate a webhook through the MailChannels API (or a sandbox standing in
// for it): enroll, list, delete, validate, batches, resend, reconcile. The API key comes from
// MAILCHANNELS_API_KEY only and is never printed.
import { isLoopbackHost, parseBaseUrl } from '../base-url.js'
import { endpointAnswer } from '../testing/sandbox/answer.js'
import { buildBatchesQuery, DEFAULT_MAX_BATCHES, parseUtcDate, type WebhooksBatch, type WebhooksBatchStatus } from '../client/batches.js'
import { isTimeoutError } from '../client/http.js'
import { MailChannels, MailChannelsError } from '../client/mailchannels.js'
import { checkReconcileOptions, type ReconcileBatchResult, type ReconcileOptions, type ReconcileReport, type ReconcileSettled, type ReconcileSkipReason } from '../client/reconcile.js'
import { checkCustomerHandle, checkEndpoint, checkRequestId, type ResentBatch, type WebhookValidationResult } from '../client/webhooks.js'
import type { ErrorResponse } from '../errors.js'
import { BIN, HELP_OPTION, numeric, optionsHelp, UsageError, type CommandSpec, type OptionSpec } from './args.js'
import { BOLD, DIM, GREEN, oneLine, painter, plural, RED, table, YELLOW, type CliIo } from './io.js'
import { readReconcileState, StateFileError, writeReconcileState } from './reconcile-state.js'
import { answerText, findSandbox, SANDBOX_PORT_HELP, SANDBOX_PORT_OPTION, sandboxPort } from './sandbox-commands.js'
import { terminalJson, terminalText } from '../terminal-text.js'

const DEFAULT_BASE_URL = 'https://api.mailchannels.net'

const CONNECTION: Record<string, OptionSpec> = {
  'base-url': { type: 'string', value: '<url>' },
  sandbox: { type: 'boolean' },
  ...SANDBOX_PORT_OPTION,
  json: { type: 'boolean' },
  ...HELP_OPTION,
}

const CONNECTION_HELP: Array<[string, string]> = [
  ['--base-url <url>', `The API (default ${DEFAULT_BASE_URL}); http: only
for a loopback host, e.g. a sandbox's http://127.0.0.1:8787`],
  ['--sandbox', 'Use the running sandbox (its address and API key)'],
  SANDBOX_PORT_HELP,
  ['--json', 'Print { "data": ..., "error": ... } as JSON, for scripts'],
  ['-h, --help', 'Show this help'],
]

const KEY_HELP = `The API key is read from the MAILCHANNELS_API_KEY environment variable (never from
a flag, so it stays out of your shell history) and never printed.`

/** The window and filter flags of `batches` and `reconcile`. */
const windowHelp = (since: string, status: string): Array<[string, string]> => [
  ['--since <n>d|h|m', `Created in the last n days, hours or minutes, at most 31d
(${since})`],
  ['--after <date>', `Or: created at or after this date (UTC),
YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ`],
  ['--before <date>', `Created before this date (same formats), at most 31 days
after the start`],
  ['--status <list>', `${status}, comma-separated from
1xx, 2xx, 3xx, 4xx, 5xx, no_response`],
  ['--webhook <url>', 'Only batches sent to this endpoint URL (exactly as enrolled)'],
]

const WINDOW_OPTIONS: Record<string, OptionSpec> = {
  since: { type: 'string', value: '<n>d|h|m' },
  after: { type: 'string', value: '<date>' },
  before: { type: 'string', value: '<date>' },
  status: { type: 'string', value: '<list>' },
  webhook: { type: 'string', value: '<url>' },
}

export const OPERATOR_COMMANDS: Record<string, CommandSpec> = {
  enroll: {
    options: { ...CONNECTION },
    args: { name: '<url>', min: 1, max: 1 },
    help: () => `Usage: ${BIN} enroll <url> [options]

Enrolls an endpoint to receive your account's email events: an https: URL (http: only
on a loopback host, for local testing), at most 8,000 characters.

Options:
${optionsHelp(CONNECTION_HELP)}

${KEY_HELP}`,
  },
  list: {
    options: { ...CONNECTION },
    help: () => `Usage: ${BIN} list [options]

Lists the enrolled endpoints, one per line.

Options:
${optionsHelp(CONNECTION_HELP)}

${KEY_HELP}`,
  },
  delete: {
    options: { yes: { type: 'boolean' }, ...CONNECTION },
    help: () => `Usage: ${BIN} delete --yes [options]

Removes EVERY enrolled endpoint (the API has no way to remove just one): your
receivers get no more events until you enroll again.

Options:
${optionsHelp([['--yes', 'Confirm: without it nothing is removed'], ...CONNECTION_HELP])}

${KEY_HELP}`,
  },
  validate: {
    options: { 'request-id': { type: 'string', value: '<id>' }, ...CONNECTION },
    help: () => `Usage: ${BIN} validate [options]

Has MailChannels POST a signed 'test' event to each enrolled endpoint, and prints what
each answered: its status and, for a failure, the error code and message of its
answer (or the start of a body that is not JSON). Exit code 0 only when every
endpoint answered 2xx.

Options:
${optionsHelp([
  ['--request-id <id>', `request_id of the test event, at most 28 characters (default: one
made up by the service)`],
  ...CONNECTION_HELP,
])}

${KEY_HELP}`,
  },
  batches: {
    options: { ...WINDOW_OPTIONS, limit: { type: 'string', value: '<n>' }, ...CONNECTION },
    help: () => `Usage: ${BIN} batches [options]

Lists webhook delivery batches as a table (id, created, status, code, events, duration,
endpoint), every page: one row per delivery attempt, so a batch tried three times has
three rows.

Options:
${optionsHelp([
  ...windowHelp('default: the last 3 days', 'Delivery results (default all)'),
  ['--limit <n>', `At most n entries (default: every page; a listing that repeats
a page, or goes past ${DEFAULT_MAX_BATCHES} entries, stops with an error)`],
  ...CONNECTION_HELP,
])}

Failed deliveries: ${BIN} batches --status 4xx,5xx,no_response

${KEY_HELP}`,
  },
  resend: {
    options: { 'customer-handle': { type: 'string', value: '<h>' }, ...CONNECTION },
    args: { name: '<batchId>...', min: 1, max: 100 },
    help: () => `Usage: ${BIN} resend <batchId>... [options]

Has MailChannels deliver each batch again, signed afresh, and prints what your endpoint
answered. Exit code 0 only when every endpoint answered 2xx.

Options:
${optionsHelp([
  ['--customer-handle <h>', `Sent as X-Customer-Handle: the (sub-)account the batches
belong to`],
  ...CONNECTION_HELP,
])}

To resend every failed batch of a window once, use '${BIN} reconcile'.

${KEY_HELP}`,
  },
  reconcile: {
    options: {
      ...WINDOW_OPTIONS,
      'dry-run': { type: 'boolean' },
      yes: { type: 'boolean' },
      concurrency: { type: 'string', value: '<n>' },
      rate: { type: 'string', value: '<n>' },
      state: { type: 'string', value: '<file>' },
      'max-batches': { type: 'string', value: '<n>' },
      ...CONNECTION,
    },
    help: () => `Usage: ${BIN} reconcile [options]

Finds every batch whose delivery failed in a window (every page) and resends each one
once: after an outage, this gets the missed events back. Your receiver should drop
events it already handled (a seen-events store), since a batch may have been
delivered in part, or resent before.

Options:
${optionsHelp([
  ...windowHelp('default: --since 3d', 'Failed results (default 4xx,5xx,no_response)'),
  ['--dry-run', 'List what would be resent; resend nothing'],
  ['--yes', 'Resend without asking (needed when not on a terminal)'],
  ['--concurrency <n>', 'Resends in flight at once, 1 to 16 (default 1)'],
  ['--rate <n>', 'Resends started per second at most (default 3)'],
  ['--state <file>', `Remember the batches resent in this file and skip those it
lists: a rerun after a crash or Ctrl-C resends nothing twice`],
  ['--max-batches <n>', `List at most n entries (one per delivery attempt); a listing
longer than that stops with an error, nothing resent
(default ${DEFAULT_MAX_BATCHES})`],
  ...CONNECTION_HELP,
])}

Every listed batch is checked against the window, --status and --webhook before it
is resent; one that does not match (the API ignored the query) is skipped.
It stops when the API refuses the key (401/403) or after 5 failed resends in a row.
Ctrl-C stops it between batches. Exit code 0 only when nothing failed.

${KEY_HELP}`,
  },
}

interface Context {
  command: string
  values: Record<string, string | boolean>
  args: string[]
  io: CliIo
  env: NodeJS.ProcessEnv
  json: boolean
  paint: ReturnType<typeof painter>
}

interface Connection {
  client: MailChannels
  baseUrl: string
  sandbox: boolean
}

const API_KEY = /^[\x21-\x7e]+$/

/** The client: `--sandbox` (the running sandbox's address and key) or `--base-url` with MAILCHANNELS_API_KEY. */
function connect (c: Context): Connection {
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
function advice (error: ErrorResponse, conn: Connection, command: string): string | null {
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
function fail (c: Context, conn: Connection | null, error: ErrorResponse): number {
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

function printJson (c: Context, data: unknown): void {
  // Exact JSON; the characters JSON.stringify leaves raw (C1, bidi) as \u escapes.
  c.io.out(terminalJson(JSON.stringify({ data, error: null }, null, 2)))
}

async function enroll (c: Context): Promise<number> {
  const checked = checkEndpoint(c.args[0])
  if (checked.error !== null) return fail(c, null, checked.error)
  const conn = connect(c)
  const r = await conn.client.webhooks.enroll(c.args[0]!)
  if (r.error !== null) return fail(c, conn, r.error)
  if (c.json) printJson(c, r.data)
  else c.io.out(`enrolled ${terminalText(r.data.endpoint)}\nCheck that it answers: ${BIN} validate${conn.sandbox ? ' --sandbox' : ''}`)
  return 0
}

async function list (c: Context): Promise<number> {
  const conn = connect(c)
  const r = await conn.client.webhooks.list()
  if (r.error !== null) return fail(c, conn, r.error)
  if (c.json) printJson(c, r.data)
  else if (r.data.length === 0) c.io.out(`no endpoint enrolled (enroll one with: ${BIN} enroll <url>${conn.sandbox ? ' --sandbox' : ''})`)
  else for (const url of r.data) c.io.out(terminalText(url))
  return 0
}

async function remove (c: Context): Promise<number> {
  if (c.values.yes !== true) {
    throw new UsageError('this removes EVERY enrolled endpoint (the API cannot remove just one), and your receivers then get no events. Run it again with --yes to confirm.', c.command)
  }
  const conn = connect(c)
  const r = await conn.client.webhooks.delete()
  if (r.error !== null) return fail(c, conn, r.error)
  if (c.json) printJson(c, r.data)
  else c.io.out(`removed every enrolled endpoint; enroll one again with: ${BIN} enroll <url>${conn.sandbox ? ' --sandbox' : ''}`)
  return 0
}

async function validate (c: Context): Promise<number> {
  const requestId = c.values['request-id'] as string | undefined
  if (requestId !== undefined) {
    const checked = checkRequestId(requestId)
    if (checked.error !== null) return fail(c, null, checked.error)
  }
  const conn = connect(c)
  const r = await conn.client.webhooks.validate(requestId)
  if (r.error !== null) return fail(c, conn, r.error)
  if (c.json) {
    printJson(c, r.data)
  } else {
    // A JSON answer's code and message are shown in full (bounded) on a line of their own; any
    // other answer, in short on the endpoint's row.
    const said = r.data.results.map((x) => (x.response === null ? null : endpointAnswer(x.response.body)))
    const plain = r.data.results.map((x, i) => [
      x.result === 'passed' ? 'passed' : 'failed',
      x.response === null ? '---' : String(x.response.status),
      terminalText(x.webhook),
      x.response === null ? '(no answer)' : x.result === 'passed' || said[i] === null ? oneLine(x.response.body, 60) : '',
    ])
    // Colour codes add invisible characters: align on the plain text, then paint.
    const lines = table(plain)
    r.data.results.forEach((x, i) => {
      const line = lines[i]!
      c.io.out(x.result === 'passed' ? line.replace('passed', c.paint(GREEN, 'passed')) : line.replace('failed', c.paint(RED, 'failed')))
      if (x.result !== 'passed' && said[i] != null) c.io.out(`  ${answerText(said[i]!)}`)
    })
    const failed = r.data.results.filter((x) => x.result !== 'passed')
    if (failed.length === 0) {
      c.io.out(`all ${plural(r.data.results.length, 'endpoint')} answered 2xx`)
    } else {
      c.io.out(`${failed.length} of ${plural(r.data.results.length, 'endpoint')} did not answer 2xx: ${validateHint(failed)}`)
      const codes = new Set(failed.map((x) => (x.response === null ? null : endpointAnswer(x.response.body)?.code ?? null)))
      if (conn.sandbox && (codes.has('key_unavailable') || codes.has('unknown_key'))) {
        c.io.out(`  The receiver could not get the sandbox's signing key: give its verifier baseUrl: '${conn.baseUrl}'.`)
      }
    }
  }
  return r.data.allPassed ? 0 : 1
}

const isLocal = (webhook: string): boolean => {
  try {
    return isLoopbackHost(new URL(webhook).hostname)
  } catch {
    return false
  }
}

/** What to check about endpoints that failed a validation, worded by where they are. */
function validateHint (failed: WebhookValidationResult[]): string {
  const local = failed.filter((x) => isLocal(x.webhook)).length
  if (local === 0) return 'check that the receiver runs, is reachable from the internet, and answers 2xx to a verified delivery'
  if (local === failed.length) return 'check that the receiver runs on this machine, listens at that address, and answers 2xx to a verified delivery'
  return 'check that each receiver runs (those on this machine at their address, the others reachable from the internet) and answers 2xx to a verified delivery'
}

const DURATION = /^(\d{1,5})([dhm])$/
const UNIT_MS: Record<string, number> = { d: 86_400_000, h: 3_600_000, m: 60_000 }

const wireDate = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z')

/** The window and filters of `batches` and `reconcile`, from their flags. */
function windowOptions (c: Context, defaultSince?: string): { createdAfter?: string, createdBefore?: string, statuses?: WebhooksBatchStatus[], webhook?: string } {
  const { since, after, before, status, webhook } = c.values as Record<string, string | undefined>
  if (since !== undefined && after !== undefined) throw new UsageError('give --since or --after, not both.', c.command)
  for (const [flag, value] of [['--after', after], ['--before', before]] as const) {
    if (value !== undefined && parseUtcDate(value) === null) throw new UsageError(`${flag} must be a date: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC), got '${value}'.`, c.command)
  }
  const out: { createdAfter?: string, createdBefore?: string, statuses?: WebhooksBatchStatus[], webhook?: string } = {}
  const sinceValue = since ?? (after === undefined && before === undefined ? defaultSince : undefined)
  if (sinceValue !== undefined) {
    const m = DURATION.exec(sinceValue)
    const ms = m === null ? NaN : Number(m[1]) * UNIT_MS[m[2]!]!
    if (m === null || ms <= 0 || ms > 31 * 86_400_000) throw new UsageError(`--since must be a duration of at most 31 days, e.g. 3d, 12h or 30m; got '${sinceValue}'.`, c.command)
    out.createdAfter = wireDate(Math.floor((Date.now() - ms) / 1000) * 1000)
  }
  if (after !== undefined) out.createdAfter = after
  if (before !== undefined) out.createdBefore = before
  if (status !== undefined) out.statuses = status.split(',').map((s) => s.trim()) as WebhooksBatchStatus[]
  if (webhook !== undefined) out.webhook = webhook
  return out
}

function batchRow (b: WebhooksBatch, paint: ReturnType<typeof painter>): string[] {
  const ok = b.status === '2xx_response'
  const status = b.status === 'no_response' ? 'no response' : b.status.replace('_response', '')
  return [
    String(b.batchId),
    terminalText(b.createdAt),
    ok ? paint(GREEN, status) : paint(RED, status),
    b.statusCode === null ? '---' : String(b.statusCode),
    String(b.eventCount),
    b.duration === undefined ? '-' : `${b.duration.value} ms`,
    terminalText(b.webhook),
  ]
}

const BATCH_HEADER = ['ID', 'CREATED', 'STATUS', 'CODE', 'EVENTS', 'DURATION', 'ENDPOINT']
// Colour codes add invisible characters: align on the plain text, then paint.
function batchTable (batches: WebhooksBatch[], paint: ReturnType<typeof painter>): string[] {
  const plain = batches.map((b) => batchRow(b, (_code, text) => text))
  const lines = table([BATCH_HEADER, ...plain], new Set([4, 5]))
  const painted = batches.map((b) => batchRow(b, paint))
  return lines.map((line, i) => (i === 0 ? paint(BOLD, line) : line.replace(plain[i - 1]![2]!, painted[i - 1]![2]!)))
}

async function batches (c: Context): Promise<number> {
  const limit = numeric(c.values.limit, 'limit', c.command)
  if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1)) throw new UsageError('--limit must be a positive integer.', c.command)
  const options = windowOptions(c)
  const query = buildBatchesQuery({ ...options, limit: Math.min(limit ?? 500, 500) })
  if (query.error !== null) return fail(c, null, query.error)
  const conn = connect(c)
  const found: WebhooksBatch[] = []
  try {
    // With --limit above the default cap, the cap follows it (--limit ends the listing first).
    const cap = limit !== undefined && limit > DEFAULT_MAX_BATCHES ? { maxBatches: limit } : {}
    for await (const b of conn.client.webhooks.iterateBatches({ ...options, limit: Math.min(limit ?? 500, 500), ...cap })) {
      found.push(b)
      if (limit !== undefined && found.length >= limit) break
    }
  } catch (err) {
    if (err instanceof MailChannelsError) return fail(c, conn, err.error)
    throw err
  }
  if (c.json) {
    printJson(c, found)
    return 0
  }
  if (found.length === 0) {
    c.io.out('no batches match (the default window is the last 3 days; widen it with --since or --after)')
    return 0
  }
  for (const line of batchTable(found, c.paint)) c.io.out(line)
  // The listing has one entry per delivery attempt: count the batches (distinct ids) apart.
  const delivered = new Set(found.filter((b) => b.status === '2xx_response').map((b) => b.batchId))
  const ids = new Set(found.map((b) => b.batchId))
  const notDelivered = [...ids].filter((id) => !delivered.has(id)).length
  const attempts = found.length === ids.size ? '' : ` (${plural(found.length, 'attempt')})`
  c.io.out(c.paint(DIM, `${plural(ids.size, 'batch', 'batches')}${attempts}${notDelivered > 0 ? `, ${notDelivered} not delivered` : ''}${limit !== undefined && found.length >= limit ? ` (--limit ${limit} reached)` : ''}`))
  return 0
}

function answered (r: ResentBatch): string {
  if (r.statusCode === null) return 'the endpoint did not answer'
  return `the endpoint answered ${r.statusCode}${r.durationInMs === null ? '' : ` (${r.durationInMs} ms)`}`
}

const delivered = (r: ResentBatch): boolean => r.statusCode !== null && r.statusCode >= 200 && r.statusCode < 300

async function resend (c: Context): Promise<number> {
  const ids = c.args.map((raw) => {
    if (!/^[1-9]\d{0,15}$/.test(raw) || !Number.isSafeInteger(Number(raw))) throw new UsageError(`'${oneLine(raw, 40)}' is not a batch id: ids are positive integers, as '${BIN} batches' lists them.`, c.command)
    return Number(raw)
  })
  const handle = c.values['customer-handle'] as string | undefined
  if (handle !== undefined) {
    const checked = checkCustomerHandle(handle)
    if (checked.error !== null) return fail(c, null, checked.error)
  }
  const conn = connect(c)
  const results: Array<{ batchId: number, resend: ResentBatch | null, error: ErrorResponse | null }> = []
  let code = 0
  for (const id of ids) {
    const r = await conn.client.webhooks.resendBatch(id, handle === undefined ? {} : { customerHandle: handle })
    if (r.error !== null) {
      if (r.error.type === 'validation_error') return fail(c, conn, r.error)
      results.push({ batchId: id, resend: null, error: r.error })
      code = 1
      if (!c.json) {
        const todo = advice(r.error, conn, c.command)
        c.io.err(`batch ${id}: ${c.paint(RED, 'not resent')}: ${terminalText(r.error.message)}${todo === null ? '' : `\n  ${todo}`}\n`)
      }
      // A refused key fails every other id the same way.
      if (r.error.statusCode === 401 || r.error.statusCode === 403) break
      continue
    }
    results.push({ batchId: id, resend: r.data, error: null })
    if (!delivered(r.data)) code = 1
    if (!c.json) c.io.out(`batch ${id}: resent to ${terminalText(r.data.webhook)}: ${delivered(r.data) ? c.paint(GREEN, answered(r.data)) : c.paint(RED, answered(r.data))}`)
  }
  if (c.json) printJson(c, results)
  else if (code !== 0 && results.some((x) => x.resend !== null && !delivered(x.resend))) c.io.err('Some endpoints still do not answer 2xx: fix the receiver, then resend again.\n')
  return code
}

/** A progress display: a bar rewritten in place on a terminal, one plain line per batch otherwise. */
/** Why a listed batch was not resent because it does not match what was asked for; `null` for the other reasons. */
function mismatchText (r: ReconcileBatchResult): string | null {
  if (r.outcome !== 'skipped') return null
  const reason: ReconcileSkipReason = r.reason
  if (reason === 'status_not_requested') return `listed as ${terminalText(r.batch.status)}, a status not asked for`
  if (reason === 'outside_window') return `created at ${terminalText(r.batch.createdAt)}, outside the window`
  if (reason === 'other_webhook') return `sent to ${terminalText(r.batch.webhook)}, not the --webhook asked for`
  return null
}

const isMismatch = (r: ReconcileBatchResult): boolean => mismatchText(r) !== null

function progressView (c: Context, stateFile: string | undefined): { update (r: ReconcileSettled, done: number, total: number, counts: Record<string, number>): void, end (): void } {
  const tty = c.io.tty === true && typeof c.io.write === 'function'
  const describe = (r: ReconcileSettled): string => {
    if (r.outcome === 'resent') return `${c.paint(GREEN, 'resent')}: ${answered(r.resend)}`
    if (r.outcome === 'failed') return `${c.paint(RED, 'failed')}: ${r.resend !== null ? answered(r.resend) : terminalText(r.error.message)}`
    if (r.reason === 'excluded') return `${c.paint(DIM, 'skipped')}: already resent${stateFile === undefined ? '' : ` (in ${terminalText(stateFile)})`}`
    const off = mismatchText(r)
    if (off !== null) return `${c.paint(YELLOW, 'skipped')}: ${off} (not resent)`
    return `${c.paint(DIM, 'skipped')}: ${r.reason.replace('_', ' ')}`
  }
  let drawn = false
  return {
    update (r, done, total, counts) {
      const line = `[${done}/${total}] batch ${r.batchId} ${describe(r)}`
      if (!tty) {
        c.io.out(line)
        return
      }
      // On a terminal: failures stay on screen above the bar; the bar is redrawn in place.
      if (r.outcome === 'failed') {
        c.io.write!('\r\u001b[K')
        c.io.out(line)
      }
      const width = 30
      const filled = total === 0 ? width : Math.round(width * done / total)
      c.io.write!(`\r\u001b[K[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${total}  resent ${counts.resent ?? 0}  failed ${counts.failed ?? 0}  skipped ${counts.skipped ?? 0}`)
      drawn = true
    },
    end () {
      if (drawn) c.io.write!('\r\u001b[K')
    },
  }
}

async function reconcile (c: Context): Promise<number> {
  const dryRun = c.values['dry-run'] === true
  const concurrency = numeric(c.values.concurrency, 'concurrency', c.command)
  const rate = numeric(c.values.rate, 'rate', c.command)
  const maxBatches = numeric(c.values['max-batches'], 'max-batches', c.command)
  if (maxBatches !== undefined && (!Number.isSafeInteger(maxBatches) || maxBatches < 1)) throw new UsageError('--max-batches must be a positive integer.', c.command)
  const stateFile = c.values.state as string | undefined
  const window = windowOptions(c, '3d')
  if (!dryRun && c.values.yes !== true && c.io.confirm === undefined) {
    throw new UsageError('reconcile resends batches: add --yes to confirm (not on a terminal, it cannot ask), or --dry-run to only list them.', c.command)
  }
  let exclude = new Set<number>()
  if (stateFile !== undefined) {
    try {
      exclude = readReconcileState(stateFile)
    } catch (err) {
      if (err instanceof StateFileError) throw new UsageError(err.message, c.command)
      throw err
    }
  }
  const base: ReconcileOptions = { ...window, exclude, ...(concurrency !== undefined ? { concurrency } : {}), ...(rate !== undefined ? { rate } : {}), ...(maxBatches !== undefined ? { maxBatches } : {}) }
  const invalid = checkReconcileOptions(base)
  if (invalid !== null) return fail(c, null, invalid)
  const conn = connect(c)

  if (!dryRun && c.values.yes !== true) {
    // On a terminal without --yes: list first, then ask.
    const preview = await conn.client.webhooks.reconcile({ ...base, dryRun: true })
    if (preview.error !== null) return fail(c, conn, preview.error)
    const todo = preview.data.batches.filter((b) => b.outcome === 'skipped' && b.reason === 'dry_run').length
    if (todo === 0) return summarize(c, preview.data, true, stateFile)
    const yes = await c.io.confirm!(`Resend ${plural(todo, 'failed batch', 'failed batches')} created from ${preview.data.window.createdAfter} to ${preview.data.window.createdBefore}? [y/N] `)
    if (!yes) {
      c.io.err(`${BIN} reconcile: nothing resent.\n`)
      return 1
    }
  }

  const controller = new AbortController()
  const release = c.io.onInterrupt?.(() => controller.abort())
  const resent = new Set(exclude)
  const counts: Record<string, number> = {}
  const view = c.json || dryRun ? null : progressView(c, stateFile)
  let stateError: Error | null = null
  let report
  try {
    report = await conn.client.webhooks.reconcile({
      ...base,
      dryRun,
      signal: controller.signal,
      onProgress ({ done, total, result }) {
        counts[result.outcome] = (counts[result.outcome] ?? 0) + 1
        if (result.outcome === 'resent' && stateFile !== undefined && stateError === null) {
          resent.add(result.batchId)
          try {
            writeReconcileState(stateFile, resent)
          } catch (err) {
            // Keep going: the resends are made; say at the end that the file is behind.
            stateError = err as Error
          }
        }
        view?.update(result, done, total, counts)
      },
    })
  } finally {
    view?.end()
    release?.()
  }
  if (report.error !== null) return fail(c, conn, report.error)
  const code = summarize(c, report.data, dryRun, stateFile)
  if (stateError !== null) {
    c.io.err(`${BIN} reconcile: could not update ${terminalText(stateFile!)} (${terminalText((stateError as Error).message)}); a rerun with it would resend batches already resent.\n`)
    return 1
  }
  return code
}

function summarize (c: Context, report: ReconcileReport, dryRun: boolean, stateFile: string | undefined): number {
  const { summary, window, stopped } = report
  const ok = summary.failed === 0 && stopped === null
  if (c.json) {
    printJson(c, report)
    return ok ? 0 : 1
  }
  const span = `created from ${window.createdAfter} to ${window.createdBefore}`
  // Batches the listing returned although they do not match what was asked for: never resent.
  const mismatched = report.batches.filter(isMismatch).length
  const warnMismatched = (): void => {
    if (mismatched === 0) return
    c.io.err(`${BIN} reconcile: ${c.paint(YELLOW, `the listing returned ${plural(mismatched, 'batch', 'batches')} outside the window or filters asked for`)} (${dryRun ? 'they would not be resent' : 'skipped, not resent'}: the API may have ignored the query; rerun with --json to see them).\n`)
  }
  const failedBatches = summary.total - mismatched
  if (dryRun) {
    const pending = report.batches.filter((b) => b.outcome === 'skipped' && b.reason === 'dry_run').map((b) => b.batch)
    if (pending.length > 0) for (const line of batchTable(pending, c.paint)) c.io.out(line)
    const excluded = report.batches.filter((b) => b.outcome === 'skipped' && b.reason === 'excluded').length
    c.io.out(`${plural(pending.length, 'failed batch', 'failed batches')} would be resent (${span})${excluded > 0 ? `; ${excluded} already resent, skipped` : ''}. Nothing was resent (--dry-run).`)
    warnMismatched()
    return 0
  }
  if (failedBatches === 0) {
    c.io.out(`no failed batch ${span}: nothing to resend`)
    warnMismatched()
    return 0
  }
  const parts = [
    `resent ${summary.resent}`,
    summary.failed > 0 ? c.paint(RED, `failed ${summary.failed}`) : 'failed 0',
    `skipped ${summary.skipped - mismatched}`,
    ...(summary.notAttempted > 0 ? [c.paint(YELLOW, `not attempted ${summary.notAttempted}`)] : []),
  ]
  c.io.out(c.paint(BOLD, `${parts.join(', ')} of ${plural(failedBatches, 'failed batch', 'failed batches')} ${span}`))
  warnMismatched()
  if (stopped !== null) c.io.err(`${BIN} reconcile: ${c.paint(YELLOW, terminalText(stopped.message))}\n`)
  if (!ok) {
    c.io.err(stateFile === undefined
      ? `Run it again to retry what failed${summary.notAttempted > 0 ? ' and what was not attempted' : ''}; add --state <file> so a rerun skips what was resent.\n`
      : `Run it again with --state ${terminalText(stateFile)}: what was resent is skipped.\n`)
  }
  return ok ? 0 : 1
}

const RUNNERS: Record<string, (c: Context) => Promise<number>> = { enroll, list, delete: remove, validate, batches, resend, reconcile }

/** Runs an operator command; resolves its exit code. Usage errors are thrown as `UsageError`. */
export async function runOperatorCommand (command: string, values: Record<string, string | boolean>, args: string[], io: CliIo, env: NodeJS.ProcessEnv): Promise<number> {
  const c: Context = { command, values, args, io, env, json: values.json === true, paint: painter(io.color === true && values.json !== true) }
  return RUNNERS[command]!(c)
}
