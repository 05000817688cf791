// The SQLite inbox (`transactional: true`) when handlers and apps break its rules, on real SQLite
// files: a handler that ends the store's transaction, context.db used after the handler
// settled, the app's own connection writing while a handler awaits, a handler that never returns,
// expired rows purged, files created 0600, ':memory:' refused unless asked for.
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { WebhookEventRouter, type DispatchReport } from '../../src/index.js'
import { sqliteSeenEvents, type SqliteSeenEventsStore } from '../../src/sqlite/index.js'
import { ev, sleep } from '../dispatch/helpers/events.js'
import { receiverOf, wire } from './helpers/deliver.js'
import type Database from 'better-sqlite3'
import { inTransaction, needsBetterSqlite3, openDatabase, sqliteCode, thrown } from './helpers/driver.js'

const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-sqlite-rules-'))
const cleanups: Array<() => unknown> = []
t.teardown(async () => {
  for (const c of cleanups.reverse()) await c()
  rmSync(dir, { recursive: true, force: true })
})
let n = 0
const file = (): string => path.join(dir, `db-${n++}.sqlite`)
function track<S extends SqliteSeenEventsStore> (store: S): S { cleanups.push(async () => { await store.close() }); return store }
const statuses = (r: DispatchReport): string[] => r.outcomes.map((o) => o.status)
const count = (db: { prepare: (sql: string) => { all: () => unknown[] } }, table: string): number => Number((db.prepare(`SELECT count(*) AS n FROM ${table}`).all()[0] as { n: number }).n)

/** Dispatches `events` until no event is deferred (a kept claim expiring on its own), at most `limit` ms. */
async function untilNotDeferred (router: WebhookEventRouter<object, any>, events: Parameters<WebhookEventRouter['dispatch']>[0], limit = 15_000): Promise<DispatchReport[]> {
  const reports: DispatchReport[] = []
  const until = Date.now() + limit
  for (;;) {
    const report = await router.dispatch(events)
    reports.push(report)
    if (report.deferred === 0 || Date.now() > until) return reports
    await sleep(100)
  }
}

t.test('a handler that runs ROLLBACK: never acknowledged, marked or released; the retry writes the effect once', async (t) => {
  const store = track(sqliteSeenEvents({ path: file(), transactional: true }))
  store.database.exec('CREATE TABLE effects (fingerprint TEXT NOT NULL)')
  let first = true
  const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 })
    .on('hard-bounced', (_event, { db, fingerprint }) => {
      db.prepare('INSERT INTO effects VALUES (?)').run(fingerprint)
      if (first) { first = false; db.exec('ROLLBACK') }
    })
  const events = [ev('hard-bounced', 1)]
  const report = await router.dispatch(events)
  t.same(statuses(report), ['failed'])
  const outcome = report.outcomes[0] as { error: Error & { reason?: string, fingerprint?: string } }
  t.equal(outcome.error.name, 'InboxTransactionError')
  t.equal(outcome.error.reason, 'transaction_ended')
  t.match(outcome.error.message, /ended the transaction/)
  t.match(outcome.error.message, /COMMIT, ROLLBACK or BEGIN/)
  t.equal(outcome.error.fingerprint, report.outcomes[0]!.fingerprint)
  t.same(await store.has([report.outcomes[0]!.fingerprint]), [false], 'no done mark')
  t.same(statuses(await router.dispatch(events)), ['deferred'], 'the claim is kept (not released): the retry waits for it to expire')
  const retries = await untilNotDeferred(router, events)
  t.same(statuses(retries.at(-1)!), ['handled'], 'the retry after the claim expired handles it')
  t.equal(count(store.database, 'effects'), 1, 'the effect written exactly once')
  t.same(statuses(await router.dispatch(events)), ['skipped'])
})

t.test('a handler that runs COMMIT (or ROLLBACK then BEGIN): no done mark, no acknowledgement; later calls refused', async (t) => {
  const store = track(sqliteSeenEvents({ path: file(), transactional: true }))
  store.database.exec('CREATE TABLE effects (fingerprint TEXT NOT NULL)')
  const seen: unknown[] = []
  const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 })
    .on('hard-bounced', (event, { db, fingerprint }) => {
      if (event.timestamp === 1700000002) {
        db.exec('ROLLBACK; BEGIN')
        db.prepare('INSERT INTO effects VALUES (?)').run(fingerprint)
        return
      }
      db.prepare('INSERT INTO effects VALUES (?)').run(fingerprint)
      try { db.exec('COMMIT') } catch (err) { seen.push(err) }
      try { db.prepare('INSERT INTO effects VALUES (?)').run('after-commit') } catch (err) { seen.push(err) }
    })
  const report = await router.dispatch([ev('hard-bounced', 1), ev('hard-bounced', 2)])
  t.same(statuses(report), ['failed', 'failed'])
  t.same(await store.has(report.outcomes.map((o) => o.fingerprint)), [false, false], 'no done marks')
  t.same(statuses(await router.dispatch([ev('hard-bounced', 1), ev('hard-bounced', 2)])), ['deferred', 'deferred'], 'claims kept, not released')
  t.equal(seen.length, 2, 'the COMMIT and the call after it both threw')
  t.match(seen, [{ name: 'InboxTransactionError', reason: 'transaction_ended' }, { name: 'InboxTransactionError', reason: 'transaction_ended' }])
  const rows = store.database.prepare('SELECT fingerprint FROM effects').all() as Array<{ fingerprint: string }>
  t.same(rows.map((r) => r.fingerprint), [report.outcomes[0]!.fingerprint], 'only what the handler committed itself; nothing after its COMMIT, nothing in its own BEGIN')
  t.notOk(inTransaction(store.database), 'no transaction left open')
})

t.test('handlers\' own savepoints stay allowed (better-sqlite3 db.transaction() nests as one)', { skip: needsBetterSqlite3 }, async (t) => {
  const app = openDatabase(file())
  cleanups.push(() => app.close())
  const store = track(sqliteSeenEvents({ database: app as unknown as Database.Database, transactional: true }))
  store.database.exec('CREATE TABLE effects (v TEXT NOT NULL)')
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', (_event, { db }) => {
      db.transaction(() => { db.prepare('INSERT INTO effects VALUES (?)').run('kept') })()
      try {
        db.transaction(() => { db.prepare('INSERT INTO effects VALUES (?)').run('undone'); throw new Error('inner') })()
      } catch {}
      db.exec('SAVEPOINT mine; INSERT INTO effects VALUES (\'sp\'); RELEASE mine')
    })
  t.same(statuses(await router.dispatch([ev('hard-bounced', 1)])), ['handled'])
  t.same((store.database.prepare('SELECT v FROM effects ORDER BY v').all() as Array<{ v: string }>).map((r) => r.v), ['kept', 'sp'])
})

t.test('context.db refuses every call after the handler settled, naming the event', { skip: needsBetterSqlite3 }, async (t) => {
  const app = openDatabase(file())
  cleanups.push(() => app.close())
  const store = track(sqliteSeenEvents({ database: app as unknown as Database.Database, transactional: true }))
  store.database.exec('CREATE TABLE effects (v TEXT NOT NULL)')
  const late: unknown[] = []
  let done!: () => void
  const finished = new Promise<void>((resolve) => { done = resolve })
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', (_event, { db }) => {
      const stmt = db.prepare('INSERT INTO effects VALUES (?)')
      const tx = db.transaction(() => { stmt.run('tx') })
      stmt.run('in time')
      setTimeout(() => {
        for (const call of [() => stmt.run('late'), () => db.prepare('INSERT INTO effects VALUES (1)'), () => db.exec('DELETE FROM effects'), () => tx(), () => stmt.all(), () => stmt.database.exec('DELETE FROM effects')]) {
          try { call() } catch (err) { late.push(err) }
        }
        done()
      }, 20)
    })
  const report = await router.dispatch([ev('hard-bounced', 1)])
  t.same(statuses(report), ['handled'])
  await finished
  t.equal(late.length, 6, 'each late call threw (a statement\'s database too)')
  t.match(late, Array(6).fill({ name: 'InboxTransactionError', reason: 'used_after_handler', fingerprint: report.outcomes[0]!.fingerprint }))
  t.match((late[0] as Error).message, new RegExp(`event ${report.outcomes[0]!.fingerprint}`))
  t.same((store.database.prepare('SELECT v FROM effects').all() as Array<{ v: string }>).map((r) => r.v), ['in time'], 'nothing written late')
})

t.test('the app\'s own connection (database: db): a handler failing after 100 ms does not roll back the app\'s INSERT', async (t) => {
  const f = file()
  // The app's connection, as an app opens it; it retries a busy file on a timer, as docs/inbox.md advises.
  const db = openDatabase(f, { timeout: 0 })
  cleanups.push(() => db.close())
  db.exec('CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)')
  const store = track(sqliteSeenEvents({ database: db as unknown as Database.Database, transactional: true }))
  let inHandler!: () => void
  const handlerWaiting = new Promise<void>((resolve) => { inHandler = resolve })
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async () => {
      inHandler()
      await sleep(100)
      throw new Error('the handler fails after its await')
    })
  const dispatched = router.dispatch([ev('hard-bounced', 1)])
  await handlerWaiting
  // Another route of the app, meanwhile: an INSERT on the app's connection that reports success.
  const insertOrder = async (): Promise<void> => {
    for (;;) {
      try { db.prepare('INSERT INTO orders (item) VALUES (?)').run('book'); return } catch (err) {
        if (sqliteCode(err) !== 'SQLITE_BUSY') throw err
        await sleep(5)
      }
    }
  }
  await insertOrder()
  t.same(statuses(await dispatched), ['failed'])
  t.equal(count(db, 'orders'), 1, 'the app\'s order survived the handler\'s rollback')
  t.notOk(inTransaction(db), 'the app\'s connection was never inside the inbox\'s transaction')
  const reopened = openDatabase(f)
  cleanups.push(() => reopened.close())
  t.equal(count(reopened, 'orders'), 1, 'committed on the file')
})

t.test('the app\'s connection with a blocking busy timeout: its write while a handler awaits fails loudly, never succeeds and vanishes', async (t) => {
  const f = file()
  const db = openDatabase(f, { timeout: 200 })
  cleanups.push(() => db.close())
  db.exec('PRAGMA foreign_keys = ON; CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL); CREATE TABLE lines (order_id INTEGER NOT NULL REFERENCES orders (id))')
  const store = track(sqliteSeenEvents({ database: db as unknown as Database.Database, transactional: true }))
  let inHandler!: () => void
  const handlerWaiting = new Promise<void>((resolve) => { inHandler = resolve })
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db: tx }) => {
      t.equal(sqliteCode(thrown(() => tx.prepare('INSERT INTO lines VALUES (42)').run())), 'SQLITE_CONSTRAINT_FOREIGNKEY', 'the app\'s foreign_keys setting holds on the inbox\'s connection')
      inHandler()
      await sleep(50)
      throw new Error('fails after its await')
    })
  const dispatched = router.dispatch([ev('hard-bounced', 1)])
  await handlerWaiting
  t.equal(sqliteCode(thrown(() => db.prepare('INSERT INTO orders (item) VALUES (?)').run('book'))), 'SQLITE_BUSY', 'the app\'s write reports the busy file')
  t.same(statuses(await dispatched), ['failed'])
  db.prepare('INSERT INTO orders (item) VALUES (?)').run('book')
  t.equal(count(db, 'orders'), 1, 'written once the event\'s transaction ended')
})

t.test('a handler that never returns: rolled back at handlerTimeout, 503, claim released, later deliveries work, its late calls refused', async (t) => {
  const store = track(sqliteSeenEvents({ path: file(), transactional: true, handlerTimeout: 300 }))
  store.database.exec('CREATE TABLE effects (v TEXT NOT NULL)')
  let hang = true
  let stuckDb: { prepare: (sql: string) => { run: (...a: unknown[]) => unknown } } | undefined
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db }) => {
      db.prepare('INSERT INTO effects VALUES (?)').run(hang ? 'stuck' : 'ok')
      if (hang) { hang = false; stuckDb = db; await new Promise(() => {}) }
    })
  const deliver = receiverOf(router)
  const first = await Promise.race([deliver(wire(1)), sleep(20_000).then(() => ({ status: -1, retryAfter: null }))])
  t.equal(first.status, 503, 'the stuck handler answered 503, not held forever')
  t.ok(first.retryAfter !== null, 'with Retry-After')
  t.equal(count(store.database, 'effects'), 0, 'its insert rolled back')
  t.notOk(inTransaction(store.database))
  t.equal((await deliver(wire(1))).status, 200, 'the retry is handled at once (the claim was released)')
  t.same((store.database.prepare('SELECT v FROM effects').all() as Array<{ v: string }>).map((r) => r.v), ['ok'])
  t.throws(() => stuckDb!.prepare('INSERT INTO effects VALUES (?)').run('late'), { name: 'InboxTransactionError', reason: 'used_after_handler' })
  const report = await router.dispatch([ev('hard-bounced', 9)])
  t.same(statuses(report), ['handled'])
  t.equal(count(store.database, 'effects'), 2)
})

t.test('handlerTimeout is validated once, naming the option', async (t) => {
  for (const bad of [0, -1, 1.5, 'x', Number.POSITIVE_INFINITY, 2 ** 31]) {
    t.throws(() => sqliteSeenEvents({ path: file(), transactional: true, handlerTimeout: bad as never }), { name: 'TypeError', message: /handlerTimeout must be/ })
  }
  for (const bad of [-1, 0.5, 'x']) {
    t.throws(() => sqliteSeenEvents({ path: file(), purgeInterval: bad as never }), { name: 'TypeError', message: /purgeInterval must be/ })
  }
})

t.test('expired rows are purged in the background of claims (ttl 1: 300 events handled, 5 more later)', async (t) => {
  const store = track(sqliteSeenEvents({ path: file(), ttl: 1, purgeInterval: 1 }))
  const router = new WebhookEventRouter({ seenEvents: store }).on('hard-bounced', () => {})
  const rows = (): number => count(store.database, 'mailchannels_webhooks_seen_events')
  t.equal((await router.dispatch(Array.from({ length: 300 }, (_, i) => ev('hard-bounced', i)))).handled, 300)
  t.equal(rows(), 300)
  // Past ttl and the purge interval, new deliveries arrive: their claims purge the expired rows.
  const until = Date.now() + 15_000
  let k = 1000
  while (rows() >= 50 && Date.now() < until) {
    await sleep(300)
    await router.dispatch([ev('hard-bounced', k++)])
    await sleep(10)
  }
  t.ok(rows() < 50, `expired rows purged (${rows()} rows left)`)
})

t.test('files created 0600 (with -wal and -shm); \':memory:\' refused unless allowMemory', { skip: process.platform === 'win32' && 'POSIX modes' }, async (t) => {
  const f = file()
  const store = track(sqliteSeenEvents({ path: f, transactional: true }))
  await store.claim(['a'], 30)
  for (const name of [f, `${f}-wal`, `${f}-shm`]) {
    t.ok(existsSync(name), `${path.basename(name)} exists`)
    t.equal(statSync(name).mode & 0o777, 0o600, `${path.basename(name)} is 0600`)
  }
  t.throws(() => sqliteSeenEvents({ path: ':memory:' }), { name: 'TypeError', message: /nothing survives a restart.*allowMemory: true/ })
  t.throws(() => sqliteSeenEvents({ database: openDatabase(':memory:') as never }), { name: 'TypeError', message: /nothing survives a restart/ })
  t.throws(() => sqliteSeenEvents({ path: ':memory:', allowMemory: 'yes' as never }), { name: 'TypeError', message: /allowMemory must be true or false/ })
  const memory = track(sqliteSeenEvents({ path: ':memory:', allowMemory: true }))
  const [c] = await memory.claim(['m'], 30)
  t.ok(typeof c === 'object', 'a memory store works when asked for')
})
