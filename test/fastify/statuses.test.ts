import { Readable } from 'node:stream'
import zlib from 'node:zlib'
import Fastify, { type FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import plugin, { webhookEventsOf, type MailChannelsWebhooksOptions } from '../../src/fastify/index.js'
import type { WebhookEvent } from '../../src/events/types.js'
import { closedPort, delivery, event, failingStore, HANDLE, KEYS, OTHER_KEYS, startKeyServer } from './helpers/fixtures.js'

interface Harness { app: FastifyInstance, calls: () => number, decorated: () => Array<WebhookEvent[] | null> }

/** An app with one webhook route that counts handler calls and records what each request carried after the response. */
async function harness (t: Test, options: Partial<MailChannelsWebhooksOptions> = {}): Promise<Harness> {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, ...options })
  let calls = 0
  const decorated: Array<WebhookEvent[] | null> = []
  app.addHook('onResponse', async (request) => { decorated.push(webhookEventsOf(request) ?? null) })
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request) => {
    calls++
    return { received: request.webhookEvents.length, first: request.webhookEvents[0]?.event }
  })
  t.teardown(() => app.close())
  return { app, calls: () => calls, decorated: () => decorated }
}

function expectRejected (t: Test, h: Harness, res: { statusCode: number, json: () => unknown }, status: number, code: string): void {
  t.equal(res.statusCode, status, `status ${status}`)
  const body = res.json() as Record<string, unknown>
  t.equal(body.code, code)
  t.equal(body.statusCode, status)
  t.type(body.error, 'string')
  t.type(body.message, 'string')
  t.same(Object.keys(body).sort(), ['code', 'error', 'message', 'statusCode'], 'only the error shape, no internals')
  t.notMatch(JSON.stringify(body), /stack|at \w+ \(/, 'no stack trace')
  t.equal(h.calls(), 0, 'handler never ran')
  t.ok(h.decorated().every((d) => d === null), 'nothing decorated')
}

t.test('200: verified events on request.webhookEvents', async (t) => {
  const h = await harness(t)
  const d = delivery({ events: [event(), event({ event: 'click', url: 'https://x.test' })] })
  const res = await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  t.equal(res.statusCode, 200)
  t.same(res.json(), { received: 2, first: 'delivered' })
  t.equal(h.calls(), 1)
  t.equal(h.decorated()[0]?.[1]?.event, 'click')
})

t.test('200 with charset=UTF-8 (any case) and Content-Encoding identity; [] gives zero events', async (t) => {
  const h = await harness(t)
  for (const ct of ['application/json; charset=UTF-8', 'Application/JSON;charset="utf-8"']) {
    const d = delivery({ payload: '[]' })
    const res = await h.app.inject({ method: 'POST', url: '/wh', headers: { ...d.headers, 'content-type': ct, 'content-encoding': 'identity' }, payload: d.body })
    t.equal(res.statusCode, 200, ct)
    t.same(res.json(), { received: 0 })
  }
})

t.test('both verify paths: event loop and thread pool', async (t) => {
  for (const verifyOnThreadPool of [true, false, 'auto'] as const) {
    const h = await harness(t, { verifyOnThreadPool })
    const d = delivery()
    const ok = await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
    t.equal(ok.statusCode, 200, `${verifyOnThreadPool}: valid`)
    const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
    const bad = await h.app.inject({ method: 'POST', url: '/wh', headers: forged.headers, payload: forged.body })
    t.equal(bad.statusCode, 401, `${verifyOnThreadPool}: forged`)
    t.equal(bad.json().code, 'signature_invalid')
    t.equal(h.calls(), 1)
  }
})

t.test('400: missing and malformed headers, invalid payload', async (t) => {
  const h = await harness(t)
  const d = delivery()
  const { signature: _s, ...noSig } = d.headers
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: noSig, payload: d.body }), 400, 'missing_header')
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: { 'content-type': 'application/json' }, payload: d.body }), 400, 'missing_header')
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: { ...d.headers, 'content-digest': 'sha-256=:AAAA:' }, payload: d.body }), 400, 'malformed_header')
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: { ...d.headers, 'signature-input': 'sig_1=("content-digest");created=1' }, payload: d.body }), 400, 'malformed_header')
  const notArray = delivery({ payload: '{"event":"delivered"}' })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: notArray.headers, payload: notArray.body }), 400, 'invalid_payload')
  const empty = delivery({ payload: '' })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: empty.headers, payload: empty.body }), 400, 'invalid_payload')
  const proto = delivery({ payload: '[{"__proto__":{"polluted":true},"event":"delivered","customer_handle":"acct_1","timestamp":1}]' })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: proto.headers, payload: proto.body }), 400, 'invalid_payload')
  t.equal(({} as Record<string, unknown>).polluted, undefined)
})

t.test('401: digest, signature and freshness', async (t) => {
  const h = await harness(t)
  const d = delivery()
  const tampered = Buffer.from(d.body.toString().replace('delivered', 'hard-bounced'))
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: tampered }), 401, 'digest_mismatch')
  const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: forged.headers, payload: forged.body }), 401, 'signature_invalid')
  const now = Math.floor(Date.now() / 1000)
  const old = delivery({ created: now - 301 })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: old.headers, payload: old.body }), 401, 'signature_expired')
  const future = delivery({ created: now + 61 })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: future.headers, payload: future.body }), 401, 'signature_from_future')
})

t.test('403: a customer handle outside customerHandles', async (t) => {
  const h = await harness(t)
  const d = delivery({ events: [event(), event({ customer_handle: 'acct_other' })] })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body }), 403, 'customer_not_allowed')
})

t.test('413: Content-Length over bodyLimit, chunked over bodyLimit, too many events', async (t) => {
  const h = await harness(t, { bodyLimit: 1024, maxEvents: 2 })
  const big = delivery({ payload: `[${' '.repeat(2000)}]` })
  const res = await h.app.inject({ method: 'POST', url: '/wh', headers: big.headers, payload: big.body })
  expectRejected(t, h, res, 413, 'payload_too_large')
  // Chunked: no Content-Length, so the limit stops the stream.
  const chunked = await h.app.inject({ method: 'POST', url: '/wh', headers: { ...big.headers, 'transfer-encoding': 'chunked' }, payload: Readable.from([big.body.subarray(0, 600), big.body.subarray(600)]) })
  t.equal(chunked.headers['content-length'] === undefined || chunked.headers['transfer-encoding'] === undefined, true)
  expectRejected(t, h, chunked, 413, 'payload_too_large')
  const many = delivery({ events: [event(), event(), event()] })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: many.headers, payload: many.body }), 413, 'payload_too_large')
})

t.test('413 at the default 1 MiB limit (F1: 1,048,577 bytes)', async (t) => {
  const h = await harness(t)
  const body = Buffer.alloc(1024 * 1024 + 1, 0x20)
  body[0] = 0x5b
  body[body.length - 1] = 0x5d
  const d = delivery({ payload: body })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body }), 413, 'payload_too_large')
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: Readable.from([d.body.subarray(0, 65536), d.body.subarray(65536)]) }), 413, 'payload_too_large')
})

t.test('415: any Content-Encoding but identity, named in the message; nothing is inflated (F3)', async (t) => {
  const h = await harness(t)
  const d = delivery()
  // Compressed bodies signed over the compressed bytes: refused, never inflated.
  const gz = zlib.gzipSync(d.body)
  for (const [encoding, bytes] of [['gzip', gz], ['br', zlib.brotliCompressSync(d.body)], ['gzip, gzip', zlib.gzipSync(gz)], ['deflate', zlib.deflateSync(d.body)]] as const) {
    const signed = delivery({ payload: bytes })
    const res = await h.app.inject({ method: 'POST', url: '/wh', headers: { ...signed.headers, 'content-encoding': encoding }, payload: signed.body })
    expectRejected(t, h, res, 415, 'unsupported_media_type')
    t.match(res.json().message, `Content-Encoding ${JSON.stringify(encoding)} is not supported`)
  }
})

t.test('503 + Retry-After: the key server is down (key_unavailable)', async (t) => {
  const port = await closedPort()
  const h = await harness(t, { publicKey: undefined, baseUrl: `http://127.0.0.1:${port}` })
  const d = delivery()
  const res = await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  expectRejected(t, h, res, 503, 'key_unavailable')
  t.match(res.headers['retry-after'], /^\d+$/)
})

t.test('keys fetched from a loopback key server: 200, then 401 unknown_key', async (t) => {
  const keys = await startKeyServer({ mckey: KEYS.publicKey })
  t.teardown(keys.close)
  const h = await harness(t, { publicKey: undefined, baseUrl: keys.baseUrl })
  const d = delivery()
  const ok = await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  t.equal(ok.statusCode, 200)
  const again = delivery()
  t.equal((await h.app.inject({ method: 'POST', url: '/wh', headers: again.headers, payload: again.body })).statusCode, 200)
  t.equal(keys.requests(), 1, 'the key is fetched once, then cached')
  const unknown = delivery({ keyId: 'nokey' })
  const res = await h.app.inject({ method: 'POST', url: '/wh', headers: unknown.headers, payload: unknown.body })
  t.equal(res.statusCode, 401)
  t.equal(res.json().code, 'unknown_key')
  t.equal(h.calls(), 2)
})

t.test('503 + Retry-After: the replay store fails (replay_store_unavailable)', async (t) => {
  const store = failingStore()
  const h = await harness(t, { replay: store })
  const d = delivery()
  const res = await h.app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  expectRejected(t, h, res, 503, 'replay_store_unavailable')
  t.match(res.headers['retry-after'], /^\d+$/)
  t.notMatch(res.body, /ECONNREFUSED|6379/, 'no store internals in the reply')
  t.same(store.calls, ['claim'])
})

t.test('a failure without verification never reaches the store', async (t) => {
  const store = failingStore()
  const h = await harness(t, { replay: store })
  const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
  expectRejected(t, h, await h.app.inject({ method: 'POST', url: '/wh', headers: forged.headers, payload: forged.body }), 401, 'signature_invalid')
  t.same(store.calls, [])
})
