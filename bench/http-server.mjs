// One receiver per process, started by bench/http-bench.mjs:
//   node bench/http-server.mjs <variant>   with BENCH_PUBLIC_KEY (SPKI DER, base64) and
//   BENCH_VERIFY_ON_THREAD_POOL (auto | true | false) in the environment.
// Variants, all POST /webhook on 127.0.0.1, 204 when the delivery verifies, 4xx otherwise:
//   fastify-ideal       Fastify, raw Buffer body, the ideal receiver + JSON.parse inline
//   express-ideal       Express, express.raw, the same inline work
//   fastify-plugin      the library's Fastify plugin (from dist/)
//   fastify-plugin-node-crypto, express-middleware-node-crypto: the same without sodium-native
//                       (its lookup fails, as when it is not installed): Ed25519 by node:crypto
//   express-middleware  the library's Express middleware (from dist/)
//   web-handler         the library's fetch handler (createWebhookHandler, mailchannels-webhooks/web,
//                       from dist/) on node:http through @hono/node-server's serve()
//   fastify-router      the Fastify plugin answering the route itself with handlers: a WebhookEventRouter
//                       with a MemoryClaimStore and one (empty) handler per event type (200 with counts)
//   fastify-router-subscribed  the same, with a subscriber on the delivery diagnostics channel
//                       (GET /published answers how many messages it received)
// The library gets the key statically (no key fetch on the timed path) and its default replay
// protection (BENCH_REPLAY=off turns it off). Every variant accepts bodies up to 16 MiB. Prints "READY <port>" once listening.
import diagnosticsChannel from 'node:diagnostics_channel'
import Module from 'node:module'
import { serve } from '@hono/node-server'
import express from 'express'
import Fastify from 'fastify'
import { CUSTOMER_HANDLE, KEY_ID } from './lib/fixtures.mjs'
import { createIdealVerifier } from './lib/ideal.mjs'

const variant = process.argv[2]
if (variant.endsWith('-node-crypto')) {
  // The library as installed without the optional sodium-native: its lookup fails, as it does then.
  const resolve = Module._resolveFilename
  Module._resolveFilename = function (request, ...rest) {
    if (request === 'sodium-native') throw Object.assign(new Error("Cannot find module 'sodium-native'"), { code: 'MODULE_NOT_FOUND' })
    return resolve.call(this, request, ...rest)
  }
}
const { default: mailchannelsWebhooks } = await import('../dist/fastify/index.js')
const { mailchannelsWebhooks: expressWebhooks } = await import('../dist/express/index.js')
const { DELIVERY_DIAGNOSTICS_CHANNEL, MemoryClaimStore, WEBHOOK_EVENT_TYPES, WebhookEventRouter } = await import('../dist/index.js')
const { createWebhookHandler } = await import('../dist/web/index.js')

const BODY_LIMIT = 16 * 1024 * 1024
const PATH = '/webhook'

const publicKey = process.env.BENCH_PUBLIC_KEY
if (!publicKey) throw new Error('BENCH_PUBLIC_KEY is not set')
const pool = process.env.BENCH_VERIFY_ON_THREAD_POOL ?? 'auto'
const libraryOptions = {
  publicKey,
  customerHandles: [CUSTOMER_HANDLE],
  // The default store (a MemoryReplayStore per receiver) unless BENCH_REPLAY=off.
  ...(process.env.BENCH_REPLAY === 'off' ? { replay: false } : {}),
  bodyLimit: BODY_LIMIT,
  verifyOnThreadPool: pool === 'auto' ? 'auto' : pool === 'true',
}
const ideal = createIdealVerifier({ [KEY_ID]: publicKey })

function fastifyApp () {
  return Fastify({ logger: false, bodyLimit: BODY_LIMIT })
}

function expressApp () {
  const app = express()
  app.disable('x-powered-by')
  app.set('etag', false)
  return app
}

let server
switch (variant) {
  case 'fastify-ideal': {
    const app = fastifyApp()
    app.removeContentTypeParser('application/json')
    app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => { done(null, body) })
    app.decorateRequest('webhookEvents', null)
    app.post(PATH, async (request, reply) => {
      const events = ideal.verifyAndParse(request.body, request.headers)
      if (events === null) return reply.code(401).send()
      request.webhookEvents = events
      return reply.code(204).send()
    })
    await app.listen({ host: '127.0.0.1', port: 0 })
    server = app.server
    break
  }
  case 'express-ideal': {
    const app = expressApp()
    app.post(PATH, express.raw({ type: 'application/json', limit: BODY_LIMIT }), (req, res) => {
      let events = null
      try { events = ideal.verifyAndParse(req.body, req.headers) } catch {}
      if (events === null) return res.status(401).end()
      req.webhookEvents = events
      res.status(204).end()
    })
    server = await listenExpress(app)
    break
  }
  case 'fastify-plugin':
  case 'fastify-plugin-node-crypto': {
    const app = fastifyApp()
    await app.register(mailchannelsWebhooks, libraryOptions)
    app.post(PATH, { config: { mailchannelsWebhooks: true } }, (request, reply) => { reply.code(204).send() })
    await app.listen({ host: '127.0.0.1', port: 0 })
    server = app.server
    break
  }
  case 'fastify-router':
  case 'fastify-router-subscribed': {
    const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() })
    for (const type of [...WEBHOOK_EVENT_TYPES, 'unknown']) router.on(type, () => {})
    const app = fastifyApp()
    if (variant === 'fastify-router-subscribed') {
      // What a metrics subscriber does at least: look at every message.
      const published = { messages: 0, accepted: 0, ms: 0 }
      diagnosticsChannel.subscribe(DELIVERY_DIAGNOSTICS_CHANNEL, (m) => {
        published.messages++
        if (m.outcome === 'accepted') published.accepted++
        published.ms += m.verifyDurationMs + m.handlerDurationMs
      })
      app.get('/published', async () => published)
    }
    // The route is the plugin's own (path), answered by the router: no handler to write.
    await app.register(mailchannelsWebhooks, { ...libraryOptions, path: PATH, handlers: router })
    await app.listen({ host: '127.0.0.1', port: 0 })
    server = app.server
    break
  }
  case 'express-middleware':
  case 'express-middleware-node-crypto': {
    const app = expressApp()
    app.post(PATH, expressWebhooks(libraryOptions), (req, res) => { res.status(204).end() })
    server = await listenExpress(app)
    break
  }
  case 'web-handler': {
    // The same options as the plugin and the middleware; onEvents answers nothing, hence 204.
    const fetch = createWebhookHandler({ ...libraryOptions, onEvents: () => {} })
    server = await new Promise((resolve, reject) => {
      const s = serve({ fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s))
      s.once('error', reject)
    })
    break
  }
  default:
    throw new Error(`unknown variant ${variant}`)
}

function listenExpress (app) {
  return new Promise((resolve, reject) => {
    const s = app.listen(0, '127.0.0.1', (err) => { if (err) reject(err); else resolve(s) })
  })
}

process.stdout.write(`READY ${server.address().port}\n`)
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0))
