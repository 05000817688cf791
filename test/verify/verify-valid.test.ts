import crypto from 'node:crypto'
import t from 'tap'
import { runtime } from '#crypto'
import { MailChannels, verifyWebhook, WEBHOOK_EVENT_TYPES, type WebhookEvent } from '../../src/index.js'
import { generateSigningKeyPair, signWebhook, type WireEvent } from '../../src/testing/index.js'
import { assertAccepted } from '../helpers/assert.js'
import { B0, nowSeconds, signRaw, TEST_PUBLIC_KEY, TEST_PUBLIC_KEY_PEM } from '../helpers/sign.js'

// A deterministic delivery: fixed values, signed with the RFC 8032 §7.1 TEST 1 key, so its bytes never change.
const VECTOR = {
  publicKey: 'MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=',
  payload: '[{"email":"sender@example.com","customer_handle":"abc123","timestamp":1738868390,"event":"delivered","request_id":"req_1"}]',
  headers: {
    'content-digest': 'sha-256=:qwouBVWDsq8VuYhySzPH0dgSIxx8moiqw08rdmRil00=:',
    'signature-input': 'sig_1738775282=("content-digest");created=1738868393;alg="ed25519";keyid="mckey"',
    signature: 'sig_1738775282=:QwhlXsI8CErrbixqU+wVEKElFKeJl9wzCr6u4CoOi9KEQwpU2QDVGjwo1st345kgmJYS1HPbmUp/wXOEAjDsCg==:',
  },
}
const CREATED = 1738868393

t.test('the deterministic delivery (RFC 8032 §7.1 TEST 1 key), pinned', async (t) => {
  const expected = [{ event: 'delivered', customerHandle: 'abc123', timestamp: 1738868390, email: 'sender@example.com', requestId: 'req_1' }]
  for (const offset of [-60, 0, 10, 300]) {
    const r = await verifyWebhook({ ...VECTOR, now: (CREATED + offset) * 1000 })
    t.strictSame(assertAccepted(t, r), expected, `accepted at created${offset >= 0 ? '+' : ''}${offset}, events camelCased exactly`)
  }
  // now as a Date and as a function returning a Date
  t.equal((await verifyWebhook({ ...VECTOR, now: new Date((CREATED + 10) * 1000) })).error, null)
  t.equal((await verifyWebhook({ ...VECTOR, now: () => new Date((CREATED + 10) * 1000) })).error, null)
  // the same vector just outside the window
  t.equal((await verifyWebhook({ ...VECTOR, now: (CREATED + 301) * 1000 })).error?.type, 'signature_expired')
  t.equal((await verifyWebhook({ ...VECTOR, now: (CREATED - 61) * 1000 })).error?.type, 'signature_from_future')
  // the key as PEM works too
  const pem = crypto.createPublicKey({ key: Buffer.from(VECTOR.publicKey, 'base64'), format: 'der', type: 'spki' }).export({ format: 'pem', type: 'spki' }).toString()
  t.equal((await verifyWebhook({ ...VECTOR, publicKey: pem, now: (CREATED + 10) * 1000 })).error, null, 'PEM key accepted')
  // Ed25519 is deterministic: re-signing with the seed gives the same signature bytes
  const seed = Buffer.from('9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60', 'hex')
  const privateKey = crypto.createPrivateKey({ key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]), format: 'der', type: 'pkcs8' })
  const signed = signWebhook({ payload: VECTOR.payload, privateKey, created: CREATED, label: 'sig_1738775282' })
  t.same(signed.headers['content-digest'], VECTOR.headers['content-digest'])
  t.same(signed.headers['signature-input'], VECTOR.headers['signature-input'])
  t.same(signed.headers.signature, VECTOR.headers.signature, 'signWebhook reproduces the vector')
})

t.test('signWebhook round trip for all ten event types and an unknown future type (F14)', async (t) => {
  const keys = generateSigningKeyPair()
  const base = { customer_handle: 'acct_1', timestamp: 1700000000, email: 's@example.com', request_id: 'r1', smtp_id: '<m1@tx>', campaign_id: 'c1', recipients: ['a@example.net', 'b@example.net'] }
  const extra: Record<string, Record<string, unknown>> = {
    open: { user_agent: 'UA', ip: '192.0.2.1' },
    click: { user_agent: 'UA', ip: '192.0.2.1', url: 'https://example.com/x' },
    'hard-bounced': { status: '5.1.1', reason: 'User does not exist' },
    'soft-bounced': { status: '4.2.2', reason: 'Mailbox full' },
    dropped: { status: '5.7.1', reason: 'Recipient suppressed' },
  }
  const camel = (w: Record<string, unknown>): Record<string, unknown> => {
    const names: Record<string, string> = { customer_handle: 'customerHandle', request_id: 'requestId', smtp_id: 'smtpId', campaign_id: 'campaignId', user_agent: 'userAgent' }
    return Object.fromEntries(Object.entries(w).map(([k, v]) => [names[k] ?? k, v]))
  }
  const wire: WireEvent[] = WEBHOOK_EVENT_TYPES.map((event) => ({ event, ...base, ...(extra[event] ?? {}) }))
  const future: WireEvent = {
    event: 'future-type',
    customer_handle: 'acct_1',
    timestamp: 1700000001,
    email: 'nul\u0000byte@example.com',
    new_field: 'lone \ud800 surrogate',
    nested: { a: 1, b: [true, null] },
  }
  const signed = signWebhook({ events: [...wire, future], privateKey: keys.privateKey })
  t.ok(signed.body.toString('utf8').includes('\\ud800'), 'the lone surrogate is escaped on the wire')
  const r = await verifyWebhook({ payload: signed.body, headers: signed.headers, publicKey: keys.publicKey, customerHandles: ['acct_1'] })
  const events = assertAccepted(t, r)
  t.equal(events.length, 11)
  for (let i = 0; i < wire.length; i++) t.strictSame(events[i], camel(wire[i]!), `${wire[i]!.event} mapped to camelCase exactly`)
  const unknown = events[10] as Extract<WebhookEvent, { event: 'unknown' }>
  t.strictSame(unknown, {
    event: 'unknown',
    eventName: 'future-type',
    customerHandle: 'acct_1',
    timestamp: 1700000001,
    email: 'nul\u0000byte@example.com',
    fields: { new_field: 'lone \ud800 surrogate', nested: { a: 1, b: [true, null] } },
  }, 'F14: unknown variant with eventName and fields; \\u0000 and a lone \\ud800 pass through')
  // and the typed events sign back to the same body (toWireEvent is the inverse)
  const again = signWebhook({ events, privateKey: keys.privateKey, created: nowSeconds() })
  t.strictSame(JSON.parse(again.body.toString('utf8')), JSON.parse(signed.body.toString('utf8')), 'WebhookEvent -> wire -> WebhookEvent is lossless')
})

t.test('static and instance verify give the same result', async (t) => {
  const keys = generateSigningKeyPair()
  const signed = signWebhook({ payload: B0, privateKey: keys.privateKey })
  const client = new MailChannels('mc_test_api_key', { baseUrl: 'http://127.0.0.1:9' })
  const opts = { payload: signed.body, headers: signed.headers, publicKey: keys.publicKeyPem }
  const a = await verifyWebhook(opts)
  const b = await client.webhooks.verify(opts)
  t.equal(a.error, null)
  t.strictSame(b, a, 'same accepted result')
  const bad = { ...opts, payload: Buffer.from(B0.replace('delivered', 'hard-bounced')) }
  t.strictSame(await client.webhooks.verify(bad), await verifyWebhook(bad), 'same rejected result')
  t.equal((await verifyWebhook(bad)).error?.type, 'digest_mismatch')
})

t.test('payload as string, Buffer and Uint8Array', async (t) => {
  const d = signRaw({ params: `("content-digest");created=${nowSeconds()};alg="ed25519";keyid="mckey"`, body: B0 })
  const u8 = new Uint8Array(d.body.byteLength + 8)
  u8.set(d.body, 4)
  const payloads = {
    string: B0,
    Buffer: d.body,
    Uint8Array: new Uint8Array(d.body),
    'Uint8Array view at an offset': u8.subarray(4, 4 + d.body.byteLength),
  }
  for (const [name, payload] of Object.entries(payloads)) {
    const r = await verifyWebhook({ payload, headers: d.headers, publicKey: TEST_PUBLIC_KEY })
    t.equal(assertAccepted(t, r).length, 1, `payload as ${name}`)
  }
})

t.test('headers: plain object in any case, IncomingHttpHeaders-like, fetch Headers', async (t) => {
  const d = signRaw({ params: `("content-digest");created=${nowSeconds()};alg="ed25519";keyid="mckey"`, body: B0 })
  const h = d.headers
  const variants: Record<string, unknown> = {
    'lower-case': h,
    'Title-Case': { 'Content-Digest': h['content-digest'], 'Signature-Input': h['signature-input'], Signature: h.signature },
    'UPPER-CASE': { 'CONTENT-DIGEST': h['content-digest'], 'SIGNATURE-INPUT': h['signature-input'], SIGNATURE: h.signature },
    'IncomingHttpHeaders-like': { host: '127.0.0.1:3000', 'content-type': 'application/json', 'content-length': '115', 'set-cookie': ['a=1', 'b=2'], 'x-n': undefined, ...h },
    'single-element arrays': { 'content-digest': [h['content-digest']], 'signature-input': [h['signature-input']], signature: [h.signature] },
    'fetch Headers': new Headers({ 'Content-Type': 'application/json', ...h }),
    'padded with whitespace': { 'content-digest': ` ${h['content-digest']} `, 'signature-input': `${h['signature-input']} `, signature: ` ${h.signature}` },
  }
  for (const [name, headers] of Object.entries(variants)) {
    const r = await verifyWebhook({ payload: d.body, headers: headers as never, publicKey: TEST_PUBLIC_KEY })
    t.equal(assertAccepted(t, r).length, 1, `headers as ${name}`)
  }
})

t.test('B7 D2 legal structured-field reformatting is accepted (signed over the canonical base)', async (t) => {
  const now = nowSeconds()
  const cases: Record<string, string> = {
    'spaces after ";"': `("content-digest"); created=${now};  alg="ed25519"; keyid="mckey"`,
    'parameters reordered': `("content-digest");keyid="mckey";alg="ed25519";created=${now}`,
    'D2 alg absent': `("content-digest");created=${now};keyid="mckey"`,
    'expires in the future': `("content-digest");created=${now};expires=${now + 300};alg="ed25519";keyid="mckey"`,
    'nonce and tag': `("content-digest");created=${now};alg="ed25519";keyid="mckey";nonce="n-1";tag="mailchannels"`,
    // Rebuilt as the canonical `@signature-params` with the escapes kept (the signer serialises with structured-headers).
    'a nonce with an escaped quote and backslash': `("content-digest");created=${now};alg="ed25519";keyid="mckey";nonce="a\\"b\\\\c"`,
    'B7 created with a leading zero': `("content-digest");created=0${now};alg="ed25519";keyid="mckey"`,
    'spaces inside the inner list': `( "content-digest" );created=${now};alg="ed25519";keyid="mckey"`,
    'keyid with every allowed character class': `("content-digest");created=${now};alg="ed25519";keyid="Mc.key_~-9"`,
  }
  for (const [name, params] of Object.entries(cases)) {
    const d = signRaw({ params, body: B0 })
    const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY })
    t.equal(assertAccepted(t, r).length, 1, name)
  }
  // A label other than sig_<digits>, and a sha-512 digest / two recognised digests, are also legal.
  const d1 = signRaw({ params: `("content-digest");created=${now};alg="ed25519";keyid="mckey"`, body: B0, label: 'mc-sig.1' })
  t.equal((await verifyWebhook({ payload: d1.body, headers: d1.headers, publicKey: TEST_PUBLIC_KEY })).error, null, 'label mc-sig.1')
  const sha512 = `sha-512=:${crypto.hash('sha512', B0, 'base64')}:`
  const sha256 = `sha-256=:${crypto.hash('sha256', B0, 'base64')}:`
  for (const cd of [sha512, `${sha256}, ${sha512}`, `${sha512},${sha256}`, `unixsum2=:AAAA:, ${sha256}`]) {
    const d = signRaw({ params: `("content-digest");created=${now};alg="ed25519";keyid="mckey"`, body: B0, contentDigest: cd })
    t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY })).error, null, `Content-Digest ${cd.replace(/=:[^:]*:/g, '=:…:')}`)
  }
})

t.test('a delivery signed over the non-canonical text does not verify', async (t) => {
  // The base is rebuilt from the canonical form (RFC 9421 §2.3), so the raw text is not what is checked.
  const now = nowSeconds()
  const params = `("content-digest"); created=${now}; keyid="mckey"`
  const d = signRaw({ params, body: B0, signedParams: params })
  const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY })
  t.equal(r.error?.type, 'signature_invalid')
})

t.test('F8 [] gives an empty event list (200-equivalent)', async (t) => {
  const d = signRaw({ params: `("content-digest");created=${nowSeconds()};alg="ed25519";keyid="mckey"`, body: '[]' })
  const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY, customerHandles: ['acct_1'] })
  t.strictSame(r, { data: [], error: null })
})

t.test('publicKey given as PEM, as a CryptoKey, and (Node) as a KeyObject', async (t) => {
  const d = signRaw({ params: `("content-digest");created=${nowSeconds()};alg="ed25519";keyid="mckey"`, body: B0 })
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY_PEM })).error, null, 'PEM')
  for (const extractable of [true, false]) {
    const cryptoKey = await crypto.subtle.importKey('spki', Buffer.from(TEST_PUBLIC_KEY, 'base64'), { name: 'Ed25519' }, extractable, ['verify'])
    const options = { payload: d.body, headers: d.headers, publicKey: cryptoKey }
    t.equal((await verifyWebhook(options)).error, null, `CryptoKey (extractable: ${extractable})`)
    t.equal((await verifyWebhook({ ...options, payload: Buffer.from(d.body.toString().replace('delivered', 'bounced')) })).error?.type, 'digest_mismatch', 'and a tampered body still fails')
  }
  const wrong = await crypto.subtle.importKey('spki', crypto.generateKeyPairSync('ed25519').publicKey.export({ format: 'der', type: 'spki' }), { name: 'Ed25519' }, false, ['verify'])
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: wrong })).error?.type, 'signature_invalid', 'a CryptoKey of another key fails')
  const x25519 = (await crypto.subtle.generateKey({ name: 'X25519' }, true, ['deriveBits']) as crypto.webcrypto.CryptoKeyPair).publicKey
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: x25519 })).error?.type, 'validation_error', 'a CryptoKey of another type is refused')
  const keyObject = { payload: d.body, headers: d.headers, publicKey: crypto.createPublicKey(TEST_PUBLIC_KEY_PEM) }
  if (runtime === 'node') t.equal((await verifyWebhook(keyObject)).error, null, 'KeyObject')
  else t.equal((await verifyWebhook(keyObject)).error?.type, 'validation_error', 'the WebCrypto port takes no KeyObject')
})
