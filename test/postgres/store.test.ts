// PostgresSeenEventsStore against a real PostgreSQL server started for this file: the shared
// seen-events contract (as the memory and Redis stores), several instances on one database,
// the schema it creates or the migration it prints, expiry and purging, and the server going away.
import t from 'tap'
import pg from 'pg'
import { ReplayStoreError, type StoreClaim, type StoreClaimResult } from '../../src/index.js'
import { PostgresSeenEventsStore, postgresSeenEvents, postgresSeenEventsSchema } from '../../src/postgres/index.js'
import { startPostgres } from '../helpers/postgres.js'
import { behavesAsASeenStore } from '../replay/helpers/seen-store-contract.js'

const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'
const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

const server = await startPostgres()
t.teardown(async () => { await server.close() })
const pool = server.pool({ max: 20 })
let n = 0

t.test('the seen-events contract', async (t) => {
  await behavesAsASeenStore(t, async () => postgresSeenEvents({ pool, table: `contract_${n++}` }))
})

t.test('three instances (own pools) on one database: of 20 concurrent claimers of 50 events each event is claimed once', async (t) => {
  const table = `instances_${n++}`
  const stores = [0, 1, 2].map(() => postgresSeenEvents({ pool: server.pool({ max: 8 }), table }))
  const fps = Array.from({ length: 50 }, (_, i) => `e${i}`)
  const results = await Promise.all(Array.from({ length: 20 }, async (_, k) => await stores[k % 3]!.claim(k % 2 === 0 ? fps : [...fps].reverse(), 30)))
  const won = results.flat().filter(isClaim)
  t.same(won.map((c) => c.fingerprint).sort(), [...fps].sort(), 'every fingerprint claimed exactly once over all instances')
  // Completed on one instance, done everywhere.
  await stores[0]!.complete(won)
  t.same(await stores[2]!.claim(fps.slice(0, 3), 30), ['done', 'done', 'done'])
})

t.test('one statement per call, whatever the number of events', async (t) => {
  const counting = server.pool({ max: 2 })
  const store = postgresSeenEvents({ pool: counting, table: `roundtrips_${n++}` })
  await store.createSchema()
  let queries = 0
  const query = counting.query.bind(counting)
  counting.query = ((config: unknown) => { queries++; return query(config as string) }) as typeof counting.query
  const fps = Array.from({ length: 1000 }, (_, i) => `r${i}`)
  const claims = (await store.claim(fps, 30)).filter(isClaim)
  t.equal(claims.length, 1000)
  await store.extend(claims, 30)
  await store.complete(claims)
  t.same(await store.has(fps).then((r) => r.every(Boolean)), true)
  t.equal(queries, 4, `claim, extend, complete and has: one query each for 1,000 events (${queries})`)
})

t.test('the schema: created on first use (safe from many instances at once), or printed for a migration', async (t) => {
  const table = `created_${n++}`
  const stores = Array.from({ length: 6 }, () => postgresSeenEvents({ pool, table }))
  await Promise.all(stores.map(async (s) => await s.claim(['x'], 30)))
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM ' + table)
  t.equal(rows[0].n, 1)

  const sql = postgresSeenEventsSchema({ table: 'app.webhook_seen' })
  t.match(sql, /CREATE TABLE IF NOT EXISTS "app"\."webhook_seen"/)
  await pool.query('CREATE SCHEMA app')
  await pool.query(sql)
  const migrated = postgresSeenEvents({ pool, table: 'app.webhook_seen', createSchema: false })
  t.ok(isClaim((await migrated.claim(['y'], 30))[0]), 'works on the migrated table')
  const missing = postgresSeenEvents({ pool, table: 'no_such_table', createSchema: false })
  await t.rejects(missing.claim(['z'], 30), { name: 'ReplayStoreError', operation: 'claim', message: /does not exist/ })
})

t.test('a done mark lives ttl, then is forgotten and purged', async (t) => {
  const table = `ttl_${n++}`
  const store = postgresSeenEvents({ pool, table, ttl: 1 })
  await store.add(['old'])
  t.same(await store.has(['old']), [true])
  await sleep(1200)
  t.same(await store.has(['old']), [false], 'past its ttl')
  const [again] = await store.claim(['old'], 30)
  t.ok(isClaim(again), 'an expired done mark can be claimed again')
  await store.add(['gone'])
  await sleep(1200)
  t.ok(await store.purgeExpired() >= 1, 'expired rows purged')
  const { rows } = await pool.query(`SELECT fingerprint FROM ${table} ORDER BY fingerprint`)
  t.same(rows.map((r) => r.fingerprint), ['old'], 'the live claim stays')
})

t.test('the server goes away under the store: calls reject with ReplayStoreError, the process lives, it recovers', async (t) => {
  const own = server.pool({ max: 4, idleTimeoutMillis: 60_000 })
  const store = postgresSeenEvents({ pool: own, table: `down_${n++}`, timeout: 2000 })
  const [held] = await store.claim(['held'], 30)
  if (!isClaim(held)) return t.fail('claimed')
  await store.has(['warm-up-more-idle-clients'])
  // A client your own code holds checked out of the same pool (no pool listener on it then).
  const held2 = await own.connect()
  await server.stop('kill')
  // Idle and checked-out clients now get an error: without the store's listeners this would crash the process.
  await sleep(200)
  for (const call of [() => store.has(['a']), () => store.add(['a']), () => store.delete(['a']),
    () => store.claim(['a'], 30), () => store.complete([held]), () => store.release([held]), () => store.extend([held], 30)]) {
    const err = await call().then(() => null, (e: unknown) => e)
    t.ok(err instanceof ReplayStoreError, String(err))
  }
  held2.release(true)
  await server.start()
  t.same(await store.claim(['held', 'b'], 30).then((r) => r.map((x) => isClaim(x) ? 'claimed' : x)), ['processing', 'claimed'], 'the claim survived the crash (it was committed)')
})

t.test('a pool that never answers: the call fails within timeout', async (t) => {
  // A server that accepts the connection and says nothing (a frozen database behind a proxy).
  const net = await import('node:net')
  const sockets = new Set<import('node:net').Socket>()
  const silent = net.createServer((socket) => { sockets.add(socket) })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); silent.close() })
  const port = (silent.address() as { port: number }).port
  const hung = new pg.Pool({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`, connectionTimeoutMillis: 1500 })
  hung.on('error', () => {})
  t.teardown(async () => { await hung.end().catch(() => {}) })
  const store = postgresSeenEvents({ pool: hung, createSchema: false, timeout: 300 })
  const started = Date.now()
  await t.rejects(store.claim(['a'], 30), { name: 'ReplayStoreError', message: /did not answer claim within 300 ms/ })
  t.ok(Date.now() - started < 2000)
})

t.test('options are validated', async (t) => {
  t.throws(() => postgresSeenEvents({} as never), { name: 'TypeError', message: /pool must be a node-postgres Pool/ })
  t.throws(() => postgresSeenEvents({ pool, table: 'x; DROP TABLE y' }), { name: 'TypeError', message: /table must be a PostgreSQL identifier/ })
  t.throws(() => postgresSeenEvents({ pool, ttl: 0 }), { name: 'TypeError', message: /ttl/ })
  t.throws(() => postgresSeenEvents({ pool, timeout: 0 }), { name: 'TypeError', message: /timeout must be a positive integer number of milliseconds/ })
  t.throws(() => postgresSeenEvents({ pool, purgeInterval: -1 }), { name: 'TypeError', message: /purgeInterval/ })
  t.throws(() => postgresSeenEvents({ pool, transactional: true, transaction: { run: async (w: any) => await w(1), query: async () => [] } } as never), { name: 'TypeError', message: /not both/ })
  t.throws(() => postgresSeenEvents({ pool, transaction: {} as never }), { name: 'TypeError', message: /transaction must be an object with run/ })
  t.ok(postgresSeenEvents({ pool }) instanceof PostgresSeenEventsStore)
  t.equal(typeof (postgresSeenEvents({ pool }) as any).runInTransaction, 'undefined', 'not transactional unless asked')
  t.equal(typeof postgresSeenEvents({ pool, transactional: true }).runInTransaction, 'function')
})

t.test('claims, renewals and releases over 300 shared rows in shuffled orders, 8 statements at once: no deadlock', async (t) => {
  const table = `lock_order_${n++}`
  const own = server.pool({ max: 10 })
  const store = postgresSeenEvents({ pool: own, table, timeout: 30_000 })
  const fps = Array.from({ length: 300 }, (_, i) => `f${String(i).padStart(3, '0')}`)
  const shuffled = <X>(xs: readonly X[]): X[] => {
    const out = [...xs]
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1))
      ;[out[i], out[j]] = [out[j]!, out[i]!]
    }
    return out
  }
  const failures: string[] = []
  for (let round = 0; round < 16; round++) {
    const claims = (await store.claim(fps, 600)).filter(isClaim)
    t.equal(claims.length, fps.length, `round ${round}: all claimed`)
    await Promise.all(Array.from({ length: 8 }, async (_, k) => {
      try {
        // Renewals, claims (which lock every conflicting row) and, last in each round, a release.
        if (k < 5) await store.extend(shuffled(claims), 600)
        else if (k < 7) await store.claim(shuffled(fps), 600)
        else await store.release(shuffled(claims))
      } catch (err) {
        failures.push(`round ${round}, statement ${k}: ${(err as Error).message}`)
      }
    }))
    await store.delete(shuffled(fps))
  }
  t.same(failures, [], 'no statement failed (on the old code 4-7 rounds of 16 deadlocked)')
})

t.test('two tables whose names share their first 50 characters both get their expiry index; short names keep theirs', async (t) => {
  const prefix = 'a'.repeat(50)
  const tables = [`${prefix}_one`, `${prefix}_two`, `${prefix}_three_x_y`]
  for (const table of tables) await postgresSeenEvents({ pool, table }).createSchema()
  const { rows } = await pool.query('SELECT tablename, indexname FROM pg_indexes WHERE tablename = ANY($1) AND indexdef LIKE \'%(expires_at)\'', [tables])
  t.same(rows.map((r) => r.tablename as string).sort(), [...tables].sort(), 'each long table has its own expiry index (on the old code only the first)')
  t.equal(new Set(rows.map((r) => r.indexname as string)).size, tables.length, 'under distinct names')
  for (const r of rows) t.ok((r.indexname as string).length <= 63, 'never cut by PostgreSQL')
  t.match(postgresSeenEventsSchema({ table: `${prefix}_one` }), /CREATE INDEX IF NOT EXISTS "a{30}_[0-9a-f]{21}_expires_at"/, 'the printed migration names it the same')
  await postgresSeenEvents({ pool, table: 'short_table' }).createSchema()
  const short = await pool.query('SELECT indexname FROM pg_indexes WHERE tablename = \'short_table\' AND indexdef LIKE \'%(expires_at)\'')
  t.same(short.rows.map((r) => r.indexname), ['short_table_expires_at'], 'a table of up to 50 characters keeps the index name it always had')
})
