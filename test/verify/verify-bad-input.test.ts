import crypto from 'node:crypto'
import t from 'tap'
import { KeyStore, MailChannels, verifyWebhook, type Result } from '../../src/index.js'
import { assertRejected } from '../helpers/assert.js'
import { serveKeys, startKeyServer, type KeyServer } from '../helpers/key-server.js'
import { B0, D0, nowSeconds, p0, sha256Digest, signRaw, TEST_PUBLIC_KEY, TEST_PUBLIC_KEY_PEM, validDelivery, type RawDelivery } from '../helpers/sign.js'

type Headers = Record<string, unknown>

/** Verify with the test key as the `publicKey` option (no fetch possible). */
function verify (payload: unknown, headers: unknown, extra: Record<string, unknown> = {}): Promise<Result<unknown[]>> {
  return verifyWebhook({ payload, headers, publicKey: TEST_PUBLIC_KEY, customerHandles: ['acct_1'], ...extra } as never)
}
const verifyD = (d: RawDelivery, extra: Record<string, unknown> = {}): Promise<Result<unknown[]>> => verify(d.body, d.headers, extra)

let server: KeyServer
t.before(async () => { server = await startKeyServer(serveKeys({ mckey: TEST_PUBLIC_KEY_PEM })) })
t.teardown(() => server.close())

/** A fresh KeyStore on the local key API, so fetches can be counted per test. */
function counted (): { store: KeyStore, fetches: () => number } {
  const store = new KeyStore({ baseUrl: server.baseUrl })
  return { store, fetches: () => store.stats().fetches }
}

// ---------------------------------------------------------------- A. Body and digest integrity
t.test('A1 tampered body -> digest_mismatch', async (t) => {
  const d = validDelivery()
  assertRejected(t, await verify(B0.replace('"delivered"', '"hard-bounced"'), d.headers), 'digest_mismatch', 401)
})

t.test('A2 tampered body with recomputed digest, original signature -> signature_invalid', async (t) => {
  const d = validDelivery()
  const tampered = B0.replace('"delivered"', '"hard-bounced"')
  const headers = { ...d.headers, 'content-digest': sha256Digest(tampered) }
  assertRejected(t, await verify(tampered, headers), 'signature_invalid', 401)
  // through the key API: exactly 1 fetch allowed
  const { store, fetches } = counted()
  assertRejected(t, await verifyWebhook({ payload: tampered, headers, keyStore: store }), 'signature_invalid', 401)
  t.equal(fetches(), 1, '1 fetch')
})

t.test('A3 Content-Digest sha-256=:AAAA: (3 bytes) -> malformed_header', async (t) => {
  const d = signRaw({ params: p0(), body: B0, contentDigest: 'sha-256=:AAAA:' })
  assertRejected(t, await verifyD(d), 'malformed_header', 400)
})

t.test('A4 Content-Digest md5 (re-signed) -> unsupported_algorithm', async (t) => {
  const d = signRaw({ params: p0(), body: B0, contentDigest: `md5=:${crypto.hash('md5', B0, 'base64')}:` })
  assertRejected(t, await verifyD(d), 'unsupported_algorithm', 401)
  for (const alg of ['sha', 'unixsum', 'unixcksum', 'adler', 'crc32c']) {
    const dd = signRaw({ params: p0(), body: B0, contentDigest: `${alg}=:AAAA:, ${D0}` })
    t.equal((await verifyD(dd)).error?.type, 'unsupported_algorithm', `deprecated ${alg} next to a good sha-256 is still refused`)
  }
  const none = signRaw({ params: p0(), body: B0, contentDigest: 'sha-384=:AAAA:' })
  assertRejected(t, await verifyD(none), 'unsupported_algorithm', 401)
})

t.test('A5 sha-256 ok plus a wrong sha-512 (re-signed) -> digest_mismatch', async (t) => {
  const cd = `sha-256=:${crypto.hash('sha256', B0, 'base64')}:, sha-512=:${Buffer.alloc(64, 7).toString('base64')}:`
  assertRejected(t, await verifyD(signRaw({ params: p0(), body: B0, contentDigest: cd })), 'digest_mismatch', 401)
  const swapped = `sha-512=:${Buffer.alloc(64, 7).toString('base64')}:, sha-256=:${crypto.hash('sha256', B0, 'base64')}:`
  assertRejected(t, await verifyD(signRaw({ params: p0(), body: B0, contentDigest: swapped })), 'digest_mismatch', 401)
})

t.test('A6 SHA-256=:<ok>: / sha-256=<b64 without colons> -> malformed_header (400)', async (t) => {
  const b64 = crypto.hash('sha256', B0, 'base64')
  for (const cd of [`SHA-256=:${b64}:`, `sha-256=${b64}`, `sha-256="${b64}"`, 'not-a-digest', 'sha-256=::', `sha-256=:${b64}`, `sha-256=:${b64}:, sha-256=:${b64}:`]) {
    const d = signRaw({ params: p0(), body: B0, contentDigest: cd })
    assertRejected(t, await verifyD(d), 'malformed_header', 400)
  }
})

t.test('A7 Content-Digest absent -> missing_header', async (t) => {
  const d = validDelivery()
  const { 'content-digest': _, ...rest } = d.headers
  assertRejected(t, await verify(d.body, rest), 'missing_header', 400)
  assertRejected(t, await verify(d.body, { ...rest, 'content-digest': '' }), 'missing_header', 400)
  assertRejected(t, await verify(d.body, { ...rest, 'content-digest': undefined }), 'missing_header', 400)
})

t.test('A8 empty body with the empty-body digest (re-signed) -> invalid_payload', async (t) => {
  const d = signRaw({ params: p0(), body: '', contentDigest: 'sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:' })
  assertRejected(t, await verifyD(d), 'invalid_payload', 400)
})

t.test('A9 covered components () (re-signed) -> malformed_header', async (t) => {
  const d = signRaw({ params: `();created=${nowSeconds()};alg="ed25519";keyid="mckey"`, body: B0 })
  assertRejected(t, await verifyD(d), 'malformed_header', 400)
})

t.test('A10 other covered components (re-signed) -> malformed_header', async (t) => {
  for (const list of ['("content-type")', '("@method" "content-digest")', '("content-digest";sf)', '("content-digest" "@path")', '("content-digest";key="sha-256")']) {
    const d = signRaw({ params: `${list};created=${nowSeconds()};alg="ed25519";keyid="mckey"`, body: B0 })
    assertRejected(t, await verifyD(d), 'malformed_header', 400)
  }
})

t.test('A11 duplicate component ("content-digest" "content-digest") -> malformed_header', async (t) => {
  const d = signRaw({ params: `("content-digest" "content-digest");created=${nowSeconds()};alg="ed25519";keyid="mckey"`, body: B0 })
  assertRejected(t, await verifyD(d), 'malformed_header', 400)
})

// ---------------------------------------------------------------- B. Time
t.test('B3 created=NOW-301 / NOW-86400 -> signature_expired', async (t) => {
  for (const age of [301, 86400]) assertRejected(t, await verifyD(validDelivery(B0, nowSeconds() - age)), 'signature_expired', 401)
  // the boundary: exactly maxAge old is still accepted; maxAge is configurable
  const now = nowSeconds()
  t.equal((await verify(validDelivery(B0, now - 300).body, validDelivery(B0, now - 300).headers, { now: now * 1000 })).error, null, 'NOW-300 accepted')
  t.equal((await verifyD(validDelivery(B0, now - 100), { maxAge: 60, now: now * 1000 })).error?.type, 'signature_expired', 'maxAge 60')
})

t.test('B4 created=NOW+61 -> signature_from_future', async (t) => {
  const now = nowSeconds()
  assertRejected(t, await verifyD(validDelivery(B0, now + 61), { now: now * 1000 }), 'signature_from_future', 401)
  t.equal((await verifyD(validDelivery(B0, now + 60), { now: now * 1000 })).error, null, 'NOW+60 accepted')
  t.equal((await verifyD(validDelivery(B0, now + 10), { clockSkew: 0, now: now * 1000 })).error?.type, 'signature_from_future', 'clockSkew 0')
})

t.test('B5 created absent -> malformed_header', async (t) => {
  const d = signRaw({ params: '("content-digest");alg="ed25519";keyid="mckey"', body: B0 })
  assertRejected(t, await verifyD(d), 'malformed_header', 400)
})

t.test('B6 created of the wrong type -> malformed_header; created=-1 -> signature_expired', async (t) => {
  for (const created of ['"1700000000"', '1700000000.5', '@1700000000', `${nowSeconds()}.0`, 'abc', '?1', ':AAAA:']) {
    const d = signRaw({ params: `("content-digest");created=${created};alg="ed25519";keyid="mckey"`, body: B0 })
    assertRejected(t, await verifyD(d), 'malformed_header', 400)
  }
  const d = signRaw({ params: '("content-digest");created=-1;alg="ed25519";keyid="mckey"', body: B0 })
  assertRejected(t, await verifyD(d), 'signature_expired', 401)
})

t.test('B7 created with 16 digits -> malformed_header', async (t) => {
  const d = signRaw({ params: '("content-digest");created=1700000000000000;alg="ed25519";keyid="mckey"', body: B0 })
  assertRejected(t, await verifyD(d), 'malformed_header', 400)
  // the leading-zero form is legal and accepted: see verify-valid.test.ts
  const lz = signRaw({ params: `("content-digest");created=0${nowSeconds()};alg="ed25519";keyid="mckey"`, body: B0 })
  t.equal((await verifyD(lz)).error, null, 'B7 created=0<NOW> accepted')
})

t.test('B8 expires=NOW-1 (re-signed) -> signature_expired', async (t) => {
  const now = nowSeconds()
  const d = signRaw({ params: `("content-digest");created=${now};expires=${now - 1};alg="ed25519";keyid="mckey"`, body: B0 })
  assertRejected(t, await verifyD(d, { now: now * 1000 }), 'signature_expired', 401)
  for (const expires of ['"9999999999"', '9999999999.5']) {
    const bad = signRaw({ params: `("content-digest");created=${now};expires=${expires};alg="ed25519";keyid="mckey"`, body: B0 })
    t.equal((await verifyD(bad)).error?.type, 'malformed_header', `expires=${expires} is not an Integer`)
  }
})

t.test('B9 valid signature, customer_handle acct_other -> customer_not_allowed', async (t) => {
  const d = validDelivery(B0.replace('acct_1', 'acct_other'))
  assertRejected(t, await verifyD(d), 'customer_not_allowed', 403)
  assertRejected(t, await verifyD(d, { customerHandles: (h: string) => h === 'acct_1' }), 'customer_not_allowed', 403)
  // a batch with one foreign event fails as a whole
  const mixed = validDelivery(`[${B0.slice(1, -1)},${B0.slice(1, -1).replace('acct_1', 'acct_other')}]`)
  assertRejected(t, await verifyD(mixed), 'customer_not_allowed', 403)
  // without the option any handle passes (documented default)
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY })).error, null)
})

// ---------------------------------------------------------------- C. Header structure and smuggling
t.test('C1 no Signature-Input / no Signature / none of the three -> missing_header', async (t) => {
  const d = validDelivery()
  const { 'signature-input': _si, ...noSi } = d.headers
  const { signature: _s, ...noSig } = d.headers
  assertRejected(t, await verify(d.body, noSi), 'missing_header', 400)
  assertRejected(t, await verify(d.body, noSig), 'missing_header', 400)
  assertRejected(t, await verify(d.body, {}), 'missing_header', 400)
  assertRejected(t, await verify(d.body, { 'content-type': 'application/json' }), 'missing_header', 400)
  assertRejected(t, await verify(d.body, new Headers()), 'missing_header', 400)
  assertRejected(t, await verify(d.body, { ...d.headers, signature: '   ' }), 'missing_header', 400)
})

t.test('C2 two Signature-Input field lines -> malformed_header', async (t) => {
  const now = nowSeconds()
  const d = validDelivery(B0, now)
  const evil = `sig_1=${p0(now, 'evil')}`
  // as Node hands them: joined with ", " (headers), or one entry per line (headersDistinct)
  assertRejected(t, await verify(d.body, { ...d.headers, 'signature-input': `${d.headers['signature-input']}, ${evil}` }), 'malformed_header', 400)
  assertRejected(t, await verify(d.body, { ...d.headers, 'signature-input': [d.headers['signature-input'], evil] }), 'malformed_header', 400)
  assertRejected(t, await verify(d.body, { ...d.headers, 'signature-input': [evil, d.headers['signature-input']] }), 'malformed_header', 400)
  const h = new Headers(d.headers)
  h.append('signature-input', evil)
  assertRejected(t, await verify(d.body, h), 'malformed_header', 400)
  // two keys that differ only in case
  assertRejected(t, await verify(d.body, { ...d.headers, 'Signature-Input': evil }), 'malformed_header', 400)
  assertRejected(t, await verify(d.body, { ...d.headers, 'Content-Digest': d.headers['content-digest'] }), 'malformed_header', 400)
  for (const name of ['sIGNATURE-INPUT', 'signaturE-input', 'cONTENT-DIGEST', 'sIGNATURE', 'SIGNATURE']) {
    const field = name.toLowerCase() as keyof typeof d.headers
    assertRejected(t, await verify(d.body, { ...d.headers, [name]: field === 'signature-input' ? evil : d.headers[field] }), 'malformed_header', 400)
  }
})

t.test('C3 two signatures in one Signature-Input -> malformed_header, 0 fetches for k2', async (t) => {
  const now = nowSeconds()
  const d = validDelivery(B0, now)
  const k2 = signRaw({ params: p0(now, 'k2'), body: B0, label: 'sig_2' })
  const headers = {
    ...d.headers,
    'signature-input': `${d.headers['signature-input']}, ${k2.headers['signature-input']}`,
    signature: `${d.headers.signature}, ${k2.headers.signature}`,
  }
  const { store, fetches } = counted()
  const before = server.requests.length
  assertRejected(t, await verifyWebhook({ payload: d.body, headers, keyStore: store }), 'malformed_header', 400)
  t.equal(fetches(), 0, '0 fetches')
  t.equal(server.requests.slice(before).filter((r) => r.url.includes('id=k2')).length, 0, 'k2 never requested')
})

t.test('C4 Signature label differs from Signature-Input label -> malformed_header', async (t) => {
  const d = validDelivery()
  const headers = { ...d.headers, signature: d.headers.signature.replace(/^sig_1=/, 'sig_2=') }
  assertRejected(t, await verify(d.body, headers), 'malformed_header', 400)
})

t.test('C5 Signature with a duplicate label -> malformed_header', async (t) => {
  const d = validDelivery()
  for (const sig of [`${d.headers.signature}, sig_1=:AAAA:`, `sig_1=:AAAA:, ${d.headers.signature}`, `${d.headers.signature}, ${d.headers.signature}`]) {
    assertRejected(t, await verify(d.body, { ...d.headers, signature: sig }), 'malformed_header', 400)
  }
})

t.test('C6 duplicate created parameter -> malformed_header', async (t) => {
  const now = nowSeconds()
  for (const params of [
    `("content-digest");created=${now - 3600};created=${now};alg="ed25519";keyid="mckey"`,
    `("content-digest");created=${now};created=${now};alg="ed25519";keyid="mckey"`,
    `("content-digest");created=${now};alg="ed25519";keyid="evil";keyid="mckey"`,
    `("content-digest");created=${now};alg="hmac-sha256";alg="ed25519";keyid="mckey"`,
  ]) {
    assertRejected(t, await verifyD(signRaw({ params, body: B0 })), 'malformed_header', 400)
  }
})

t.test('C7 invalid structured fields -> malformed_header', async (t) => {
  const now = nowSeconds()
  const d = validDelivery(B0, now)
  for (const si of [
    `Sig_1=${p0(now)}`,
    `sig_1="content-digest";created=${now}`,
    `sig_1=("content-digest";created=${now}`,
    `sig_1=${p0(now)},`,
    `sig_1=${p0(now)};`,
    `sig_1=("content-digest")created=${now}`,
  ]) {
    assertRejected(t, await verify(d.body, { ...d.headers, 'signature-input': si }), 'malformed_header', 400)
  }
  // a String where an inner list must be, re-signed so only the shape is wrong
  const str = signRaw({ params: `"content-digest";created=${now};alg="ed25519";keyid="mckey"`, body: B0 })
  assertRejected(t, await verifyD(str), 'malformed_header', 400)
})

t.test('C8 keyid/alg of the wrong type or charset -> 400', async (t) => {
  const now = nowSeconds()
  for (const tail of ['keyid="mécky"', 'keyid=mckey', 'keyid=:bWNrZXk=:', 'keyid=""', 'keyid="mc key"']) {
    const d = signRaw({ params: `("content-digest");created=${now};alg="ed25519";${tail}`, body: B0 })
    assertRejected(t, await verifyD(d), 'malformed_header', 400)
  }
  const tok = signRaw({ params: `("content-digest");created=${now};alg=ed25519;keyid="mckey"`, body: B0 })
  assertRejected(t, await verifyD(tok), 'malformed_header', 400)
  const noKey = signRaw({ params: `("content-digest");created=${now};alg="ed25519"`, body: B0 })
  assertRejected(t, await verifyD(noKey), 'malformed_header', 400)
  const extra = signRaw({ params: `("content-digest");created=${now};alg="ed25519";keyid="mckey";foo="x"`, body: B0 })
  assertRejected(t, await verifyD(extra), 'malformed_header', 400)
})

t.test('C9 Signature-Input of 8 KiB (200 members) -> malformed_header', async (t) => {
  const now = nowSeconds()
  const d = validDelivery(B0, now)
  const members = Array.from({ length: 200 }, (_, i) => `sig_${i}=${p0(now)}`).join(', ')
  t.ok(members.length > 8000)
  assertRejected(t, await verify(d.body, { ...d.headers, 'signature-input': members }), 'malformed_header', 400)
  assertRejected(t, await verify(d.body, { ...d.headers, signature: `${d.headers.signature}${' '.repeat(2000)}x` }), 'malformed_header', 400)
  assertRejected(t, await verify(d.body, { ...d.headers, 'content-digest': `${D0}, ${'a'.repeat(2000)}=:AAAA:` }), 'malformed_header', 400)
})

t.test('C10 headers absent from the header set (trailers are never passed) -> missing_header', async (t) => {
  // The core sees only what the adapter passes as headers; trailers are not among them.
  const d = validDelivery()
  assertRejected(t, await verify(d.body, { host: 'x', 'transfer-encoding': 'chunked', trailer: 'Content-Digest, Signature-Input, Signature' }), 'missing_header', 400)
})

t.test('C11 Signature sig_1=:!!!!: -> malformed_header', async (t) => {
  const d = validDelivery()
  for (const sig of ['sig_1=:!!!!:', 'sig_1=:AAAA', 'sig_1="abc"', 'sig_1=abc', 'sig_1=:AAAA:;x=1']) {
    assertRejected(t, await verify(d.body, { ...d.headers, signature: sig }), 'malformed_header', 400)
  }
})

t.test('C12 signatures of the wrong length or non-canonical -> signature_invalid, no exception', async (t) => {
  const d = validDelivery()
  const sig = d.sig
  const L = (1n << 252n) + 27742317777372353535851937790883648493n
  const s = BigInt('0x' + Buffer.from(sig.subarray(32)).reverse().toString('hex'))
  const sPlusL = Buffer.from((s + L).toString(16).padStart(64, '0'), 'hex').reverse()
  const variants: Record<string, Buffer> = {
    '63 bytes': sig.subarray(0, 63),
    '65 bytes (valid + 00, Wycheproof tc 37)': Buffer.concat([sig, Buffer.from([0])]),
    '0 bytes': Buffer.alloc(0),
    '64 zero bytes (tc 10)': Buffer.alloc(64),
    'S+L': Buffer.concat([sig.subarray(0, 32), sPlusL]),
    'R flipped': Buffer.concat([Buffer.from([sig[0]! ^ 1]), sig.subarray(1)]),
  }
  for (const [name, bytes] of Object.entries(variants)) {
    const headers = { ...d.headers, signature: `sig_1=:${bytes.toString('base64')}:` }
    const r = await verify(d.body, headers)
    t.equal(r.error?.type, 'signature_invalid', name)
    assertRejected(t, r, 'signature_invalid', 401)
  }
  // through the key API: at most 1 fetch
  const { store, fetches } = counted()
  const headers = { ...d.headers, signature: `sig_1=:${Buffer.alloc(64).toString('base64')}:` }
  assertRejected(t, await verifyWebhook({ payload: d.body, headers, keyStore: store }), 'signature_invalid', 401)
  t.ok(fetches() <= 1, 'at most 1 fetch')
})

// ---------------------------------------------------------------- D. Algorithm and key
t.test('D1 alg other than "ed25519" (re-signed) -> unsupported_algorithm, 0 fetches', async (t) => {
  const now = nowSeconds()
  const { store, fetches } = counted()
  for (const alg of ['hmac-sha256', 'rsa-pss-sha512', 'ecdsa-p256-sha256', 'ED25519', 'ed25519 ']) {
    const d = signRaw({ params: `("content-digest");created=${now};alg="${alg}";keyid="mckey"`, body: B0 })
    assertRejected(t, await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store }), 'unsupported_algorithm', 401)
  }
  t.equal(fetches(), 0, '0 fetches')
})

t.test('D6 valid format, signed by a different Ed25519 key -> signature_invalid', async (t) => {
  const other = crypto.generateKeyPairSync('ed25519').privateKey
  const d = signRaw({ params: p0(), body: B0, key: other })
  assertRejected(t, await verifyD(d), 'signature_invalid', 401)
  const { store, fetches } = counted()
  assertRejected(t, await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store }), 'signature_invalid', 401)
  t.equal(fetches(), 1)
})

// ---------------------------------------------------------------- F. Body, encoding, JSON
t.test('F5 non-UTF-8 body (re-signed) -> invalid_payload', async (t) => {
  const body = Buffer.from('5b7b226576656e74223a22ff227d5d', 'hex')
  assertRejected(t, await verifyD(signRaw({ params: p0(), body })), 'invalid_payload', 400)
  // overlong encoding and a lone surrogate encoded in UTF-8 (CESU) are not UTF-8 either
  for (const hex of ['5b22c0af225d', '5b22eda080225d']) {
    assertRejected(t, await verifyD(signRaw({ params: p0(), body: Buffer.from(hex, 'hex') })), 'invalid_payload', 400)
  }
})

t.test('F6 BOM + B0 (re-signed) -> invalid_payload', async (t) => {
  const body = Buffer.concat([Buffer.from('efbbbf', 'hex'), Buffer.from(B0)])
  assertRejected(t, await verifyD(signRaw({ params: p0(), body })), 'invalid_payload', 400)
})

t.test('F7 not an array of event objects (re-signed) -> invalid_payload', async (t) => {
  for (const body of ['{"event":"delivered"}', '[1,"x",null]', '"x"', '[null]', '[[]]', 'null', '{invalid-json', '[{"event":"delivered","customer_handle":"acct_1","timestamp":1}] x']) {
    const r = await verifyD(signRaw({ params: p0(), body }))
    assertRejected(t, r, 'invalid_payload', 400)
  }
})

t.test('F9 100,000 nested arrays (re-signed) -> invalid_payload, no RangeError', async (t) => {
  const body = '['.repeat(100_000) + ']'.repeat(100_000)
  const r = await verifyD(signRaw({ params: p0(), body }))
  assertRejected(t, r, 'invalid_payload', 400)
  const objs = '['.repeat(1) + '{"a":'.repeat(50_000) + '1' + '}'.repeat(50_000) + ']'
  assertRejected(t, await verifyD(signRaw({ params: p0(), body: objs })), 'invalid_payload', 400)
})

t.test('F10 10,001 minimal events (re-signed) -> payload_too_large naming the cap', async (t) => {
  const ev = '{"event":"delivered","customer_handle":"acct_1","timestamp":1}'
  const body = `[${Array(10_001).fill(ev).join(',')}]`
  t.ok(body.length < 1024 * 1024)
  const r = await verifyD(signRaw({ params: p0(), body }))
  assertRejected(t, r, 'payload_too_large', 413)
  t.match(r.error?.message, /maxEvents/)
  t.match(r.error?.message, /10000|10,000/)
  const ok = await verifyD(signRaw({ params: p0(), body: `[${Array(10_000).fill(ev).join(',')}]` }))
  t.equal(ok.data?.length, 10_000, '10,000 events accepted')
  t.equal((await verifyD(signRaw({ params: p0(), body: `[${ev},${ev}]` }), { maxEvents: 1 })).error?.type, 'payload_too_large', 'maxEvents: 1')
})

t.test('F11 prototype pollution keys -> invalid_payload; Object.prototype untouched', async (t) => {
  for (const body of [
    '[{"__proto__":{"polluted":true},"customer_handle":"acct_1","timestamp":1,"event":"delivered"}]',
    '[{"constructor":{"prototype":{"polluted":true}},"customer_handle":"acct_1","timestamp":1,"event":"delivered"}]',
    '[{"\\u005f_proto__":{"polluted":true},"customer_handle":"acct_1","timestamp":1,"event":"future"}]',
  ]) {
    assertRejected(t, await verifyD(signRaw({ params: p0(), body })), 'invalid_payload', 400)
    t.equal(({} as Record<string, unknown>).polluted, undefined)
  }
})

t.test('F12 duplicate customer_handle keys: last wins for check and consumer', async (t) => {
  const body = '[{"event":"delivered","timestamp":1,"customer_handle":"acct_1","customer_handle":"acct_other"}]'
  const d = signRaw({ params: p0(), body })
  assertRejected(t, await verifyD(d), 'customer_not_allowed', 403)
  const r = await verifyD(d, { customerHandles: ['acct_other'] })
  t.equal((r.data?.[0] as { customerHandle?: string })?.customerHandle, 'acct_other', 'consumer sees the checked value')
})

t.test('F13 events failing the flat schema -> invalid_payload', async (t) => {
  const bad = [
    '{"event":"delivered","customer_handle":"acct_1","timestamp":"1700000000"}',
    '{"event":"delivered","customer_handle":"acct_1","timestamp":1e400}',
    '{"event":"delivered","customer_handle":"acct_1","timestamp":-1}',
    '{"event":"delivered","customer_handle":"acct_1","timestamp":1.5}',
    '{"customer_handle":"acct_1","timestamp":1}',
    '{"event":"delivered","customer_handle":"acct_1","timestamp":1,"recipients":"x"}',
    '{"event":"delivered","customer_handle":"acct_1","timestamp":1,"recipients":[1]}',
    '{"event":"delivered","timestamp":1}',
    '{"event":"delivered","customer_handle":7,"timestamp":1}',
    '{"event":"click","customer_handle":"acct_1","timestamp":1,"url":{}}',
    '{"event":"hard-bounced","customer_handle":"acct_1","timestamp":1,"status":550}',
    '{"event":7,"customer_handle":"acct_1","timestamp":1}',
  ]
  for (const ev of bad) assertRejected(t, await verifyD(signRaw({ params: p0(), body: `[${ev}]` })), 'invalid_payload', 400)
})

// ---------------------------------------------------------------- leakage and robustness
t.test('messages never contain the signature, the key or body content', async (t) => {
  const d = validDelivery(B0.replace('acct_1', 'acct_secret_handle'))
  const sigB64 = d.sig.toString('base64')
  const results = [
    await verify(d.body, d.headers), // customer_not_allowed
    await verify(d.body.toString().replace('delivered', 'dropped'), d.headers), // digest
    await verify(d.body, { ...d.headers, signature: `sig_1=:${Buffer.alloc(64, 1).toString('base64')}:` }), // invalid
    await verify(d.body, { ...d.headers, signature: d.headers.signature.replace('sig_1', 'sig_9') }), // label
    await verifyD(signRaw({ params: p0(), body: '[{"event":"delivered","customer_handle":"acct_secret_handle","timestamp":"x"}]' })),
    await verifyD(signRaw({ params: p0(), body: '{"secret_field":"acct_secret_handle"}' })),
    await verifyD(signRaw({ params: '("content-digest");created=1;foo="acct_secret_handle";keyid="mckey"', body: B0 })),
  ]
  for (const r of results) {
    t.ok(r.error !== null)
    const text = JSON.stringify(r.error)
    t.notOk(text.includes(sigB64), 'no signature')
    t.notOk(text.includes(TEST_PUBLIC_KEY) || text.includes('MCowBQYDK2VwAyEA'), 'no key')
    t.notOk(text.includes('acct_secret_handle'), `no body content (${r.error?.type})`)
    t.notOk(text.includes(D0.slice(9, 30)), 'no digest echo')
  }
})

t.test('verify never throws or rejects for garbage input', async (t) => {
  const d = validDelivery()
  const garbage: Array<[unknown, string]> = [
    [null, 'validation_error'],
    [undefined, 'validation_error'],
    ['options', 'validation_error'],
    [42, 'validation_error'],
    [{ payload: { event: 'x' }, headers: d.headers, publicKey: TEST_PUBLIC_KEY }, 'invalid_payload'],
    [{ payload: [1, 2], headers: d.headers, publicKey: TEST_PUBLIC_KEY }, 'invalid_payload'],
    [{ payload: null, headers: d.headers, publicKey: TEST_PUBLIC_KEY }, 'invalid_payload'],
    [{ payload: 123, headers: d.headers, publicKey: TEST_PUBLIC_KEY }, 'invalid_payload'],
    [{ payload: d.body, headers: null, publicKey: TEST_PUBLIC_KEY }, 'missing_header'],
    [{ payload: d.body, headers: undefined, publicKey: TEST_PUBLIC_KEY }, 'missing_header'],
    [{ payload: d.body, headers: 'content-digest: x', publicKey: TEST_PUBLIC_KEY }, 'missing_header'],
    [{ payload: d.body, headers: { ...d.headers, signature: 42 }, publicKey: TEST_PUBLIC_KEY }, 'malformed_header'],
    [{ payload: d.body, headers: { ...d.headers, signature: { toString: () => 'x' } }, publicKey: TEST_PUBLIC_KEY }, 'malformed_header'],
    [{ payload: d.body, headers: { ...d.headers, signature: [] }, publicKey: TEST_PUBLIC_KEY }, 'malformed_header'],
    [{ payload: d.body, headers: { ...d.headers, 'signature-input': '\u0000\uffff' }, publicKey: TEST_PUBLIC_KEY }, 'malformed_header'],
    [{ payload: d.body, headers: { ...d.headers, 'signature-input': 'sig_1=("content-digest");created=1;keyid="é"' }, publicKey: TEST_PUBLIC_KEY }, 'malformed_header'],
    [{ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY, now: 'yesterday' }, 'validation_error'],
    [{ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY, now: () => { throw new Error('clock broke') } }, 'application_error'],
  ]
  for (const [opts, type] of garbage) {
    let r: Result<unknown[]> | undefined
    let threw: unknown = null
    try {
      r = await verifyWebhook(opts as never)
    } catch (err) {
      threw = err
    }
    t.equal(threw, null, 'did not throw')
    t.equal(r?.data, null)
    t.equal(r?.error?.type, type, `${JSON.stringify(opts)?.slice(0, 60)} -> ${type}`)
  }
  // a headers object whose getters throw, and a fetch-like Headers whose get throws
  const hostile = { get 'content-digest' () { throw new Error('boom') } }
  const r1 = await verifyWebhook({ payload: d.body, headers: hostile as never, publicKey: TEST_PUBLIC_KEY }).catch((e: unknown) => e)
  t.equal((r1 as Result<unknown>).data, null, 'throwing getter: resolved with an error')
  t.ok((r1 as Result<unknown>).error, 'throwing getter: typed error')
  const hostile2 = { get: () => { throw new Error('boom') }, forEach: () => {} }
  const r2 = await verifyWebhook({ payload: d.body, headers: hostile2 as never, publicKey: TEST_PUBLIC_KEY }).catch((e: unknown) => e)
  t.ok((r2 as Result<unknown>).error, 'throwing Headers.get: typed error')
  // MailChannels#webhooks.verify too
  const client = new MailChannels('mc_test_key', { baseUrl: server.baseUrl })
  const r3 = await client.webhooks.verify(null as never)
  t.equal(r3.error?.type, 'validation_error')
})

t.test('the publicKey option never fetches; rejections before the key never fetch', async (t) => {
  const before = server.requests.length
  const d = validDelivery()
  await verify(d.body, d.headers)
  await verify('x', d.headers)
  t.equal(server.requests.length, before)
})
