// The strict Dictionary parser of the three signature fields against structured-headers, an
// independent RFC 9651 implementation (rows C3, C5, C6, C7 in test/README.md): every dictionary that parser
// reads and that holds no repeated key, no display string, no Date and nothing outside visible
// ASCII parses to the same value here; anything else is refused with a typed malformed_header,
// and whatever is accepted here is accepted there with the same value.
import fc from 'fast-check'
import t from 'tap'
import { parseDictionary, serializeDictionary, Token, type BareItem as SfBareItem, type Dictionary as SfDictionary } from 'structured-headers'
import { check, failOnUnhandledRejection } from './helpers/fixtures.js'
import { VerificationError } from '../../src/errors.js'
import { Decimal, parseDictionaryField, Token as OwnToken, type BareItem, type Dictionary } from '../../src/verify/structured-fields.js'

failOnUnhandledRejection(t)

/** A comparable plain form of a bare item, the same for both parsers' representations. */
function plainItem (v: BareItem | SfBareItem): unknown {
  // structured-headers reads the Decimal 1.0 as the number 1: compare numbers by value only.
  if (v instanceof Decimal) return { number: v.value }
  if (typeof v === 'number') return { number: v }
  if (v instanceof Token || v instanceof OwnToken) return { token: v.toString() }
  if (v instanceof Uint8Array) return { bytes: Buffer.from(v).toString('base64') }
  if (v instanceof ArrayBuffer) return { bytes: Buffer.from(v).toString('base64') }
  if (typeof v === 'string' || typeof v === 'boolean') return v
  return { other: String(v) }
}
const plainParams = (p: Map<string, BareItem | SfBareItem>): unknown => [...p].map(([k, v]) => [k, plainItem(v)])
function plain (d: Dictionary | SfDictionary): unknown {
  return [...d].map(([k, m]) => {
    const [value, params] = m as [unknown, Map<string, BareItem>]
    if (Array.isArray(value)) return [k, { inner: (value as Array<[BareItem, Map<string, BareItem>]>).map(([v, p]) => [plainItem(v), plainParams(p)]), params: plainParams(params) }]
    return [k, { item: plainItem(value as BareItem), params: plainParams(params) }]
  })
}

const key = fc.stringMatching(/^[a-z*][a-z0-9_.*-]{0,6}$/)
const bare: fc.Arbitrary<SfBareItem> = fc.oneof(
  fc.integer({ min: -999_999_999_999_999, max: 999_999_999_999_999 }),
  fc.integer({ min: -999_999_999, max: 999_999_999 }).map((n) => n / 1000).filter((n) => !Number.isInteger(n)),
  fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 12 }),
  fc.stringMatching(/^[A-Za-z*][A-Za-z0-9!#$%&'*+.^_`|~:/-]{0,8}$/).map((s) => new Token(s)),
  fc.uint8Array({ maxLength: 20 }).map((b) => b.slice().buffer as ArrayBuffer),
  fc.boolean(),
)
const params = fc.uniqueArray(fc.tuple(key, bare), { selector: ([k]) => k, maxLength: 3 }).map((e) => new Map(e))
const item = fc.tuple(bare, params)
const member = fc.oneof(item, fc.tuple(fc.array(item, { maxLength: 3 }), params))
const dictionary = fc.uniqueArray(fc.tuple(key, member), { selector: ([k]) => k, minLength: 1, maxLength: 4 }).map((e) => new Map(e) as SfDictionary)

t.test('every RFC 9651 dictionary without repeats, display strings or Dates parses to what structured-headers reads', async (t) => {
  await check(t,
    fc.property(dictionary, fc.constantFrom(', ', ',', ' ,\t', '\t,  '), (dict, sep) => {
      const wire = serializeDictionary(dict).split(', ').join(sep)
      let theirs: SfDictionary
      try {
        theirs = parseDictionary(wire)
      } catch {
        return true // the split on ', ' can cut inside a String: not a dictionary any more
      }
      const ours = parseDictionaryField(wire, 'X')
      return JSON.stringify(plain(ours)) === JSON.stringify(plain(theirs))
    }),
    2000,
  )
})

const PROFILE_REFUSALS = /twice|repeats the|display string|a Date|outside visible ASCII/
const alphabet = fc.constantFrom(...'abz09*_-.;=,: ()"\\?%@/+AZ\t'.split(''), '\u00a0', '\ufeff', 'é', '\u2028')

t.test('on any string: accepted here => accepted by structured-headers with the same value; refused here but read there => a profile refusal', async (t) => {
  const outcomes = { both: 0, profile: 0, neither: 0 }
  await check(t,
    fc.property(fc.oneof(fc.string({ unit: alphabet, maxLength: 40 }), dictionary.map((d) => serializeDictionary(d))), fc.nat(40), fc.constantFrom('', ',a', ';a', ', a=%"x\\"', ';b=@1', '\u00a0'), (s, at, ins) => {
      const input = s.slice(0, at) + ins + s.slice(at)
      let theirs: SfDictionary | null = null
      try { theirs = parseDictionary(input) } catch {}
      let ours: Dictionary
      try {
        ours = parseDictionaryField(input, 'X')
      } catch (err) {
        if (!(err instanceof VerificationError) || err.type !== 'malformed_header') throw err
        if (theirs === null) { outcomes.neither++; return true }
        outcomes.profile++
        return PROFILE_REFUSALS.test(err.message)
      }
      outcomes.both++
      return theirs !== null && JSON.stringify(plain(ours)) === JSON.stringify(plain(theirs))
    }),
    4000,
  )
  t.ok(outcomes.both > 0 && outcomes.profile > 0 && outcomes.neither > 0, `every branch was exercised: ${JSON.stringify(outcomes)}`)
})

// Byte Sequences are decoded with the port's base64 decoder (Node's Buffer accepts misplaced
// padding), so which padding is allowed is decided by the parser alone: exactly what atob, the
// WHATWG forgiving-base64 decode, accepts (row C5).
t.test('a Byte Sequence is accepted exactly when atob accepts its base64, with the same bytes', async (t) => {
  const outcomes = { accepted: 0, refused: 0 }
  await check(t,
    fc.property(fc.string({ unit: fc.constantFrom('Q', 'B', 'z', '9', '+', '/', '=', '='), maxLength: 14 }), (b64) => {
      let expected: string | null = null
      try { expected = Buffer.from(atob(b64), 'latin1').toString('base64') } catch {}
      let ours: Dictionary
      try {
        ours = parseDictionaryField(`a=:${b64}:`, 'X')
      } catch (err) {
        if (!(err instanceof VerificationError) || err.type !== 'malformed_header') throw err
        outcomes.refused++
        return expected === null && /not :base64:/.test(err.message)
      }
      outcomes.accepted++
      const bytes = ours.get('a')![0]
      return expected !== null && bytes instanceof Uint8Array && Buffer.from(bytes).toString('base64') === expected
    }),
    4000,
  )
  t.ok(outcomes.accepted > 100 && outcomes.refused > 100, `both outcomes were exercised: ${JSON.stringify(outcomes)}`)
})
