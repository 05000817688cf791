// The soak target, run as a child process so its RSS is the receiver's alone: a Fastify 5
// app with the mailchannels-webhooks plugin (replay protection on, its default), on
// 127.0.0.1:0, with timeouts against slow bodies. Talks to the driver over IPC.
//   argv: <keyBaseUrl>
import http from 'node:http'
import Fastify from 'fastify'
import mailchannelsWebhooks from '../../dist/fastify/index.js'

const REQUEST_TIMEOUT_MS = 5_000
const counters = { handled: 0, events: 0, unhandledRejections: 0, uncaughtExceptions: 0, peakRss: 0 }
process.on('unhandledRejection', (reason) => {
  counters.unhandledRejections++
  process.send?.({ type: 'log', line: `server unhandledRejection: ${reason?.stack ?? reason}` })
})
process.on('uncaughtException', (err) => {
  counters.uncaughtExceptions++
  process.send?.({ type: 'log', line: `server uncaughtException: ${err?.stack ?? err}` })
})

const baseUrl = process.argv[2]
const app = Fastify({
  logger: false,
  requestTimeout: REQUEST_TIMEOUT_MS,
  connectionTimeout: 10_000,
  // Node checks requestTimeout every connectionsCheckingInterval (default 30 s); check
  // every 500 ms so a trickled body is cut off close to the 5 s limit.
  serverFactory: (handler) => http.createServer({
    requestTimeout: REQUEST_TIMEOUT_MS,
    headersTimeout: REQUEST_TIMEOUT_MS,
    keepAliveTimeout: 5_000,
    connectionsCheckingInterval: 500,
  }, handler),
})
// SOAK_REPLAY=off (diagnostics only) runs without replay protection, to tell the replay
// store's bounded growth apart from anything else.
const replay = process.env.SOAK_REPLAY === 'off' ? { replay: false } : {}
await app.register(mailchannelsWebhooks, { baseUrl, customerHandles: ['acct_1'], ...replay })
app.post('/webhooks', { config: { mailchannelsWebhooks: true } }, async (request) => {
  counters.handled++
  counters.events += request.webhookEvents.length
  return { received: request.webhookEvents.length }
})
await app.listen({ host: '127.0.0.1', port: 0 })

function sample () {
  const m = process.memoryUsage()
  if (m.rss > counters.peakRss) counters.peakRss = m.rss
  return m
}
const sampler = setInterval(sample, 250)

process.on('message', async (msg) => {
  if (msg?.type === 'stats') {
    if (msg.gc === true && typeof globalThis.gc === 'function') {
      globalThis.gc()
      await new Promise((resolve) => setTimeout(resolve, 50))
      globalThis.gc()
    }
    const m = sample()
    process.send({ type: 'stats', id: msg.id, rss: m.rss, heapUsed: m.heapUsed, ...counters })
  } else if (msg?.type === 'close') {
    clearInterval(sampler)
    await app.close()
    process.send({ type: 'closed' })
    process.disconnect()
  }
})
process.send({ type: 'ready', port: app.server.address().port })
