// Content types: MailChannels does not document the
// Content-Type of its deliveries, so by default both receivers accept any media type, or none,
// read the exact raw bytes themselves, and rely on the digest, the signature and the strict
// JSON checks. `contentTypes` restricts them (415 only then). Real servers on 127.0.0.1, so
// the headers are exactly what is sent (no Content-Type at all is possible).
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { EXPRESS_VERSIONS } from '../express/helpers/server.js'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { mailchannelsWebhooks as expressWebhooks } from '../../src/express/index.js'
import type { WebhookReceiverOptions } from '../../src/receiver/options.js'
import { delivery, HANDLE, KEYS } from './helpers/fixtures.js'

const TYPES = ['application/json', 'application/json; charset=utf-8', 'text/plain', 'application/octet-stream', 'application/x-www-form-urlencoded', undefined]

type Options = Partial<WebhookReceiverOptions>
interface Receiver { port: number, calls: () => number }

async function fastifyReceiver (t: Test, options: Options = {}): Promise<Receiver> {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, ...options })
  let calls = 0
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request) => { calls++; return { received: request.webhookEvents.length } })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { port: (app.server.address() as AddressInfo).port, calls: () => calls }
}

async function expressReceiver (t: Test, options: Options = {}, express = EXPRESS_VERSIONS[0]![1]): Promise<Receiver> {
  const app = express()
  let calls = 0
  app.post('/wh', expressWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, ...options }), (req, res) => {
    calls++
    res.json({ received: req.webhookEvents!.length })
  })
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { port: (server.address() as AddressInfo).port, calls: () => calls }
}

const RECEIVERS = [
  ['fastify', fastifyReceiver],
  ...EXPRESS_VERSIONS.map(([version, express]) => [version, async (t: Test, options: Options = {}) => await expressReceiver(t, options, express)] as const),
] as const

/** POSTs with exactly these headers (no Content-Type unless given). */
async function post (port: number, headers: Record<string, string>, body: Buffer): Promise<{ status: number, body: Record<string, unknown> }> {
  return await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/wh', method: 'POST', headers: { ...headers, 'content-length': String(body.length) }, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown> }) })
    })
    req.on('error', reject)
    req.end(body)
  })
}

function withType (headers: Record<string, string>, type: string | undefined): Record<string, string> {
  const { 'content-type': _drop, ...rest } = headers
  return type === undefined ? rest : { ...rest, 'content-type': type }
}

for (const [name, build] of RECEIVERS) {
  t.test(`${name}: a valid signed delivery is accepted whatever its media type, or none; the same body tampered is rejected`, async (t) => {
    const r = await build(t)
    for (const type of TYPES) {
      const d = delivery()
      const ok = await post(r.port, withType(d.headers, type), d.body)
      t.same(ok, { status: 200, body: { received: 1 } }, `${String(type)}: accepted`)
      const tampered = Buffer.from(d.body.toString().replace('delivered', 'dropped'))
      const bad = await post(r.port, withType(d.headers, type), tampered)
      t.equal(bad.status, 401, `${String(type)}: tampered -> 401`)
      t.equal(bad.body.code, 'digest_mismatch')
    }
    t.equal(r.calls(), TYPES.length)
  })

  t.test(`${name}: contentTypes restricts the media types (415 only then)`, async (t) => {
    const r = await build(t, { contentTypes: ['application/json'] })
    const d = delivery()
    t.equal((await post(r.port, withType(d.headers, 'application/json; charset=UTF-8'), d.body)).status, 200, 'parameters are ignored')
    for (const type of ['text/plain', 'application/octet-stream', undefined]) {
      const res = await post(r.port, withType(d.headers, type), d.body)
      t.equal(res.status, 415, String(type))
      t.equal(res.body.code, 'unsupported_media_type')
      t.match(res.body.message, /Content-Type must be one of: application\/json/)
    }
    t.equal(r.calls(), 1)
  })

  t.test(`${name}: a Content-Encoding other than identity is refused, naming the header and value`, async (t) => {
    const r = await build(t)
    const d = delivery()
    const res = await post(r.port, { ...d.headers, 'content-encoding': 'gzip' }, d.body)
    t.equal(res.status, 415)
    t.match(res.body.message, /^Content-Encoding "gzip" is not supported/)
    t.equal((await post(r.port, { ...d.headers, 'content-encoding': 'identity' }, d.body)).status, 200)
  })
}

t.test('contentTypes is validated at registration / construction, naming the option', async (t) => {
  for (const contentTypes of [[], ['json'], ['application/json; charset=utf-8'], 'application/json']) {
    t.throws(() => expressWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], contentTypes: contentTypes as never }), { name: 'TypeError', message: /contentTypes/ })
    const app = Fastify()
    app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], contentTypes: contentTypes as never })
    await t.rejects(async () => { await app.ready() }, { message: /contentTypes/ })
    await app.close()
  }
})

t.test('fastify: per-route contentTypes override', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false })
  app.post('/strict', { config: { mailchannelsWebhooks: { contentTypes: ['application/json'] } } }, async () => ({}))
  app.post('/any', { config: { mailchannelsWebhooks: true } }, async () => ({}))
  const d = delivery()
  const headers = withType(d.headers, 'text/plain')
  t.equal((await app.inject({ method: 'POST', url: '/strict', headers, payload: d.body })).statusCode, 415)
  t.equal((await app.inject({ method: 'POST', url: '/any', headers, payload: d.body })).statusCode, 200)
})

t.test("fastify: the app's custom parsers keep parsing its other routes; webhook routes in the same scope still get the exact raw bytes", async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => { done(null, { custom: body }) })
  app.addContentTypeParser('text/plain', { parseAs: 'string' }, (_request, body, done) => { done(null, { text: body }) })
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => { done(null, { any: (body as Buffer).length }) })
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false })
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request) => ({ received: request.webhookEvents.length, raw: Buffer.isBuffer(request.body) }))
  app.post('/api', async (request) => request.body)
  for (const type of ['application/json', 'text/plain', 'application/octet-stream', undefined]) {
    const d = delivery()
    t.same((await app.inject({ method: 'POST', url: '/wh', headers: withType(d.headers, type), payload: d.body })).json(), { received: 1, raw: true }, `webhook route, ${String(type)}`)
  }
  t.same((await app.inject({ method: 'POST', url: '/api', headers: { 'content-type': 'application/json' }, payload: '{}' })).json(), { custom: '{}' })
  t.same((await app.inject({ method: 'POST', url: '/api', headers: { 'content-type': 'text/plain' }, payload: 'hi' })).json(), { text: 'hi' })
  t.same((await app.inject({ method: 'POST', url: '/api', headers: { 'content-type': 'application/xml' }, payload: '<a/>' })).json(), { any: 4 })
})

t.test('fastify: a webhook route still answers 413 in the webhook shape for any media type over bodyLimit (chunked)', async (t) => {
  const r = await fastifyReceiver(t, { bodyLimit: 200 })
  const big = delivery({ payload: `[${' '.repeat(400)}]` })
  for (const type of ['application/json', 'application/octet-stream', undefined]) {
    const res = await new Promise<{ status: number, body: Record<string, unknown> }>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: r.port, path: '/wh', method: 'POST', headers: withType(big.headers, type), agent: false }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => { resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown> }) })
      })
      req.on('error', reject)
      req.write(big.body.subarray(0, 100))
      req.end(big.body.subarray(100))
    })
    t.equal(res.status, 413, String(type))
    t.equal(res.body.code, 'payload_too_large')
  }
  t.equal(r.calls(), 0)
})
