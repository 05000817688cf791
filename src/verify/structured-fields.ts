import { Token } from 'structured-headers'
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

export type BareItem = number | Decimal | string | Token | Uint8Array | boolean
export type Parameters = Map<string, BareItem>
export type Item = [BareItem, Parameters]
export type InnerList = [Item[], Parameters]
export type Dictionary = Map<string, Item | InnerList>

const malformed = (message: string): VerificationError => new VerificationError('malformed_header', message)

const SP = 32
const HTAB = 9
const DQUOTE = 34
const BACKSLASH = 92

const isDigit = (c: number): boolean => c >= 48 && c <= 57
const isLcAlpha = (c: number): boolean => c >= 97 && c <= 122
const isAlpha = (c: number): boolean => (c >= 65 && c <= 90) || isLcAlpha(c)
/** key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ) */
const isKeyChar = (c: number): boolean => isLcAlpha(c) || isDigit(c) || c === 95 || c === 45 || c === 46 || c === 42
/** tchar / ":" / "/" (RFC 9110 §5.6.2). */
const isTokenChar = (c: number): boolean => isAlpha(c) || isDigit(c) || (c < 128 && "!#$%&'*+-.^_`|~:/".includes(String.fromCharCode(c)))
const BASE64 = /^[A-Za-z0-9+/=]*$/

/** Parses `value` as the Dictionary field `name`. Throws `malformed_header` for anything outside the grammar. */
export function parseDictionaryField (value: string, name: string): Dictionary {
  return new Parser(value, name).dictionary()
}

class Parser {
  #pos = 0
  readonly #s: string
  readonly #name: string

  constructor (value: string, name: string) {
    this.#s = value
    this.#name = name
    for (let i = 0; i < value.length; i++) {
      const c = value.charCodeAt(i)
      if ((c < SP && c !== HTAB) || c > 126) {
        const code = c.toString(16).toUpperCase().padStart(4, '0')
        throw malformed(`The ${name} header contains a character outside visible ASCII (U+${code}); only SP and HTAB may separate its parts.`)
      }
    }
  }

  #fail (why: string): never {
    throw malformed(`The ${this.#name} header is not a valid structured-field dictionary (RFC 9651): ${why}.`)
  }

  #peek (): number {
    return this.#pos < this.#s.length ? this.#s.charCodeAt(this.#pos) : -1
  }

  #skipSP (): void {
    while (this.#peek() === SP) this.#pos++
  }

  #skipOWS (): void {
    for (let c = this.#peek(); c === SP || c === HTAB; c = this.#peek()) this.#pos++
  }

  dictionary (): Dictionary {
    const dict: Dictionary = new Map()
    this.#skipSP()
    while (this.#pos < this.#s.length) {
      const key = this.#key()
      if (dict.has(key)) {
        throw malformed(`The ${this.#name} header names "${key.slice(0, 32)}" twice (or the header was sent twice).`)
      }
      if (this.#peek() === 61 /* = */) {
        this.#pos++
        dict.set(key, this.#peek() === 40 /* ( */ ? this.#innerList() : this.#item())
      } else {
        dict.set(key, [true, this.#parameters()])
      }
      this.#skipOWS()
      if (this.#pos >= this.#s.length) return dict
      if (this.#peek() !== 44 /* , */) this.#fail('expected a comma between members')
      this.#pos++
      this.#skipOWS()
      if (this.#pos >= this.#s.length) this.#fail('a trailing comma')
    }
    return dict
  }

  #innerList (): InnerList {
    this.#pos++ // (
    const items: Item[] = []
    for (;;) {
      this.#skipSP()
      if (this.#peek() === 41 /* ) */) {
        this.#pos++
        return [items, this.#parameters()]
      }
      if (this.#pos >= this.#s.length) this.#fail('an inner list without its closing parenthesis')
      items.push(this.#item())
      const c = this.#peek()
      if (c !== SP && c !== 41) this.#fail('inner-list items must be separated by spaces')
    }
  }

  #item (): Item {
    return [this.#bareItem(), this.#parameters()]
  }

  #parameters (): Parameters {
    const params: Parameters = new Map()
    while (this.#peek() === 59 /* ; */) {
      this.#pos++
      this.#skipSP()
      const key = this.#key()
      if (params.has(key)) throw malformed(`The ${this.#name} header repeats the "${key.slice(0, 32)}" parameter.`)
      let value: BareItem = true
      if (this.#peek() === 61 /* = */) {
        this.#pos++
        value = this.#bareItem()
      }
      params.set(key, value)
    }
    return params
  }

  #key (): string {
    const start = this.#pos
    const c = this.#peek()
    if (!isLcAlpha(c) && c !== 42) this.#fail('a key must start with a lower-case letter or "*"')
    this.#pos++
    while (isKeyChar(this.#peek())) this.#pos++
    return this.#s.slice(start, this.#pos)
  }

  #bareItem (): BareItem {
    const c = this.#peek()
    if (c === 45 || isDigit(c)) return this.#number()
    if (c === DQUOTE) return this.#string()
    if (isAlpha(c) || c === 42) return this.#token()
    if (c === 58 /* : */) return this.#bytes()
    if (c === 63 /* ? */) return this.#boolean()
    if (c === 37 /* % */) throw malformed(`The ${this.#name} header holds a display string (%"…"), which these signature fields never carry.`)
    if (c === 64 /* @ */) throw malformed(`The ${this.#name} header holds a Date (@…), which these signature fields never carry.`)
    this.#fail(c === -1 ? 'a value is missing' : 'unexpected character')
  }

  /** RFC 9651 §4.2.4: Integer (at most 15 digits) or Decimal (at most 12.3 digits). */
  #number (): number | Decimal {
    const start = this.#pos
    const negative = this.#peek() === 45
    if (negative) this.#pos++
    if (!isDigit(this.#peek())) this.#fail('expected a digit')
    const digitsStart = this.#pos
    while (isDigit(this.#peek())) this.#pos++
    const intDigits = this.#pos - digitsStart
    if (this.#peek() !== 46 /* . */) {
      if (intDigits > 15) this.#fail('an Integer longer than 15 digits')
      return Number(this.#s.slice(start, this.#pos))
    }
    if (intDigits > 12) this.#fail('a Decimal with more than 12 integer digits')
    this.#pos++
    const fracStart = this.#pos
    while (isDigit(this.#peek())) this.#pos++
    const fracDigits = this.#pos - fracStart
    if (fracDigits === 0 || fracDigits > 3) this.#fail('a Decimal needs 1 to 3 digits after the point')
    return new Decimal(Number(this.#s.slice(start, this.#pos)))
  }

  #string (): string {
    this.#pos++ // "
    let out = ''
    let runStart = this.#pos
    for (;;) {
      const c = this.#peek()
      if (c === -1) this.#fail('a String without its closing quote')
      if (c === DQUOTE) {
        out += this.#s.slice(runStart, this.#pos)
        this.#pos++
        return out
      }
      if (c === BACKSLASH) {
        out += this.#s.slice(runStart, this.#pos)
        const next = this.#s.charCodeAt(this.#pos + 1)
        if (next !== BACKSLASH && next !== DQUOTE) this.#fail('a backslash in a String must escape \\ or "')
        out += this.#s[this.#pos + 1]
        this.#pos += 2
        runStart = this.#pos
        continue
      }
      if (c === HTAB) this.#fail('a tab inside a String')
      this.#pos++
    }
  }

  #token (): Token {
    const start = this.#pos
    this.#pos++
    while (isTokenChar(this.#peek())) this.#pos++
    return new Token(this.#s.slice(start, this.#pos))
  }

  /** RFC 9651 §4.2.7; padding is optional, as the RFC asks parsers to allow. */
  #bytes (): Uint8Array {
    const end = this.#s.indexOf(':', this.#pos + 1)
    if (end === -1) this.#fail('a Byte Sequence without its closing colon')
    const b64 = this.#s.slice(this.#pos + 1, end)
    this.#pos = end + 1
    if (!BASE64.test(b64)) this.#fail('a Byte Sequence that is not base64')
    let binary: string
    try {
      binary = atob(b64)
    } catch {
      this.#fail('a Byte Sequence that is not base64')
    }
    const out = new Uint8Array(binary.length)
    for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i)
    return out
  }

  #boolean (): boolean {
    const c = this.#s.charCodeAt(this.#pos + 1)
    if (c !== 48 && c !== 49) this.#fail('a Boolean must be ?0 or ?1')
    this.#pos += 2
    return c === 49
  }
}
