// The `handlers` / `enqueue` options, validated once on every adapter (a TypeError naming the
// option), the Fastify plugin's `path` route and per-route answers next to its fail-closed
// routing, and which failure wins when a delivery has several.
import express from 'express'
import Fastify from 'fastify'
import t from 'tap'
import plugin from '../../src/fastify/index.js'
import { mailchannelsWebhooks as expressWebhook } from '../../src/express/index.js'
import { mailchannelsWebhooks as honoWebhook } from '../../src/hono/index.js'
import { createWebhookHandler } from '../../src/web/index.js'
import { MemoryClaimStore, WebhookEventRouter, ReplayStoreError, type DispatchReport, type WebhookEvent } from '../../src/index.js'
import { dispatchReply } from '../../src/receiver/answer.js'
import { noopLogger } from '../../src/logger.js'
import { HANDLE, KEYS, sign, wireEvents } from './helpers/adapters.js'

const base = { publicKey: KEYS.publicKey, customerHandles: [HANDLE] }
const router = new WebhookEventRouter()

const BAD: Array<[string, Record<string, unknown>, RegExp]> = [
  ['handlers without dispatch', { handlers: {} }, /^handlers must be a WebhookEventRouter/],
  ['handlers as a function', { handlers: () => {} }, /^handlers must be a WebhookEventRouter/],
  ['enqueue not a function', { enqueue: {} }, /^enqueue must be a function/],
  ['both', { handlers: router, enqueue: async () => {} }, /^handlers and enqueue cannot both be given/],
  ['enqueueTimeout alone', { handlers: router, enqueueTimeout: 100 }, /^enqueueTimeout applies to enqueue only/],
  ['enqueueTimeout 0', { enqueue: async () => {}, enqueueTimeout: 0 }, /^enqueueTimeout must be a positive integer number of milliseconds/],
  ['enqueueTimeout a string', { enqueue: async () => {}, enqueueTimeout: '5s' }, /^enqueueTimeout must be a positive integer/],
]

t.test('bad handlers / enqueue options throw a TypeError naming the option, on every adapter', async (t) => {
  for (const [name, options, message] of BAD) {
    t.throws(() => expressWebhook({ ...base, ...options } as never), { name: 'TypeError', message }, `express: ${name}`)
    t.throws(() => honoWebhook({ ...base, ...options } as never), { name: 'TypeError', message }, `hono: ${name}`)
    const app = Fastify()
    await t.rejects(async () => { await app.register(plugin, { ...base, ...options } as never).ready() }, { name: 'TypeError', message }, `fastify: ${name}`)
    await app.close()
    const route = Fastify()
    await route.register(plugin, base)
    // A route's options are checked as it is declared.
    t.throws(() => route.post('/hook', { config: { mailchannelsWebhooks: options as never } }, () => {}), { name: 'TypeError', message }, `fastify route config: ${name}`)
    await route.close()
  }
  t.throws(() => createWebhookHandler({ ...base, enqueue: async () => {}, enqueueTimeout: 0 }), { name: 'TypeError', message: /^enqueueTimeout must be/ })
})

t.test('the web handler takes exactly one of onEvents, handlers and enqueue', async (t) => {
  t.throws(() => createWebhookHandler(base as never), { name: 'TypeError', message: /^onEvents, handlers or enqueue is required/ })
  t.throws(() => createWebhookHandler({ ...base, onEvents: () => {}, handlers: router } as never), { name: 'TypeError', message: /^onEvents and handlers cannot be given together/ })
  t.throws(() => createWebhookHandler({ ...base, handlers: router, enqueue: async () => {} } as never), { name: 'TypeError', message: /^handlers and enqueue cannot be given together/ })
  t.throws(() => createWebhookHandler({ ...base, onEvents: 'save' } as never), { name: 'TypeError', message: /^onEvents must be a function/ })
  t.doesNotThrow(() => createWebhookHandler({ ...base, handlers: router }))
  t.doesNotThrow(() => createWebhookHandler({ ...base, enqueue: async () => {} }))
})

t.test('fastify path: the plugin declares POST <path>, verified and answered, in its scope and prefix', async (t) => {
  const calls: string[] = []
  const r = new WebhookEventRouter().on('*', (event) => { calls.push(event.event) })
  const app = Fastify()
  await app.register(async (scope) => {
    await scope.register(plugin, { ...base, path: '/hook', handlers: r })
  }, { prefix: '/v1' })
  await app.ready()
  t.teardown(() => app.close())
  const d = sign(wireEvents(['delivered']))
  const ok = await app.inject({ method: 'POST', url: '/v1/hook', headers: d.headers, payload: d.body })
  t.equal(ok.statusCode, 200)
  t.same(ok.json(), { handled: 1, skipped: 0, unhandled: 0 })
  t.same(calls, ['delivered'])
  const unsigned = await app.inject({ method: 'POST', url: '/v1/hook', headers: { 'content-type': 'application/json' }, payload: '[]' })
  t.equal(unsigned.statusCode, 400, 'the route verifies: an unsigned request is refused')
  t.equal(unsigned.json().code, 'missing_header')
  t.equal((await app.inject({ method: 'GET', url: '/v1/hook' })).statusCode, 404, 'POST only')
  t.same(calls, ['delivered'])
})

t.test('fastify path: needs handlers or enqueue, and a path; route config takes no path', async (t) => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ path: '/hook' }, /^path declares a route the plugin answers itself: give handlers/],
    [{ path: 'hook', handlers: router }, /^path must be a URL path starting with '\/'/],
    [{ path: 42, handlers: router }, /^path must be a URL path/],
  ]
  for (const [options, message] of cases) {
    const app = Fastify()
    await t.rejects(async () => { await app.register(plugin, { ...base, ...options } as never).ready() }, { name: 'TypeError', message })
    await app.close()
  }
  const app = Fastify()
  await app.register(plugin, base)
  t.throws(() => app.post('/hook', { config: { mailchannelsWebhooks: { path: '/x', handlers: router } as never } }, () => {}), { name: 'TypeError', message: /^path is not a known option/ })
  await app.close()
})

t.test('fastify: handlers given at registration answer every webhook route; a route may hand its events to a queue instead', async (t) => {
  const handled: string[] = []
  const queued: string[] = []
  let ownHandler = 0
  const app = Fastify()
  await app.register(plugin, { ...base, handlers: new WebhookEventRouter().on('*', (e) => { handled.push(e.event) }) })
  app.post('/a', { config: { mailchannelsWebhooks: true } }, async () => { ownHandler++; return 'own' })
  app.post('/b', { config: { mailchannelsWebhooks: { enqueue: async (events: readonly WebhookEvent[]) => { queued.push(...events.map((e) => e.event)) } } } }, async () => { ownHandler++; return 'own' })
  app.post('/c', { config: { mailchannelsWebhooks: false } }, async (request) => request.body)
  await app.ready()
  t.teardown(() => app.close())
  const d = sign(wireEvents(['open']))
  t.same((await app.inject({ method: 'POST', url: '/a', headers: d.headers, payload: d.body })).json(), { handled: 1, skipped: 0, unhandled: 0 })
  const e = sign(wireEvents(['click']))
  t.same((await app.inject({ method: 'POST', url: '/b', headers: e.headers, payload: e.body })).json(), { queued: 1 })
  t.same(handled, ['open'])
  t.same(queued, ['click'])
  t.equal(ownHandler, 0, 'the routes\' own handlers do not run')
  t.same((await app.inject({ method: 'POST', url: '/c', payload: { x: 1 } })).json(), { x: 1 }, 'a route that opted out is untouched')
})

t.test('fastify: fail-closed routing still holds with handlers: a route that opts in out of reach fails ready()', async (t) => {
  const app = Fastify()
  await app.register(async (scope) => { await scope.register(plugin, { ...base, handlers: router, path: '/hook' }) })
  app.post('/elsewhere', { config: { mailchannelsWebhooks: { handlers: router } } }, () => {})
  await t.rejects(async () => { await app.ready() }, /POST \/elsewhere opts in with config.mailchannelsWebhooks, but no registration of the plugin reaches its scope/)
  await app.close()
})

t.test('express: POSTs only; other methods pass through to next untouched', async (t) => {
  const app = express()
  app.use('/hook', expressWebhook({ ...base, handlers: router }))
  app.get('/hook', (_req, res) => { res.json({ health: 'ok' }) })
  const { serve } = await import('../express/helpers/server.js')
  const port = await serve(t, app)
  const res = await fetch(`http://127.0.0.1:${port}/hook`)
  t.same(await res.json(), { health: 'ok' })
})

t.test('a handler failure wins over deferred events: 500, so the failure is seen', async (t) => {
  const store = new MemoryClaimStore()
  let release!: () => void
  const held = new Promise<void>((resolve) => { release = resolve })
  let started = false
  const r = new WebhookEventRouter({ seenEvents: store, concurrency: 2 })
    .on('delivered', async () => { started = true; await held })
    .on('open', () => { throw new Error('open handler failed') })
  const handler = createWebhookHandler({ ...base, handlers: r })
  const events = wireEvents(['delivered', 'open'])
  const original = sign(events)
  const first = handler(new Request('http://x/hook', { method: 'POST', headers: original.headers, body: original.body }))
  while (!started) await new Promise((resolve) => setTimeout(resolve, 5))
  const resend = sign(events, 2)
  const res = await handler(new Request('http://x/hook', { method: 'POST', headers: resend.headers, body: resend.body }))
  t.equal(res.status, 500, 'one event deferred, one failed')
  t.equal((await res.json() as { code: string }).code, 'handler_error')
  release()
  t.equal((await first).status, 500)
})

t.test('a seen-events store failure wins over deferred events: 503 replay_store_unavailable', async (t) => {
  const event = { event: 'delivered', customerHandle: HANDLE, timestamp: 1 } as unknown as WebhookEvent
  const report: DispatchReport = {
    outcomes: [
      { status: 'deferred', event, fingerprint: 'a' },
      { status: 'failed', event, fingerprint: 'b', error: new ReplayStoreError('claim', 'Redis did not answer claim within 1000 ms.') },
    ],
    handled: 0, skipped: 0, unhandled: 0, deferred: 1, failed: 1, ok: false,
  }
  const reply = dispatchReply(report, 30, 'mckey', noopLogger)
  t.same([reply.status, (reply.body as { code: string }).code, reply.headers['retry-after']], [503, 'replay_store_unavailable', '10'])
  const deferredOnly = dispatchReply({ ...report, outcomes: [report.outcomes[0]!], failed: 0 }, 30, 'mckey', noopLogger)
  t.same([deferredOnly.status, (deferredOnly.body as { code: string }).code, deferredOnly.headers['retry-after']], [503, 'event_in_progress', '30'])
})
