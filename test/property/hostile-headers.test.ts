// Hostile signature headers (rows C and E in test/README.md): arbitrary header
// strings, and duplicated or reordered members and parameters, yield a typed error, and
// the (real, loopback) key endpoint sees a request only when Signature-Input carried a
// well-formed keyid and every local check passed.
import crypto from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import { parseDictionary } from 'structured-headers'
import { check, failOnUnhandledRejection, isTypedRejection, KEYS, NOW, NOW_MS, sha256Digest, sign, startKeyServer, BODY } from './helpers/fixtures.js'
import { verifyWebhook } from '../../src/index.js'
import { KeyStore } from '../../src/keys/key-store.js'
import { KEY_ID_PATTERN } from '../../src/keys/key-id.js'

failOnUnhandledRejection(t)

/** Independent oracle: does this Signature-Input hold exactly one member with a well-formed String keyid? */
function wellFormedKeyId (signatureInput: string): boolean {
  try {
    const dict = parseDictionary(signatureInput)
    if (dict.size !== 1) return false
    const [value, params] = dict.values().next().value!
    const keyId = params.get('keyid')
    return Array.isArray(value) && typeof keyId === 'string' && KEY_ID_PATTERN.test(keyId)
  } catch {
    return false
  }
}

const SF_CHARS = 'abcdefgkstuyz019_-.*;=,:()"\\ /+?%~ACDSZ\t'.split('')
const sfString = fc.string({ unit: fc.constantFrom(...SF_CHARS), maxLength: 120 })
const anyString = fc.oneof(sfString, fc.string({ maxLength: 80 }), fc.string({ unit: 'binary', maxLength: 40 }))

const keyIdValue = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9._~-]{1,64}$/).map((k) => `"${k}"`), // well-formed
  fc.constantFrom('"mckey"', 'mckey', ':bWNrZXk=:', '"../../send"', '"mckey&id=x"', '"mckey#x"', '"%2e%2e%2f"', '""', '"m\\"k"', '1', '?1', `"${'k'.repeat(65)}"`),
  sfString.map((s) => `"${s.replace(/["\\]/g, '')}"`),
)
const createdValue = fc.oneof(
  fc.constant(String(NOW)),
  fc.integer({ min: NOW - 400, max: NOW + 100 }).map(String),
  fc.constantFrom('"1700000000"', '1700000000.5', '@1700000000', '-1', '01700000000', '1700000000000000', 'x'),
)
const param = fc.oneof(
  createdValue.map((v) => `created=${v}`),
  keyIdValue.map((v) => `keyid=${v}`),
  fc.constantFrom('alg="ed25519"', 'alg=ed25519', 'alg="hmac-sha256"', 'alg="ED25519"', 'nonce="n"', 'tag=x', 'expires=1', `expires=${NOW + 100}`, 'foo=1'),
)
const covered = fc.constantFrom('("content-digest")', '()', '("content-type")', '("@method" "content-digest")', '("content-digest";sf)', '("content-digest" "content-digest")', '"content-digest"')
const label = fc.constantFrom('sig_1', 'sig_2', 'Sig_1', 'a', '*x')
const sep = fc.constantFrom(';', '; ', ';  ')

/** Signature-Input built from SF-ish parts: often well-formed, often not. */
const structuredInput = fc.record({ label, covered, params: fc.array(fc.tuple(sep, param), { maxLength: 5 }), tail: fc.constantFrom('', '', ',', ', sig_2=()', ' ') })
  .map(({ label, covered, params, tail }) => `${label}=${covered}${params.map(([s, p]) => s + p).join('')}${tail}`)
const signatureValue = fc.oneof(
  fc.uint8Array({ minLength: 0, maxLength: 70 }).map((b) => `:${Buffer.from(b).toString('base64')}:`),
  fc.constant(`:${Buffer.alloc(64).toString('base64')}:`),
  fc.constantFrom(':!!!!:', ':AAAA:', '"x"', 'x'),
)
const signatureHeader = fc.oneof(fc.tuple(label, signatureValue).map(([l, v]) => `${l}=${v}`), anyString)
const digestHeader = fc.oneof(
  fc.constant(sha256Digest(BODY)),
  fc.constant('sha-256=:AAAA:'),
  fc.constant(`sha-256=:${crypto.hash('sha256', 'other', 'base64')}:`),
  anyString,
)

/** E1's flood shape: everything local is right except that the keyid is random (well-formed or not) and the signature is zeros. */
const nearValid = fc.record({
  keyId: keyIdValue,
  created: fc.integer({ min: NOW - 300, max: NOW + 60 }),
  order: fc.constantFrom([0, 1, 2], [2, 1, 0], [1, 2, 0]),
  extra: fc.constantFrom('', ';nonce="n"', ';alg=ed25519', ';foo=1'),
  label: fc.constantFrom('sig_1', 'sig_2'),
  sigLabel: fc.constantFrom('sig_1', 'sig_1', 'sig_2'),
  sigBytes: fc.constantFrom(64, 64, 64, 63),
}).map(({ keyId, created, order, extra, label, sigLabel, sigBytes }) => {
  const params = [`created=${created}`, 'alg="ed25519"', `keyid=${keyId}`]
  return {
    input: `${label}=("content-digest");${order.map((i) => params[i]).join(';')}${extra}`,
    sig: `${sigLabel}=:${Buffer.alloc(sigBytes).toString('base64')}:`,
    digest: sha256Digest(BODY),
  }
})

t.test('E1 E3 E4 E5 C7 C8: arbitrary header strings give a typed error; no key fetch unless the keyid is well-formed', async (t) => {
  const server = await startKeyServer({})
  t.teardown(server.close)
  const keyStore = new KeyStore({ baseUrl: server.baseUrl, fetchesPerMinute: 100_000, maxConcurrentFetches: 4, unknownKeyTtl: 1, errorTtl: 1 })
  const reasons = new Map<string, number>()
  await check(t,
    fc.asyncProperty(
      fc.oneof(
        { weight: 3, arbitrary: fc.record({ input: fc.oneof(structuredInput, anyString), sig: signatureHeader, digest: digestHeader }) },
        { weight: 1, arbitrary: nearValid },
      ),
      async ({ input, sig, digest }) => {
        const before = server.fetches()
        const r = await verifyWebhook({
          payload: BODY,
          headers: { 'content-digest': digest, 'signature-input': input, signature: sig },
          keyStore,
          now: NOW_MS,
        })
        const fetched = server.fetches() - before
        if (r.error !== null) reasons.set(r.error.type, (reasons.get(r.error.type) ?? 0) + 1)
        if (!isTypedRejection(r)) return false
        if (fetched > 0) {
          // A fetch means every local check passed: well-formed keyid, digest, freshness, 64-byte signature.
          return wellFormedKeyId(input) && digest === sha256Digest(BODY) && ['unknown_key', 'key_unavailable'].includes(r.error!.type)
        }
        return true
      }),
    3000,
  )
  t.ok(server.fetches() > 0, `some inputs reached the key endpoint (${server.fetches()} fetches), so the 0-fetch check is not vacuous`)
  t.ok((reasons.get('malformed_header') ?? 0) > 0 && (reasons.get('unknown_key') ?? 0) > 0, `reasons: ${JSON.stringify(Object.fromEntries(reasons))}`)
})

// --- Duplication and reordering --------------------------------------------------

const P = (created = NOW, keyId = 'mckey'): string => `("content-digest");created=${created};alg="ed25519";keyid="${keyId}"`
const validSig = sign()
const anyLabel = fc.oneof(fc.constantFrom('sig_1', 'sig_2'), fc.stringMatching(/^[a-z][a-z0-9_]{0,8}$/))
const ows = fc.constantFrom(',', ', ', ' ,  ', ',\t')

type Variant = { name: string, headers: Record<string, string | string[]> }

/** Every variant keeps a correct digest, a fresh created, the known keyid and a real signature somewhere. */
const duplicated: fc.Arbitrary<Variant> = fc.oneof(
  // C3: two Signature-Input members (labels same or different), both signatures present.
  fc.tuple(anyLabel, anyLabel, ows, fc.boolean(), fc.constantFrom('mckey', 'k2')).map(([l1, l2, s, swap, k2]) => {
    const a = sign({ label: l1 })
    const b = sign({ label: l2, keyId: k2 })
    const [x, y] = swap ? [b, a] : [a, b]
    return { name: 'two Signature-Input members', headers: { 'content-digest': a.headers['content-digest']!, 'signature-input': x.headers['signature-input']! + s + y.headers['signature-input']!, signature: x.headers.signature! + s + y.headers.signature! } }
  }),
  // C5: one Signature-Input, two Signature members (any labels, one of them the valid one).
  fc.tuple(anyLabel, ows, fc.boolean(), fc.constantFrom(':AAAA:', `:${Buffer.alloc(64).toString('base64')}:`)).map(([l2, s, swap, bogus]) => {
    const extra = `${l2}=${bogus}`
    const sig = swap ? extra + s + validSig.headers.signature! : validSig.headers.signature! + s + extra
    return { name: 'two Signature members', headers: { ...validSig.headers, signature: sig } }
  }),
  // C6: a duplicated parameter (same or different value), anywhere in the list.
  fc.tuple(fc.constantFrom('created', 'alg', 'keyid'), fc.boolean(), fc.nat(3)).map(([name, sameValue, at]) => {
    const values: Record<string, [string, string]> = { created: [String(NOW), String(NOW - 3600)], alg: ['"ed25519"', '"hmac-sha256"'], keyid: ['"mckey"', '"evil"'] }
    const params = [`created=${NOW}`, 'alg="ed25519"', 'keyid="mckey"']
    params.splice(at, 0, `${name}=${values[name]![sameValue ? 0 : 1]}`)
    const wire = `("content-digest");${params.join(';')}`
    // Signed over what a last-wins parser sees, as an attacker would.
    const d = sign({ params: wire })
    return { name: `duplicate ${name}`, headers: d.headers }
  }),
  // A5-ish: a duplicated Content-Digest member (same algorithm twice), with other members around it.
  fc.tuple(fc.constantFrom('sha-256', 'sha-512'), fc.boolean(), ows, fc.boolean()).map(([alg, wrongFirst, s, withOther]) => {
    const good = `${alg}=:${crypto.hash(alg.replace('-', ''), BODY, 'base64')}:`
    const bad = `${alg}=:${crypto.hash(alg.replace('-', ''), 'x', 'base64')}:`
    const members = wrongFirst ? [bad, good] : [good, good]
    if (withOther) members.push(alg === 'sha-256' ? `sha-512=:${crypto.hash('sha512', BODY, 'base64')}:` : sha256Digest(BODY).slice(0))
    const contentDigest = members.join(s)
    return { name: 'duplicate Content-Digest member', headers: sign({ contentDigest }).headers }
  }),
  // C3 C5 A5: the same duplicates hidden behind a display string whose content ends in a
  // backslash (a scan that reads it as an sf-string takes \" as an escape and swallows the rest).
  fc.tuple(fc.constantFrom('signature-input', 'signature', 'content-digest'), fc.constantFrom(' \\', 'a \\', '\\', '%20\\'), ows).map(([field, content, s]) => {
    const v = validSig.headers
    const hidden: Record<string, string> = {
      'signature-input': `${v['signature-input']!};nonce=%"${content}"${s}${v['signature-input']!}`,
      signature: `${v.signature!};x=%"${content}"${s}${v.signature!}`,
      'content-digest': `${v['content-digest']!};x=%"${content}"${s}${v['content-digest']!}`,
    }
    return { name: `${field} repeated behind a display string`, headers: { ...v, [field]: hidden[field]! } }
  }),
  // C2: the same field sent twice (Node's array form), or under two name casings.
  fc.tuple(fc.constantFrom('content-digest', 'signature-input', 'signature'), fc.boolean()).map(([field, asArray]) => {
    const other = sign({ keyId: 'evil' }).headers
    const headers: Record<string, string | string[]> = { ...validSig.headers }
    if (asArray) headers[field] = [validSig.headers[field]!, other[field]!]
    else headers[field.toUpperCase()] = other[field]!
    return { name: `${field} twice`, headers }
  }),
)

t.test('C2 C3 C5 C6: duplicated members, labels, parameters or fields are always malformed_header with 0 key fetches', async (t) => {
  const server = await startKeyServer({ mckey: KEYS.publicKey, k2: KEYS.publicKey, evil: KEYS.publicKey })
  t.teardown(server.close)
  const keyStore = new KeyStore({ baseUrl: server.baseUrl, fetchesPerMinute: 100_000 })
  // Non-vacuity: the same store and server accept the undisturbed delivery (1 fetch).
  const ok = await verifyWebhook({ payload: BODY, headers: validSig.headers, keyStore, now: NOW_MS })
  t.equal(ok.error, null, 'the valid delivery is accepted through the key server')
  keyStore.clear()
  const fetchesBefore = server.fetches()
  await check(t,
    fc.asyncProperty(duplicated, async ({ headers }) => {
      const r = await verifyWebhook({ payload: BODY, headers, keyStore, now: NOW_MS })
      return r.data === null && r.error?.type === 'malformed_header'
    }),
    1500,
  )
  t.equal(server.fetches() - fetchesBefore, 0, 'no key fetch for any duplicated input')
})

t.test('C3: reordering the members of a two-signature header never changes the verdict', async (t) => {
  await check(t,
    fc.asyncProperty(anyLabel, anyLabel, async (l1, l2) => {
      const a = sign({ label: l1 })
      const b = sign({ label: l2, params: P(NOW - 10) })
      const verdict = async (x: typeof a, y: typeof a): Promise<string | undefined> => (await verifyWebhook({
        payload: BODY,
        headers: { 'content-digest': a.headers['content-digest']!, 'signature-input': `${x.headers['signature-input']}, ${y.headers['signature-input']}`, signature: `${x.headers.signature}, ${y.headers.signature}` },
        publicKey: KEYS.publicKey,
        now: NOW_MS,
      })).error?.type
      const [ab, ba] = [await verdict(a, b), await verdict(b, a)]
      return ab === 'malformed_header' && ba === 'malformed_header'
    }),
    300,
  )
})
