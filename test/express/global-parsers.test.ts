// An Express app as people have it: global express.json() / urlencoded() / text() before every
// route, the webhook route among the others. With `verify: captureRawBody` (or NestJS's
// req.rawBody) the middleware verifies the exact bytes the parsers read; without it, it fails
// closed and names the line that fixes it. Express 4 and 5, over real sockets.
import http from 'node:http'
import zlib from 'node:zlib'
import type { Express as ExpressApp } from 'express'
import t, { type Test } from 'tap'
import { captureRawBody, mailchannelsWebhooks, type MailChannelsWebhooksOptions } from '../../src/express/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import type { WebhookEvent } from '../../src/events/types.js'
import { conformance, delivery, event, EXPRESS_VERSIONS, HANDLE, KEYS, OTHER_KEYS, post, recordingLogger, serve, type Express, type Reply } from './helpers/server.js'

let express: Express = EXPRESS_VERSIONS[0]![1]
const { test, run } = conformance((e) => { express = e })

const PATTERN = 'app.use(express.json({ verify: captureRawBody }))'

interface App { port: number, handled: Array<{ events: WebhookEvent[], body: unknown }> }

/**
 * The app: `parsers` installed globally first, then other routes echoing their parsed body, then
 * the webhook route, then a 404. Nothing of the middleware's is set up before the parsers.
 */
async function app (t: Test, parsers: (app: ExpressApp) => void, options: Partial<MailChannelsWebhooksOptions> = {}): Promise<App> {
  const a = express()
  parsers(a)
  const handled: App['handled'] = []
  a.post('/api/echo', (req, res) => { res.json({ body: req.body as unknown }) })
  a.post('/webhooks/mailchannels', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, ...options }), (req, res) => {
    handled.push({ events: req.webhookEvents, body: req.body })
    res.json({ received: req.webhookEvents.length })
  })
  return { port: await serve(t, a), handled }
}

const withPattern = (a: ExpressApp): void => {
  a.use(express.json({ verify: captureRawBody }))
  a.use(express.urlencoded({ extended: false, verify: captureRawBody }))
  a.use(express.text({ verify: captureRawBody }))
}

const hook = (port: number, d: { headers: Record<string, string>, body: Buffer }, headers: Record<string, string> = {}): Promise<Reply> =>
  post(port, '/webhooks/mailchannels', { ...d.headers, ...headers }, d.body)

test('with verify: captureRawBody on global json/urlencoded/text: a delivery is verified from the exact bytes and handled', async (t) => {
  const h = await app(t, withPattern)
  const d = delivery({ events: [event(), event({ event: 'open' })] })
  const res = await hook(h.port, d)
  t.equal(res.status, 200)
  t.same(res.json(), { received: 2 })
  t.same(h.handled[0]?.events.map((e) => e.event), ['delivered', 'open'])
  t.same(h.handled[0]?.body, JSON.parse(d.body.toString()), "the app's parser still parsed the webhook route's body")
  // A body that JSON.stringify(req.body) would not reproduce (indentation, a final newline): the bytes are verified, not a re-serialisation.
  const spaced = delivery({ payload: `[ ${JSON.stringify(event(), null, 2)} ]\n` })
  t.same((await hook(h.port, spaced)).json(), { received: 1 }, 'bytes that JSON.stringify(req.body) would not reproduce')
  t.same((await post(h.port, '/webhooks/mailchannels', spaced.headers, [spaced.body.subarray(0, 7), spaced.body.subarray(7)])).json(), { received: 1 }, 'chunked')
  // Each parser keeps the bytes it read: a delivery labelled text/plain or form-encoded is read by text() / urlencoded().
  for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
    const other = delivery()
    t.same((await hook(h.port, other, { 'content-type': type })).json(), { received: 1 }, `read by the ${type} parser`)
  }
  t.equal(h.handled.length, 5)
})

test('with the pattern: forged and tampered deliveries are refused, the handler never runs', async (t) => {
  const h = await app(t, withPattern)
  const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
  const f = await hook(h.port, forged)
  t.equal(f.status, 401)
  t.equal(f.json().code, 'signature_invalid')
  const d = delivery()
  const tampered = await post(h.port, '/webhooks/mailchannels', d.headers, Buffer.from(d.body.toString().replace('delivered', 'bounced')))
  t.equal(tampered.status, 401)
  t.equal(tampered.json().code, 'digest_mismatch')
  t.equal(h.handled.length, 0)
})

test("F3 behind the app's global parsers: any Content-Encoding is refused, though body-parser inflated the body before verify saw it", async (t) => {
  const h = await app(t, withPattern)
  const d = delivery()
  // Signed over the plain bytes and sent gzipped: what body-parser hands to verify matches the digest.
  for (const [encoding, bytes] of [['gzip', zlib.gzipSync(d.body)], ['deflate', zlib.deflateSync(d.body)], ['br', zlib.brotliCompressSync(d.body)]] as const) {
    const res = await post(h.port, '/webhooks/mailchannels', { ...d.headers, 'content-encoding': encoding }, bytes)
    t.equal(res.status, 415, encoding)
    // Express 4's body-parser cannot inflate br and refuses it itself (its own 415 page); any other is the middleware's refusal.
    if (!/html/.test(String(res.headers['content-type']))) {
      t.equal(res.json().code, 'unsupported_media_type')
      t.match(res.json().message, `Content-Encoding ${JSON.stringify(encoding)} is not supported`)
    } else t.equal(encoding, 'br')
  }
  // Signed over the compressed bytes: refused as well.
  const gz = delivery({ payload: zlib.gzipSync(Buffer.from(`[${JSON.stringify(event())}]`)) })
  t.equal((await hook(h.port, gz, { 'content-encoding': 'gzip' })).status, 415)
  t.equal(h.handled.length, 0)
  t.equal((await hook(h.port, d)).status, 200, 'the same delivery uncompressed is accepted')
})

test("with the pattern: the app's other routes keep their parsed bodies", async (t) => {
  const h = await app(t, withPattern)
  t.same((await post(h.port, '/api/echo', { 'content-type': 'application/json' }, Buffer.from('{"a":1}'))).json(), { body: { a: 1 } })
  t.same((await post(h.port, '/api/echo', { 'content-type': 'application/x-www-form-urlencoded' }, Buffer.from('a=1&b=x'))).json(), { body: { a: '1', b: 'x' } })
  t.same((await post(h.port, '/api/echo', { 'content-type': 'text/plain' }, Buffer.from('hello'))).json(), { body: 'hello' })
  t.same((await post(h.port, '/api/echo', { 'content-type': 'application/json', 'content-encoding': 'gzip' }, zlib.gzipSync('{"z":true}'))).json(), { body: { z: true } },
    'gzip is still inflated for the app\'s own routes')
})

test("with the pattern: a body the app's JSON parser refuses is answered by the app (400) before the middleware runs", async (t) => {
  const h = await app(t, withPattern)
  const broken = delivery({ payload: '[{"event":' })
  const res = await hook(h.port, broken)
  t.equal(res.status, 400, "the app's parser (and its error handler) answer first")
  t.equal(h.handled.length, 0)
})

test('with the pattern and replay protection: an exact resend is a duplicate', async (t) => {
  const h = await app(t, withPattern, { replay: new MemoryReplayStore() })
  const d = delivery()
  t.same((await hook(h.port, d)).json(), { received: 1 })
  t.same((await hook(h.port, d)).json(), { duplicate: true })
  t.equal(h.handled.length, 1)
})

test('without the pattern: 500 configuration_error naming the line that fixes it, for each global parser; other routes untouched', async (t) => {
  for (const [name, install] of [
    ['express.json()', (a: ExpressApp) => { a.use(express.json()) }],
    ['express.urlencoded()', (a: ExpressApp) => { a.use(express.urlencoded({ extended: false })) }],
    ['express.text()', (a: ExpressApp) => { a.use(express.text({ type: '*/*' })) }],
  ] as const) {
    const h = await app(t, install)
    const d = delivery()
    const type = name === 'express.urlencoded()' ? 'application/x-www-form-urlencoded' : 'application/json'
    const res = await hook(h.port, d, { 'content-type': type })
    t.equal(res.status, 500, name)
    const body = res.json()
    t.equal(body.code, 'configuration_error')
    t.ok(String(body.message).includes(PATTERN), `${name}: the message names ${PATTERN}`)
    t.match(body.message, /mailchannels-webhooks\/express/)
    t.equal(h.handled.length, 0)
  }
  const h = await app(t, (a) => { a.use(express.json()) })
  t.same((await post(h.port, '/api/echo', { 'content-type': 'application/json' }, Buffer.from('{"a":1}'))).json(), { body: { a: 1 } })
})

test('without the pattern: the logger gets the line that fixes it once, and every refusal', async (t) => {
  const { logger, entries } = recordingLogger()
  const h = await app(t, (a) => { a.use(express.json()) }, { logger })
  for (let i = 0; i < 3; i++) t.equal((await hook(h.port, delivery())).status, 500)
  const fix = entries.filter((e) => e.msg?.includes(PATTERN) === true)
  t.equal(fix.length, 1, 'told once')
  t.equal(fix[0]?.level, 'error')
  t.equal(entries.filter((e) => e.msg === 'mailchannels webhook rejected').length, 3, 'each refusal logged as before')
})

/** NestJS's `rawBody: true`: its global parsers get body-parser's verify setting `req.rawBody` to the Buffer (platform-express get-body-parser-options.util.ts). */
const nestRawBody = (req: http.IncomingMessage & { rawBody?: Buffer }, _res: http.ServerResponse, buffer: Buffer): void => {
  if (Buffer.isBuffer(buffer)) req.rawBody = buffer
}

test("NestJS-style req.rawBody (a Buffer) is verified; a string rawBody is not trusted", async (t) => {
  const h = await app(t, (a) => {
    a.use(express.json({ verify: nestRawBody }))
    a.use(express.urlencoded({ extended: true, verify: nestRawBody }))
  })
  const d = delivery()
  t.same((await hook(h.port, d)).json(), { received: 1 })
  const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
  t.equal((await hook(h.port, forged)).status, 401)
  t.equal((await post(h.port, '/webhooks/mailchannels', { ...d.headers, 'content-encoding': 'gzip' }, zlib.gzipSync(d.body))).status, 415)
  t.same((await post(h.port, '/api/echo', { 'content-type': 'application/json' }, Buffer.from('{"a":1}'))).json(), { body: { a: 1 } })
  t.equal(h.handled.length, 1)

  // A common hand-written variant keeps a decoded string: not the bytes, so not used (fails closed).
  const s = await app(t, (a) => { a.use(express.json({ verify: (req, _res, buf) => { (req as { rawBody?: string }).rawBody = buf.toString('utf8') } })) })
  const res = await hook(s.port, delivery())
  t.equal(res.status, 500)
  t.equal(res.json().code, 'configuration_error')
})

run(t)
