// A single-byte mutation of the body or
// of any of the three signature header values of a valid delivery is never accepted, and
// verify resolves with a typed error instead of throwing.
import fc from 'fast-check'
import t from 'tap'
import { structuredHeaderBytes } from './helpers/sf.js'
import { check, failOnUnhandledRejection, isTypedRejection, KEYS, NOW_MS, sign } from './helpers/fixtures.js'
import { verifyWebhook } from '../../src/index.js'

failOnUnhandledRejection(t)

const FIELDS = ['body', 'content-digest', 'signature-input', 'signature'] as const
type Field = (typeof FIELDS)[number]

const valid = sign()

/** Replaces one byte; header values are treated as latin1 strings (what Node hands over). */
function mutate (field: Field, pos: number, byte: number): { body: Buffer, headers: Record<string, string> } | null {
  const headers = { ...valid.headers }
  if (field === 'body') {
    const body = Buffer.from(valid.body)
    const i = pos % body.length
    if (body[i] === byte) return null
    body[i] = byte
    return { body, headers }
  }
  const bytes = Buffer.from(headers[field]!, 'latin1')
  const i = pos % bytes.length
  if (bytes[i] === byte) return null
  bytes[i] = byte
  headers[field] = bytes.toString('latin1')
  return { body: valid.body, headers }
}

t.test('the unmutated delivery is accepted (so the property below is not vacuous)', async (t) => {
  const r = await verifyWebhook({ payload: valid.body, headers: valid.headers, publicKey: KEYS.publicKey, now: NOW_MS })
  t.equal(r.error, null)
  t.equal(r.data?.length, 1)
})

t.test('A1 C11 C12: any single-byte mutation of body or signature headers is rejected with a typed error, never a throw', async (t) => {
  const rejectedBy = new Map<string, number>()
  let padBitMutations = 0
  await check(t,
    fc.asyncProperty(fc.constantFrom(...FIELDS), fc.nat(), fc.integer({ min: 0, max: 255 }), async (field, pos, byte) => {
      const m = mutate(field, pos, byte)
      fc.pre(m !== null)
      const r = await verifyWebhook({ payload: m!.body, headers: m!.headers, publicKey: KEYS.publicKey, now: NOW_MS })
      if (r.error === null) {
        // The only acceptable "acceptance": the pad bits of the last base64 character of the
        // Signature byte sequence, which RFC 9651 §4.2.7 tells parsers to ignore. The decoded
        // signature (and so the replay id) is then identical to the original.
        const same = field === 'signature' && structuredHeaderBytes(m!.headers.signature!)?.equals(structuredHeaderBytes(valid.headers.signature!)!) === true
        if (same) padBitMutations++
        return same
      }
      rejectedBy.set(r.error.type, (rejectedBy.get(r.error.type) ?? 0) + 1)
      return isTypedRejection(r)
    }),
    4000,
  )
  t.ok(rejectedBy.size >= 4, `several reasons seen: ${JSON.stringify(Object.fromEntries(rejectedBy))} (pad-bit re-encodings: ${padBitMutations})`)
})

t.test('A1: mutating any body byte gives exactly digest_mismatch', async (t) => {
  await check(t, 
    fc.asyncProperty(fc.nat(), fc.integer({ min: 0, max: 255 }), async (pos, byte) => {
      const m = mutate('body', pos, byte)
      fc.pre(m !== null)
      const r = await verifyWebhook({ payload: m!.body, headers: m!.headers, publicKey: KEYS.publicKey, now: NOW_MS })
      return r.data === null && r.error?.type === 'digest_mismatch'
    }),
    1000,
  )
})
