// Content-Digest (rows A3-A6 in test/README.md): for random dictionaries, parseContentDigest
// + checkContentDigest accept iff at least one recognised member (sha-256, sha-512) exists,
// every recognised member matches the body, no deprecated algorithm is present, no name is
// repeated and there are at most 4 members. Rejections are typed, never other exceptions.
import crypto from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import { check } from './helpers/fixtures.js'
import { VerificationError } from '../../src/errors.js'
import { checkContentDigest, parseContentDigest } from '../../src/verify/content-digest.js'

// RFC 9530 §7.2: registered and deprecated.
const DEPRECATED = new Set(['md5', 'sha', 'unixsum', 'unixcksum', 'adler', 'crc32c'])
const RECOGNISED: Record<string, string> = { 'sha-256': 'sha256', 'sha-512': 'sha512' }

const algName = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('sha-256', 'sha-512') },
  { weight: 1, arbitrary: fc.constantFrom('md5', 'sha', 'unixsum', 'crc32c') },
  { weight: 1, arbitrary: fc.stringMatching(/^[a-z*][a-z0-9_.*-]{0,8}$/) },
)

interface Member { name: string, kind: 'right' | 'wrong-bytes' | 'wrong-length' | 'not-bytes', unpadded: boolean }
const member: fc.Arbitrary<Member> = fc.record({
  name: algName,
  kind: fc.oneof({ weight: 6, arbitrary: fc.constant('right' as const) }, fc.constantFrom('wrong-bytes' as const, 'wrong-length' as const, 'not-bytes' as const)),
  unpadded: fc.boolean(),
})

function valueFor (m: Member, body: Uint8Array): string {
  const hashName = RECOGNISED[m.name] ?? (DEPRECATED.has(m.name) ? 'md5' : 'sha256')
  let bytes = crypto.hash(hashName, body, 'buffer')
  if (m.kind === 'wrong-bytes') bytes = Buffer.from(bytes.map((b, i) => (i === 0 ? b ^ 1 : b)))
  if (m.kind === 'wrong-length') bytes = bytes.subarray(1)
  if (m.kind === 'not-bytes') return '"x"'
  const b64 = bytes.toString('base64')
  return `:${m.unpadded ? b64.replace(/=+$/, '') : b64}:`
}

/** The specification's verdict, computed independently of the implementation. */
function expectedAccept (members: Member[]): boolean {
  const names = members.map((m) => m.name)
  if (members.length > 4 || new Set(names).size !== names.length) return false
  if (members.some((m) => m.kind === 'not-bytes')) return false
  if (names.some((n) => DEPRECATED.has(n))) return false
  const recognised = members.filter((m) => RECOGNISED[m.name] !== undefined)
  return recognised.length > 0 && recognised.every((m) => m.kind === 'right')
}

const TYPES = new Set(['malformed_header', 'unsupported_algorithm', 'digest_mismatch'])

t.test('A3 A4 A5 A6: Content-Digest is accepted iff every recognised member matches, one exists, and none is deprecated', async (t) => {
  const seen = { accepted: 0, rejected: 0 }
  await check(t,
    fc.property(fc.uint8Array({ maxLength: 64 }), fc.array(member, { minLength: 1, maxLength: 6 }), fc.constantFrom(',', ', ', ' , ', ',\t'),
      (body, members, sep) => {
        const field = members.map((m) => `${m.name}=${valueFor(m, body)}`).join(sep)
        let accepted: boolean
        try {
          checkContentDigest(parseContentDigest(field), body)
          accepted = true
        } catch (err) {
          if (!(err instanceof VerificationError) || !TYPES.has(err.type)) throw err
          accepted = false
        }
        seen[accepted ? 'accepted' : 'rejected']++
        return accepted === expectedAccept(members)
      }),
    5000,
  )
  t.ok(seen.accepted > 500 && seen.rejected > 500, `both verdicts exercised: ${JSON.stringify(seen)}`)
})

t.test('A3 A6: arbitrary strings as Content-Digest never throw anything but a typed VerificationError', async (t) => {
  const alphabet = fc.constantFrom(...'sha-256512md=:,; "AZaz09+/*?()\t'.split(''))
  await check(t,
    fc.property(fc.oneof(fc.string({ unit: alphabet, maxLength: 120 }), fc.string({ maxLength: 60 })), (field) => {
      try {
        checkContentDigest(parseContentDigest(field), Buffer.from('[]'))
        // Accepting means a recognised member equal to the hash of "[]" was given: impossible by chance.
        return false
      } catch (err) {
        return err instanceof VerificationError && TYPES.has(err.type)
      }
    }),
    3000,
  )
})
