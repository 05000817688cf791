// WebhookEventRouter on the PostgreSQL store against a real server: the router scenarios every
// store passes across instances, and transactional handlers (node-postgres and Kysely): the
// effects in the user's own table and the done mark commit together or not at all.
import t from 'tap'
import { CompiledQuery, Kysely, PostgresDialect, type Transaction } from 'kysely'
import type pg from 'pg'
import { ReplayStoreError, WebhookEventRouter, eventFingerprint, type StoreClaim } from '../../src/index.js'
import { postgresSeenEvents } from '../../src/postgres/index.js'
import { startPostgres } from '../helpers/postgres.js'
import { ev } from '../dispatch/helpers/events.js'
import { concurrentDeliveries, retryCompletesTheRest } from '../dispatch/helpers/scenarios.js'

const server = await startPostgres()
t.teardown(async () => { await server.close() })
const pool = server.pool({ max: 20 })
let n = 0

t.test('two instances (own pools), many concurrent identical deliveries and resends, handlers failing once: every effect exactly once', async (t) => {
  const table = `scenario_${n++}`
  await concurrentDeliveries(t, { stores: [0, 1].map(() => postgresSeenEvents({ pool: server.pool({ max: 10 }), table })) }, { events: 60, deliveries: 30, rounds: 80, failures: 8 })
})

t.test('a retry on the other instance completes only the failed events', async (t) => {
  const table = `retry_${n++}`
  await retryCompletesTheRest(t, postgresSeenEvents({ pool, table }), postgresSeenEvents({ pool: server.pool(), table }))
})

async function countRows (table: string): Promise<Map<string, number>> {
  const { rows } = await pool.query(`SELECT fingerprint, count(*)::int AS n FROM ${table} GROUP BY fingerprint`)
  return new Map(rows.map((r) => [r.fingerprint as string, r.n as number]))
}

t.test('transactional: a handler that fails after its insert leaves neither the row nor the mark; the retry writes it once', async (t) => {
  const table = `suppressions_${n++}`
  await pool.query(`CREATE TABLE ${table} (fingerprint text NOT NULL, email text NOT NULL)`)
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  let failNext = true
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (event, { db, fingerprint }) => {
      await db.query(`INSERT INTO ${table} (fingerprint, email) VALUES ($1, $2)`, [fingerprint, event.email])
      if (failNext) { failNext = false; throw new Error('downstream failed after the insert') }
    })
  const events = [ev('hard-bounced', 1, { status: '5.1.1' }), ev('hard-bounced', 2, { status: '5.1.1' })]
  const first = await router.dispatch(events)
  t.same(first.outcomes.map((o) => o.status), ['failed', 'handled'])
  t.match(first.outcomes[0], { error: { message: 'downstream failed after the insert' } }, 'the handler\'s own error')
  t.same([...(await countRows(table)).values()], [1], 'the failed event\'s insert was rolled back')
  t.same(await store.has(events.map(eventFingerprint)), [false, true])
  const retry = await router.dispatch(events.map((e) => structuredClone(e)))
  t.same(retry.outcomes.map((o) => o.status), ['handled', 'skipped'])
  const rows = await countRows(table)
  t.same(events.map((e) => rows.get(eventFingerprint(e))), [1, 1], 'each event\'s row exactly once')
})

t.test('transactional: a claim another caller took meanwhile rolls the transaction back', async (t) => {
  const seen = `seen_${n++}`
  const store = postgresSeenEvents({ pool, table: seen, transactional: true })
  const effects = `effects_${n++}`
  await pool.query(`CREATE TABLE ${effects} (v int)`)
  const [claim] = await store.claim(['lost'], 30) as [StoreClaim]
  // As if the claim had expired and another instance had claimed the event anew.
  await pool.query(`UPDATE ${seen} SET token = 'theirs' WHERE fingerprint = 'lost'`)
  await t.rejects(store.runInTransaction(claim, async (db) => { await db.query(`INSERT INTO ${effects} VALUES (1)`) }), { name: 'ReplayStoreError', message: /another caller took it/ })
  t.equal((await pool.query(`SELECT count(*)::int AS n FROM ${effects}`)).rows[0].n, 0, 'the effect was rolled back')
  t.same(await store.claim(['lost'], 30), ['processing'], 'the other caller\'s claim stands')
})

t.test('transactional: the database down when the transaction opens fails the event with ReplayStoreError (503), nothing ran', async (t) => {
  const own = server.pool({ max: 2 })
  const store = postgresSeenEvents({ pool: own, table: `down_${n++}`, transactional: true })
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: store }).on('*', async () => { runs++ })
  t.equal((await router.dispatch([ev('delivered', 1)])).handled, 1)
  // Claims answered, then the server dies before the transaction opens.
  const claim = store.claim.bind(store)
  store.claim = async (fps, life) => { const r = await claim(fps, life); await server.stop('kill'); return r }
  const report = await router.dispatch([ev('delivered', 2)])
  store.claim = claim
  t.equal(report.failed, 1)
  t.ok(report.outcomes[0]!.status === 'failed' && report.outcomes[0]!.error instanceof ReplayStoreError, 'a ReplayStoreError')
  t.equal(runs, 1, 'the handler did not run')
  await server.start()
})

t.test('transactional: the server killed while a handler\'s transaction is open: the event fails, nothing commits, the process lives', async (t) => {
  const own = server.pool({ max: 2 })
  const table = `killed_${n++}`
  await own.query(`CREATE TABLE ${table} (v int)`)
  const store = postgresSeenEvents({ pool: own, table: `seen_${n++}`, transactional: true })
  let entered!: () => void
  const inside = new Promise<void>((resolve) => { entered = resolve })
  let proceed!: () => void
  const gate = new Promise<void>((resolve) => { proceed = resolve })
  const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 }).on('*', async (_event, { db }) => {
    await db.query(`INSERT INTO ${table} VALUES (1)`)
    entered()
    await gate
    await db.query(`INSERT INTO ${table} VALUES (2)`)
  })
  const pending = router.dispatch([ev('delivered', 99)])
  await inside
  await server.stop('kill')
  proceed()
  const report = await pending
  t.equal(report.failed, 1, 'the event failed')
  // Late socket errors of the broken client arrive now: none may crash the process.
  await new Promise((resolve) => setTimeout(resolve, 500))
  await server.start()
  t.equal((await pool.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n, 0, 'nothing of the transaction committed')
  // Its claim could not be released (the server was down): the retry waits for it to expire, like a sender's retry.
  let retry = await router.dispatch([ev('delivered', 99)])
  for (let i = 0; i < 40 && !retry.ok; i++) { await new Promise((resolve) => setTimeout(resolve, 100)); retry = await router.dispatch([ev('delivered', 99)]) }
  t.equal(retry.handled, 1, 'handled once the server is back and the claim expired')
  t.equal((await pool.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n, 2, 'its two rows, once')
})

t.test('Kysely: the router runs handlers in a Kysely transaction and writes the done mark in it', async (t) => {
  interface Database { kysely_suppressions: { email: string, fingerprint: string } }
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: server.pool() as unknown as pg.Pool }) })
  await db.schema.createTable('kysely_suppressions').addColumn('email', 'text').addColumn('fingerprint', 'text', (c) => c.primaryKey()).execute()
  const seenEvents = postgresSeenEvents<Transaction<Database>>({
    pool,
    table: `seen_${n++}`,
    transaction: {
      run: async (work) => await db.transaction().execute(work),
      query: async (trx, text, values) => await trx.executeQuery(CompiledQuery.raw(text, values)),
    },
  })
  let fail = true
  const router = new WebhookEventRouter({ seenEvents })
    .on('hard-bounced', async (event, { db: trx, fingerprint }) => {
      await trx.insertInto('kysely_suppressions').values({ email: event.email!, fingerprint }).execute()
      if (fail) { fail = false; throw new Error('once') }
    })
  const events = [ev('hard-bounced', 7, { status: '5.1.1' })]
  t.equal((await router.dispatch(events)).failed, 1)
  t.same(await db.selectFrom('kysely_suppressions').selectAll().execute(), [], 'rolled back with the failure')
  t.equal((await router.dispatch(events)).handled, 1)
  t.equal((await router.dispatch(events)).skipped, 1)
  t.same((await db.selectFrom('kysely_suppressions').select('fingerprint').execute()).map((r) => r.fingerprint), [eventFingerprint(events[0]!)])
  await db.destroy()
})
