import { parseDictionary, type Dictionary } from 'structured-headers'
import { VerificationError } from '../errors.js'

/**
 * What a compliant RFC 9651 parser hides: it keeps the *last* of duplicate dictionary
 * keys and duplicate parameters (§4.2.2), and returns a Decimal `1.0` as the number 1.
 * This scan of the raw field value, outside quoted strings, recovers the member count
 * and every parameter key with its raw value, so the strict profile can reject
 * duplicates and Decimals the parser would silently accept (threat-model T6, T7).
 */
export interface RawShape {
  /** Top-level members (commas outside strings + 1). */
  members: number
  /** `key=rawValue` of every parameter, in order (item parameters included). */
  params: Array<[key: string, raw: string]>
}

export function scanShape (value: string): RawShape {
  let members = 1
  const params: Array<[string, string]> = []
  const n = value.length
  let i = 0
  while (i < n) {
    const c = value.charCodeAt(i)
    if (c === 34 /* " */) {
      i = skipString(value, i)
    } else if (c === 44 /* , */) {
      members++
      i++
    } else if (c === 59 /* ; */) {
      i++
      while (value.charCodeAt(i) === 32) i++
      const keyStart = i
      while (i < n && /[a-z0-9_.*-]/.test(value[i]!)) i++
      const key = value.slice(keyStart, i)
      let raw = ''
      if (value.charCodeAt(i) === 61 /* = */) {
        const valueStart = ++i
        if (value.charCodeAt(i) === 34) i = skipString(value, i)
        else while (i < n && !';, )'.includes(value[i]!)) i++
        raw = value.slice(valueStart, i)
      }
      params.push([key, raw])
    } else {
      i++
    }
  }
  return { members, params }
}

/** Index just past the closing quote of the String starting at `start` (backslash escapes honoured). */
function skipString (value: string, start: number): number {
  let i = start + 1
  while (i < value.length) {
    const c = value.charCodeAt(i)
    if (c === 92 /* \ */) i += 2
    else if (c === 34) return i + 1
    else i++
  }
  return i
}

/** Parses a Dictionary field, turning the parser's exception into a typed `malformed_header`. */
export function parseDictionaryField (value: string, name: string): Dictionary {
  try {
    return parseDictionary(value)
  } catch {
    throw new VerificationError('malformed_header', `The ${name} header is not a valid structured-field dictionary (RFC 9651).`)
  }
}
