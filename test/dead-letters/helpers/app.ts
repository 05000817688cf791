// An application process for the dead-letter crash and concurrency tests: a router with
// `deadLetters` on Redis (REDIS_PORT) or on transactional PostgreSQL (DATABASE_URL), whose handler
// records one effect per event (Redis INCR, or a row inserted through context.db) and throws for
// the event whose request_id is POISON unless FIXED=1.
//   ROLE=receiver  a Node HTTP server around createWebhookHandler; prints `listening <port>`.
//   ROLE=retry     reads `go` on stdin, then retryDeadLetter(FP); prints `result <json>`.
// CRASH makes it SIGKILL itself:
//   before-park   a handler failed; killed before the failure is written to the dead-letter store;
//   after-park    the dead letter is written; killed before the event is completed and answered;
//   retry-effect  in a retry, after the handler's effect (its insert), before the commit.
import { Redis } from 'ioredis'
import pg from 'pg'
import { RedisDeadLetterStore, RedisClaimStore, WebhookEventRouter, type DeadLetterStore } from '../../../src/index.js'
import { postgresDeadLetters, postgresSeenEvents } from '../../../src/postgres/index.js'
import { createWebhookHandler } from '../../../src/web/index.js'
import { serveFetchInChild } from '../../helpers/fetch-child-server.js'

const { ROLE = 'receiver', REDIS_PORT, DATABASE_URL, PUBLIC_KEY = '', POISON = '', FIXED = '', CRASH = '', FP = '', AFTER = '2', PREFIX = 'app', CLAIM_LIFETIME = '1', RETRY_LIFETIME = '2' } = process.env
const crash = (): never => { process.kill(process.pid, 'SIGKILL'); throw new Error('unreachable') }
const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

let store: DeadLetterStore
let router: WebhookEventRouter<object, any>
let close: () => Promise<void>

/** The dead-letter store, with the CRASH points around its recordFailure. */
function crashing (inner: DeadLetterStore): DeadLetterStore {
  return new Proxy(inner, {
    get (target, key) {
      const value = Reflect.get(target, key, target) as unknown
      if (key === 'recordFailure') {
        return async (failure: Parameters<DeadLetterStore['recordFailure']>[0]) => {
          if (CRASH === 'before-park') crash()
          const result = await target.recordFailure(failure)
          if (CRASH === 'after-park' && result.parked) crash()
          return result
        }
      }
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}

if (REDIS_PORT !== undefined) {
  const client = new Redis({ port: Number(REDIS_PORT), host: '127.0.0.1', maxRetriesPerRequest: 1, commandTimeout: 5000 })
  store = new RedisDeadLetterStore(client, { prefix: `{${PREFIX}-dl}:`, timeout: 10_000 })
  router = new WebhookEventRouter({ seenEvents: new RedisClaimStore(client, { prefix: `${PREFIX}-seen:`, timeout: 10_000 }), claimLifetime: Number(CLAIM_LIFETIME), deadLetters: { store: crashing(store), after: Number(AFTER), retryLifetime: Number(RETRY_LIFETIME) } })
    .on('*', async (event, { fingerprint }) => {
      await client.incr(`${PREFIX}-effects:${fingerprint}`)
      if (event.requestId === POISON && FIXED !== '1') throw new Error('poison')
      if (ROLE === 'retry') await sleep(200)
    })
  close = async () => { client.disconnect() }
  // The stores refuse to send while the client is still connecting: wait until it is ready.
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve))
} else {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 })
  store = postgresDeadLetters({ pool, table: `${PREFIX}_dl` })
  router = new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool, table: `${PREFIX}_seen`, transactional: true }), claimLifetime: Number(CLAIM_LIFETIME), deadLetters: { store: crashing(store), after: Number(AFTER), retryLifetime: Number(RETRY_LIFETIME) } })
    .on('*', async (event, { db, fingerprint }) => {
      await db.query(`INSERT INTO ${PREFIX}_effects (fingerprint) VALUES ($1)`, [fingerprint])
      if (event.requestId === POISON && FIXED !== '1') throw new Error('poison')
      if (ROLE === 'retry' && CRASH === 'retry-effect') crash()
      if (ROLE === 'retry') await sleep(200)
    })
  close = async () => { await pool.end() }
}

if (ROLE === 'retry') {
  process.stdin.once('data', () => {
    router.retryDeadLetter(FP).then(async (result) => {
      process.stdout.write(`result ${JSON.stringify({ status: result.status })}\n`)
      await close()
      process.exit(0)
    }, (err: unknown) => { process.stdout.write(`error ${String(err)}\n`); process.exit(1) })
  })
  process.stdout.write('ready\n')
} else {
  const handler = createWebhookHandler({ publicKey: PUBLIC_KEY, customerHandles: ['acct_1'], handlers: router })
  const server = serveFetchInChild(handler)
  process.on('SIGTERM', () => { server.close(); void close().then(() => process.exit(0)) })
}
