// SqliteSeenEventsStore on a real SQLite file (node:sqlite on Node 22.13+ and 24, better-sqlite3
// on Node 20): the shared seen-events contract, the router scenarios, two connections on one
// file, and transactional handlers writing to the app's table in the same file.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { ReplayStoreError, WebhookEventRouter, eventFingerprint, type StoreClaim, type StoreClaimResult } from '../../src/index.js'
import { SqliteSeenEventsStore, sqliteSeenEvents, type SqliteDatabaseLike, type TransactionalSqliteSeenEventsStore } from '../../src/sqlite/index.js'
import { behavesAsASeenStore } from '../replay/helpers/seen-store-contract.js'
import { ev } from '../dispatch/helpers/events.js'
import { concurrentDeliveries, retryCompletesTheRest } from '../dispatch/helpers/scenarios.js'

const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'
const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-sqlite-'))
const stores: SqliteSeenEventsStore[] = []
t.teardown(async () => {
  for (const s of stores) await s.close()
  rmSync(dir, { recursive: true, force: true })
})
let n = 0
const file = (): string => path.join(dir, `db-${n++}.sqlite`)
function openTransactional (): TransactionalSqliteSeenEventsStore<SqliteDatabaseLike> {
  const store = sqliteSeenEvents({ path: file(), transactional: true })
  stores.push(store)
  return store
}
function open (options: Parameters<typeof sqliteSeenEvents>[0]): SqliteSeenEventsStore {
  const store = sqliteSeenEvents(options as never) as SqliteSeenEventsStore
  stores.push(store)
  return store
}

t.test('the seen-events contract', async (t) => {
  await behavesAsASeenStore(t, async () => open({ path: file() }))
})

t.test('two connections on one file (as two processes): many concurrent deliveries, every effect exactly once', async (t) => {
  const f = file()
  await concurrentDeliveries(t, { stores: [open({ path: f }), open({ path: f })] }, { events: 40, deliveries: 20, rounds: 80, failures: 6 })
})

t.test('a retry on the other connection completes only the failed events', async (t) => {
  const f = file()
  await retryCompletesTheRest(t, open({ path: f }), open({ path: f }))
})

t.test('done marks outlive the store: a new store on the same file skips them', async (t) => {
  const f = file()
  const first = open({ path: f })
  const [c] = await first.claim(['kept'], 30)
  if (!isClaim(c)) return t.fail('claimed')
  await first.complete([c])
  await first.close()
  t.same(await open({ path: f }).claim(['kept'], 30), ['done'])
})

t.test('transactional: effects in the app\'s table commit with the done mark, or roll back with a failure', async (t) => {
  const store = openTransactional()
  store.database.exec('CREATE TABLE suppressions (fingerprint TEXT NOT NULL, email TEXT NOT NULL)')
  let failNext = true
  const router = new WebhookEventRouter({ seenEvents: store })
  router.on('hard-bounced', async (event, { db, fingerprint }) => {
    db.prepare('INSERT INTO suppressions (fingerprint, email) VALUES (?, ?)').run(fingerprint, event.email)
    await new Promise((resolve) => setTimeout(resolve, 2))
    if (failNext) { failNext = false; throw new Error('after the insert') }
  })
  const events = [ev('hard-bounced', 1, { status: '5.1.1' }), ev('hard-bounced', 2, { status: '5.1.1' })]
  const first = await router.dispatch(events)
  t.same(first.outcomes.map((o) => o.status), ['failed', 'handled'])
  const count = (): unknown[] => store.database.prepare('SELECT fingerprint FROM suppressions ORDER BY fingerprint').all().map((r) => (r as { fingerprint: string }).fingerprint)
  t.same(count(), [eventFingerprint(events[1]!)], 'the failed event\'s insert rolled back')
  t.same((await router.dispatch(events)).outcomes.map((o) => o.status), ['handled', 'skipped'])
  t.same(count(), events.map(eventFingerprint).sort(), 'each event\'s row exactly once')
})

t.test('transactional: a claim another caller took meanwhile rolls the transaction back', async (t) => {
  const store = openTransactional()
  store.database.exec('CREATE TABLE effects (v INTEGER)')
  const [claim] = await store.claim(['lost'], 30) as [StoreClaim]
  store.database.prepare('UPDATE mailchannels_webhooks_seen_events SET token = ? WHERE fingerprint = ?').run('theirs', 'lost')
  await t.rejects(store.runInTransaction(claim, async (db) => { db.prepare('INSERT INTO effects VALUES (1)').run() }), { name: 'ReplayStoreError', message: /another caller took it/ })
  t.same(store.database.prepare('SELECT count(*) AS n FROM effects').all(), [{ n: 0 }])
})

t.test('expiry and purging', async (t) => {
  const store = open({ path: file(), ttl: 1 })
  await store.add(['old'])
  await new Promise((resolve) => setTimeout(resolve, 1100))
  t.same(await store.has(['old']), [false])
  t.equal(await store.purgeExpired(), 1)
})

t.test('a closed store rejects with ReplayStoreError; options are validated', async (t) => {
  const store = open({ path: file() })
  await store.close()
  await t.rejects(store.claim(['a'], 30), ReplayStoreError)
  t.throws(() => sqliteSeenEvents({} as never), { name: 'TypeError', message: /exactly one of path .* or database/ })
  t.throws(() => sqliteSeenEvents({ path: file(), table: 'a b' }), { name: 'TypeError', message: /table must be a SQLite identifier/ })
  t.throws(() => sqliteSeenEvents({ path: file(), ttl: 0 }), { name: 'TypeError', message: /ttl/ })
  t.throws(() => sqliteSeenEvents({ path: file(), busyTimeout: -1 }), { name: 'TypeError', message: /busyTimeout/ })
  t.throws(() => sqliteSeenEvents({ database: {} as never }), { name: 'TypeError', message: /database must be an open/ })
  t.throws(() => sqliteSeenEvents({ path: path.join(dir, 'no', 'such', 'dir', 'x.db') }), { name: 'ReplayStoreError', message: /could not be opened/ })
})
