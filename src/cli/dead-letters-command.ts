// `dead-letters list|show|retry|discard`: the router's dead letters, read and acted on in
// the store itself: Redis (or a Redis Cluster), PostgreSQL or a SQLite file. The CLI has none of
// the application's handlers, so `retry` cannot run them: it marks the dead letter as requested,
// and the application's next `router.retryRequestedDeadLetters()` runs it under its usual claim.
import type { DeadLetter, DeadLetterPage, DeadLetterStore } from '../replay/dead-letters-types.js'
import { terminalExcerpt, terminalJson, terminalText } from '../terminal-text.js'
import { BIN, HELP_OPTION, integer, optionsHelp, UsageError, type CommandSpec } from './args.js'
import { painter, plural, RED, table, type CliIo } from './io.js'

const ACTIONS = ['list', 'show', 'retry', 'discard'] as const
type Action = typeof ACTIONS[number]
const ENV = 'MAILCHANNELS_DEAD_LETTERS'

export const DEAD_LETTER_COMMANDS: Record<string, CommandSpec> = {
  'dead-letters': {
    options: {
      store: { type: 'string', value: '<url|file>' },
      cluster: { type: 'boolean' },
      prefix: { type: 'string', value: '<prefix>' },
      table: { type: 'string', value: '<name>' },
      type: { type: 'string', value: '<event-type>' },
      'older-than': { type: 'string', value: '<age>' },
      'newer-than': { type: 'string', value: '<age>' },
      limit: { type: 'string', value: '<n>' },
      cursor: { type: 'string', value: '<cursor>' },
      json: { type: 'boolean' },
      ...HELP_OPTION,
    },
    args: { name: '<list|show|retry|discard> [fingerprint]', min: 1, max: 2 },
    help: () => `Usage: ${BIN} dead-letters list [options]
       ${BIN} dead-letters show|retry|discard <fingerprint> [options]

The events your router parked after their handlers failed (router option deadLetters),
read from the store they are parked in.

  list      the dead letters, newest first: fingerprint, type, attempts, when, last error
  show      one dead letter in full: the event as received, its attempts and last error
  retry     ask for a retry: your application's next router.retryRequestedDeadLetters()
            runs its handlers again (the CLI has none of your handlers to run)
  discard   delete it for good

The store (or set ${ENV}, which keeps a password out of your shell history):
${optionsHelp([
  ['--store <url|file>', 'redis://host:6379, rediss://..., postgres://user@host/db, or a SQLite file'],
  ['--cluster', 'the Redis URL is a node of a Redis Cluster'],
  ['--prefix <prefix>', "the RedisDeadLetterStore's prefix (default '{mailchannels-webhooks:dead-letters}:')"],
  ['--table <name>', "the PostgreSQL or SQLite table (default 'mailchannels_webhooks_dead_letters')"],
])}

Options of list:
${optionsHelp([
  ['--type <event-type>', 'only this event type (hard-bounced, unknown...)'],
  ['--older-than <age>', 'only those parked longer ago than this (30m, 2h, 7d)'],
  ['--newer-than <age>', 'only those parked within this'],
  ['--limit <n>', 'dead letters per page, 1 to 1000 (default 50)'],
  ['--cursor <cursor>', 'the next page, as the previous one printed it'],
  ['--json', 'print JSON: { data, error }'],
])}

Exit codes: 0 success, 1 the store failed or there is no such dead letter, 2 a usage error.`,
  },
}

const AGE = /^(\d{1,9})(s|m|h|d)$/
const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

function age (value: string | boolean | undefined, flag: string): Date | undefined {
  if (value === undefined || typeof value === 'boolean') return undefined
  const m = AGE.exec(value)
  if (m === null) throw new UsageError(`--${flag} must be an age such as 30m, 2h or 7d, got '${terminalText(value, 40)}'.`, 'dead-letters')
  return new Date(Date.now() - Number(m[1]) * UNIT_MS[m[2]!]!)
}

/** A store and how to let it go. */
interface Opened { store: DeadLetterStore, close: () => Promise<void>, where: string }

/** The URL or file of `--store` (or the environment), checked: a password only from the environment. */
function storeTarget (values: Record<string, string | boolean>, env: NodeJS.ProcessEnv): { target: string, where: string } {
  const flag = values.store
  if (typeof flag === 'string') {
    if (/^[a-z][a-z0-9+.-]*:\/\/[^/@\s]*:[^/@\s]*@/i.test(flag)) {
      throw new UsageError(`--store must not carry a password (it would stay in your shell history): set ${ENV} to the URL instead.`, 'dead-letters')
    }
    return { target: flag, where: flag }
  }
  const fromEnv = (env[ENV] ?? '').trim()
  if (fromEnv === '') throw new UsageError(`say where the dead letters are: --store <redis://...|postgres://...|file.sqlite>, or set ${ENV}.`, 'dead-letters')
  // Shown without its credentials.
  return { target: fromEnv, where: fromEnv.replace(/(\/\/)[^/@\s]*@/, '$1') }
}

async function open (values: Record<string, string | boolean>, env: NodeJS.ProcessEnv): Promise<Opened> {
  const { target, where } = storeTarget(values, env)
  const prefix = typeof values.prefix === 'string' ? values.prefix : undefined
  const table = typeof values.table === 'string' ? values.table : undefined
  if (/^rediss?:\/\//i.test(target)) {
    if (table !== undefined) throw new UsageError('--table is for PostgreSQL and SQLite; a Redis store takes --prefix.', 'dead-letters')
    const { Redis, Cluster } = await importPeer<typeof import('ioredis')>('ioredis', 'a Redis store')
    const { RedisDeadLetterStore } = await import('../replay/redis-dead-letters.js')
    const url = new URL(target)
    // One attempt: a command run by hand fails fast, it does not wait for Redis to come back.
    const options = { enableOfflineQueue: false, maxRetriesPerRequest: 1, connectTimeout: 3000, commandTimeout: 3000, lazyConnect: true, retryStrategy: () => null }
    const client = values.cluster === true
      ? new Cluster([{ host: url.hostname, port: Number(url.port || 6379) }], {
        enableOfflineQueue: false,
        redisOptions: { ...options, ...(url.username !== '' ? { username: decodeURIComponent(url.username) } : {}), ...(url.password !== '' ? { password: decodeURIComponent(url.password) } : {}), ...(url.protocol === 'rediss:' ? { tls: {} } : {}) },
        lazyConnect: true,
        clusterRetryStrategy: () => null,
      })
      : new Redis(target, options)
    client.on('error', () => {})
    try {
      await client.connect()
    } catch (err) {
      client.disconnect()
      throw new Error(`could not connect to Redis at ${where}: ${(err as Error).message}`)
    }
    return { store: new RedisDeadLetterStore(client, { ...(prefix !== undefined ? { prefix } : {}), timeout: 5000 }), close: async () => { client.disconnect() }, where }
  }
  if (prefix !== undefined) throw new UsageError('--prefix is for Redis; a PostgreSQL or SQLite store takes --table.', 'dead-letters')
  if (values.cluster === true) throw new UsageError('--cluster is for a Redis URL.', 'dead-letters')
  if (/^postgres(ql)?:\/\//i.test(target)) {
    const pg = await importPeer<{ default: typeof import('pg') }>('pg', 'a PostgreSQL store')
    const { postgresDeadLetters } = await import('../postgres/dead-letters.js')
    const pool = new pg.default.Pool({ connectionString: target, max: 1, connectionTimeoutMillis: 5000 })
    pool.on('error', () => {})
    return { store: postgresDeadLetters({ pool, ...(table !== undefined ? { table } : {}), createSchema: false }), close: async () => { await pool.end() }, where }
  }
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(target)) throw new UsageError(`--store must be a redis://, rediss://, postgres:// URL or a SQLite file, got '${terminalText(where, 80)}'.`, 'dead-letters')
  const { existsSync } = await import('node:fs')
  // A file that does not exist would be created empty: say so instead.
  if (!existsSync(target)) throw new Error(`no SQLite file at ${where}`)
  const { sqliteDeadLetters } = await import('../sqlite/dead-letters.js')
  const store = sqliteDeadLetters({ path: target, ...(table !== undefined ? { table } : {}) })
  return { store, close: async () => { store.close() }, where }
}

async function importPeer<T> (name: string, what: string): Promise<T> {
  try {
    return await import(name) as T
  } catch {
    throw new Error(`${what} needs the ${name} package: npm install ${name}`)
  }
}

export async function runDeadLetters (values: Record<string, string | boolean>, args: string[], io: CliIo, env: NodeJS.ProcessEnv): Promise<number> {
  const action = args[0] as Action
  if (!(ACTIONS as readonly string[]).includes(action)) throw new UsageError(`unknown action '${terminalText(String(args[0]), 40)}': use list, show, retry or discard.`, 'dead-letters')
  const fingerprint = args[1]
  if (action === 'list' && fingerprint !== undefined) throw new UsageError(`list takes no fingerprint (show does): unexpected '${terminalText(fingerprint, 60)}'.`, 'dead-letters')
  if (action !== 'list' && fingerprint === undefined) throw new UsageError(`${action} needs the dead letter's fingerprint: ${BIN} dead-letters ${action} <fingerprint>.`, 'dead-letters')
  if (fingerprint !== undefined && !/^[A-Za-z0-9_-]{1,200}$/.test(fingerprint)) throw new UsageError(`'${terminalText(fingerprint, 60)}' is not a fingerprint (base64url, as the list shows it).`, 'dead-letters')
  const listFlags = ['type', 'older-than', 'newer-than', 'limit', 'cursor'].filter((f) => values[f] !== undefined)
  if (action !== 'list' && listFlags.length > 0) throw new UsageError(`--${listFlags[0]!} is an option of list.`, 'dead-letters')
  const json = values.json === true
  const query = action === 'list'
    ? {
        ...(typeof values.type === 'string' ? { type: values.type } : {}),
        ...(values['older-than'] !== undefined ? { parkedBefore: age(values['older-than'], 'older-than')! } : {}),
        ...(values['newer-than'] !== undefined ? { parkedAfter: age(values['newer-than'], 'newer-than')! } : {}),
        ...(values.limit !== undefined ? { limit: integer(values.limit, 'limit', 'dead-letters', 1, 1000)! } : {}),
        ...(typeof values.cursor === 'string' ? { cursor: values.cursor } : {}),
      }
    : {}
  const opened = await open(values, env)
  const paint = painter(io.color === true)
  try {
    if (action === 'list') {
      let page: DeadLetterPage
      try {
        page = await opened.store.list(query)
      } catch (err) {
        if (err instanceof TypeError) throw new UsageError(`${err.message.replace(/^cursor/, '--cursor')}.`, 'dead-letters')
        throw err
      }
      if (json) { printJson(io, { items: page.items.map(plain), next: page.next ?? null }); return 0 }
      if (page.items.length === 0) { io.out(`no dead letters${query.type !== undefined ? ` of type ${terminalText(query.type, 60)}` : ''} in ${terminalText(opened.where)}`); return 0 }
      const rows = [['FINGERPRINT', 'TYPE', 'ATTEMPTS', 'PARKED', 'LAST ERROR'], ...page.items.map((l) => [
        terminalText(l.fingerprint, 60), terminalText(l.type, 40), String(l.attempts), l.parkedAt.toISOString(),
        terminalExcerpt(`${l.error.name}: ${l.error.message}`, 70),
      ])]
      for (const line of table(rows, new Set([2]))) io.out(line)
      io.out(`${plural(page.items.length, 'dead letter')}${page.next !== undefined ? `; next page: ${BIN} dead-letters list --cursor ${page.next}` : ''}`)
      return 0
    }
    if (action === 'show') {
      const letter = await opened.store.get(fingerprint!)
      if (letter === undefined) return missing(io, json, fingerprint!, paint)
      if (json) { printJson(io, plain(letter)); return 0 }
      for (const line of table([
        ['fingerprint', terminalText(letter.fingerprint, 60)],
        ['type', terminalText(letter.type, 60)],
        ['attempts', String(letter.attempts)],
        ['first failed', letter.firstFailedAt.toISOString()],
        ['last failed', letter.lastFailedAt.toISOString()],
        ['parked', letter.parkedAt.toISOString()],
        ['source', letter.source],
        ['retry requested', letter.retryRequestedAt?.toISOString() ?? 'no'],
        ['error', `${terminalText(letter.error.name, 100)}: ${terminalText(letter.error.message)}`],
      ])) io.out(line)
      io.out('event:')
      io.out(terminalJson(JSON.stringify(letter.event, null, 2)))
      return 0
    }
    if (action === 'retry') {
      if (!await opened.store.requestRetry(fingerprint!)) return missing(io, json, fingerprint!, paint)
      if (json) printJson(io, { fingerprint, retryRequested: true })
      else io.out(`retry requested for ${fingerprint!}: your application's next router.retryRequestedDeadLetters() runs its handlers again`)
      return 0
    }
    if (!await opened.store.discard(fingerprint!)) return missing(io, json, fingerprint!, paint)
    if (json) printJson(io, { fingerprint, discarded: true })
    else io.out(`discarded ${fingerprint!}`)
    return 0
  } finally {
    await opened.close()
  }
}

function missing (io: CliIo, json: boolean, fingerprint: string, paint: ReturnType<typeof painter>): number {
  const message = `no dead letter ${fingerprint} (retried or discarded already?)`
  if (json) io.out(terminalJson(JSON.stringify({ data: null, error: { type: 'not_found', message } }, null, 2)))
  io.err(`${BIN} dead-letters: ${paint(RED, message)}\n  List them with: ${BIN} dead-letters list\n`)
  return 1
}

/** A dead letter as JSON output: times as ISO strings. */
function plain (l: DeadLetter): Record<string, unknown> {
  return {
    fingerprint: l.fingerprint,
    type: l.type,
    attempts: l.attempts,
    firstFailedAt: l.firstFailedAt.toISOString(),
    lastFailedAt: l.lastFailedAt.toISOString(),
    parkedAt: l.parkedAt.toISOString(),
    retryRequestedAt: l.retryRequestedAt?.toISOString() ?? null,
    source: l.source,
    error: l.error,
    event: l.event,
  }
}

function printJson (io: CliIo, data: unknown): void {
  io.out(terminalJson(JSON.stringify({ data, error: null }, null, 2)))
}
