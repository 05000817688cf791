// Every dead-letter store on its real backend: memory, a real redis-server, the local six-node
// Redis Cluster, a real PostgreSQL server and a SQLite file hold the same contract.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { MemoryDeadLetterStore, RedisDeadLetterStore, WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { postgresDeadLetters, postgresSeenEvents } from '../../src/postgres/index.js'
import { ev } from '../dispatch/helpers/events.js'
import { sqliteDeadLetters, type SqliteDeadLetterStore } from '../../src/sqlite/index.js'
import { startRedisServer } from '../replay/helpers/redis-server.js'
import { clusterUnavailable, startRedisCluster } from '../helpers/redis-cluster.js'
import { startPostgres } from '../helpers/postgres.js'
import { behavesAsADeadLetterStore } from './helpers/contract.js'

// Semantics, not failure handling: generous timeouts, so a loaded machine cannot fail a call.
const GENEROUS = { commandTimeout: 5000, maxRetriesPerRequest: 1 }

let n = 0

t.test('memory', async (t) => {
  await behavesAsADeadLetterStore(t, async () => new MemoryDeadLetterStore())
  t.test('options are checked', async (t) => {
    t.throws(() => new MemoryDeadLetterStore({ max: 0 }), /max must be a positive integer/)
    t.throws(() => new MemoryDeadLetterStore({ ttl: 1.5 }), /ttl must be a positive integer/)
  })
})

t.test('Redis', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client(GENEROUS)
  await behavesAsADeadLetterStore(t, async () => new RedisDeadLetterStore(client, { prefix: `{dl-${n++}}:`, timeout: 10_000 }))
  t.test('a prefix without a hash tag is refused', async (t) => {
    t.throws(() => new RedisDeadLetterStore(client, { prefix: 'dl:', timeout: 10_000 }), /hash tag/)
  })
})

const reason = clusterUnavailable()
t.test('Redis Cluster', { skip: reason ?? false }, async (t) => {
  const cluster = await startRedisCluster()
  t.teardown(async () => { await cluster.close() })
  const client = await cluster.client({ redisOptions: { commandTimeout: 5000, maxRetriesPerRequest: 1 } })
  for (const waitForReplicas of [0, 1]) {
    t.test(`waitForReplicas ${waitForReplicas}`, async (t) => {
      await behavesAsADeadLetterStore(t, async () => new RedisDeadLetterStore(client, { prefix: `{dl-${n++}}:`, timeout: 10_000, waitForReplicas, waitTimeout: 5000 }))
    })
  }
})

t.test('PostgreSQL', async (t) => {
  const server = await startPostgres()
  t.teardown(async () => { await server.close() })
  const pool = server.pool()
  await behavesAsADeadLetterStore(t, async () => postgresDeadLetters({ pool, table: `dead_letters_${n++}` }))

  t.test('with the transactional inbox: a retried dead letter is deleted in the transaction of its effect', async (t) => {
    await pool.query('CREATE TABLE dl_effects (fingerprint text NOT NULL)')
    const store = postgresDeadLetters({ pool, table: 'dl_inbox' })
    let broken = true
    const router = new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool, table: 'dl_seen', transactional: true }), deadLetters: { store, after: 1 } })
      .on('hard-bounced', async (_event, { db, fingerprint }) => {
        await db.query('INSERT INTO dl_effects (fingerprint) VALUES ($1)', [fingerprint])
        if (broken) throw new Error('constraint')
      })
    const event = ev('hard-bounced', 77)
    const fp = eventFingerprint(event)
    t.equal((await router.dispatch([event])).parked, 1)
    broken = false
    // The deletion after the commit fails: the one in the handlers' transaction did it already.
    store.resolveRetry = async () => { throw new Error('resolveRetry must not be needed') }
    t.same(await router.retryDeadLetter(fp), { status: 'handled', fingerprint: fp })
    t.equal((await pool.query('SELECT count(*)::int AS n FROM dl_effects')).rows[0].n, 1)
    t.equal(await store.get(fp), undefined)
  })
})

t.test('SQLite file', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-dl-'))
  const stores: SqliteDeadLetterStore[] = []
  t.teardown(() => { for (const s of stores) s.close(); rmSync(dir, { recursive: true, force: true }) })
  await behavesAsADeadLetterStore(t, async () => {
    const store = sqliteDeadLetters({ path: path.join(dir, `dl-${n++}.sqlite`) })
    stores.push(store)
    return store
  })
  t.test('an in-memory path is refused unless allowed', async (t) => {
    t.throws(() => sqliteDeadLetters({ path: ':memory:' }), /in-memory/)
  })
})
