// `mailchannels-webhooks dead-letters list|show|retry|discard`, the built CLI in a child process,
// against a real redis-server, the local Redis Cluster, a real PostgreSQL server and a SQLite
// file: tables, --json, exit codes (0, 1 missing or store down, 2 usage), every stored string
// escaped, a password never taken on the command line.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import t, { type Test } from 'tap'
import { RedisDeadLetterStore, deadLetterError, eventFingerprint, type DeadLetterStore } from '../../src/index.js'
import { postgresDeadLetters } from '../../src/postgres/index.js'
import { sqliteDeadLetters } from '../../src/sqlite/index.js'
import { ev } from '../dispatch/helpers/events.js'
import { ANSI, ensureBuilt, inParallel, runCli } from '../cli/helpers/cli.js'
import { clusterUnavailable, startRedisCluster } from '../helpers/redis-cluster.js'
import { startPostgres } from '../helpers/postgres.js'
import { startRedisServer } from '../replay/helpers/redis-server.js'

// Semantics, not failure handling: generous timeouts, so a loaded machine cannot fail a call.
const GENEROUS = { commandTimeout: 5000, maxRetriesPerRequest: 1 }

ensureBuilt()
// The stores are independent of each other (a server, a cluster, a file each): their subtests run
// side by side, so one store's server start-up waits beside another's commands.
t.jobs = 4

const HOSTILE = 'boom \u001b[31mred\u001b[0m \u009b2J \u202e'
const events = [ev('hard-bounced', 1, { reason: `550 \u001b]0;pwned\u0007 ${HOSTILE}` }), ev('open', 2), ev('hard-bounced', 3)]

async function park (store: DeadLetterStore): Promise<void> {
  for (const event of events) {
    await store.recordFailure({ event, fingerprint: eventFingerprint(event), error: deadLetterError(new TypeError(HOSTILE)), parkAfter: 1 })
  }
}

async function operate (t: Test, store: DeadLetterStore, args: string[], env: Record<string, string> = {}): Promise<void> {
  await park(store)
  const [a, b, c] = events.map(eventFingerprint)

  // The reads first, side by side (none changes the store), then the changes in order.
  const [list, byType, paged, newer, show] = await inParallel([
    () => runCli(['dead-letters', 'list', ...args], env),
    () => runCli(['dead-letters', 'list', '--type', 'hard-bounced', '--json', ...args], env),
    () => runCli(['dead-letters', 'list', '--limit', '2', '--json', ...args], env),
    () => runCli(['dead-letters', 'list', '--older-than', '1h', ...args], env),
    () => runCli(['dead-letters', 'show', a!, ...args], env),
  ])
  t.equal(list.code, 0, list.stderr)
  t.notMatch(list.stdout, ANSI, 'no escape sequence from the store reaches the terminal')
  t.notMatch(list.stdout, /[\u0080-\u009f\u202e]/)
  t.match(list.stdout, /FINGERPRINT\s+TYPE\s+ATTEMPTS\s+PARKED\s+LAST ERROR/)
  for (const fp of [a, b, c]) t.match(list.stdout, fp!)
  t.match(list.stdout, /TypeError: boom \\x1b\[31mred/, 'the error shown, escaped')
  t.match(list.stdout, /3 dead letters/)

  t.equal(byType.code, 0)
  const parsed = JSON.parse(byType.stdout) as { data: { items: Array<{ fingerprint: string, error: { message: string }, event: { reason: string } }>, next: string | null }, error: null }
  t.same(parsed.data.items.map((i) => i.fingerprint).sort(), [a, c].sort())
  t.equal(parsed.data.items.find((i) => i.fingerprint === a)!.error.message, HOSTILE, 'JSON keeps the exact text')
  t.notMatch(byType.stdout, /[\u001b\u0080-\u009f\u202e]/, 'as \\u escapes')

  const first = JSON.parse(paged.stdout).data as { items: unknown[], next: string }
  t.equal(first.items.length, 2)
  const rest = await runCli(['dead-letters', 'list', '--limit', '2', '--cursor', first.next, '--json', ...args], env)
  t.equal((JSON.parse(rest.stdout).data as { items: unknown[] }).items.length, 1)
  t.match(newer.stdout, /no dead letters/)

  t.equal(show.code, 0, show.stderr)
  t.match(show.stdout, /attempts\s+1/)
  t.match(show.stdout, /"reason": "550 \\u001b\]0;pwned\\u0007/)
  t.notMatch(show.stdout, /[\u001b\u0007\u0080-\u009f\u202e]/)

  const retry = await runCli(['dead-letters', 'retry', b!, ...args], env)
  t.equal(retry.code, 0, retry.stderr)
  t.match(retry.stdout, /retry requested/)
  t.ok((await store.get(b!))?.retryRequestedAt, 'marked for the application\'s next retryRequestedDeadLetters()')

  const discard = await runCli(['dead-letters', 'discard', c!, ...args], env)
  t.equal(discard.code, 0)
  t.equal(await store.get(c!), undefined)
  const again = await runCli(['dead-letters', 'discard', c!, ...args], env)
  t.equal(again.code, 1, 'no such dead letter: exit 1')
  t.match(again.stderr, /no dead letter/)
  const missingJson = await runCli(['dead-letters', 'show', c!, '--json', ...args], env)
  t.equal(missingJson.code, 1)
  t.equal(JSON.parse(missingJson.stdout).error.type, 'not_found')
}

t.test('usage errors: exit 2 with a message', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['dead-letters'], /missing/],
    [['dead-letters', 'list'], /--store/],
    [['dead-letters', 'purge', '--store', 'x.sqlite'], /unknown action/],
    [['dead-letters', 'show', '--store', 'x.sqlite'], /needs the dead letter's fingerprint/],
    [['dead-letters', 'show', '../etc/passwd', '--store', 'x.sqlite'], /not a fingerprint/],
    [['dead-letters', 'list', '--store', 'redis://:hunter2@127.0.0.1:1'], /must not carry a password/],
    [['dead-letters', 'list', '--older-than', 'yesterday', '--store', 'x.sqlite'], /--older-than must be an age/],
    [['dead-letters', 'list', '--limit', '0', '--store', 'x.sqlite'], /--limit must be an integer/],
    [['dead-letters', 'list', '--store', 'mysql://db/x'], /must be a redis/],
  ]
  const runs = await inParallel(cases.map(([args]) => () => runCli(args)))
  for (const [i, [args, message]] of cases.entries()) {
    const r = runs[i]!
    t.equal(r.code, 2, args.join(' '))
    t.match(r.stderr, message)
    t.notMatch(r.stderr, /hunter2/)
  }
})

t.test('a store that cannot be reached: exit 1, no stack', async (t) => {
  const [r, file] = await inParallel([
    () => runCli(['dead-letters', 'list', '--store', 'redis://127.0.0.1:1']),
    () => runCli(['dead-letters', 'list', '--store', path.join(os.tmpdir(), 'no-such-dir', 'x.sqlite')]),
  ])
  t.equal(r.code, 1)
  t.match(r.stderr, /could not connect to Redis/)
  t.notMatch(r.stderr, /\n\s+at /)
  t.equal(file.code, 1)
  t.match(file.stderr, /no SQLite file/)
})

t.test('Redis', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client(GENEROUS)
  await operate(t, new RedisDeadLetterStore(client, { prefix: '{cli}:', timeout: 10_000 }), ['--prefix', '{cli}:'], { MAILCHANNELS_DEAD_LETTERS: `redis://127.0.0.1:${redis.port}` })
})

t.test('Redis Cluster', { skip: clusterUnavailable() ?? false }, async (t) => {
  const cluster = await startRedisCluster()
  t.teardown(async () => { await cluster.close() })
  const client = await cluster.client({ redisOptions: { commandTimeout: 5000, maxRetriesPerRequest: 1 } })
  await operate(t, new RedisDeadLetterStore(client, { timeout: 10_000 }), ['--store', `redis://127.0.0.1:${cluster.ports[0]!}`, '--cluster'])
})

t.test('PostgreSQL', async (t) => {
  const server = await startPostgres()
  t.teardown(async () => { await server.close() })
  const pool = server.pool()
  await operate(t, postgresDeadLetters({ pool: pool as unknown as pg.Pool }), ['--store', server.url])
})

t.test('SQLite file', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-dl-cli-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  const file = path.join(dir, 'events.sqlite')
  const store = sqliteDeadLetters({ path: file })
  t.teardown(() => { store.close() })
  await operate(t, store, ['--store', file, '--table', 'mailchannels_webhooks_dead_letters'])
})
