// The web entry's own rules, on Node with fetch Requests built in-process: options validated
// once, the body read once and never past bodyLimit, the replay claim settled by onEvents'
// answer, failures answered like the Node receivers.
import t from 'tap'
import { verifyWebhook } from '../../src/index.js'
import type { ReplayStore } from '../../src/replay/types.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { createWebhookHandler, verifyWebhookRequest, type WebhookEvent } from '../../src/web/index.js'

const keys = generateSigningKeyPair()
const CUSTOMER = 'acct_web'
let n = 0
const sign = (extra: Record<string, unknown> = {}): SignedWebhook => signWebhook({
  events: [{ event: 'delivered', customer_handle: CUSTOMER, timestamp: 1, request_id: `r${++n}`, ...extra }],
  privateKey: keys.privateKey,
})
const request = (signed: SignedWebhook, init: RequestInit = {}): Request =>
  new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: signed.body, ...init })
const base = { publicKey: keys.publicKey, customerHandles: [CUSTOMER] }

/** A body that never ends, counting how many chunks were pulled from it. */
function endless (chunkSize: number): { stream: ReadableStream<Uint8Array>, pulls: () => number } {
  let pulls = 0
  const stream = new ReadableStream<Uint8Array>({
    pull (controller) {
      pulls++
      controller.enqueue(new Uint8Array(chunkSize).fill(0x20))
    },
  }, { highWaterMark: 0 })
  return { stream, pulls: () => pulls }
}

t.test('options are validated once, at creation, with a TypeError naming the option', async (t) => {
  const onEvents = (): undefined => undefined
  t.throws(() => createWebhookHandler({ publicKey: keys.publicKey, onEvents } as never), { name: 'TypeError', message: /customerHandles is required/ })
  t.throws(() => createWebhookHandler({ ...base } as never), { name: 'TypeError', message: /onEvents/ })
  t.throws(() => createWebhookHandler({ ...base, onEvents, customerHandle: 'x' } as never), { name: 'TypeError', message: /customerHandle is not a known option/ })
  t.throws(() => createWebhookHandler({ ...base, onEvents, bodyLimit: 0 }), { name: 'TypeError', message: /bodyLimit/ })
  t.throws(() => createWebhookHandler({ ...base, onEvents, logger: {} as never }), { name: 'TypeError', message: /logger/ })
  t.throws(() => createWebhookHandler({ ...base, onEvents, replay: {} as never }), { name: 'TypeError', message: /replay/ })
  t.throws(() => createWebhookHandler({ ...base, onEvents, publicKey: 'not a key' }), { name: 'TypeError', message: /publicKey/ })
  const warnings: string[] = []
  const logger = { debug () {}, info () {}, error () {}, warn (_o: unknown, msg: string) { warnings.push(msg) } }
  createWebhookHandler({ publicKey: keys.publicKey, customerHandles: 'any', onEvents, logger })
  t.match(warnings, [/customerHandles is 'any'/], "'any' is accepted, with a warning")
})

t.test('onEvents gets the events; nothing returned answers 204; a resend is a duplicate', async (t) => {
  const seen: WebhookEvent[][] = []
  const handler = createWebhookHandler({ ...base, onEvents: (events, req) => { t.type(req, Request); seen.push(events) } })
  const signed = sign()
  const first = await handler(request(signed))
  t.equal(first.status, 204)
  const again = await handler(request(signed))
  t.equal(again.status, 200)
  t.strictSame(await again.json(), { duplicate: true })
  t.equal(seen.length, 1, 'onEvents ran once')
  t.equal(seen[0]![0]!.customerHandle, CUSTOMER)
})

t.test('onEvents throwing: 500 without internals, the claim released so the retry is handled', async (t) => {
  const errors: unknown[] = []
  const logger = { debug () {}, info () {}, warn () {}, error (o: unknown) { errors.push(o) } }
  let calls = 0
  const handler = createWebhookHandler({
    ...base,
    logger,
    onEvents: () => {
      if (++calls === 1) throw new Error('database down at 10.0.0.7')
      return new Response('ok')
    },
  })
  const signed = sign()
  const failed = await handler(request(signed))
  t.equal(failed.status, 500)
  const body = await failed.json() as Record<string, unknown>
  t.match(body, { statusCode: 500, error: 'Internal Server Error' })
  t.notMatch(JSON.stringify(body), /database|10\.0\.0\.7/, 'the error message stays in the log')
  t.match(errors, [{ err: 'database down at 10.0.0.7' }])
  const retry = await handler(request(signed))
  t.equal(retry.status, 200, 'the retry reaches onEvents')
  t.equal(calls, 2)
  t.strictSame(await (await handler(request(signed))).json(), { duplicate: true }, 'handled now')
})

t.test('a non-2xx answer from onEvents releases the claim', async (t) => {
  let calls = 0
  const handler = createWebhookHandler({ ...base, onEvents: () => new Response(null, { status: ++calls === 1 ? 503 : 200 }) })
  const signed = sign()
  t.equal((await handler(request(signed))).status, 503)
  t.equal((await handler(request(signed))).status, 200)
  t.equal(calls, 2)
})

t.test('replay: false hands every copy over; a failing store answers 503 with Retry-After', async (t) => {
  let calls = 0
  const open = createWebhookHandler({ ...base, replay: false, onEvents: () => { calls++ } })
  const signed = sign()
  await open(request(signed))
  await open(request(signed))
  t.equal(calls, 2)

  const broken: ReplayStore = { claim: () => Promise.reject(new Error('down')), complete: async () => {}, release: async () => {} }
  const closed = createWebhookHandler({ ...base, replay: broken, onEvents: () => { calls++ } })
  const res = await closed(request(sign()))
  t.equal(res.status, 503)
  t.equal(res.headers.get('retry-after'), '10')
  t.match(await res.json(), { statusCode: 503, code: 'replay_store_unavailable', error: 'Service Unavailable' })
  t.equal(calls, 2, 'onEvents not called')
})

t.test('other methods: 405 with Allow: POST, the body untouched', async (t) => {
  const handler = createWebhookHandler({ ...base, onEvents: () => { t.fail('not called') } })
  for (const method of ['GET', 'HEAD', 'PUT', 'OPTIONS']) {
    const res = await handler(new Request('http://127.0.0.1/hook', { method }))
    t.equal(res.status, 405, method)
    t.equal(res.headers.get('allow'), 'POST')
    t.equal(res.headers.get('content-type'), 'application/json; charset=utf-8')
  }
})

t.test('transport: Content-Encoding refused (415); a Content-Length over the limit refused before reading (413)', async (t) => {
  const handler = createWebhookHandler({ ...base, bodyLimit: 1024, onEvents: () => { t.fail('not called') } })
  const signed = sign()
  const gz = await handler(request(signed, { headers: { ...signed.headers, 'content-encoding': 'gzip' } }))
  t.equal(gz.status, 415)
  t.match(await gz.json(), { code: 'unsupported_media_type' })

  const body = endless(512)
  const declared = new Request('http://127.0.0.1/hook', { method: 'POST', headers: { ...signed.headers, 'content-length': '4096' }, body: body.stream, duplex: 'half' } as RequestInit)
  const res = await handler(declared)
  t.equal(res.status, 413)
  t.match(await res.json(), { statusCode: 413, code: 'payload_too_large', error: 'Payload Too Large' })
  t.equal(body.pulls(), 0, 'no body byte read')
})

t.test('a streamed body is read only until it passes bodyLimit (413), whatever its length', async (t) => {
  const handler = createWebhookHandler({ ...base, bodyLimit: 4096, onEvents: () => { t.fail('not called') } })
  const body = endless(1000)
  const res = await handler(new Request('http://127.0.0.1/hook', { method: 'POST', headers: sign().headers, body: body.stream, duplex: 'half' } as RequestInit))
  t.equal(res.status, 413)
  t.ok(body.pulls() <= 6, `stopped after ${body.pulls()} chunks of 1000 bytes`)
})

t.test('a body already read is a configuration error (500), not a verification failure', async (t) => {
  const handler = createWebhookHandler({ ...base, onEvents: () => { t.fail('not called') } })
  const req = request(sign())
  await req.text()
  const res = await handler(req)
  t.equal(res.status, 500)
  t.match(await res.json(), { code: 'configuration_error', message: /already read/ })
})

t.test('verifyWebhookRequest resolves what Webhooks.verify resolves', async (t) => {
  const signed = sign()
  const expected = await verifyWebhook({ payload: signed.body, headers: signed.headers, ...base })
  t.strictSame(await verifyWebhookRequest(request(signed), base), expected)

  const tampered = new Uint8Array(signed.body)
  tampered[5] = tampered[5]! ^ 1
  const bad = await verifyWebhook({ payload: tampered, headers: signed.headers, ...base })
  t.equal(bad.error?.type, 'digest_mismatch')
  t.strictSame(await verifyWebhookRequest(request(signed, { body: tampered }), base), bad)

  const other = await verifyWebhookRequest(request(sign({ customer_handle: 'acct_other' })), base)
  t.equal(other.error?.type, 'customer_not_allowed')

  const invalid = await verifyWebhookRequest(request(signed), { ...base, bodyLimit: -1 })
  t.match(invalid, { data: null, error: { type: 'validation_error', message: /bodyLimit/ } }, 'bad options resolve an error, never throw')

  const body = endless(1000)
  const big = await verifyWebhookRequest(new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: body.stream, duplex: 'half' } as RequestInit), { ...base, bodyLimit: 2500 })
  t.match(big, { data: null, error: { type: 'payload_too_large' } })
  t.ok(body.pulls() <= 5, `read at most the limit (${body.pulls()} chunks)`)

  const used = request(signed)
  await used.arrayBuffer()
  t.match(await verifyWebhookRequest(used, base), { data: null, error: { type: 'configuration_error' } })
})

t.test('verifyWebhookRequest reads the signature fields as Webhooks.verify does (its own reader of fetch Headers)', async (t) => {
  const signed = sign()
  const variants: Record<string, (h: Headers) => void> = {
    'no Content-Digest': (h) => { h.delete('content-digest') },
    'an empty Signature': (h) => { h.set('signature', '') },
    'a Signature-Input of SP and HTAB only': (h) => { h.set('signature-input', ' \t ') },
    'a Signature over 1024 bytes': (h) => { h.set('signature', `${h.get('signature')!}${' '.repeat(600)};x=${'a'.repeat(600)}`) },
    'two Signature-Input field lines': (h) => { h.append('signature-input', h.get('signature-input')!) },
    'padded with SP and HTAB': (h) => { h.set('content-digest', ` \t${h.get('content-digest')!}\t `) },
  }
  for (const [name, change] of Object.entries(variants)) {
    const headers = new Headers(signed.headers)
    change(headers)
    const expected = await verifyWebhook({ payload: signed.body, headers, ...base })
    const got = await verifyWebhookRequest(new Request('http://127.0.0.1/hook', { method: 'POST', headers, body: signed.body }), base)
    t.strictSame(got, expected, name)
    if (name === 'padded with SP and HTAB') t.equal(got.error, null, `${name}: verifies`)
    else t.not(got.error, null, `${name}: refused`)
  }
})

t.test('keyIds are fetched when the first delivery arrives, not at creation, and once', async (t) => {
  const { serveKeys, startKeyServer, delay } = await import('../helpers/key-server.js')
  const server = await startKeyServer(serveKeys({ k1: keys.publicKey }))
  t.teardown(() => server.close())
  let calls = 0
  const handler = createWebhookHandler({ baseUrl: server.baseUrl, keyIds: ['k1'], customerHandles: [CUSTOMER], onEvents: () => { calls++ } })
  await delay(50)
  t.equal(server.keyFetches(), 0, 'nothing fetched at creation (Workers allow no I/O outside a request)')
  const delivery = (): SignedWebhook => signWebhook({ events: [{ event: 'delivered', customer_handle: CUSTOMER, timestamp: 1, request_id: `k${++n}` }], privateKey: keys.privateKey, keyId: 'k1' })
  t.equal((await handler(new Request('http://127.0.0.1/', { method: 'GET' }))).status, 405)
  t.equal(server.keyFetches(), 0, 'a request that is not a delivery fetches nothing')
  const [a, b] = await Promise.all([handler(request(delivery())), handler(request(delivery()))])
  t.equal(a.status, 204)
  t.equal(b.status, 204)
  t.equal((await handler(request(delivery()))).status, 204)
  t.equal(server.keyFetches(), 1, 'one fetch for every delivery')
  t.equal(calls, 3)
})

t.test('body chunks: bytes from another realm are read as bytes; anything else is invalid_payload (400)', async (t) => {
  const vm = await import('node:vm')
  const handler = createWebhookHandler({ ...base, onEvents: (events) => Response.json(events.length) })
  const signed = sign()
  const foreign = vm.runInNewContext('(bytes) => new Uint8Array(bytes)')(Array.from(signed.body)) as Uint8Array
  t.notOk(foreign instanceof Uint8Array, 'the chunk is from another realm')
  const streamOf = (chunk: unknown): ReadableStream => new ReadableStream({ start (c) { c.enqueue(chunk); c.close() } })
  const ok = await handler(new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: streamOf(foreign), duplex: 'half' } as RequestInit))
  t.equal(ok.status, 200)
  t.equal(await ok.json(), 1)
  const text = await handler(new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: streamOf('[]'), duplex: 'half' } as RequestInit))
  t.equal(text.status, 400)
  t.match(await text.json(), { code: 'invalid_payload' })
})
