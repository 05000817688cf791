// `npm start`: a Fastify receiver verifying MailChannels webhooks from an embedded sandbox.
// No API key, no configuration. Ctrl-C to stop (DEMO_DURATION_MS=5000 stops by itself).
import { randomBytes } from 'node:crypto'
import Fastify, { LogController } from 'fastify'
import pino from 'pino'
import pretty from 'pino-pretty'
import mailchannelsWebhooks, { batchesRoute } from '../src/fastify/index.js'
import { MailChannels, type WebhookEvent } from '../src/index.js'
import { createSandbox } from '../src/testing/index.js'

// The sandbox plays MailChannels: it signs deliveries with its own keys, serves them, and
// records every delivery as a webhook batch. Every 5th delivery is tampered with on purpose.
const sandbox = await createSandbox({ rate: 2, batchSize: 4, tamperEvery: 5, retryDelay: 500 })

const logger = pino(pretty({ sync: true, translateTime: 'HH:MM:ss', ignore: 'pid,hostname,reqId' }))
const app = Fastify({
  loggerInstance: logger,
  logController: new LogController({ disableRequestLogging: true }), // our own lines only
  requestTimeout: 30_000, // a slow client cannot hold a request open forever
  connectionTimeout: 60_000,
})
await app.register(mailchannelsWebhooks, {
  customerHandles: [sandbox.customerHandle], // whose deliveries this endpoint accepts
  baseUrl: sandbox.baseUrl, // fetch signing keys from the sandbox (in production: leave it out)
})

const stats = { received: 0, verified: 0, events: 0, rejected: {} as Record<string, number> }

function describe (e: WebhookEvent): string {
  const who = e.recipients?.[0] ?? e.email ?? '?'
  switch (e.event) {
    case 'click': return `click        ${who} -> ${e.url ?? ''}`
    case 'open': return `open         ${who} (${e.ip ?? '?'})`
    case 'hard-bounced':
    case 'soft-bounced':
    case 'dropped': return `${e.event.padEnd(12)} ${who}: ${e.status ?? ''} ${e.reason ?? ''}`
    case 'unknown': return `unknown      ${e.eventName}`
    default: return `${e.event.padEnd(12)} ${who}`
  }
}

app.post('/webhooks', {
  config: { mailchannelsWebhook: true },
  onRequest: async () => { stats.received++ },
  // Count rejections by their reason code (the plugin answers with { code, message }).
  onSend: async (_request, reply, payload) => {
    if (reply.statusCode >= 400 && typeof payload === 'string') {
      const code = (JSON.parse(payload) as { code?: string }).code ?? String(reply.statusCode)
      stats.rejected[code] = (stats.rejected[code] ?? 0) + 1
    }
    return payload
  },
}, async (request, reply) => {
  stats.verified++
  stats.events += request.webhookEvents.length
  for (const event of request.webhookEvents) request.log.info(`verified ${describe(event)}`)
  return reply.code(204).send()
})

// The batch listing, behind a bearer token (any authorize hook works: session, JWT, ...).
const token = randomBytes(12).toString('hex')
await app.register(batchesRoute, {
  client: new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl }),
  url: '/webhooks/batches',
  authorize: (request) => request.headers.authorization === `Bearer ${token}`,
})

const address = await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) })
sandbox.start({ target: `${address}/webhooks` })

console.log(`
  MailChannels webhooks demo
  receiver:  POST ${address}/webhooks  (Fastify + mailchannels-webhooks, replay protection on)
  sandbox:   ${sandbox.baseUrl}  (signing key ${sandbox.keyId}, customer handle "${sandbox.customerHandle}")
  batches:   curl -H 'Authorization: Bearer ${token}' '${address}/webhooks/batches?statuses=4xx,5xx'
  Ctrl-C to stop.
`)

const summary = (): void => {
  const rejected = Object.entries(stats.rejected).map(([code, n]) => `${code}: ${n}`).join(', ') || 'none'
  logger.info(`summary: received ${stats.received}, verified ${stats.verified} (${stats.events} events), rejected ${Object.values(stats.rejected).reduce((a, b) => a + b, 0)} (${rejected})`)
}
const every = setInterval(summary, 5000)

let stopping = false
async function shutdown (): Promise<void> {
  if (stopping) return
  stopping = true
  clearInterval(every)
  clearTimeout(deadline)
  await sandbox.close() // stops the sender, aborts deliveries in flight, closes its server
  await app.close()
  summary()
  console.log('demo stopped')
}
process.on('SIGINT', () => { void shutdown() })
process.on('SIGTERM', () => { void shutdown() })
const deadline = setTimeout(() => { void shutdown() }, Number(process.env.DEMO_DURATION_MS ?? 2 ** 31 - 1))
