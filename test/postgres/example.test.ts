// The PostgreSQL inbox example of docs/inbox.md ("PostgreSQL in twenty lines"), as written there,
// against a real server: a Fastify receiver whose hard-bounced and complained events write
// suppressions in the event's transaction. A resent copy, re-signed, writes nothing more.
import t from 'tap'
import pg from 'pg'
import Fastify from 'fastify'
import mailchannelsWebhooks from '../../src/fastify/index.js'
import { WebhookEventRouter } from '../../src/index.js'
import { postgresSeenEvents } from '../../src/postgres/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { startPostgres } from '../helpers/postgres.js'

const server = await startPostgres()
t.teardown(async () => { await server.close() })

t.test('the fifteen-line example: each suppression once, a resend skipped', async (t) => {
  const admin = server.pool()
  await admin.query('CREATE TABLE suppressions (email text PRIMARY KEY, reason text NOT NULL)')
  const keys = generateSigningKeyPair()
  process.env.MAILCHANNELS_CUSTOMER_HANDLE = 'acct_1'

  // --- docs/inbox.md, as written (the pool's error listener and publicKey are the test's) ---
  const pool = new pg.Pool({ connectionString: server.url })
  const router = new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool, transactional: true }) })
    .on(['hard-bounced', 'complained'], async (event, { db }) => {
      // db: this event's transaction; the event's done mark commits with this row, or neither does
      await db.query('INSERT INTO suppressions (email, reason) SELECT unnest($1::text[]), $2 ON CONFLICT DO NOTHING',
        [event.recipients ?? [], event.event])
    })

  const app = Fastify()
  await app.register(mailchannelsWebhooks, { path: '/webhooks/mailchannels', customerHandles: [process.env.MAILCHANNELS_CUSTOMER_HANDLE!], handlers: router, publicKey: keys.publicKey })
  // --- end of the example ---
  t.teardown(async () => { await app.close(); await pool.end() })

  const events = [
    { event: 'hard-bounced', customer_handle: 'acct_1', timestamp: 1700000001, request_id: 'r1', recipients: ['gone@example.com'], status: '5.1.1' },
    { event: 'complained', customer_handle: 'acct_1', timestamp: 1700000002, request_id: 'r2', recipients: ['angry@example.com'] },
    { event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000003, request_id: 'r3', recipients: ['fine@example.com'] },
  ]
  const send = async (created: number): Promise<{ status: number, body: unknown }> => {
    const signed = signWebhook({ privateKey: keys.privateKey, events, created })
    const res = await app.inject({ method: 'POST', url: '/webhooks/mailchannels', headers: signed.headers, payload: signed.body })
    return { status: res.statusCode, body: res.json() }
  }
  const now = Math.floor(Date.now() / 1000)
  t.equal((await send(now)).status, 200)
  t.equal((await send(now - 5)).status, 200, 'a re-signed resend is acknowledged')
  const { rows } = await admin.query('SELECT email, reason FROM suppressions ORDER BY email')
  t.same(rows, [{ email: 'angry@example.com', reason: 'complained' }, { email: 'gone@example.com', reason: 'hard-bounced' }])
  const seen = await admin.query('SELECT count(*)::int AS n FROM mailchannels_webhooks_seen_events WHERE done')
  t.equal(seen.rows[0].n, 2, 'two done marks (the delivered event has no handler)')
})
