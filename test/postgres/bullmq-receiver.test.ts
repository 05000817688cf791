// The PostgreSQL store takes part like the others: a BullMQ worker and a receiver (the fetch
// receiver with `handlers`) run routers on one transactional PostgreSQL store table, fed the
// same events (queued, and delivered directly): each event's row lands once.
import t from 'tap'
import type pg from 'pg'
import { bullmqEnqueue, createWebhookEventWorker, type WebhookEventJobContext } from '../../src/bullmq/index.js'
import { WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { noopLogger } from '../../src/logger.js'
import { postgresSeenEvents } from '../../src/postgres/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { createWebhookHandler } from '../../src/web/index.js'
import { startRedisServer, waitFor } from '../replay/helpers/redis-server.js'
import { startPostgres } from '../helpers/postgres.js'
import { CUSTOMER, sampleEvents, testQueue } from '../bullmq/helpers.js'

// The longest a condition may take to hold: waitFor returns as soon as it holds, so only a
// failing run waits this long; a busy machine (four test files on two cores) must not fail it.
const WAIT_MS = 120_000

const redis = await startRedisServer()
t.teardown(() => redis.close())
const postgres = await startPostgres()
t.teardown(() => postgres.close())
const pool = postgres.pool()

t.test('a BullMQ worker and a receiver on one PostgreSQL store: every event once', async (t) => {
  await pool.query('CREATE TABLE effects (fingerprint text NOT NULL, via text NOT NULL)')
  const seenEvents = postgresSeenEvents({ pool, transactional: true })
  const worker = new WebhookEventRouter<WebhookEventJobContext, pg.PoolClient>({ seenEvents })
    .on('*', async (_event, { db, fingerprint, job }) => {
      await db.query('INSERT INTO effects (fingerprint, via) VALUES ($1, $2)', [fingerprint, `job ${job.id}`])
    })
  const { queue } = await testQueue(t, redis)
  const w = createWebhookEventWorker(worker, { queueName: queue.name, connection: { host: '127.0.0.1', port: redis.port }, drainDelay: 1, concurrency: 4 })
  t.teardown(() => w.close())

  const direct = new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool: postgres.pool(), transactional: true }) })
    .on('*', async (_event, { db, fingerprint }) => {
      await db.query('INSERT INTO effects (fingerprint, via) VALUES ($1, $2)', [fingerprint, 'receiver'])
    })
  const keys = generateSigningKeyPair()
  const handler = createWebhookHandler({ publicKey: keys.publicKey, customerHandles: [CUSTOMER], handlers: direct })

  const events = sampleEvents(12)
  await bullmqEnqueue(queue)(events, { keyId: 'mckey', log: noopLogger })
  // The same events delivered to the receiver meanwhile, until acknowledged.
  const signed = signWebhook({ privateKey: keys.privateKey, events })
  let status = 0
  for (let i = 0; i < 50 && status !== 200; i++) {
    status = (await handler(new Request('http://127.0.0.1/', { method: 'POST', headers: signed.headers, body: signed.body }))).status
    if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.equal(status, 200, 'the receiver acknowledged the delivery')
  t.ok(await waitFor(async () => (await queue.getJobCounts('completed')).completed === 12, WAIT_MS), 'every job completed')
  const { rows } = await pool.query('SELECT fingerprint, count(*)::int AS n FROM effects GROUP BY fingerprint')
  t.equal(rows.length, 12, 'no event lost')
  t.ok(rows.every((r) => r.n === 1), 'every event exactly once, whichever path ran it')
  t.same(new Set(rows.map((r) => r.fingerprint)), new Set(events.map(eventFingerprint)))
})
