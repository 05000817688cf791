// Ack fast, process later: the receiver. It verifies each delivery, adds its events to a BullMQ
// queue (one job per event) and answers MailChannels as soon as Redis has them; the workers
// (./worker.ts, as many processes as you like) run the handlers.
// How to run it against the local sandbox: README.md in this folder.
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import mailchannelsWebhooks from 'mailchannels-webhooks/fastify'
import { bullmqEnqueue, createWebhookEventQueue } from 'mailchannels-webhooks/bullmq'

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
// The producer fails fast: while Redis is down a delivery is answered 503 at once (MailChannels
// retries it) instead of waiting for a reconnect.
const connection = new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 })
connection.on('error', () => {}) // reconnects on its own; a failed enqueue is logged by the plugin

const app = Fastify({ logger: { level: 'warn' }, requestTimeout: 30_000, connectionTimeout: 60_000 })
// Same queue name and hash-tagged prefix as createWebhookEventWorker's defaults.
const queue = createWebhookEventQueue({ connection, log: app.log })

await app.register(mailchannelsWebhooks, {
  path: '/webhooks/mailchannels', // the plugin declares the route and answers it: 200 { queued: n }, or 503 + Retry-After
  customerHandles: [process.env.MAILCHANNELS_CUSTOMER_HANDLE ?? ''],
  publicKey: process.env.MAILCHANNELS_PUBLIC_KEY || undefined, // optional: else fetched by keyid and cached
  baseUrl: process.env.MAILCHANNELS_BASE_URL || undefined, // where keys are fetched: MailChannels unless set (the local sandbox)
  enqueue: bullmqEnqueue(queue),
})
app.get('/health', async () => ({ ok: true }))

const address = await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 3000) })
console.log(`Listening on ${address}`)

process.on('SIGTERM', () => {
  void app.close().then(async () => { await queue.close(); connection.disconnect() })
})
