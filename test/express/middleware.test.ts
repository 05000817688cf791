import zlib from 'node:zlib'
import type { Express as ExpressApp, NextFunction, Request, Response } from 'express'
import t, { type Test } from 'tap'
import { mailchannelsWebhooks, webhookEventsOf, type MailChannelsWebhooksOptions } from '../../src/express/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import type { WebhookEvent } from '../../src/events/types.js'
import {
  closedPort, delivery, event, failingStore, HANDLE, KEYS, OTHER_KEYS, parseRaw, post, rawRequest, recordingLogger, requestHead, serve, type Reply,
} from './helpers/server.js'
import { conformance, EXPRESS_VERSIONS, type Express } from './helpers/server.js'

let express: Express = EXPRESS_VERSIONS[0]![1]
const { test, run } = conformance((e) => { express = e })

interface Harness { port: number, calls: () => number, seen: Array<{ events: WebhookEvent[] | undefined, body: unknown }> }

async function harness (t: Test, options: Partial<MailChannelsWebhooksOptions> = {}, setup?: (app: ExpressApp) => void): Promise<Harness> {
  const app = express()
  setup?.(app)
  let calls = 0
  const seen: Harness['seen'] = []
  app.post('/wh', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, ...options }), (req, res) => {
    calls++
    seen.push({ events: req.webhookEvents, body: req.body })
    res.json({ received: req.webhookEvents!.length })
  })
  app.post('/json', express.json(), (req, res) => { res.json({ body: req.body }) })
  const port = await serve(t, app)
  return { port, calls: () => calls, seen }
}

function expectRejected (t: Test, h: Harness, res: Reply, status: number, code: string): void {
  t.equal(res.status, status, `status ${status}`)
  const body = res.json()
  t.equal(body.code, code)
  t.equal(body.statusCode, status)
  t.same(Object.keys(body).sort(), ['code', 'error', 'message', 'statusCode'], 'only the error shape')
  t.equal(h.calls(), 0, 'next handler never ran')
}

test('200: events on req.webhookEvents, req.body untouched', async (t) => {
  const h = await harness(t)
  const d = delivery({ events: [event(), event({ event: 'open' })] })
  const res = await post(h.port, '/wh', d.headers, d.body)
  t.equal(res.status, 200)
  t.same(res.json(), { received: 2 })
  t.equal(h.seen[0]?.events?.[1]?.event, 'open')
  t.equal(h.seen[0]?.body, undefined, 'events never on req.body')
  const chunked = await post(h.port, '/wh', d.headers, [d.body.subarray(0, 10), d.body.subarray(10)])
  t.equal(chunked.status, 200, 'chunked body read from the stream')
  const utf8 = delivery({ payload: '[]' })
  t.equal((await post(h.port, '/wh', { ...utf8.headers, 'content-type': 'application/json; charset=UTF-8' }, utf8.body)).status, 200)
})

test('both verify paths: event loop and thread pool', async (t) => {
  for (const verifyOnThreadPool of [true, false] as const) {
    const h = await harness(t, { verifyOnThreadPool })
    const d = delivery()
    t.equal((await post(h.port, '/wh', d.headers, d.body)).status, 200)
    const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
    t.equal((await post(h.port, '/wh', forged.headers, forged.body)).json().code, 'signature_invalid')
    t.equal(h.calls(), 1)
  }
})

test('400, 401, 403', async (t) => {
  const h = await harness(t)
  const d = delivery()
  const { signature: _s, ...noSig } = d.headers
  expectRejected(t, h, await post(h.port, '/wh', noSig, d.body), 400, 'missing_header')
  expectRejected(t, h, await post(h.port, '/wh', { ...d.headers, 'content-digest': 'sha-256=:AAAA:' }, d.body), 400, 'malformed_header')
  const empty = delivery({ payload: '' })
  expectRejected(t, h, await post(h.port, '/wh', empty.headers, empty.body), 400, 'invalid_payload')
  expectRejected(t, h, await post(h.port, '/wh', d.headers, Buffer.from(d.body.toString().replace('delivered', 'dropped'))), 401, 'digest_mismatch')
  const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
  expectRejected(t, h, await post(h.port, '/wh', forged.headers, forged.body), 401, 'signature_invalid')
  const old = delivery({ created: Math.floor(Date.now() / 1000) - 400 })
  expectRejected(t, h, await post(h.port, '/wh', old.headers, old.body), 401, 'signature_expired')
  const other = delivery({ events: [event({ customer_handle: 'acct_other' })] })
  expectRejected(t, h, await post(h.port, '/wh', other.headers, other.body), 403, 'customer_not_allowed')
})

test('413: Content-Length precheck, chunked over the limit, too many events', async (t) => {
  const h = await harness(t, { bodyLimit: 1024, maxEvents: 1 })
  const big = delivery({ payload: `[${' '.repeat(3000)}]` })
  const res = await post(h.port, '/wh', big.headers, big.body)
  expectRejected(t, h, res, 413, 'payload_too_large')
  t.equal(res.headers.connection, 'close')
  expectRejected(t, h, await post(h.port, '/wh', big.headers, [big.body.subarray(0, 500), big.body.subarray(500)]), 413, 'payload_too_large')
  const many = delivery({ events: [event(), event()] })
  expectRejected(t, h, await post(h.port, '/wh', many.headers, many.body), 413, 'payload_too_large')
})

test('F1 at the default 1 MiB limit: 1,048,577 bytes with Content-Length -> 413 before reading', async (t) => {
  const h = await harness(t)
  const d = delivery()
  // Only the head is sent: the answer must come without any body byte.
  const r = parseRaw(await rawRequest(h.port, requestHead('/wh', d, ['Content-Length: 1048577']) + '\r\n'))
  t.equal(r.status, 413)
  t.equal(r.body?.code, 'payload_too_large')
  t.equal(h.calls(), 0)
})

test('415: any Content-Encoding but identity, named in the message; nothing is inflated (F3)', async (t) => {
  const h = await harness(t)
  const d = delivery()
  const gz = zlib.gzipSync(d.body)
  for (const [encoding, bytes] of [['gzip', gz], ['br', zlib.brotliCompressSync(d.body)], ['gzip, gzip', zlib.gzipSync(gz)]] as const) {
    const signed = delivery({ payload: bytes })
    const res = await post(h.port, '/wh', { ...signed.headers, 'content-encoding': encoding }, signed.body)
    expectRejected(t, h, res, 415, 'unsupported_media_type')
    t.match(res.json().message, `Content-Encoding ${JSON.stringify(encoding)} is not supported`)
  }
  // A gzip bomb is refused from its headers alone.
  const bomb = zlib.gzipSync(Buffer.alloc(16 * 1024 * 1024))
  const signedBomb = delivery({ payload: bomb })
  expectRejected(t, h, await post(h.port, '/wh', { ...signedBomb.headers, 'content-encoding': 'gzip' }, signedBomb.body), 415, 'unsupported_media_type')
})

test('500 configuration_error when a global express.json() consumed the body', async (t) => {
  const h = await harness(t, {}, (app) => { app.use(express.json()) })
  const d = delivery()
  const res = await post(h.port, '/wh', d.headers, d.body)
  expectRejected(t, h, res, 500, 'configuration_error')
  t.ok(String(res.json().message).includes('app.use(express.json({ verify: captureRawBody }))'), 'the message names the line that fixes it')
  // The app's other JSON routes are untouched.
  const other = await post(h.port, '/json', { 'content-type': 'application/json' }, Buffer.from('{"a":1}'))
  t.same(other.json(), { body: { a: 1 } })
})

test("a route-level express.raw({ inflate: false }) Buffer is reused", async (t) => {
  const app = express()
  let calls = 0
  app.post('/wh', express.raw({ type: 'application/json', inflate: false }), mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, bodyLimit: 2048 }), (req, res) => {
    calls++
    res.json({ received: req.webhookEvents!.length })
  })
  const port = await serve(t, app)
  const d = delivery()
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { received: 1 })
  const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
  t.equal((await post(port, '/wh', forged.headers, forged.body)).status, 401)
  const big = delivery({ payload: `[${' '.repeat(3000)}]` })
  t.equal((await post(port, '/wh', big.headers, big.body)).status, 413, "the middleware's bodyLimit still applies")
  t.equal(calls, 1)
})

test('503 + Retry-After: key server down, replay store down', async (t) => {
  const port = await closedPort()
  const h = await harness(t, { publicKey: undefined, baseUrl: `http://127.0.0.1:${port}` })
  const d = delivery()
  const res = await post(h.port, '/wh', d.headers, d.body)
  expectRejected(t, h, res, 503, 'key_unavailable')
  t.match(res.headers['retry-after'], /^\d+$/)
  const h2 = await harness(t, { replay: failingStore() })
  const res2 = await post(h2.port, '/wh', d.headers, d.body)
  expectRejected(t, h2, res2, 503, 'replay_store_unavailable')
  t.match(res2.headers['retry-after'], /^\d+$/)
})

test('C2 (two Signature-Input lines) -> 400; C10 (headers only as trailers) -> 400 missing_header', async (t) => {
  const h = await harness(t)
  const d = delivery()
  const evil = d.headers['signature-input'].replace('keyid="mckey"', 'keyid="evil"')
  const r1 = parseRaw(await rawRequest(h.port, requestHead('/wh', d, [`Signature-Input: ${evil}`, `Content-Length: ${d.body.length}`]) + '\r\n' + d.body.toString()))
  t.equal(r1.status, 400)
  t.equal(r1.body?.code, 'malformed_header')
  const body = d.body.toString()
  const trailers = `content-digest: ${d.headers['content-digest']}\r\nsignature-input: ${d.headers['signature-input']}\r\nsignature: ${d.headers.signature}\r\n`
  const head = requestHead('/wh', d, ['Transfer-Encoding: chunked'], ['content-digest', 'signature-input', 'signature'])
  const r2 = parseRaw(await rawRequest(h.port, `${head}\r\n${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n${trailers}\r\n`))
  t.equal(r2.status, 400)
  t.equal(r2.body?.code, 'missing_header')
  t.equal(h.calls(), 0)
})

test('options are validated at construction: TypeError naming the option', async (t) => {
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ publicKey: KEYS.publicKey }, /customerHandles/],
    [{ publicKey: KEYS.publicKey, customerHandles: [] }, /customerHandles/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], bodyLimit: 0 }, /bodyLimit/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], maxAge: -1 }, /maxAge/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: 'redis' }, /replay/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], logger: {} }, /logger/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], verifyOnThreadPool: 1 }, /verifyOnThreadPool/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], limit: '1mb' }, /limit/],
    [{ customerHandles: [HANDLE], baseUrl: 'http://evil.example' }, /baseUrl/],
  ]
  for (const [opts, message] of bad) t.throws(() => mailchannelsWebhooks(opts as never), { name: 'TypeError', message }, JSON.stringify(Object.keys(opts)))
})

test("customerHandles: 'any' warns through the logger", async (t) => {
  const { logger, entries } = recordingLogger()
  mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: 'any', logger })
  t.ok(entries.some((e) => e.level === 'warn' && /customerHandles is 'any'/.test(e.msg ?? '')))
})

test('app.use(mailchannelsWebhooks(...)) verifies POST deliveries only: GET /health and other methods pass through untouched', async (t) => {
  for (const mount of ['/webhooks', '/'] as const) {
    const app = express()
    let calls = 0
    app.use(mount, mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false }))
    app.get('/health', (_req, res) => { res.json({ ok: true }) })
    app.head('/webhooks/mc', (_req, res) => { res.status(204).end() })
    app.post('/webhooks/mc', (req, res) => { calls++; res.json({ received: req.webhookEvents!.length }) })
    app.post('/api', express.json(), (req, res) => { res.json({ body: req.body as unknown }) })
    const port = await serve(t, app)
    const health = await fetch(`http://127.0.0.1:${port}/health`)
    t.equal(health.status, 200, `${mount}: GET /health`)
    t.same(await health.json(), { ok: true })
    t.equal((await fetch(`http://127.0.0.1:${port}/webhooks/mc`, { method: 'HEAD' })).status, 204, `${mount}: HEAD`)
    const d = delivery()
    t.same((await post(port, '/webhooks/mc', d.headers, d.body)).json(), { received: 1 }, `${mount}: a delivery is verified`)
    const unsigned = await post(port, '/webhooks/mc', { 'content-type': 'application/json' }, Buffer.from('[]'))
    t.equal(unsigned.status, 400, `${mount}: an unsigned POST is refused`)
    const api = await post(port, '/api', { 'content-type': 'application/json' }, Buffer.from('{"a":1}'))
    if (mount === '/webhooks') t.same(api.json(), { body: { a: 1 } }, 'a POST outside the mount path is untouched')
    else t.equal(api.status, 400, 'mounted at the root, every POST of the app is verified (fail closed)')
    t.equal(calls, 1)
  }
})

test('mounted twice (app-wide and on the route), a delivery is verified and claimed once', async (t) => {
  const app = express()
  const replay = new MemoryReplayStore()
  let calls = 0
  app.use(mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay }))
  app.post('/wh', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay }), (req, res) => { calls++; res.json({ received: req.webhookEvents!.length }) })
  const port = await serve(t, app)
  const d = delivery()
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { received: 1 })
  await new Promise((resolve) => setTimeout(resolve, 10))
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { duplicate: true })
  t.equal(calls, 1)
})

test('webhookEventsOf(req): the verified events, undefined on a request let through (never throws)', async (t) => {
  const app = express()
  const seen: Array<[string, number | undefined]> = []
  app.all('/wh', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false }), (req, res) => {
    seen.push([req.method, webhookEventsOf(req)?.length])
    res.status(204).end()
  })
  app.post('/plain', (req, res) => { seen.push(['plain', webhookEventsOf(req)?.length]); res.status(204).end() })
  const port = await serve(t, app)
  const d = delivery({ events: [event(), event()] })
  t.equal((await post(port, '/wh', d.headers, d.body)).status, 204)
  t.equal((await fetch(`http://127.0.0.1:${port}/wh`)).status, 204)
  t.equal((await post(port, '/plain', {}, Buffer.from('x'))).status, 204)
  t.same(seen, [['POST', 2], ['GET', undefined], ['plain', undefined]])
})

run(t)
