// Regression "property" (deterministic, exhaustive over positions): every single-byte
// mutation of the body or of any of the three signature header values of a valid delivery
// is rejected with a typed error and never throws (the property of test/property/mutation.test.ts; rows A1, C7, C11, C12 in test/README.md).
import t from 'tap'
import { HTTP_STATUS_BY_TYPE, verifyWebhook, type Result } from '../../src/index.js'
import { B0, TEST_PUBLIC_KEY, validDelivery } from '../helpers/sign.js'

const NOW = 1_700_000_100
const valid = validDelivery(B0, NOW)
const REPLACEMENTS = [(c: number) => c ^ 0x01, (c: number) => c ^ 0x20, () => 0x20, () => 0x2c, () => 0x22, () => 0x00, () => 0xff, () => 0x3d]

/** The signature bytes a Signature header decodes to (pad bits ignored, RFC 9651 §4.2.7), or null. */
function sigBytes (header: string): Buffer | null {
  const m = /^sig_1=:([A-Za-z0-9+/]*=*):$/.exec(header)
  return m === null ? null : Buffer.from(m[1]!, 'base64')
}

t.test('the unmutated delivery is accepted (so the loop below is not vacuous)', async (t) => {
  const r = await verifyWebhook({ payload: valid.body, headers: valid.headers, publicKey: TEST_PUBLIC_KEY, now: NOW * 1000 })
  t.equal(r.error, null)
})

t.test('every single-byte mutation is rejected with a typed error, never a throw', async (t) => {
  const seen = new Map<string, number>()
  let cases = 0
  let padBitReencodings = 0
  let failures = 0
  const fields = ['body', 'content-digest', 'signature-input', 'signature'] as const
  for (const field of fields) {
    const original = field === 'body' ? valid.body.toString('latin1') : valid.headers[field]
    for (let pos = 0; pos < original.length; pos++) {
      for (const replace of REPLACEMENTS) {
        const c = replace(original.charCodeAt(pos))
        if (c === original.charCodeAt(pos)) continue
        const mutated = original.slice(0, pos) + String.fromCharCode(c) + original.slice(pos + 1)
        const payload = field === 'body' ? Buffer.from(mutated, 'latin1') : valid.body
        const headers = field === 'body' ? valid.headers : { ...valid.headers, [field]: mutated }
        cases++
        let r: Result<unknown[]>
        try {
          r = await verifyWebhook({ payload, headers, publicKey: TEST_PUBLIC_KEY, customerHandles: ['acct_1'], now: NOW * 1000 })
        } catch (err) {
          failures++
          t.fail(`${field}[${pos}] -> 0x${c.toString(16)} threw ${String(err)}`)
          continue
        }
        if (r.error === null) {
          // Only acceptable: the pad bits of the Signature's last base64 character, which decode
          // to the same 64 bytes (so the same signature, and the same replay id).
          const same = field === 'signature' && sigBytes(mutated)?.equals(valid.sig) === true
          if (same) padBitReencodings++
          else {
            failures++
            t.fail(`${field}[${pos}] -> 0x${c.toString(16)} was ACCEPTED`)
          }
          continue
        }
        const typed = r.data === null && r.error.statusCode === null && (HTTP_STATUS_BY_TYPE[r.error.type] ?? 0) >= 400
        if (!typed) {
          failures++
          t.fail(`${field}[${pos}] -> 0x${c.toString(16)}: untyped rejection ${JSON.stringify(r.error)}`)
        }
        if (field === 'body' && r.error.type !== 'digest_mismatch') {
          failures++
          t.fail(`body[${pos}] -> 0x${c.toString(16)}: expected digest_mismatch, got ${r.error.type}`)
        }
        seen.set(`${field}:${r.error.type}`, (seen.get(`${field}:${r.error.type}`) ?? 0) + 1)
      }
    }
  }
  t.equal(failures, 0, `${cases} mutations, all rejected with a typed error (pad-bit re-encodings accepted: ${padBitReencodings})`)
  t.ok(cases > 2000, `${cases} cases`)
  t.ok(padBitReencodings <= 8, 'pad-bit re-encodings only at the last base64 character')
  t.ok(new Set([...seen.keys()].map((k) => k.split(':')[1])).size >= 4, `several reasons: ${JSON.stringify(Object.fromEntries(seen))}`)
})
