// One parser for Content-Digest, Signature-Input and Signature (rows C3, C5, C6, A5 in test/README.md):
// duplicates are found by the parser that reads the values, so nothing can hide them from a
// second, disagreeing scan; display strings (%"…") and anything outside visible ASCII are
// refused; only SP and HTAB (RFC 9110 OWS) are trimmed around a value.
import crypto from 'node:crypto'
import t from 'tap'
import { KeyStore, verifyWebhook, type Result } from '../../src/index.js'
import { assertAccepted, assertRejected } from '../helpers/assert.js'
import { serveKeys, startKeyServer, type KeyServer } from '../helpers/key-server.js'
import { B0, nowSeconds, p0, sha256Digest, signRaw, TEST_PUBLIC_KEY, TEST_PUBLIC_KEY_PEM, validDelivery } from '../helpers/sign.js'

let server: KeyServer
t.before(async () => { server = await startKeyServer(serveKeys({ mckey: TEST_PUBLIC_KEY_PEM, evil: TEST_PUBLIC_KEY })) })
t.teardown(() => server.close())

/** Verifies through a fresh store on the loopback key API; returns the result and the fetches it made. */
async function viaKeyApi (body: Uint8Array | string, headers: Record<string, string>): Promise<{ r: Result<unknown[]>, fetches: number }> {
  const store = new KeyStore({ baseUrl: server.baseUrl })
  const r = await verifyWebhook({ payload: body, headers, keyStore: store })
  return { r, fetches: store.stats().fetches }
}

const b64sig = (bytes: Buffer): string => `:${bytes.toString('base64')}:`

t.test('C3 a second same-label Signature-Input member hidden behind a display string -> malformed_header, 0 fetches', async (t) => {
  const now = nowSeconds()
  // The first member carries a display string whose content ends in a backslash; a scan that
  // reads it as an sf-string takes \" as an escape and swallows the second member. A last-wins
  // parser then uses the second member, signed here by the attacker's idea of the profile.
  const hidden = `("content-digest");created=${now};keyid="mckey";alg="ed25519";nonce=%" \\", sig_1=("content-digest");created=${now};keyid="evil";tag="x"`
  const d = signRaw({ params: hidden, body: B0, signedParams: `("content-digest");created=${now};keyid="evil";tag="x"` })
  const { r, fetches } = await viaKeyApi(d.body, d.headers)
  assertRejected(t, r, 'malformed_header', 400)
  t.equal(fetches, 0, 'no key fetched')
})

t.test('C5 a second same-label Signature member hidden behind a display string -> malformed_header, 0 fetches', async (t) => {
  const d = validDelivery()
  const signature = `sig_1=${b64sig(Buffer.alloc(64))};x=%" \\", ${d.headers.signature}`
  const { r, fetches } = await viaKeyApi(d.body, { ...d.headers, signature })
  assertRejected(t, r, 'malformed_header', 400)
  t.equal(fetches, 0)
})

t.test('A5 a duplicate sha-256 member hidden behind a display string -> malformed_header, 0 fetches', async (t) => {
  const wrong = `sha-256=:${crypto.hash('sha256', 'something else', 'base64')}:`
  const contentDigest = `${wrong};x=%" \\", ${sha256Digest(B0)}`
  const d = signRaw({ params: p0(), body: B0, contentDigest })
  const { r, fetches } = await viaKeyApi(d.body, d.headers)
  assertRejected(t, r, 'malformed_header', 400)
  t.equal(fetches, 0)
})

t.test('C6 a duplicate created hidden behind a display string -> malformed_header, 0 fetches', async (t) => {
  const now = nowSeconds()
  const used = `("content-digest");created=${now - 3600};created=${now};keyid="mckey";alg="ed25519"`
  const d = signRaw({ params: `();n=%" \\", sig_1=${used}`, body: B0, signedParams: `("content-digest");created=${now};keyid="mckey";alg="ed25519"` })
  const { r, fetches } = await viaKeyApi(d.body, d.headers)
  assertRejected(t, r, 'malformed_header', 400)
  t.equal(fetches, 0)
})

t.test('a display string anywhere in the three fields is refused, even where it would be ignored', async (t) => {
  const now = nowSeconds()
  const cases: Array<[string, Record<string, string>, Uint8Array]> = []
  const withNonce = signRaw({ params: `("content-digest");created=${now};keyid="mckey";nonce=%"n"`, body: B0, signedParams: `("content-digest");created=${now};keyid="mckey";nonce="n"` })
  cases.push(['Signature-Input nonce', withNonce.headers, withNonce.body])
  const unknownAlg = signRaw({ params: p0(now), body: B0, contentDigest: `${sha256Digest(B0)}, x-unknown=%"caf%c3%a9"` })
  cases.push(['Content-Digest unknown algorithm', unknownAlg.headers, unknownAlg.body])
  const sigParam = validDelivery()
  cases.push(['Signature parameter', { ...sigParam.headers, signature: `${sigParam.headers.signature};x=%"a"` }, sigParam.body])
  for (const [name, headers, body] of cases) {
    const { r, fetches } = await viaKeyApi(body, headers)
    assertRejected(t, r, 'malformed_header', 400)
    t.match(r.error?.message, /display string/i, `${name}: the message says why`)
    t.equal(fetches, 0, `${name}: no fetch`)
  }
})

const FIELDS = ['content-digest', 'signature-input', 'signature'] as const
const UNICODE_SPACES: Record<string, string> = {
  'NBSP U+00A0': '\u00a0',
  'BOM U+FEFF': '\ufeff',
  'NEL U+0085': '\u0085',
  'OGHAM SPACE U+1680': '\u1680',
  'EN QUAD U+2000': '\u2000',
  'THIN SPACE U+2009': '\u2009',
  'LINE SEPARATOR U+2028': '\u2028',
  'NARROW NBSP U+202F': '\u202f',
  'MEDIUM MATHEMATICAL SPACE U+205F': '\u205f',
  'IDEOGRAPHIC SPACE U+3000': '\u3000',
  'VT': '\v',
  'FF': '\f',
  'CR': '\r',
  'LF': '\n',
  'NUL': '\0',
}

t.test('A genuine delivery with 0xA0 appended to Content-Digest is rejected (a different RFC 9421 signature base)', async (t) => {
  const d = validDelivery()
  // As Node hands it over: the byte 0xA0 read as latin1.
  const headers = { ...d.headers, 'content-digest': d.headers['content-digest'] + Buffer.from([0xa0]).toString('latin1') }
  const { r, fetches } = await viaKeyApi(d.body, headers)
  assertRejected(t, r, 'malformed_header', 400)
  t.match(r.error?.message, /Content-Digest/)
  t.equal(fetches, 0)
})

t.test('Unicode spaces and control characters before, after or inside any of the three fields are rejected', async (t) => {
  const d = validDelivery()
  let checked = 0
  for (const field of FIELDS) {
    for (const [name, ch] of Object.entries(UNICODE_SPACES)) {
      const value = d.headers[field]
      const inside = value.replace(';', `${ch};`).replace(', ', `,${ch}`)
      for (const [where, v] of [['after', value + ch], ['before', ch + value], ['inside', field === 'signature-input' ? inside : value.replace('=', `${ch}=`)]] as const) {
        const r = await verifyWebhook({ payload: d.body, headers: { ...d.headers, [field]: v }, publicKey: TEST_PUBLIC_KEY })
        if (r.error?.type !== 'malformed_header') t.fail(`${field} with ${name} ${where}: expected malformed_header, got ${r.error?.type ?? 'accepted'}`)
        checked++
      }
    }
  }
  t.equal(checked, FIELDS.length * Object.keys(UNICODE_SPACES).length * 3, `${checked} variants, all malformed_header`)
  // The original delivery is still accepted (non-vacuity).
  assertAccepted(t, await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY }))
})

t.test('non-ASCII inside a string or a key id is refused with a message naming the field', async (t) => {
  const now = nowSeconds()
  const cases: Array<[string, string]> = [
    ['signature-input', `sig_1=("content-digest");created=${now};keyid="mckéy"`],
    ['signature-input', `sig_1=("content-digest");created=${now};keyid="mckey";nonce="\u00a0"`],
    ['signature', `sig_1=:${Buffer.alloc(64).toString('base64')}:\u00e9`],
    ['content-digest', `sha-256=:${crypto.hash('sha256', B0, 'base64')}:, x="\u2028"`],
  ]
  const d = validDelivery()
  for (const [field, value] of cases) {
    const r = await verifyWebhook({ payload: d.body, headers: { ...d.headers, [field]: value }, publicKey: TEST_PUBLIC_KEY })
    assertRejected(t, r, 'malformed_header', 400)
    t.match(r.error?.message, field === 'content-digest' ? /Content-Digest/ : field === 'signature' ? /Signature\b/ : /Signature-Input/)
  }
})

t.test('SP and HTAB around a field value are trimmed (RFC 9110 OWS); the delivery verifies', async (t) => {
  const d = validDelivery()
  for (const field of FIELDS) {
    for (const ows of [' ', '\t', ' \t ', '\t\t']) {
      assertAccepted(t, await verifyWebhook({ payload: d.body, headers: { ...d.headers, [field]: ows + d.headers[field] + ows }, publicKey: TEST_PUBLIC_KEY }))
    }
  }
  // A field that is only OWS is missing.
  assertRejected(t, await verifyWebhook({ payload: d.body, headers: { ...d.headers, signature: ' \t ' }, publicKey: TEST_PUBLIC_KEY }), 'missing_header', 400)
})

t.test('duplicate keys and parameters the parser sees are refused wherever they are', async (t) => {
  const now = nowSeconds()
  const d = validDelivery()
  const digest = d.headers['content-digest']
  const cases: Array<[string, string]> = [
    ['content-digest', `${digest}, ${digest}`],
    ['content-digest', `${digest}, sha-512=:${crypto.hash('sha512', B0, 'base64')}:, ${digest}`],
    ['content-digest', `${digest};a=1;a=2`],
    ['signature-input', `sig_1=("content-digest";a=1;a=1);created=${now};keyid="mckey"`],
    ['signature-input', `sig_1=("content-digest");created=${now};keyid="mckey";keyid="mckey"`],
    ['signature', `${d.headers.signature};a;a`],
    ['signature', `${d.headers.signature}, ${d.headers.signature}`],
  ]
  for (const [field, value] of cases) {
    const { r, fetches } = await viaKeyApi(d.body, { ...d.headers, [field]: value })
    assertRejected(t, r, 'malformed_header', 400)
    t.equal(fetches, 0, `${field}: ${value.slice(0, 60)}: no fetch`)
  }
})
