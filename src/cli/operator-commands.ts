// The commands that operate a webhook through the MailChannels API (or a sandbox standing in
// for it): their flags and help, and which file runs each: endpoint-commands.ts (enroll,
// list, delete, validate), batch-commands.ts (batches, resend), reconcile-command.ts
// (reconcile), on operator-connection.ts. The API key comes from MAILCHANNELS_API_KEY only and
// is never printed.
import { DEFAULT_MAX_BATCHES } from '../client/batches.js'
import { BIN, HELP_OPTION, optionsHelp, type CommandSpec, type OptionSpec } from './args.js'
import { painter, type CliIo } from './io.js'
import { batches, resend } from './batch-commands.js'
import { enroll, list, remove, validate } from './endpoint-commands.js'
import { DEFAULT_BASE_URL, type Context } from './operator-connection.js'
import { reconcile } from './reconcile-command.js'
import { SANDBOX_PORT_HELP, SANDBOX_PORT_OPTION } from './sandbox-commands.js'

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

const RUNNERS: Record<string, (c: Context) => Promise<number>> = { enroll, list, delete: remove, validate, batches, resend, reconcile }

/** Runs an operator command; resolves its exit code. Usage errors are thrown as `UsageError`. */
export async function runOperatorCommand (command: string, values: Record<string, string | boolean>, args: string[], io: CliIo, env: NodeJS.ProcessEnv): Promise<number> {
  const c: Context = { command, values, args, io, env, json: values.json === true, paint: painter(io.color === true && values.json !== true) }
  return RUNNERS[command]!(c)
}
