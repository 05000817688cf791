// Every legal Structured-Fields formatting of a valid delivery's
// Signature-Input, signed over the canonical re-serialisation of the parsed member (RFC 9421
// §2.3, what the verifier rebuilds), is accepted; and the fast canonical parser agrees with
// the strict RFC 9651 path.
import crypto from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import { canonicalParams, check, failOnUnhandledRejection, KEYS, NOW, NOW_MS, sign, BODY } from './helpers/fixtures.js'
import { verifyWebhook } from '../../src/index.js'
import { VerificationError } from '../../src/errors.js'
import { parseSignature, parseSignatureStrict, type ParsedSignature } from '../../src/verify/signature-input.js'

failOnUnhandledRejection(t)

const sfKey = fc.stringMatching(/^[a-z*][a-z0-9_.*-]{0,20}$/)
const keyId = fc.stringMatching(/^[A-Za-z0-9._~-]{1,64}$/)
/** An sf-string of printable ASCII, escaped as RFC 9651 §4.1.6 requires. */
const sfString = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 24 })
  .map((s) => `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`)
const zeros = fc.nat(3).map((n) => '0'.repeat(n))
const spaces = (max: number): fc.Arbitrary<string> => fc.nat(max).map((n) => ' '.repeat(n))

/** A legal, accepted formatting of one Signature-Input member value (after `label=`). */
const reformatted = fc.record({
  created: fc.integer({ min: NOW - 300, max: NOW + 60 }),
  createdZeros: zeros,
  keyId,
  withAlg: fc.boolean(),
  nonce: fc.option(sfString, { nil: undefined }),
  tag: fc.option(sfString, { nil: undefined }),
  expires: fc.option(fc.tuple(fc.integer({ min: NOW, max: NOW + 10_000 }), zeros), { nil: undefined }),
  order: fc.array(fc.nat(), { minLength: 6, maxLength: 6 }),
  spaceAfterSemicolon: fc.array(spaces(2), { minLength: 6, maxLength: 6 }),
  innerSpaces: fc.tuple(spaces(2), spaces(2)),
}).map((r) => {
  const params = [`created=${r.createdZeros}${r.created}`, `keyid="${r.keyId}"`]
  if (r.withAlg) params.push('alg="ed25519"')
  if (r.nonce !== undefined) params.push(`nonce=${r.nonce}`)
  if (r.tag !== undefined) params.push(`tag=${r.tag}`)
  if (r.expires !== undefined) params.push(`expires=${r.expires[1]}${r.expires[0]}`)
  // A permutation driven by the generated keys (stable sort on random weights).
  const ordered = params.map((p, i) => [r.order[i]!, p] as const).sort((a, b) => a[0] - b[0]).map(([, p]) => p)
  return `(${r.innerSpaces[0]}"content-digest"${r.innerSpaces[1]})${ordered.map((p, i) => `;${r.spaceAfterSemicolon[i]}${p}`).join('')}`
})

t.test('B7 D2: any legal SF formatting of Signature-Input (spaces, order, alg absent, nonce/tag, expires, leading zeros) is accepted', async (t) => {
  await check(t,
    fc.asyncProperty(reformatted, sfKey, spaces(2), spaces(2), fc.boolean(), async (params, label, lead, trail, unpadded) => {
      const d = sign({ params, label })
      if (unpadded) d.headers.signature = d.headers.signature!.replace(/=+:$/, ':') // RFC 9651 §4.2.7: padding optional
      d.headers['signature-input'] = lead + d.headers['signature-input']! + trail
      const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: KEYS.publicKey, now: NOW_MS, customerHandles: ['acct_1'] })
      if (r.error !== null) throw new Error(`rejected ${r.error.type}: ${r.error.message}\n${JSON.stringify(d.headers)}`)
      return r.data.length === 1 && r.data[0]!.customerHandle === 'acct_1'
    }),
    1200,
  )
})

t.test('a reformatted Signature-Input signed over its *wire* text instead of the canonical form is rejected unless they coincide', async (t) => {
  await check(t,
    fc.asyncProperty(reformatted, async (params) => {
      const base = `"content-digest": ${sign().headers['content-digest']}\n"@signature-params": ${params}`
      const sig = crypto.sign(null, Buffer.from(base, 'latin1'), KEYS.privateKey).toString('base64')
      const headers = { ...sign().headers, 'signature-input': `sig_1=${params}`, signature: `sig_1=:${sig}:` }
      const r = await verifyWebhook({ payload: BODY, headers, publicKey: KEYS.publicKey, now: NOW_MS })
      const canonical = canonicalParams(params) === params
      return canonical ? r.error === null : r.error?.type === 'signature_invalid'
    }),
    300,
  )
})

// --- fast canonical path vs strict path ---------------------------------------------

const canonicalLabel = fc.stringMatching(/^[a-z*][a-z0-9_.*-]{0,63}$/)
const created = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 999_999_999_999_999 }), fc.integer({ min: NOW - 1000, max: NOW + 1000 }))
const sig64 = fc.uint8Array({ minLength: 64, maxLength: 64 })

function outcome (f: () => ParsedSignature): ParsedSignature | string {
  try {
    return f()
  } catch (err) {
    if (err instanceof VerificationError) return err.type
    throw err // anything else is a bug: fast-check reports it
  }
}

t.test('parseSignature (fast path) and parseSignatureStrict agree on every canonical input', async (t) => {
  await check(t,
    fc.property(canonicalLabel, created, keyId, sig64, (label, c, k, s) => {
      const input = `${label}=("content-digest");created=${c};alg="ed25519";keyid="${k}"`
      const signature = `${label}=:${Buffer.from(s).toString('base64')}:`
      const fast = parseSignature(input, signature)
      const strict = parseSignatureStrict(input, signature)
      return fast.label === strict.label && fast.expires === strict.expires && fast.keyId === k && fast.created === c && Buffer.from(fast.signature).equals(Buffer.from(s)) && fast.params === strict.params && Buffer.from(fast.signature).equals(strict.signature)
    }),
    2500,
  )
})

t.test('parseSignature and parseSignatureStrict agree (same result or same error type) on near-canonical inputs', async (t) => {
  const piece = fc.constantFrom('', ' ', ';', '"', ',', '0', '-', '=', ':', 'A', '(', ')', '.5', '\\')
  await check(t,
    fc.property(canonicalLabel, created, keyId, sig64, fc.nat(200), piece, fc.nat(120), piece, fc.boolean(),
      (label, c, k, s, at, ins, sigAt, sigIns, otherLabel) => {
        const cleanInput = `${label}=("content-digest");created=${c};alg="ed25519";keyid="${k}"`
        const input = cleanInput.slice(0, at % (cleanInput.length + 1)) + ins + cleanInput.slice(at % (cleanInput.length + 1))
        const cleanSig = `${otherLabel ? 'x' + label : label}=:${Buffer.from(s).toString('base64')}:`
        const signature = cleanSig.slice(0, sigAt % (cleanSig.length + 1)) + sigIns + cleanSig.slice(sigAt % (cleanSig.length + 1))
        const fast = outcome(() => parseSignature(input, signature))
        const strict = outcome(() => parseSignatureStrict(input, signature))
        if (typeof fast === 'string' || typeof strict === 'string') return fast === strict
        return fast.label === strict.label && fast.keyId === strict.keyId && fast.created === strict.created &&
          fast.expires === strict.expires && fast.params === strict.params && Buffer.from(fast.signature).equals(strict.signature)
      }),
    3000,
  )
})
