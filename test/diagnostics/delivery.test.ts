// One message per delivery on the delivery channel and one receive trace per delivery, through
// real receivers (the web handler with fetch Requests, the Fastify plugin with inject, the Express
// middleware on a loopback server): every outcome, with its type, status, sizes and durations.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import express from 'express'
import Fastify from 'fastify'
import t from 'tap'
import { mailchannelsWebhooks } from '../../src/express/index.js'
import plugin from '../../src/fastify/index.js'
import { MemoryClaimStore, WebhookEventRouter } from '../../src/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import type { ReplayStore } from '../../src/replay/types.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { createWebhookHandler } from '../../src/web/index.js'
import { serveKeys, startKeyServer } from '../helpers/key-server.js'
import { checkTraces, record } from './helpers.js'

const keys = generateSigningKeyPair()
const CUSTOMER = 'acct_diag'
const KEY_ID = 'diag-key'
let n = 0
const sign = (count = 1, keyId = KEY_ID): SignedWebhook => signWebhook({
  events: Array.from({ length: count }, () => ({ event: 'delivered', customer_handle: CUSTOMER, timestamp: 1700000000, request_id: `d${++n}` })),
  privateKey: keys.privateKey,
  keyId,
})
const request = (signed: SignedWebhook, init: RequestInit = {}): Request =>
  new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: signed.body, ...init })
const base = { publicKey: keys.publicKey, customerHandles: [CUSTOMER] }

t.test('accepted, then duplicate: counts, sizes, key id, the handler time', async (t) => {
  const r = record(t)
  const handler = createWebhookHandler({ ...base, onEvents: async () => { await sleep(60) } })
  const signed = sign(3)
  const started = performance.now()
  t.equal((await handler(request(signed))).status, 204)
  const wall = performance.now() - started
  t.equal((await handler(request(signed))).status, 200, 'the resend')
  t.equal(r.deliveries.length, 2)
  const [accepted, duplicate] = r.deliveries
  t.match(accepted, { outcome: 'accepted', type: null, status: 204, eventCount: 3, bodyBytes: signed.body.length, keyId: KEY_ID })
  t.ok(accepted!.handlerDurationMs >= 50, `the handler's 60 ms wait is in handlerDurationMs (${accepted!.handlerDurationMs})`)
  // Apart: the two spans do not overlap, so together they fit in the request's wall time (a
  // verify span that also held the handler's wait would exceed it by ~60 ms). Not a speed check:
  // on a loaded machine verification alone can take longer than the handler.
  t.ok(accepted!.verifyDurationMs >= 0 && accepted!.verifyDurationMs + accepted!.handlerDurationMs <= wall + 1, `verification is measured apart (${accepted!.verifyDurationMs} + ${accepted!.handlerDurationMs} <= ${wall})`)
  t.match(duplicate, { outcome: 'duplicate', type: null, status: 200, eventCount: 3, bodyBytes: signed.body.length, keyId: KEY_ID, handlerDurationMs: 0 })
  t.strictSame(Object.keys(accepted!).sort(), ['bodyBytes', 'eventCount', 'handlerDurationMs', 'keyId', 'outcome', 'status', 'type', 'verifyDurationMs'])
  checkTraces(t, r)
})

t.test('rejected: verification failures carry their type and status, and no key id or events', async (t) => {
  const r = record(t)
  const handler = createWebhookHandler({ ...base, onEvents: () => { t.fail('the handler must not run') } })
  const signed = sign()
  const tampered = new Uint8Array(signed.body)
  tampered[tampered.length - 3] = tampered[tampered.length - 3]! ^ 1
  t.equal((await handler(request(signed, { body: tampered }))).status, 401)
  const other = signWebhook({ events: [{ event: 'delivered', customer_handle: 'acct_other', timestamp: 1700000000 }], privateKey: keys.privateKey })
  t.equal((await handler(request(other))).status, 403)
  t.match(r.deliveries, [
    { outcome: 'rejected', type: 'digest_mismatch', status: 401, eventCount: 0, bodyBytes: signed.body.length, keyId: null, handlerDurationMs: 0 },
    { outcome: 'rejected', type: 'customer_not_allowed', status: 403, eventCount: 0, bodyBytes: other.body.length, keyId: null, handlerDurationMs: 0 },
  ])
  checkTraces(t, r)
})

t.test('rejected before the body is read: transport checks and the body limit, bodyBytes 0', async (t) => {
  const r = record(t)
  const signed = sign()
  const gzipped = new Headers(signed.headers)
  gzipped.set('content-encoding', 'gzip')
  const handler = createWebhookHandler({ ...base, onEvents: () => { t.fail('the handler must not run') } })
  t.equal((await handler(request(signed, { headers: gzipped }))).status, 415)
  const small = createWebhookHandler({ ...base, bodyLimit: 64, onEvents: () => { t.fail('the handler must not run') } })
  const chunked = new Headers(signed.headers)
  chunked.delete('content-length')
  const stream = new ReadableStream<Uint8Array>({ start (c) { c.enqueue(new Uint8Array(signed.body)); c.close() } })
  t.equal((await small(request(signed, { headers: chunked, body: stream, duplex: 'half' } as RequestInit))).status, 413, 'no Content-Length: refused while reading')
  t.match(r.deliveries, [
    { outcome: 'rejected', type: 'unsupported_media_type', status: 415, bodyBytes: 0, eventCount: 0, verifyDurationMs: 0, handlerDurationMs: 0 },
    { outcome: 'rejected', type: 'payload_too_large', status: 413, bodyBytes: 0, eventCount: 0, verifyDurationMs: 0, handlerDurationMs: 0 },
  ])
  checkTraces(t, r)
})

t.test('failed: the handler throws (500) or answers non-2xx; type handler_error', async (t) => {
  const r = record(t)
  let answer: () => Response | undefined = () => { throw new Error('database down') }
  const handler = createWebhookHandler({ ...base, logger: { debug () {}, info () {}, warn () {}, error () {} }, onEvents: () => answer() })
  t.equal((await handler(request(sign(2)))).status, 500)
  answer = () => new Response('busy', { status: 503 })
  t.equal((await handler(request(sign()))).status, 503)
  t.match(r.deliveries, [
    { outcome: 'failed', type: 'handler_error', status: 500, eventCount: 2 },
    { outcome: 'failed', type: 'handler_error', status: 503, eventCount: 1 },
  ])
  t.notMatch(JSON.stringify(r.deliveries), /database down/, 'no error message in the messages')
  checkTraces(t, r)
})

t.test('rejected after verification: the replay store is down (503), with the verified events and key id', async (t) => {
  const r = record(t)
  const down: ReplayStore = { claim: async () => { throw new Error('ECONNREFUSED') }, complete: async () => {}, release: async () => {} }
  const handler = createWebhookHandler({ ...base, replay: down, logger: { debug () {}, info () {}, warn () {}, error () {} }, onEvents: () => { t.fail('the handler must not run') } })
  const signed = sign(2)
  t.equal((await handler(request(signed))).status, 503)
  t.match(r.deliveries, [{ outcome: 'rejected', type: 'replay_store_unavailable', status: 503, eventCount: 2, keyId: KEY_ID, handlerDurationMs: 0 }])
  checkTraces(t, r)
})

t.test('verifyDurationMs includes the key fetch the delivery waited for', async (t) => {
  const r = record(t)
  const keyServer = await startKeyServer(async (id, req) => { await sleep(80); return serveKeys({ diagkey: keys.publicKey })(id, req) })
  t.teardown(() => keyServer.close())
  const handler = createWebhookHandler({ customerHandles: [CUSTOMER], baseUrl: keyServer.baseUrl, onEvents: () => {} })
  const signed = sign(1, 'diagkey')
  t.equal((await handler(request(signed))).status, 204)
  t.match(r.keyFetches, [{ outcome: 'fetched', keyId: 'diagkey', refresh: false }])
  t.match(r.deliveries, [{ outcome: 'accepted', keyId: 'diagkey' }])
  t.ok(r.deliveries[0]!.verifyDurationMs >= r.keyFetches[0]!.durationMs, 'the fetch is part of the verification time')
  t.ok(r.keyFetches[0]!.durationMs >= 70, `the key server's 80 ms delay is in the fetch time (${r.keyFetches[0]!.durationMs})`)
})

t.test('Fastify plugin: every delivery is published, also without replay protection (settled by the route\'s answer)', async (t) => {
  const r = record(t)
  const fastify = Fastify()
  t.teardown(() => fastify.close())
  await fastify.register(plugin, { ...base, replay: false })
  fastify.post('/hook', { config: { mailchannelsWebhooks: true } }, async (request, reply) => {
    if (request.webhookEvents.length === 2) return reply.code(500).send({ nope: true })
    return { received: request.webhookEvents.length }
  })
  const ok = sign()
  const accepted = await fastify.inject({ method: 'POST', url: '/hook', headers: ok.headers, payload: ok.body })
  t.equal(accepted.statusCode, 200)
  const two = sign(2)
  t.equal((await fastify.inject({ method: 'POST', url: '/hook', headers: two.headers, payload: two.body })).statusCode, 500)
  t.equal((await fastify.inject({ method: 'POST', url: '/hook', headers: { ...ok.headers, 'content-encoding': 'gzip' }, payload: ok.body })).statusCode, 415)
  const tampered = Buffer.from(ok.body)
  tampered[tampered.length - 3] = tampered[tampered.length - 3]! ^ 1
  t.equal((await fastify.inject({ method: 'POST', url: '/hook', headers: ok.headers, payload: tampered })).statusCode, 401)
  t.match(r.deliveries, [
    { outcome: 'accepted', type: null, status: 200, eventCount: 1, bodyBytes: ok.body.length, keyId: KEY_ID },
    { outcome: 'failed', type: 'handler_error', status: 500, eventCount: 2 },
    { outcome: 'rejected', type: 'unsupported_media_type', status: 415, bodyBytes: 0 },
    { outcome: 'rejected', type: 'digest_mismatch', status: 401, bodyBytes: ok.body.length },
  ])
  checkTraces(t, r)
})

t.test('Express middleware: accepted without replay protection, duplicate with it', async (t) => {
  const r = record(t)
  const app = express()
  app.post('/plain', mailchannelsWebhooks({ ...base, replay: false }), (_req, res) => { res.status(202).end() })
  app.post('/replay', mailchannelsWebhooks({ ...base, replay: new MemoryReplayStore() }), (_req, res) => { res.status(200).json({ ok: true }) })
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const post = async (path: string, signed: SignedWebhook): Promise<number> => {
    const res = await fetch(url + path, { method: 'POST', headers: signed.headers, body: signed.body })
    await res.arrayBuffer()
    return res.status
  }
  const a = sign()
  t.equal(await post('/plain', a), 202)
  const b = sign()
  t.equal(await post('/replay', b), 200)
  t.equal(await post('/replay', b), 200)
  t.match(r.deliveries, [
    { outcome: 'accepted', status: 202, eventCount: 1, keyId: KEY_ID },
    { outcome: 'accepted', status: 200, eventCount: 1 },
    { outcome: 'duplicate', status: 200, eventCount: 1 },
  ])
  checkTraces(t, r)
})

t.test('handlers: a router answers; its answer is the delivery\'s outcome (web handler and Fastify path route)', async (t) => {
  const r = record(t)
  let fail = false
  const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() })
    .on('delivered', async () => { await sleep(30); if (fail) throw new Error('no') })
  const quiet = { debug () {}, info () {}, warn () {}, error () {} }
  const handler = createWebhookHandler({ ...base, handlers: router, logger: quiet })
  t.equal((await handler(request(sign(2)))).status, 200)
  const fastify = Fastify()
  t.teardown(() => fastify.close())
  await fastify.register(plugin, { ...base, path: '/events', handlers: router })
  const viaFastify = sign()
  t.equal((await fastify.inject({ method: 'POST', url: '/events', headers: viaFastify.headers, payload: viaFastify.body })).statusCode, 200)
  fail = true
  t.equal((await handler(request(sign()))).status, 500)
  t.match(r.deliveries, [
    { outcome: 'accepted', type: null, status: 200, eventCount: 2, keyId: KEY_ID },
    { outcome: 'accepted', type: null, status: 200, eventCount: 1, keyId: KEY_ID },
    { outcome: 'failed', type: 'handler_error', status: 500, eventCount: 1 },
  ])
  for (const m of r.deliveries) t.ok(m.handlerDurationMs >= 25, `the router's handler time (${m.handlerDurationMs})`)
  checkTraces(t, r)
})

t.test('handlers: an event another delivery is handling: failed with the code answered (event_in_progress, 503)', async (t) => {
  const r = record(t)
  let entered!: () => void
  const inHandler = new Promise<void>((resolve) => { entered = resolve })
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() }).on('delivered', async () => { entered(); await gate })
  const handler = createWebhookHandler({ ...base, handlers: router, logger: { debug () {}, info () {}, warn () {}, error () {} } })
  const events = [{ event: 'delivered', customer_handle: CUSTOMER, timestamp: 1700000000, request_id: 'in-progress' }]
  // Signed a second apart whatever the time between the two lines (a loaded machine can take a
  // second): the same `created` would make the resend the same delivery (a duplicate), not a resend.
  const created = Math.floor(Date.now() / 1000)
  const first = handler(request(signWebhook({ events, privateKey: keys.privateKey, keyId: KEY_ID, created })))
  await inHandler
  const resent = signWebhook({ events, privateKey: keys.privateKey, keyId: KEY_ID, created: created - 1 })
  t.equal((await handler(request(resent))).status, 503, 'the resend of the same events meanwhile')
  release()
  t.equal((await first).status, 200)
  t.match(r.deliveries, [
    { outcome: 'failed', type: 'event_in_progress', status: 503, eventCount: 1 },
    { outcome: 'accepted', type: null, status: 200, eventCount: 1 },
  ])
})
