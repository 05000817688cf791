// Ack fast, process later: a worker. Run two (or more) of these next to ./receiver.ts; each
// takes jobs from the queue and runs the router's handlers. BullMQ retries a job whose handler
// throws (10 attempts, exponential backoff by default); a job of a worker that died is picked up
// by another; the Redis seen-events store keeps a job run again from repeating a handled event.
// How to run it against the local sandbox: README.md in this folder.
import { Redis } from 'ioredis'
import { pino } from 'pino'
import { RedisClaimStore, WebhookEventRouter } from 'mailchannels-webhooks'
import { createWebhookEventWorker, type WebhookEventJobContext } from 'mailchannels-webhooks/bullmq'

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const log = pino({ level: 'warn' })

// The seen-events store's client fails fast, like the stores recommend.
const redis = new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 })
redis.on('error', () => {})

const router = new WebhookEventRouter<WebhookEventJobContext>({ seenEvents: new RedisClaimStore(redis) })
  .on(['hard-bounced', 'complained', 'unsubscribed'], async (event, { fingerprint }) => {
    // Your side effect here, idempotent by `fingerprint` (e.g. a unique index) for the one case
    // the store cannot cover: a crash after the effect and before the event is marked done.
    // Addresses come from outside: JSON escapes any control character before it reaches a terminal.
    console.log(`suppress ${JSON.stringify(event.recipients ?? [])} (${event.event}) ${fingerprint} pid=${process.pid}`)
  })
  .on('*', (event, { fingerprint, job }) => {
    console.log(`${event.event} ${fingerprint} pid=${process.pid} attempt=${job.attemptsMade + 1}`)
  })

const worker = createWebhookEventWorker(router, {
  connection: { url: redisUrl }, // BullMQ makes its own connections for a worker (maxRetriesPerRequest: null)
  concurrency: 10,
  log,
})
await worker.waitUntilReady()
console.log(`Worker ready pid=${process.pid}`)

// Finish the running jobs, then stop; a job cut short by a crash is run again by another worker.
process.on('SIGTERM', () => {
  void worker.close().then(() => { redis.disconnect() })
})
