// The transactional inbox on a real PostgreSQL when handlers break the rules of `context.db`
// (docs/inbox.md, "What a handler may do with context.db"): a handler that ends the store's
// transaction (ROLLBACK, its own BEGIN ... COMMIT, a multi-statement text, a statement that gets
// past the client's check, the same on Kysely), uses context.db after it settled, or never returns.
// The event is never acknowledged, marked or released on a transaction the handler ended; the
// deadline rolls back, gives the connection back, releases the claim and answers 503.
import t from 'tap'
import { CompiledQuery, Kysely, PostgresDialect, type Transaction } from 'kysely'
import pg from 'pg'
import { ReplayStoreError, WebhookEventRouter, eventFingerprint, type StoreClaim } from '../../src/index.js'
import { HandlerTimeoutError, InboxTransactionError } from '../../src/replay/errors.js'
import { postgresSeenEvents } from '../../src/postgres/index.js'
import { startPostgres } from '../helpers/postgres.js'
import { until } from '../helpers/wait.js'
import { ev } from '../dispatch/helpers/events.js'

const server = await startPostgres()
t.teardown(async () => { await server.close() })
const pool = server.pool({ max: 10 })
let n = 0

async function effectsTable (): Promise<string> {
  const table = `effects_${n++}`
  await pool.query(`CREATE TABLE ${table} (what text NOT NULL)`)
  return table
}

async function rows (table: string): Promise<string[]> {
  return (await pool.query(`SELECT what FROM ${table} ORDER BY what COLLATE "C"`)).rows.map((r) => r.what as string)
}

/** Rejects if `p` has not settled within `ms`: a hang is a failure here, not a stuck test run. */
async function settlesWithin<R> (p: Promise<R>, ms: number, what: string): Promise<R> {
  let timer: ReturnType<typeof setTimeout> | undefined
  try {
    return await Promise.race([p, new Promise<never>((_resolve, reject) => { timer = setTimeout(() => { reject(new Error(`${what} did not settle within ${ms} ms`)) }, ms) })])
  } finally {
    clearTimeout(timer)
  }
}

t.test('a handler that writes through context.db and then runs ROLLBACK: refused, the event fails and is not marked; the retry writes it once', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  let rollBack = true
  let refusal: unknown
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ('effect')`)
      if (rollBack) {
        try { await db.query('ROLLBACK') } catch (err) { refusal = err; throw err }
      }
    })
  const event = ev('hard-bounced', 1)
  const first = await router.dispatch([event])
  t.equal(first.outcomes[0]!.status, 'failed', 'not acknowledged (on the old code: handled, the done mark auto-committed alone)')
  t.ok(refusal instanceof InboxTransactionError, 'the ROLLBACK was refused with InboxTransactionError')
  t.match(refusal, { reason: 'transaction_ended', fingerprint: eventFingerprint(event), message: /refused ROLLBACK.*the inbox owns this transaction.*Throw from the handler to roll back.*SAVEPOINT/ })
  t.same(await rows(effects), [], 'the effect rolled back with the transaction')
  t.same(await store.has([eventFingerprint(event)]), [false], 'not marked done')
  rollBack = false
  const retry = await router.dispatch([structuredClone(event)])
  t.equal(retry.outcomes[0]!.status, 'handled', 'the retry runs the handler (it is not skipped)')
  t.same(await rows(effects), ['effect'], 'the effect exactly once')
})

t.test('the node-postgres helper pattern (its own BEGIN ... COMMIT), then a throw: BEGIN refused, nothing committed; the retry writes once, not twice', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  let attempt = 0
  let refusal: unknown
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db }) => {
      attempt++
      if (attempt === 1) {
        try {
          await db.query('BEGIN')
          await db.query(`INSERT INTO ${effects} (what) VALUES ('effect')`)
          await db.query('COMMIT')
        } catch (err) {
          refusal = err
          throw err
        }
        throw new Error('a later step failed')
      }
      await db.query(`INSERT INTO ${effects} (what) VALUES ('effect')`)
    })
  const event = ev('hard-bounced', 2)
  const first = await router.dispatch([event])
  t.equal(first.outcomes[0]!.status, 'failed')
  t.match(refusal, { name: 'InboxTransactionError', reason: 'transaction_ended', message: /refused BEGIN/ })
  t.same(await rows(effects), [], 'nothing committed by the first attempt (on the old code: its COMMIT committed the row)')
  const retry = await router.dispatch([structuredClone(event)])
  t.equal(retry.outcomes[0]!.status, 'handled')
  t.same(await rows(effects), ['effect'], 'one row, not two')
})

t.test('every way of writing a transaction end is refused (multi-statement texts, comments, callbacks, config objects); savepoints and data that looks like SQL are not', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  const refused = [
    'SELECT 1; COMMIT', 'select 1;commit;', '/* note */ END', '-- a comment\nABORT', 'START TRANSACTION', 'begin isolation level serializable',
    'ROLLBACK AND CHAIN', 'COMMIT AND CHAIN', 'ROLLBACK PREPARED \'x\'', 'PREPARE TRANSACTION \'x\'', 'COMMIT PREPARED \'x\'',
    'SELECT \'a;b\'; ROLLBACK', 'SELECT $$ ; $$; COMMIT', 'SELECT "x;y" FROM (SELECT 1 AS "x;y") s; END', 'SELECT E\'\\\'; \'; COMMIT', '/* a /* nested */ comment */ COMMIT',
  ]
  const allowed = [
    `INSERT INTO ${effects} (what) VALUES ('a; COMMIT')`, `INSERT INTO ${effects} (what) VALUES ($$ROLLBACK$$)`, 'SELECT 1 AS "commit"',
    'SAVEPOINT s1', `INSERT INTO ${effects} (what) VALUES ('undone')`, 'ROLLBACK TO SAVEPOINT s1', 'RELEASE SAVEPOINT s1',
    'SAVEPOINT s2', `INSERT INTO ${effects} (what) VALUES ('nested')`, 'RELEASE s2', 'SAVEPOINT s3', 'rollback work to s3',
    'PREPARE p1 AS SELECT 1', 'EXECUTE p1', 'DEALLOCATE p1', '-- BEGIN\nSELECT 1',
  ]
  const outcomes: string[] = []
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db }) => {
      for (const text of refused) {
        await db.query(text).then(() => { outcomes.push(`ran: ${text}`) }, (err: unknown) => { if (!(err instanceof InboxTransactionError)) outcomes.push(`other error: ${text}: ${String(err)}`) })
      }
      // The callback form gets the refusal through its callback; a config object is read too.
      const viaCallback = await new Promise<unknown>((resolve) => { (db as unknown as pg.ClientBase).query('COMMIT', (err: Error) => { resolve(err) }) })
      if (!(viaCallback instanceof InboxTransactionError)) outcomes.push('callback form not refused')
      await db.query({ text: 'ROLLBACK' }).then(() => { outcomes.push('config object ran') }, () => {})
      t.throws(() => { (db as unknown as pg.PoolClient).release() }, /the inbox releases the client/, 'a handler cannot release the client')
    })
  t.equal((await router.dispatch([ev('hard-bounced', 3)])).outcomes[0]!.status, 'failed', 'a handler that swallowed the refusals still fails its event')
  t.same(outcomes, [], 'every transaction end refused, never run')
  t.same(await rows(effects), [], 'and its transaction rolled back')

  const nested = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db }) => { for (const text of allowed) await db.query(text) })
  const report = await nested.dispatch([ev('hard-bounced', 4)])
  t.equal(report.outcomes[0]!.status, 'handled', 'savepoints, prepared statements and SQL-looking data are allowed')
  t.same(await rows(effects), ['ROLLBACK', 'a; COMMIT', 'nested'], 'committed with the mark, the rolled-back savepoint\'s row gone')
})

t.test('a ROLLBACK that gets past the client\'s check is still caught: not marked, not acknowledged, not released', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool, table: `seen_${n++}`, transactional: true })
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ('before')`)
      // A Query whose text reads as harmless when checked and is ROLLBACK when sent.
      await new Promise((resolve, reject) => {
        const query = new pg.Query('ROLLBACK', undefined, (err: Error | undefined) => { if (err != null) reject(err); else resolve(undefined) })
        let reads = 0
        Object.defineProperty(query, 'text', { get: () => reads++ === 0 ? 'SELECT 1' : 'ROLLBACK' })
        ;(db as unknown as pg.ClientBase).query(query)
      })
      await db.query(`INSERT INTO ${effects} (what) VALUES ('after, outside any transaction')`)
    })
  const event = ev('hard-bounced', 5)
  const report = await router.dispatch([event])
  const outcome = report.outcomes[0]!
  t.equal(outcome.status, 'failed', 'not acknowledged (on the old code: handled)')
  t.ok(outcome.status === 'failed' && outcome.error instanceof InboxTransactionError, 'an InboxTransactionError, not a store error')
  t.match(outcome, { error: { reason: 'transaction_ended', fingerprint: eventFingerprint(event), message: /A handler ended the transaction the inbox opened.*neither marked done nor acknowledged.*SAVEPOINT/ } })
  t.same(await rows(effects), ['after, outside any transaction'], 'the first insert rolled back; what the handler wrote after is its own')
  t.same(await store.has([eventFingerprint(event)]), [false], 'no done mark')
  t.same(await store.claim([eventFingerprint(event)], 30), ['processing'], 'the claim is kept to expire, not released')
})

t.test('Kysely (transaction: { run, query }): a handler that runs ROLLBACK through its transaction fails the event, nothing marked', async (t) => {
  const effects = await effectsTable()
  const db = new Kysely<Record<string, { what: string }>>({ dialect: new PostgresDialect({ pool: server.pool({ max: 3 }) }) })
  t.teardown(async () => { await db.destroy() })
  const store = postgresSeenEvents<Transaction<Record<string, { what: string }>>>({
    pool,
    table: `seen_${n++}`,
    transaction: {
      run: async (work) => await db.transaction().execute(work),
      query: async (trx, text, values) => await trx.executeQuery(CompiledQuery.raw(text, values)),
    },
  })
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db: trx }) => {
      await trx.insertInto(effects).values({ what: 'effect' }).execute()
      await trx.executeQuery(CompiledQuery.raw('ROLLBACK'))
    })
  const event = ev('hard-bounced', 6)
  const report = await router.dispatch([event])
  t.equal(report.outcomes[0]!.status, 'failed', 'not acknowledged (on the old code: handled, the mark auto-committed alone)')
  t.match(report.outcomes[0], { error: { name: 'InboxTransactionError', reason: 'transaction_ended' } })
  t.same(await rows(effects), [])
  t.same(await store.has([eventFingerprint(event)]), [false])
})

t.test('context.db used after the handler settled, while the next event runs (pool max 1): refused naming the event, never run in the next event\'s work; that event fails, the next one stands', async (t) => {
  const effects = await effectsTable()
  const store = postgresSeenEvents({ pool: server.pool({ max: 1 }), table: `seen_${n++}`, transactional: true })
  let late: Promise<unknown> | undefined
  let startLate: () => void = () => {}
  const bStarted = new Promise<void>((resolve) => { startLate = resolve })
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (event, { db }) => {
      if (event.requestId === 'req-7') {
        // Fired and forgotten: runs once the next event's handler is running.
        void bStarted.then(() => { late = db.query(`INSERT INTO ${effects} (what) VALUES ('A, late')`).then(() => 'ran', (err: unknown) => err) })
        await db.query(`INSERT INTO ${effects} (what) VALUES ('A')`)
        return
      }
      startLate()
      await until(() => late !== undefined, 'the late insert')
      await late
      await db.query(`INSERT INTO ${effects} (what) VALUES ('B')`)
    })
  const a = ev('hard-bounced', 7)
  const b = ev('hard-bounced', 8)
  const report = await router.dispatch([a, b])
  // A's work is not what its handler meant (a statement of it was refused) and it is not committed
  // yet (the group commits after B): A fails, unmarked; B runs again without it and commits.
  t.same(report.outcomes.map((o) => o.status), ['failed', 'handled'])
  t.match(report.outcomes[0], { error: { name: 'InboxTransactionError', reason: 'used_after_handler', fingerprint: eventFingerprint(a) } })
  const result = await late
  t.ok(result instanceof InboxTransactionError, 'the late call was refused (on the old code it ran, in the next event\'s transaction)')
  t.match(result, { reason: 'used_after_handler', fingerprint: eventFingerprint(a), message: new RegExp(`context.db of event ${eventFingerprint(a)} was used after the event's handlers settled.*Await every query`) })
  t.same(await rows(effects), ['B'], 'A rolled back, B once')
  t.same(await store.has([eventFingerprint(a), eventFingerprint(b)]), [false, true])
})

t.test('context.db used after the handler settled, while the commit is under way: refused; the event stands with the work its handler awaited', async (t) => {
  const effects = await effectsTable()
  const seen = `seen_${n++}`
  const store = postgresSeenEvents({ pool, table: seen, transactional: true })
  // Holds the event's row locked from another connection, so the done mark (and the commit with it) waits until the late call was made.
  const locker = await pool.connect()
  t.teardown(() => { locker.release() })
  let late: Promise<unknown> | undefined
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db, fingerprint }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ('A')`)
      await locker.query('BEGIN')
      await locker.query(`SELECT 1 FROM ${seen} WHERE fingerprint = $1 FOR UPDATE`, [fingerprint])
      setTimeout(() => {
        late = db.query(`INSERT INTO ${effects} (what) VALUES ('A, late')`).then(() => 'ran', (err: unknown) => err)
        void late.then(async () => await locker.query('COMMIT'))
      }, 0)
    })
  const event = ev('hard-bounced', 12)
  const report = await router.dispatch([event])
  t.equal(report.outcomes[0]!.status, 'handled', 'the commit was sent before the late call: the event stands')
  t.match(await late, { reason: 'used_after_handler' }, 'the late call itself was refused, never run (on the old code it was queued into the transaction)')
  t.same(await rows(effects), ['A'], 'what the handler awaited committed; the late insert never ran')
  t.same(await store.has([eventFingerprint(event)]), [true], 'marked done with it')
})

t.test('handlerTimeout: a handler that never returns (pool max 1) is rolled back, its connection given back, its claim released, 503; later deliveries work', async (t) => {
  const effects = await effectsTable()
  const own = server.pool({ max: 1 })
  const store = postgresSeenEvents({ pool: own, table: `seen_${n++}`, transactional: true, handlerTimeout: 300 })
  let signal: AbortSignal | undefined
  let stuckDb: pg.PoolClient | undefined
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, context) => {
      signal = context.signal
      stuckDb = context.db
      await context.db.query(`INSERT INTO ${effects} (what) VALUES ('stuck')`)
      await new Promise(() => {})
    })
    .on('delivered', async (_event, { db }) => { await db.query(`INSERT INTO ${effects} (what) VALUES ('later')`) })
  const stuck = ev('hard-bounced', 9)
  const report = await settlesWithin(router.dispatch([stuck]), 15_000, 'the delivery with a handler that never returns')
  const outcome = report.outcomes[0]!
  t.ok(outcome.status === 'failed' && outcome.error instanceof HandlerTimeoutError && outcome.error instanceof ReplayStoreError, 'HandlerTimeoutError, a ReplayStoreError: 503 with Retry-After')
  t.match(outcome, { error: { fingerprint: eventFingerprint(stuck), message: /ran past handlerTimeout \(300 ms\).*rolled back.*claim released/ } })
  t.equal(signal?.aborted, true, 'the running handler sees context.signal aborted')
  const activity = await pool.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = \'idle in transaction\'')
  t.equal(activity.rows[0].n, 0, 'no connection left idle in transaction')
  t.same(await rows(effects), [], 'its insert rolled back')
  t.match(await store.claim([eventFingerprint(stuck)], 30), [{ fingerprint: eventFingerprint(stuck) }], 'its claim was released: claimable again at once')
  await t.rejects(stuckDb!.query('SELECT 1'), { name: 'InboxTransactionError', reason: 'used_after_handler', message: /after the handler deadline \(handlerTimeout, 300 ms\) passed/ }, 'the stuck handler\'s context.db refuses every call')
  for (let i = 0; i < 3; i++) {
    const later = await settlesWithin(router.dispatch([ev('delivered', 100 + i)]), 15_000, 'a later delivery on the pool of one')
    t.equal(later.outcomes[0]!.status, 'handled', `later delivery ${i + 1} handled on the pool of one`)
  }
  t.same(await rows(effects), ['later', 'later', 'later'])
})

t.test('handlerTimeout: a handler stuck in a statement (pool max 1): the server process is ended, its locks go, later deliveries work', async (t) => {
  const effects = await effectsTable()
  const own = server.pool({ max: 1 })
  const store = postgresSeenEvents({ pool: own, table: `seen_${n++}`, transactional: true, handlerTimeout: 300, timeout: 500 })
  let sleeping: Promise<unknown> | undefined
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db }) => {
      await db.query(`INSERT INTO ${effects} (what) VALUES ('stuck')`)
      sleeping = db.query('SELECT pg_sleep(3600)').catch((err: unknown) => err)
      await sleeping
    })
    .on('delivered', async (_event, { db }) => { await db.query(`INSERT INTO ${effects} (what) VALUES ('later')`) })
  const report = await settlesWithin(router.dispatch([ev('hard-bounced', 10)]), 15_000, 'the delivery stuck in pg_sleep')
  t.ok(report.outcomes[0]!.status === 'failed' && report.outcomes[0]!.error instanceof HandlerTimeoutError)
  t.ok(await settlesWithin(sleeping!, 15_000, 'the handler\'s statement') instanceof Error, 'the handler\'s statement failed with its connection')
  let left = 1
  for (let i = 0; i < 500 && left > 0; i++) {
    left = (await pool.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE \'SELECT pg_sleep(3600)%\'')).rows[0].n
    if (left > 0) await new Promise((resolve) => setTimeout(resolve, 10))
  }
  t.equal(left, 0, 'the sleeping server process was ended')
  const later = await settlesWithin(router.dispatch([ev('delivered', 110)]), 15_000, 'a later delivery')
  t.equal(later.outcomes[0]!.status, 'handled')
  t.same(await rows(effects), ['later'], 'the stuck transaction rolled back')
})

t.test('handlerTimeout on your own transaction (Kysely): rolled back, 503, the claim released', async (t) => {
  const effects = await effectsTable()
  const db = new Kysely<Record<string, { what: string }>>({ dialect: new PostgresDialect({ pool: server.pool({ max: 1 }) }) })
  t.teardown(async () => { await db.destroy() })
  const store = postgresSeenEvents<Transaction<Record<string, { what: string }>>>({
    pool,
    table: `seen_${n++}`,
    handlerTimeout: 300,
    transaction: {
      run: async (work) => await db.transaction().execute(work),
      query: async (trx, text, values) => await trx.executeQuery(CompiledQuery.raw(text, values)),
    },
  })
  let hang = true
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('hard-bounced', async (_event, { db: trx }) => {
      await trx.insertInto(effects).values({ what: hang ? 'stuck' : 'effect' }).execute()
      if (hang) await new Promise(() => {})
    })
  const event = ev('hard-bounced', 11)
  const report = await settlesWithin(router.dispatch([event]), 15_000, 'the delivery')
  t.ok(report.outcomes[0]!.status === 'failed' && report.outcomes[0]!.error instanceof HandlerTimeoutError)
  t.same(await rows(effects), [])
  hang = false
  t.equal((await settlesWithin(router.dispatch([structuredClone(event)]), 15_000, 'the retry')).outcomes[0]!.status, 'handled', 'the retry runs at once (claim released) on the pool of one')
  t.same(await rows(effects), ['effect'])
})

t.test('handlerTimeout is validated once, naming the option', async (t) => {
  for (const handlerTimeout of [0, -1, 1.5, '1000', 2 ** 31, Number.NaN]) {
    t.throws(() => postgresSeenEvents({ pool, transactional: true, handlerTimeout: handlerTimeout as number }), { name: 'TypeError', message: /handlerTimeout must be a positive integer number of milliseconds/ }, String(handlerTimeout))
  }
  t.doesNotThrow(() => postgresSeenEvents({ pool, transactional: true, handlerTimeout: 120_000 }))
})

t.test('a claim lost meanwhile is still told apart from a transaction a handler ended', async (t) => {
  const seen = `seen_${n++}`
  const store = postgresSeenEvents({ pool, table: seen, transactional: true })
  const [claim] = await store.claim(['lost'], 30) as [StoreClaim]
  await pool.query(`UPDATE ${seen} SET token = 'theirs' WHERE fingerprint = 'lost'`)
  await t.rejects(store.runInTransaction(claim, async () => {}), { name: 'ReplayStoreError', message: /another caller took it/ })
})
