// One transaction per delivery on a real PostgreSQL (docs/inbox.md, "One commit per delivery"):
// the router runs a delivery's events one after the other in one transaction, each in the store's
// savepoint, and commits once. An event that fails is undone alone and retried alone; a crash
// before the one commit loses nothing and duplicates nothing; the handler deadline and the rules
// of context.db still hold per event; a handler cannot release or roll back to the store's savepoint.
import t from 'tap'
import pg from 'pg'
import { WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { HandlerTimeoutError, InboxTransactionError } from '../../src/replay/errors.js'
import { postgresSeenEvents } from '../../src/postgres/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { startPostgres } from '../helpers/postgres.js'
import { ev } from '../dispatch/helpers/events.js'
import { postSigned, spawnReceiver } from './helpers/spawn-receiver.js'

const server = await startPostgres()
t.teardown(async () => { await server.close() })
const pool = server.pool({ max: 10 })
let n = 0

async function effectsTable (): Promise<string> {
  const table = `effects_${n++}`
  await pool.query(`CREATE TABLE ${table} (what text NOT NULL UNIQUE, xid bigint NOT NULL DEFAULT txid_current())`)
  return table
}

async function rows (table: string): Promise<string[]> {
  return (await pool.query(`SELECT what FROM ${table} ORDER BY what COLLATE "C"`)).rows.map((r) => r.what as string)
}

async function idleInTransaction (): Promise<number> {
  return (await pool.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = \'idle in transaction\'')).rows[0].n
}

const events = (from: number, count: number): ReturnType<typeof ev>[] => Array.from({ length: count }, (_, k) => ev('hard-bounced', from + k))

t.test('the events of a delivery commit together, in one transaction', async (t) => {
  const effects = await effectsTable()
  const router = new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true }) })
    .on('hard-bounced', async (event, { db }) => { await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [event.requestId]) })
  const report = await router.dispatch(events(100, 20))
  t.equal(report.handled, 20)
  // txid_current(): the top-level transaction's id, also inside a savepoint.
  const { rows: xmins } = await pool.query(`SELECT count(DISTINCT xid)::int AS n FROM ${effects}`)
  t.equal(xmins[0].n, 1, 'every row written by one transaction (on the old code: one per event)')
})

t.test('a failed event among many is rolled back alone and retried alone', async (t) => {
  const effects = await effectsTable()
  const seen = `seen_${n++}`
  const store = postgresSeenEvents({ pool, table: seen, transactional: true })
  const delivery = events(200, 12)
  const calls = new Map<string, number>()
  let failing = true
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (event, { db }) => {
      const id = event.requestId!
      calls.set(id, (calls.get(id) ?? 0) + 1)
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [id])
      // One throws after its insert; another fails inside PostgreSQL (a unique violation), which
      // leaves the transaction in error until it is rolled back to the event's savepoint.
      if (failing && id === 'req-203') throw new Error('a handler failed')
      if (failing && id === 'req-207') await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [id])
    })
  const first = await router.dispatch(delivery)
  t.same(first.outcomes.map((o) => o.status), delivery.map((e) => e.requestId === 'req-203' || e.requestId === 'req-207' ? 'failed' : 'handled'))
  t.match(first.outcomes[3], { error: { message: 'a handler failed' } })
  t.same(await rows(effects), delivery.map((e) => e.requestId).filter((id) => id !== 'req-203' && id !== 'req-207').sort(), 'the failed events\' rows rolled back, the others\' committed')
  t.same(await store.has(delivery.map(eventFingerprint)), delivery.map((e) => e.requestId !== 'req-203' && e.requestId !== 'req-207'), 'only the others marked done')
  t.equal(await idleInTransaction(), 0, 'no connection left in a transaction')
  // No savepoints: a failure rolls its group back, and the events before it in the group run again
  // (their first run left nothing behind); the events after it run once.
  t.same(delivery.map((e) => calls.get(e.requestId!)), [2, 2, 2, 1, 2, 2, 2, 1, 1, 1, 1, 1], 'the events before each failure ran again, once per failure they met')

  failing = false
  calls.clear()
  const retry = await router.dispatch(delivery)
  t.same(retry.outcomes.map((o) => o.status), delivery.map((e) => e.requestId === 'req-203' || e.requestId === 'req-207' ? 'handled' : 'skipped'), 'the failed events\' claims were released: the retry runs them at once')
  t.same([...calls.keys()].sort(), ['req-203', 'req-207'], 'and only them')
  t.same(await rows(effects), delivery.map((e) => e.requestId).sort(), 'every event\'s row once')
})

t.test('with concurrency, each lane is a transaction of its own: a failure in one touches no other', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  const router = new WebhookEventRouter({ seenEvents: store, concurrency: 3 })
    .on('hard-bounced', async (event, { db }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [event.requestId])
      if (event.requestId === 'req-305') throw new Error('one fails')
    })
  const delivery = events(300, 30)
  const report = await router.dispatch(delivery)
  t.equal(report.handled, 29)
  t.equal(report.failed, 1)
  t.same(await rows(effects), delivery.map((e) => e.requestId).filter((id) => id !== 'req-305').sort())
  const { rows: xmins } = await pool.query(`SELECT count(DISTINCT xid)::int AS n FROM ${effects}`)
  // A lane's transaction ends at a failure: its other events run again and commit in a fresh one, and its next events go on in another.
  t.ok(xmins[0].n >= 1 && xmins[0].n <= 5, `one transaction per lane, two more for the lane that met the failure (${String(xmins[0].n)})`)
})

t.test('the handler deadline holds per event: the late one is undone, the earlier ones commit, the rest are handed back', async (t) => {
  const effects = await effectsTable()
  const seen = `seen_${n++}`
  const small = server.pool({ max: 1 })
  const store = postgresSeenEvents({ pool: small, table: seen, transactional: true, handlerTimeout: 300 })
  let stuckDb: pg.PoolClient | undefined
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (event, { db }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [event.requestId])
      if (event.requestId === 'req-402') { stuckDb = db; await new Promise(() => {}) }
    })
  const delivery = events(400, 5)
  const report = await router.dispatch(delivery)
  t.same(report.outcomes.map((o) => o.status), ['handled', 'handled', 'failed', 'failed', 'failed'])
  t.ok(report.outcomes[2]!.status === 'failed' && report.outcomes[2]!.error instanceof HandlerTimeoutError, 'the stuck event fails with HandlerTimeoutError (503)')
  t.same(await rows(effects), ['req-400', 'req-401'], 'the stuck event\'s insert undone; the earlier events committed')
  const fps = delivery.map(eventFingerprint)
  t.same(await store.has(fps), [true, true, false, false, false])
  const again = await store.claim(fps.slice(2), 30)
  t.ok(again.every((c) => typeof c === 'object'), 'the stuck event\'s claim and those of the events handed back were released')
  await store.release(again.filter((c) => typeof c === 'object'))
  await t.rejects(stuckDb!.query('SELECT 1'), { name: 'InboxTransactionError', reason: 'used_after_handler' }, 'the stuck handler\'s context.db refuses every call')
  t.equal(await idleInTransaction(), 0, 'no connection left idle in transaction')
  const later = await router.dispatch(events(410, 3))
  t.equal(later.handled, 3, 'later deliveries go on, on the pool of one')
})

t.test('a handler that ends the delivery\'s transaction past the check: nothing of the delivery is acknowledged', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 })
    .on('hard-bounced', async (event, { db }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [event.requestId])
      if (event.requestId !== 'req-501') return
      // A Query whose text reads as harmless when checked and is ROLLBACK when sent.
      await new Promise((resolve, reject) => {
        const query = new pg.Query('ROLLBACK', undefined, (err: Error | undefined) => { if (err != null) reject(err); else resolve(undefined) })
        let reads = 0
        Object.defineProperty(query, 'text', { get: () => reads++ === 0 ? 'SELECT 1' : 'ROLLBACK' })
        ;(db as unknown as pg.ClientBase).query(query)
      })
    })
  const delivery = events(500, 3)
  const report = await router.dispatch(delivery)
  t.same(report.outcomes.map((o) => o.status), ['failed', 'failed', 'failed'], 'none acknowledged')
  t.match(report.outcomes[1], { error: { name: 'InboxTransactionError', reason: 'transaction_ended', fingerprint: eventFingerprint(delivery[1]!) } })
  t.same(await rows(effects), [], 'the handler\'s ROLLBACK took the first event with it; nothing committed')
  t.same(await store.has(delivery.map(eventFingerprint)), [false, false, false], 'no done mark')
  t.equal(await idleInTransaction(), 0)
})

t.test('a handler\'s own savepoints work, of any name; one that swallows a failed statement fails its event alone', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  const runs = new Map<string, number>()
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (event, { db }) => {
      const id = event.requestId!
      runs.set(id, (runs.get(id) ?? 0) + 1)
      if (id === 'req-601') {
        await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [id])
        // Fails inside PostgreSQL (there is no such savepoint: the store sets none), and the handler goes on.
        await db.query('RELEASE SAVEPOINT mailchannels_webhooks_event').catch(() => {})
        return
      }
      await db.query('SAVEPOINT mailchannels_webhooks_event')
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [`${id} undone`])
      await db.query('ROLLBACK TO SAVEPOINT mailchannels_webhooks_event')
      await db.query('RELEASE mailchannels_webhooks_event')
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [id])
    })
  const report = await router.dispatch(events(600, 3))
  t.same(report.outcomes.map((o) => o.status), ['handled', 'failed', 'handled'], 'the handler that went on past a failed statement fails its event; the others stand')
  t.match(report.outcomes[1], { error: { name: 'ReplayStoreError', message: /failed and they went on/ } })
  t.same(await rows(effects), ['req-600', 'req-602'], 'the handlers\' own savepoints undid their part; the failed event\'s insert rolled back')
  t.same(Object.fromEntries(runs), { 'req-600': 2, 'req-601': 1, 'req-602': 1 }, 'the event before the failed one ran again, in a fresh transaction')
  t.same(await store.has(events(600, 3).map(eventFingerprint)), [true, false, true])
  t.equal(await idleInTransaction(), 0)
})

t.test('an event that fails when run again after a neighbour\'s failure: it fails too, its claim released; the others commit', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  const runs = new Map<string, number>()
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (event, { db }) => {
      const id = event.requestId!
      const run = (runs.get(id) ?? 0) + 1
      runs.set(id, run)
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [id])
      if (id === 'req-702') throw new Error('fails first')
      if (id === 'req-701' && run === 2) throw new Error('fails when run again')
    })
  const delivery = events(700, 4)
  const report = await router.dispatch(delivery)
  t.same(report.outcomes.map((o) => o.status), ['handled', 'failed', 'failed', 'handled'])
  t.match(report.outcomes[1], { error: { message: 'fails when run again' } })
  t.same(await rows(effects), ['req-700', 'req-703'])
  t.same(await store.has(delivery.map(eventFingerprint)), [true, false, false, true])
  const again = await store.claim(delivery.map(eventFingerprint).slice(1, 3), 30)
  t.ok(again.every((c) => typeof c === 'object'), 'both failed events\' claims were released: a retry runs them at once')
  t.equal(await idleInTransaction(), 0)
})

t.test('a claim lost before the commit (expired, taken by another caller): that event fails unreleased; the others run again and commit', async (t) => {
  const effects = await effectsTable()
  const seen = `seen_${n++}`
  const store = postgresSeenEvents({ pool, table: seen, transactional: true })
  const delivery = events(800, 3)
  const fps = delivery.map(eventFingerprint)
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (event, { db }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [event.requestId])
      // Another caller takes the first event's row while it waits for the commit.
      if (event.requestId === 'req-802') await pool.query(`UPDATE ${seen} SET token = 'theirs' WHERE fingerprint = $1`, [fps[0]])
    })
  const report = await router.dispatch(delivery)
  t.same(report.outcomes.map((o) => o.status), ['failed', 'handled', 'handled'])
  t.match(report.outcomes[0], { error: { name: 'ReplayStoreError', message: /another caller took it/ } })
  t.same(await rows(effects), ['req-801', 'req-802'], 'its insert rolled back; the others committed once')
  t.same(await store.has(fps), [false, true, true])
  t.same((await pool.query(`SELECT token FROM ${seen} WHERE fingerprint = $1`, [fps[0]])).rows[0].token, 'theirs', 'the other caller\'s claim left as it is')
})

t.test('a handler that COMMITs past the check (a Submittable): the events before it are committed with their done marks, never without', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  let sneaky = true
  const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 })
    .on('hard-bounced', async (event, { db }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [`${event.requestId!} ${sneaky ? 'first' : 'retry'}`])
      if (event.requestId !== 'req-902' || !sneaky) return
      // A Query whose text reads as harmless when checked and is COMMIT when sent.
      await new Promise((resolve, reject) => {
        const query = new pg.Query('COMMIT', undefined, (err: Error | undefined) => { if (err != null) reject(err); else resolve(undefined) })
        let reads = 0
        Object.defineProperty(query, 'text', { get: () => reads++ === 0 ? 'SELECT 1' : 'COMMIT' })
        ;(db as unknown as pg.ClientBase).query(query)
      })
    })
  const delivery = events(900, 3)
  const fps = delivery.map(eventFingerprint)
  const first = await router.dispatch(delivery)
  t.same(first.outcomes.map((o) => o.status), ['failed', 'failed', 'failed'], 'none acknowledged')
  t.match(first.outcomes[2], { error: { name: 'InboxTransactionError', reason: 'transaction_ended', fingerprint: fps[2] } })
  t.same(await store.has(fps), [true, true, false], 'the events before it committed with their done marks')
  sneaky = false
  let retry = await router.dispatch(delivery)
  for (let i = 0; i < 50 && retry.outcomes[2]!.status !== 'handled'; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    retry = await router.dispatch(delivery)
  }
  t.same(retry.outcomes.map((o) => o.status), ['skipped', 'skipped', 'handled'], 'the retry skips them (once the offender\'s claim expired, it runs it)')
  t.same(await rows(effects), ['req-900 first', 'req-901 first', 'req-902 first', 'req-902 retry'], 'each of the others once; the offender\'s own commit stays, as documented')
  t.equal(await idleInTransaction(), 0)
})

t.test('node-postgres without transaction status (before 8.21): each event that wrote is marked at once, and the same guarantees hold', async (t) => {
  const effects = await effectsTable()
  const old = server.pool({ max: 2 })
  old.on('connect', (client) => { Object.defineProperty(client, 'getTransactionStatus', { value: undefined }) })
  const store = postgresSeenEvents({ pool: old, table: `seen_${n++}`, transactional: true })
  const calls = new Map<string, number>()
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (event, { db }) => {
      const id = event.requestId!
      calls.set(id, (calls.get(id) ?? 0) + 1)
      await db.query(`INSERT INTO ${effects} (what) VALUES ($1)`, [id])
      if (id === 'req-952') throw new Error('a handler failed')
      // A failed statement the handler goes on past: its event fails, alone.
      if (id === 'req-954') await db.query('SELECT 1 / 0').catch(() => {})
    })
  const delivery = events(950, 6)
  const report = await router.dispatch(delivery)
  t.same(report.outcomes.map((o) => o.status), ['handled', 'handled', 'failed', 'handled', 'failed', 'handled'])
  t.same(await rows(effects), ['req-950', 'req-951', 'req-953', 'req-955'])
  t.same(await store.has(delivery.map(eventFingerprint)), [true, true, false, true, false, true])
  t.same(delivery.map((e) => calls.get(e.requestId!)), [2, 2, 1, 2, 1, 1])
  t.equal(await idleInTransaction(), 0)
})

t.test('claims whose text is not the store\'s own shape are marked by a parameterised statement, never spliced into SQL', async (t) => {
  const seen = `seen_${n++}`
  const store = postgresSeenEvents({ pool, table: seen, transactional: true })
  await store.createSchema()
  const claims = [{ fingerprint: "fp'); DROP TABLE x; --", token: "it's" }, { fingerprint: 'plain', token: 'a.b' }]
  for (const c of claims) await pool.query(`INSERT INTO ${seen} (fingerprint, token, done, expires_at) VALUES ($1, $2, false, now() + interval '1 minute')`, [c.fingerprint, c.token])
  const tx = store.openDelivery()!
  for (const c of claims) await tx.run(c, async (db) => { await db.query('SELECT 1') })
  t.equal(await tx.commit(), undefined, 'committed, no event failed')
  t.same(await store.has(claims.map((c) => c.fingerprint)), [true, true])
})

t.test('SIGKILL before the delivery\'s one commit, its other events already marked: nothing lost, nothing twice', async (t) => {
  const keys = generateSigningKeyPair()
  const effects = `effects_${n++}`
  await pool.query(`CREATE TABLE ${effects} (fingerprint text NOT NULL, pid int NOT NULL)`)
  const seen = `seen_${n++}`
  const env = { DATABASE_URL: server.url, PUBLIC_KEY: keys.publicKey, EFFECTS: effects, SEEN: seen, CLAIM_LIFETIME: '1', CONCURRENCY: '1' }
  // Five events, then one whose handler kills the process after its insert.
  const wire = Array.from({ length: 6 }, (_, i) => ({ event: i < 5 ? 'hard-bounced' : 'complained', customer_handle: 'acct_1', timestamp: 1700000000, request_id: `crash-${i}`, email: `u${i}@example.com` }))
  const post = async (port: number, label: string): Promise<number> => {
    const signed = signWebhook({ privateKey: keys.privateKey, events: wire as never, label })
    return await postSigned(port, signed)
  }
  const doomed = await spawnReceiver(t, { ...env, CRASH_TYPE: 'complained' })
  t.equal(await post(doomed.port, 'sig_doomed'), 0, 'the connection dies with the process')
  t.equal(await doomed.exited, 'SIGKILL')
  t.same((await pool.query(`SELECT count(*)::int AS n FROM ${effects}`)).rows[0].n, 0, 'the five committed-looking events died with the one transaction')
  t.same((await pool.query(`SELECT count(*)::int AS n FROM ${seen} WHERE done`)).rows[0].n, 0, 'and so did their done marks')

  const next = await spawnReceiver(t, env)
  const statuses: number[] = []
  for (let attempt = 0; attempt < 60; attempt++) {
    statuses.push(await post(next.port, `sig_retry_${attempt}`))
    if (statuses.at(-1) === 200) break
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  t.equal(statuses.at(-1), 200, `acknowledged once the dead receiver's claims expired (${statuses.join(',')})`)
  const { rows: counts } = await pool.query(`SELECT count(*)::int AS n FROM ${effects} GROUP BY fingerprint`)
  t.same(counts.map((r) => r.n), [1, 1, 1, 1, 1, 1], 'each event\'s row exactly once')
})
