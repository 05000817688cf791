import crypto from 'node:crypto'
import path from 'node:path'
import t, { type Test } from 'tap'
import { runtime } from '#crypto'
import { KeyStore, verifyWebhook, type Logger, type Result } from '../../src/index.js'
import { importEd25519PublicKey, isWeakEd25519Point, KeyRejectedError } from '../../src/keys/public-key.js'
import { signatureBase, verifyEd25519 } from '../../src/verify/signature.js'
import { assertRejected } from '../helpers/assert.js'
import { fakeClock } from '../helpers/clock.js'
import { isSmallOrder } from '../helpers/ed25519-math.js'
import { closedPort, serveKeys, startKeyServer, type KeyBehaviour, type KeyServer } from '../helpers/key-server.js'
import { B0, nowSeconds, p0, signRaw, TEST_PUBLIC_KEY, TEST_PUBLIC_KEY_PEM, validDelivery } from '../helpers/sign.js'

const good = serveKeys({ mckey: TEST_PUBLIC_KEY_PEM })
const json = (body: unknown): ReturnType<KeyBehaviour> => ({ status: 200, body: JSON.stringify(body), headers: { 'content-type': 'application/json' } })

async function server (t: Test, behaviour: KeyBehaviour): Promise<KeyServer> {
  const s = await startKeyServer(behaviour)
  t.teardown(() => s.close())
  return s
}

function captureLogger (): Logger & { lines: unknown[] } {
  const lines: unknown[] = []
  const log = (obj: unknown, msg?: string): void => { lines.push([obj, msg]) }
  return { lines, debug: log, info: log, warn: log, error: log } as Logger & { lines: unknown[] }
}

/**
 * The common fault contract: key_unavailable (503), nothing cached as a key, the failure
 * remembered for errorTtl (no refetch), one refetch once errorTtl has passed, and recovery
 * once the endpoint serves a good key again.
 */
async function expectUnavailableNotCached (t: Test, behaviour: KeyBehaviour, label: string, fetchTimeout?: number): Promise<void> {
  const s = await server(t, behaviour)
  const clock = fakeClock()
  const logger = captureLogger()
  const store = new KeyStore({ baseUrl: s.baseUrl, now: clock.now, errorTtl: 30, logger, ...(fetchTimeout ? { fetchTimeout } : {}) })
  const d = validDelivery()
  const run = (): Promise<Result<unknown[]>> => verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  assertRejected(t, await run(), 'key_unavailable', 503)
  t.equal(store.stats().keys, 0, `${label}: nothing cached as a key`)
  t.equal(s.keyFetches(), 1)
  t.ok(logger.lines.length > 0, `${label}: logged`)
  const logged = JSON.stringify(logger.lines)
  t.notOk(logged.includes(d.headers.signature.slice(8, 40)) || logged.includes('acct_1'), 'log has no signature or body')
  await clock.advance(10)
  assertRejected(t, await run(), 'key_unavailable', 503)
  t.equal(s.keyFetches(), 1, `${label}: failure remembered within errorTtl`)
  await clock.advance(21)
  assertRejected(t, await run(), 'key_unavailable', 503)
  t.equal(s.keyFetches(), 2, `${label}: fetched again once errorTtl passed`)
  s.behave(good)
  await clock.advance(31)
  t.equal((await run()).error, null, `${label}: recovers when the endpoint serves a good key`)
  t.equal(s.keyFetches(), 3)
}

t.test('key API connection refused -> key_unavailable, recovers after errorTtl', async (t) => {
  const port = await closedPort()
  const store = new KeyStore({ baseUrl: `http://127.0.0.1:${port}` })
  const d = validDelivery()
  const r = await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  assertRejected(t, r, 'key_unavailable', 503)
  t.notOk(r.error?.message.includes(String(port)), 'the message does not echo the URL')
  t.equal(store.stats().keys, 0)
  // via baseUrl + shared store as well
  assertRejected(t, await verifyWebhook({ payload: d.body, headers: d.headers, baseUrl: `http://127.0.0.1:${port}`, cache: false }), 'key_unavailable', 503)
})

t.test('key API resets the connection -> key_unavailable, not cached', async (t) => {
  await expectUnavailableNotCached(t, () => 'destroy', 'reset')
})

t.test('key API hangs -> key_unavailable after the fetch timeout; waiters released', async (t) => {
  const s = await server(t, () => 'hang')
  const clock = fakeClock()
  const store = new KeyStore({ baseUrl: s.baseUrl, fetchTimeout: 300, now: clock.now, errorTtl: 30 })
  const d = validDelivery()
  const run = (): Promise<Result<unknown[]>> => verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  const started = Date.now()
  const results = await Promise.all(Array.from({ length: 10 }, run))
  const elapsed = Date.now() - started
  t.equal(results.filter((r) => r.error?.type === 'key_unavailable').length, 10, 'all 10 waiters released with key_unavailable')
  t.ok(elapsed < 10_000, 'released (not stuck on the hung request)')
  t.equal(s.keyFetches(), 1, 'one fetch for all waiters')
  // later requests are not stuck on the hung promise
  s.behave(good)
  await clock.advance(31)
  t.equal((await run()).error, null, 'a later request fetches afresh and verifies')
  t.equal(s.keyFetches(), 2)
})

for (const status of [500, 502, 503, 429]) {
  t.test(`key API ${status} -> key_unavailable, nothing cached`, async (t) => {
    await expectUnavailableNotCached(t, () => ({ status, body: '<html>oops</html>', headers: { 'content-type': 'text/html', 'retry-after': '1' } }), String(status))
  })
}

t.test('key API 3xx redirect -> key_unavailable; the redirect target receives nothing', async (t) => {
  const steal = await server(t, () => json({ id: 'mckey', key: TEST_PUBLIC_KEY }))
  for (const status of [301, 302, 307, 308]) {
    await t.test(String(status), async (t) => {
      await expectUnavailableNotCached(t, () => ({ status, headers: { location: `${steal.baseUrl}/tx/v1/webhook/public-key?id=mckey` } }), `redirect ${status}`)
    })
  }
  t.equal(steal.requests.length, 0, 'the redirect target received no request')
})

const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey
const x25519 = crypto.generateKeyPairSync('x25519').publicKey
const p256 = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey
const pem = (k: crypto.KeyObject): string => k.export({ format: 'pem', type: 'spki' }).toString()
const der64 = (k: crypto.KeyObject): string => k.export({ format: 'der', type: 'spki' }).toString('base64')
const IDENTITY_KEY = 'MCowBQYDK2VwAyEAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='

const garbage: Record<string, KeyBehaviour> = {
  HTML: () => ({ status: 200, body: '<html><body>maintenance</body></html>', headers: { 'content-type': 'text/html' } }),
  '{}': () => json({}),
  '{"id":"mckey"}': () => json({ id: 'mckey' }),
  '"key":123': () => json({ id: 'mckey', key: 123 }),
  'an array': () => json([{ id: 'mckey', key: TEST_PUBLIC_KEY }]),
  'null': () => json(null),
  'empty body': () => ({ status: 200, body: '' }),
  'truncated JSON': () => ({ status: 200, body: `{"id":"mckey","key":"${TEST_PUBLIC_KEY.slice(0, 20)}` }),
  'truncated PEM': () => json({ id: 'mckey', key: TEST_PUBLIC_KEY_PEM.slice(0, 60) }),
  'two PEM blocks': () => json({ id: 'mckey', key: TEST_PUBLIC_KEY_PEM + TEST_PUBLIC_KEY_PEM }),
  'a 1 MiB body': () => json({ id: 'mckey', key: TEST_PUBLIC_KEY, pad: 'x'.repeat(1024 * 1024) }),
  'a raw 32-byte key': () => json({ id: 'mckey', key: Buffer.from(TEST_PUBLIC_KEY, 'base64').subarray(12).toString('base64') }),
  'not base64': () => json({ id: 'mckey', key: 'SIMULATOR_PUBLIC_SIGNING_KEY!' }),
  'D3 RSA-2048 SPKI PEM': () => json({ id: 'mckey', key: pem(rsa) }),
  'D3 RSA-2048 SPKI base64': () => json({ id: 'mckey', key: der64(rsa) }),
  'D3 X25519 SPKI': () => json({ id: 'mckey', key: der64(x25519) }),
  'D3 X25519 SPKI PEM': () => json({ id: 'mckey', key: pem(x25519) }),
  'D3 P-256 SPKI': () => json({ id: 'mckey', key: pem(p256) }),
  'D5 id mismatch': () => json({ id: 'other', key: TEST_PUBLIC_KEY }),
  'D5 id case mismatch': () => json({ id: 'MCKEY', key: TEST_PUBLIC_KEY }),
  'private key PEM': () => json({ id: 'mckey', key: crypto.generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString() }),
}

for (const [name, behaviour] of Object.entries(garbage)) {
  t.test(`key API 200 with garbage: ${name} -> key_unavailable, not cached`, async (t) => {
    await expectUnavailableNotCached(t, behaviour, name)
  })
}

t.test('D4 small-order identity key with R=identity,S=0 -> key_unavailable, never accepted', async (t) => {
  const forged = `sig_1=:${Buffer.concat([Buffer.from([1]), Buffer.alloc(63)]).toString('base64')}:`
  // How a naive verifier fares depends on the runtime: node:crypto on Node 20 and 22 accepts this
  // forgery for any message; Node 24's OpenSSL refuses it. Reported, never asserted: what is
  // asserted, on every runtime, is the library's own rejection below.
  const rawKey = crypto.createPublicKey({ key: Buffer.from(IDENTITY_KEY, 'base64'), format: 'der', type: 'spki' })
  let naiveFooled = false
  try {
    naiveFooled = crypto.verify(null, Buffer.from('any message'), rawKey, Buffer.concat([Buffer.from([1]), Buffer.alloc(63)]))
  } catch {}
  t.comment(naiveFooled
    ? `Node ${process.versions.node}: node:crypto accepts the identity-key forgery, so a verifier without the small-order check is fooled`
    : `Node ${process.versions.node}: node:crypto refuses the identity-key forgery itself; the library refuses the key before it gets that far`)
  await expectUnavailableNotCached(t, () => json({ id: 'mckey', key: IDENTITY_KEY }), 'D4')
  const s = await server(t, () => json({ id: 'mckey', key: IDENTITY_KEY }))
  const d = validDelivery(B0.replace('delivered', 'complained'))
  const r = await verifyWebhook({ payload: d.body, headers: { ...d.headers, signature: forged }, keyStore: new KeyStore({ baseUrl: s.baseUrl }) })
  assertRejected(t, r, 'key_unavailable', 503)
  // and given as the publicKey option it is refused at validation
  const r2 = await verifyWebhook({ payload: d.body, headers: { ...d.headers, signature: forged }, publicKey: IDENTITY_KEY })
  t.equal(r2.error?.type, 'validation_error')
  t.match(r2.error?.message, /publicKey/)
  // and as a KeyObject (the forgery verified before the fix)
  const r3 = await verifyWebhook({ payload: d.body, headers: { ...d.headers, signature: forged }, publicKey: rawKey })
  t.equal(r3.error?.type, 'validation_error', 'small-order KeyObject refused')
  t.equal(r3.data, null)
  // and as an extractable CryptoKey: refused when the options are read (Node), or never verifies (WebCrypto, where its bytes are read asynchronously)
  const weakCryptoKey = await crypto.subtle.importKey('spki', Buffer.from(IDENTITY_KEY, 'base64'), { name: 'Ed25519' }, true, ['verify'])
  const r4 = await verifyWebhook({ payload: d.body, headers: { ...d.headers, signature: forged }, publicKey: weakCryptoKey })
  t.equal(r4.error?.type, runtime === 'node' ? 'validation_error' : 'signature_invalid', 'small-order CryptoKey refused')
  t.equal(r4.data, null)
})

// ---------------------------------------------------------------- importEd25519PublicKey: small-order and non-canonical points
const spki = (raw: Buffer): string => Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), raw]).toString('base64')
const withSign = (hex: string): Buffer => {
  const b = Buffer.from(hex, 'hex')
  b[31] = b[31]! | 0x80
  return b
}

t.test('importEd25519PublicKey rejects all small-order encodings and y >= p', async (t) => {
  const ys = {
    'y=0': '0000000000000000000000000000000000000000000000000000000000000000',
    'y=1 (identity)': '0100000000000000000000000000000000000000000000000000000000000000',
    'order 8 (a)': '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
    'order 8 (b)': 'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
    'y=p-1': 'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  }
  let smallOrder = 0
  for (const [name, hex] of Object.entries(ys)) {
    for (const [variant, raw] of [['sign 0', Buffer.from(hex, 'hex')], ['sign 1', withSign(hex)]] as const) {
      if (isSmallOrder(raw)) smallOrder++
      t.ok(isWeakEd25519Point(raw), `${name} ${variant} is weak`)
      t.throws(() => importEd25519PublicKey(spki(raw)), KeyRejectedError, `${name} ${variant} refused (base64 SPKI)`)
      const asPem = crypto.createPublicKey({ key: Buffer.from(spki(raw), 'base64'), format: 'der', type: 'spki' }).export({ format: 'pem', type: 'spki' }).toString()
      t.throws(() => importEd25519PublicKey(asPem), KeyRejectedError, `${name} ${variant} refused (PEM)`)
    }
  }
  t.equal(smallOrder, 8, 'the independent check finds exactly 8 canonical small-order encodings among them')
  for (const [name, hex] of Object.entries({
    'y=p': 'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
    'y=p+1 (non-canonical identity)': 'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
    'y=2^255-1': 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  })) {
    for (const raw of [Buffer.from(hex, 'hex'), withSign(hex)]) {
      t.throws(() => importEd25519PublicKey(spki(raw)), KeyRejectedError, `${name} refused`)
    }
  }
  // good keys pass, both encodings
  const d = validDelivery(B0)
  for (const [form, material] of [['base64', TEST_PUBLIC_KEY], ['PEM', TEST_PUBLIC_KEY_PEM], ['wrapped base64', `  ${TEST_PUBLIC_KEY.slice(0, 30)}\n${TEST_PUBLIC_KEY.slice(30)}  `]]) {
    const key = importEd25519PublicKey(material!)
    const base = signatureBase(d.headers['content-digest'], d.headers['signature-input'].slice(d.headers['signature-input'].indexOf('=') + 1))
    const sig = Buffer.from(d.headers.signature.slice(d.headers.signature.indexOf('=:') + 2, -1), 'base64')
    await t.resolves(async () => { await verifyEd25519(base, key, sig) }, `${form}: imported, and verifies a delivery`)
  }
  t.notOk(isSmallOrder(Buffer.from(TEST_PUBLIC_KEY, 'base64').subarray(12)))
  // garbage never throws anything but KeyRejectedError
  for (const bad of ['', 'x'.repeat(5000), 'AAAA', '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----', 42, null, undefined]) {
    t.throws(() => importEd25519PublicKey(bad as never), KeyRejectedError)
  }
})

t.test('key API TLS error (self-signed certificate) -> key_unavailable', async (t) => {
  const { execFileSync } = await import('node:child_process')
  const { mkdtempSync, readFileSync, rmSync } = await import('node:fs')
  const os = await import('node:os')
  const https = await import('node:https')
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mc-tls-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem'), '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'pipe' })
  let hits = 0
  const srv = https.createServer({ key: readFileSync(path.join(dir, 'key.pem')), cert: readFileSync(path.join(dir, 'cert.pem')) }, (_req, res) => {
    hits++
    res.end(JSON.stringify({ id: 'mckey', key: TEST_PUBLIC_KEY }))
  })
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { srv.closeAllConnections(); srv.close(() => resolve()) }))
  const port = (srv.address() as { port: number }).port
  const store = new KeyStore({ baseUrl: `https://127.0.0.1:${port}` })
  const d = validDelivery()
  assertRejected(t, await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store }), 'key_unavailable', 503)
  t.equal(hits, 0, 'no request completed over the untrusted connection')
  t.equal(store.stats().keys, 0)
})

t.test('key rotation: a new keyid is fetched once (single flight) and both keys keep working', async (t) => {
  const next = crypto.generateKeyPairSync('ed25519')
  const s = await server(t, async (id, req) => {
    await new Promise((resolve) => setTimeout(resolve, 30))
    return serveKeys({ mckey: TEST_PUBLIC_KEY_PEM, mckey2: next.publicKey.export({ format: 'pem', type: 'spki' }).toString() })(id, req)
  })
  const store = new KeyStore({ baseUrl: s.baseUrl })
  const old = validDelivery()
  t.equal((await verifyWebhook({ payload: old.body, headers: old.headers, keyStore: store })).error, null)
  const rotated = signRaw({ params: p0(nowSeconds(), 'mckey2'), body: B0, key: next.privateKey })
  const results = await Promise.all(Array.from({ length: 20 }, () => verifyWebhook({ payload: rotated.body, headers: rotated.headers, keyStore: store })))
  t.equal(results.filter((r) => r.error === null).length, 20)
  t.equal(s.keyFetches(), 2, 'one fetch per key id')
  t.equal((await verifyWebhook({ payload: old.body, headers: old.headers, keyStore: store })).error, null, 'the old key still verifies')
  // a delivery claiming mckey but signed with the new key is not accepted
  const confused = signRaw({ params: p0(nowSeconds(), 'mckey'), body: B0, key: next.privateKey })
  assertRejected(t, await verifyWebhook({ payload: confused.body, headers: confused.headers, keyStore: store }), 'signature_invalid', 401)
})
