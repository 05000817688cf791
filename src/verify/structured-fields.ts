import { base64Decode } from '#crypto'
import { VerificationError } from '../errors.js'

/**
 * The one parser of `Content-Digest`, `Signature-Input` and `Signature`: RFC 9651 Dictionaries,
 * restricted to what these fields carry. It is deliberately the only reader of their values:
 * a compliant parser keeps the *last* of duplicate keys (RFC 9651 §4.2.2), so a separate
 * scan had to recover what it hid, and any disagreement between the two on where a string
 * ends (a display string `%"…\"` read as an sf-string) hid members and parameters from the
 * scan. Here duplicates are refused where they are parsed, so nothing can be hidden.
 *
 * Refused besides RFC 9651's own errors: a repeated dictionary key or parameter key, Display
 * Strings and Dates (no place in these fields), and any character outside visible ASCII other
 * than SP and HTAB (RFC 9421 verifiers sign the value as received: a NBSP or U+FEFF is part of it).
 */

/** A Decimal, kept apart from Integers so a profile can refuse `created=1.0`. */
export class Decimal {
  constructor (readonly value: number) {}
}

/**
 * A Token (RFC 9651 §3.3.4), kept apart from Strings so a profile can refuse `keyid=abc`. Its own
 * class rather than structured-headers' `Token`, whose constructor re-validates what the TOKEN
 * pattern below already matched (and was the last of that package in a Worker bundle).
 */
export class Token {
  constructor (readonly value: string) {}
  toString (): string { return this.value }
}

export type BareItem = number | Decimal | string | Token | Uint8Array | boolean
export type Parameters = Map<string, BareItem>
export type Item = [BareItem, Parameters]
export type InnerList = [Item[], Parameters]
export type Dictionary = Map<string, Item | InnerList>

const malformed = (message: string): VerificationError => new VerificationError('malformed_header', message)

// Sticky patterns, one per RFC 9651 production the fields can carry (§4.2), each tried at the
// current position (`take` sets `lastIndex` before every use, so sharing them is safe).
// A key: ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ).
const KEY = /[a-z*][a-z0-9_.*-]*/y
/** Integer or Decimal: the digit counts are checked after the match. */
const NUMBER = /-?(\d+)(\.\d*)?/y
/** Between the quotes: visible ASCII or SP but `"` and `\` (the ASCII check leaves nothing else), or `\"` and `\\`. */
const STRING = /"((?:[ !#-[\]-~]|\\["\\])*)"/y
/** tchar / ":" / "/" (RFC 9110 §5.6.2) after a first ALPHA or "*". */
const TOKEN = /[A-Za-z*][-!#$%&'*+.^_`|~:/A-Za-z0-9]*/y
/**
 * Padding is optional, as the RFC asks parsers to allow; where present it must be what `atob`
 * (WHATWG forgiving-base64) accepts, checked after the match: a length that is a multiple of 4.
 * Checked here so that the decode can be the port's cheapest (Node's `Buffer`, which would accept
 * any padding). Without padding, `atob` refuses only a length of 4n + 1.
 */
const BYTES = /:([A-Za-z0-9+/]*(=?=?)):/y
const BOOLEAN = /\?([01])/y

// The parse state: module-level rather than closures, so a parse allocates only what it
// returns. Safe because a parse is synchronous and never re-entered.
let value = ''
let pos = 0
let name = ''

const fail = (why: string): never => {
  throw malformed(`The ${name} header is not an RFC 9651 dictionary: ${why}.`)
}

// Spaces (and OWS) by hand: a regular expression's exec costs more than the loop, on every member.
function spaces (): void {
  while (value[pos] === ' ') pos++
}

function ows (): void {
  while (value[pos] === ' ' || value[pos] === '\t') pos++
}

/** The match of `re` at `pos` (moving past it), or null. */
function take (re: RegExp): RegExpExecArray | null {
  re.lastIndex = pos
  const m = re.exec(value)
  if (m !== null) pos = re.lastIndex
  return m
}

const key = (): string => take(KEY)?.[0] ?? fail('a key must start with a-z or "*"')

function bareItem (): BareItem {
  const c = value[pos]
  let m: RegExpExecArray | null
  if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) {
    m = take(NUMBER) ?? fail('expected a digit')
    if (m[2] === undefined) return m[1]!.length > 15 ? fail('an Integer longer than 15 digits') : Number(m[0])
    if (m[1]!.length > 12 || m[2].length < 2 || m[2].length > 4) fail('a Decimal with too many digits')
    return new Decimal(Number(m[0]))
  }
  if (c === '"') {
    const s = (take(STRING) ?? fail('an unclosed or badly escaped String'))[1]!
    return s.includes('\\') ? s.replace(/\\(.)/g, '$1') : s
  }
  if ((m = take(TOKEN)) !== null) return new Token(m[0])
  if (c === ':') {
    m = take(BYTES)
    return m === null || (m[2] === '' ? m[1]!.length % 4 === 1 : m[1]!.length % 4 !== 0) ? fail('a Byte Sequence that is not :base64:') : base64Decode(m[1]!)
  }
  if (c === '?') return (take(BOOLEAN) ?? fail('a Boolean must be ?0 or ?1'))[1] === '1'
  if (c === '%' || c === '@') throw malformed(`The ${name} header holds ${c === '%' ? 'a display string (%"…")' : 'a Date (@…)'}, which these fields never carry.`)
  return fail(c === undefined ? 'a value is missing' : 'unexpected character')
}

function parameters (): Parameters {
  const params: Parameters = new Map()
  while (value[pos] === ';') {
    pos++
    spaces()
    const k = key()
    if (params.has(k)) throw malformed(`The ${name} header repeats the "${k.slice(0, 32)}" parameter.`)
    let v: BareItem = true
    if (value[pos] === '=') {
      pos++
      v = bareItem()
    }
    params.set(k, v)
  }
  return params
}

const item = (): Item => [bareItem(), parameters()]

function innerList (): InnerList {
  pos++ // (
  const items: Item[] = []
  for (;;) {
    spaces()
    if (value[pos] === ')') {
      pos++
      return [items, parameters()]
    }
    if (pos >= value.length) fail('an unclosed inner list')
    items.push(item())
    if (value[pos] !== ' ' && value[pos] !== ')') fail('inner-list items must be separated by spaces')
  }
}

/** Parses `field` as the Dictionary field `fieldName`. Throws `malformed_header` for anything outside the grammar. */
export function parseDictionaryField (field: string, fieldName: string): Dictionary {
  // A regular expression scans faster than a loop of charCodeAt.
  const bad = field.search(/[^\t -~]/)
  if (bad !== -1) {
    const c = field.charCodeAt(bad)
    throw malformed(`The ${fieldName} header holds U+${c.toString(16).toUpperCase().padStart(4, '0')}, outside visible ASCII (only SP and HTAB may separate its parts).`)
  }
  value = field
  pos = 0
  name = fieldName
  const dict: Dictionary = new Map()
  spaces()
  while (pos < value.length) {
    const k = key()
    // Refused where it is parsed: a compliant parser would keep only the last one.
    if (dict.has(k)) throw malformed(`The ${name} header names "${k.slice(0, 32)}" twice (or the header was sent twice).`)
    if (value[pos] === '=') {
      pos++
      dict.set(k, value[pos] === '(' ? innerList() : item())
    } else {
      dict.set(k, [true, parameters()])
    }
    ows()
    if (pos >= value.length) break
    if (value[pos] !== ',') fail('expected a comma between members')
    pos++
    ows()
    if (pos >= value.length) fail('a trailing comma')
  }
  return dict
}
