// Exactly once into the app's own table, with receivers in child processes on a real PostgreSQL:
// SIGKILL after a handler's insert and before its commit, SIGKILL after the commit and before
// the 2xx, the database restarted under running receivers, and two and three receivers on one
// database sent 20 concurrent re-signed copies of a delivery. Every event's row exactly once.
import t, { type Test } from 'tap'
import { postSigned, spawnReceiver, type Receiver } from './helpers/spawn-receiver.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { startPostgres } from '../helpers/postgres.js'

const KEYS = generateSigningKeyPair()
const server = await startPostgres()
t.teardown(async () => { await server.close() })
const pool = server.pool()
let n = 0
let serial = 0


async function receiver (t: Test, tables: { effects: string, seen: string }, crashAt = ''): Promise<Receiver> {
  return await spawnReceiver(t, { DATABASE_URL: server.url, PUBLIC_KEY: KEYS.publicKey, CRASH_AT: crashAt, EFFECTS: tables.effects, SEEN: tables.seen, CLAIM_LIFETIME: '2' })
}

async function tables (): Promise<{ effects: string, seen: string }> {
  const k = n++
  await pool.query(`CREATE TABLE effects_${k} (fingerprint text NOT NULL, pid int NOT NULL)`)
  return { effects: `effects_${k}`, seen: `seen_${k}` }
}

/** Wire events of one delivery (distinct per call). */
function events (count: number): Array<Record<string, unknown>> {
  const base = ++serial
  return Array.from({ length: count }, (_, i) => ({ event: i % 2 === 0 ? 'hard-bounced' : 'delivered', customer_handle: 'acct_1', timestamp: 1700000000 + base, request_id: `req-${base}-${i}`, email: `u${i}@example.com` }))
}

/** Signs the events anew (as MailChannels re-signs a retry: a new signature, the same events) and posts them; the status, or 0 when the connection failed. */
async function post (port: number, wire: Array<Record<string, unknown>>, copy: number): Promise<number> {
  const signed = signWebhook({ privateKey: KEYS.privateKey, events: wire as never, created: Math.floor(Date.now() / 1000) - (copy % 200), label: `sig_${copy}_${Date.now()}` })
  return await postSigned(port, signed)
}

/** Posts until a 2xx, like a sender retrying a 5xx or a dropped connection (bounded). */
async function deliverUntilAcknowledged (ports: () => number, wire: Array<Record<string, unknown>>, copy: number): Promise<number[]> {
  const statuses: number[] = []
  for (let attempt = 0; attempt < 80; attempt++) {
    const status = await post(ports(), wire, copy * 1000 + attempt)
    statuses.push(status)
    if (status >= 200 && status < 300) return statuses
    await new Promise((resolve) => setTimeout(resolve, 150 + Math.floor(Math.random() * 100)))
  }
  throw new Error(`not acknowledged after 80 attempts: ${statuses.join(',')}`)
}

async function rowsPerEvent (effects: string): Promise<number[]> {
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${effects} GROUP BY fingerprint ORDER BY fingerprint`)
  return rows.map((r) => r.n as number)
}

t.test('SIGKILL after the handler\'s insert, before the commit: no row; the retry writes each event once', async (t) => {
  const tb = await tables()
  const wire = events(3)
  const doomed = await receiver(t, tb, 'after-insert')
  t.equal(await post(doomed.port, wire, 1), 0, 'the connection dies with the process')
  t.equal(await doomed.exited, 'SIGKILL')
  t.same(await rowsPerEvent(tb.effects), [], 'the insert died with its transaction')
  const next = await receiver(t, tb)
  const statuses = await deliverUntilAcknowledged(() => next.port, wire, 2)
  t.same(await rowsPerEvent(tb.effects), [1, 1, 1], `each event's row exactly once (answers ${statuses.join(',')})`)
  t.equal(await post(next.port, wire, 3), 200, 'a later resend is acknowledged')
  t.same(await rowsPerEvent(tb.effects), [1, 1, 1])
})

t.test('SIGKILL while the events before a failed one run again: nothing of them committed; the retry writes each event once', async (t) => {
  const tb = await tables()
  // Three events on one lane; the third fails after its insert, so the first two run again in a
  // fresh transaction, and the process dies in the first of those second runs.
  const wire = events(3).map((e, i) => ({ ...e, event: i === 2 ? 'complained' : 'hard-bounced' }))
  const doomed = await spawnReceiver(t, { DATABASE_URL: server.url, PUBLIC_KEY: KEYS.publicKey, CRASH_AT: 'rerun', FAIL_TYPE: 'complained', CONCURRENCY: '1', EFFECTS: tb.effects, SEEN: tb.seen, CLAIM_LIFETIME: '2' })
  t.equal(await post(doomed.port, wire, 1), 0, 'the connection dies with the process')
  t.equal(await doomed.exited, 'SIGKILL')
  t.same(await rowsPerEvent(tb.effects), [], 'the first runs rolled back, the second run died uncommitted')
  t.same((await pool.query(`SELECT count(*)::int AS n FROM ${tb.seen} WHERE done`)).rows[0].n, 0, 'no done mark')
  const next = await receiver(t, tb)
  const statuses = await deliverUntilAcknowledged(() => next.port, wire, 2)
  t.same(await rowsPerEvent(tb.effects), [1, 1, 1], `each event's row exactly once (answers ${statuses.join(',')})`)
})

t.test('SIGKILL after the commit, before the 2xx: the rows are in; the retry skips them', async (t) => {
  const tb = await tables()
  const wire = events(3)
  const doomed = await receiver(t, tb, 'after-commit')
  t.equal(await post(doomed.port, wire, 1), 0, 'no answer: the sender will retry')
  t.equal(await doomed.exited, 'SIGKILL')
  t.same(await rowsPerEvent(tb.effects), [1, 1, 1], 'committed with the done marks')
  const next = await receiver(t, tb)
  t.same(await deliverUntilAcknowledged(() => next.port, wire, 2), [200], 'the retry is acknowledged at once')
  t.same(await rowsPerEvent(tb.effects), [1, 1, 1], 'nothing written twice')
})

t.test('the database restarted mid-traffic: receivers answer 503 meanwhile, stay up, and every event lands once', async (t) => {
  const tb = await tables()
  const a = await receiver(t, tb)
  const b = await receiver(t, tb)
  const deliveries = Array.from({ length: 12 }, () => events(5))
  let k = 0
  const traffic = Promise.all(deliveries.flatMap((wire, d) => [0, 1].map(async (c) => await deliverUntilAcknowledged(() => (k++ % 2 === 0 ? a : b).port, wire, d * 10 + c))))
  await new Promise((resolve) => setTimeout(resolve, 150))
  await server.stop('kill')
  await new Promise((resolve) => setTimeout(resolve, 700))
  await server.start()
  const statuses = (await traffic.catch((err: Error) => { throw new Error(`${err.message}; receivers said: ${a.stderr()} ${b.stderr()}`) })).flat()
  t.ok(statuses.some((s) => s === 503), `some deliveries were answered 503 while the database was down (${[...new Set(statuses)].join(',')})`)
  t.equal(a.proc.exitCode, null, `receiver a is still running ${a.stderr()}`)
  t.equal(b.proc.exitCode, null, `receiver b is still running ${b.stderr()}`)
  const rows = await rowsPerEvent(tb.effects)
  t.equal(rows.length, 60, 'no event lost')
  t.ok(rows.every((r) => r === 1), 'every event exactly once')
})

for (const count of [2, 3]) {
  t.test(`${count} receivers on one database, 20 concurrent re-signed copies of each delivery: every event exactly once`, async (t) => {
    const tb = await tables()
    const receivers = await Promise.all(Array.from({ length: count }, async () => await receiver(t, tb)))
    const deliveries = [events(10), events(1), events(25)]
    const results = await Promise.all(deliveries.flatMap((wire, d) => Array.from({ length: 20 }, async (_, c) =>
      await deliverUntilAcknowledged(() => receivers[(c + d) % count]!.port, wire, d * 100 + c))))
    const rows = await rowsPerEvent(tb.effects)
    t.equal(rows.length, 36, 'no event lost')
    t.ok(rows.every((r) => r === 1), 'every event exactly once')
    const { rows: pids } = await pool.query(`SELECT count(DISTINCT pid)::int AS n FROM ${tb.effects}`)
    t.ok(results.flat().length >= 60, `${results.flat().length} posts; handled by ${pids[0].n} of ${count} receivers`)
  })
}

/** Signs and posts `wire`; its status and Retry-After header. */
async function postFor (port: number, wire: Array<Record<string, unknown>>): Promise<{ status: number, retryAfter: string | null }> {
  const signed = signWebhook({ privateKey: KEYS.privateKey, events: wire as never, label: `sig_${Date.now()}_${serial++}` })
  const res = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', headers: signed.headers, body: signed.body, signal: AbortSignal.timeout(20_000) })
  await res.arrayBuffer()
  return { status: res.status, retryAfter: res.headers.get('retry-after') }
}

async function idleInTransaction (): Promise<number> {
  return (await pool.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = \'idle in transaction\'')).rows[0].n
}

/** Polls the database (every 20 ms, up to 10 s) until `cond` holds. */
async function untilDb (cond: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await cond()) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error(`timed out waiting for ${what}`)
}

t.test('a handler that never returns (receiver process, pool of one): 503 with Retry-After after handlerTimeout, later deliveries 200; killed while it hangs, the retry elsewhere writes once', async (t) => {
  const tb = await tables()
  const env = { DATABASE_URL: server.url, PUBLIC_KEY: KEYS.publicKey, EFFECTS: tb.effects, SEEN: tb.seen, CLAIM_LIFETIME: '2', HANG_TYPE: 'complained', POOL_MAX: '1' }
  const hanging = await spawnReceiver(t, { ...env, HANDLER_TIMEOUT: '300' })
  const stuck = events(1).map((e) => ({ ...e, event: 'complained' }))
  const answer = await postFor(hanging.port, stuck)
  t.equal(answer.status, 503, 'answered 503 once handlerTimeout passed (on the old code: no answer, ever)')
  t.ok(answer.retryAfter !== null, 'with Retry-After')
  for (let i = 0; i < 3; i++) t.equal((await postFor(hanging.port, events(2))).status, 200, `later delivery ${i + 1} handled on the pool of one`)
  t.equal(await idleInTransaction(), 0, 'no connection left idle in transaction')
  t.same(await rowsPerEvent(tb.effects), [1, 1, 1, 1, 1, 1], 'the later deliveries\' rows; none from the hanging handler')

  // Killed while a handler hangs inside its transaction (a deadline far away).
  const slow = await spawnReceiver(t, { ...env, HANDLER_TIMEOUT: '600000' })
  const wire = events(1).map((e) => ({ ...e, event: 'complained' }))
  const pending = post(slow.port, wire, 1)
  await untilDb(async () => await idleInTransaction() === 1, 'the hanging handler\'s open transaction')
  slow.proc.kill('SIGKILL')
  await slow.exited
  t.equal(await pending, 0, 'never answered')
  await untilDb(async () => await idleInTransaction() === 0, 'PostgreSQL to roll back the dead receiver\'s transaction')
  const good = await spawnReceiver(t, { DATABASE_URL: server.url, PUBLIC_KEY: KEYS.publicKey, EFFECTS: tb.effects, SEEN: tb.seen, CLAIM_LIFETIME: '2' })
  await deliverUntilAcknowledged(() => good.port, wire, 7)
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${tb.effects} WHERE pid = $1`, [good.proc.pid])
  t.equal(rows[0].n, 1, 'the retry on another receiver wrote the event once')
  t.same(await rowsPerEvent(tb.effects), [1, 1, 1, 1, 1, 1, 1], 'every event\'s row exactly once')
})
