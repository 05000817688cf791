import { VerificationError } from '../errors.js'

/** What `verify` accepts as headers: a plain object (any name case), Node's `IncomingHttpHeaders`, or a fetch `Headers`. */
export type HeadersInput =
  | Record<string, string | string[] | number | undefined | null>
  | { get (name: string): string | null, forEach (cb: (value: string, name: string) => void): void }

/** Signature headers are small; anything larger is an attack or a bug. */
export const MAX_SIGNATURE_HEADER_BYTES = 1024

/** The three signature fields, each exactly one field line, as received (SP and HTAB trimmed). */
export interface SignatureFields {
  contentDigest: string
  signatureInput: string
  signature: string
}

const NAMES = ['content-digest', 'signature-input', 'signature'] as const
const DISPLAY: Record<(typeof NAMES)[number], string> = {
  'content-digest': 'Content-Digest',
  'signature-input': 'Signature-Input',
  signature: 'Signature',
}

function isFetchHeaders (h: HeadersInput): h is Extract<HeadersInput, { get: unknown }> {
  return typeof (h as { get?: unknown }).get === 'function' && typeof (h as { forEach?: unknown }).forEach === 'function'
}

/**
 * Reads the three signature fields. A name may appear under any case, but only once:
 * two keys differing in case, an array value, or a missing field are rejected here.
 * (A value Node or fetch joined from two field lines is caught later, as two members.)
 */
export function readSignatureFields (headers: HeadersInput): SignatureFields {
  if (headers === null || typeof headers !== 'object') {
    throw new VerificationError('missing_header', 'No headers were given; pass the request headers.')
  }
  if (isFetchHeaders(headers)) return readFetchSignatureFields(headers)
  const found: Array<string | undefined> = [undefined, undefined, undefined]
  // Fast path: Node lower-cases names, so the exact keys are usually there.
  const rec = headers as Record<string, unknown>
  let exact = true
  for (let i = 0; i < 3; i++) {
    const v = rec[NAMES[i]!]
    if (v === undefined) exact = false
    else found[i] = headerValue(v, NAMES[i]!)
  }
  if (!exact || hasMixedCaseSignatureKey(rec)) {
    for (let i = 0; i < 3; i++) found[i] = undefined
    for (const key of Object.keys(rec)) {
      const i = NAMES.indexOf(key.toLowerCase() as (typeof NAMES)[number])
      if (i === -1 || rec[key] === undefined) continue
      if (found[i] !== undefined) {
        throw new VerificationError('malformed_header', `The ${DISPLAY[NAMES[i]!]} header appears more than once.`)
      }
      found[i] = headerValue(rec[key], NAMES[i]!)
    }
  }
  return checkedFields(found)
}

/**
 * `readSignatureFields` for a fetch `Headers` only (it joins repeated field lines itself): what
 * the Fetch API entry uses, so a Worker bundle leaves out the reading of Node's header records.
 */
export function readFetchSignatureFields (headers: { get (name: string): string | null }): SignatureFields {
  return checkedFields(NAMES.map((name) => headers.get(name) ?? undefined))
}

/** Each field present, not empty and not too long, with SP and HTAB trimmed. */
function checkedFields (found: Array<string | undefined>): SignatureFields {
  for (let i = 0; i < 3; i++) {
    const v = found[i] === undefined ? undefined : trimOws(found[i]!)
    const name = DISPLAY[NAMES[i]!]
    if (v === undefined || v === '') {
      throw new VerificationError('missing_header', `The ${name} header is missing; MailChannels signs every delivery with Content-Digest, Signature-Input and Signature.`)
    }
    if (v.length > MAX_SIGNATURE_HEADER_BYTES) {
      throw new VerificationError('malformed_header', `The ${name} header is longer than ${MAX_SIGNATURE_HEADER_BYTES} bytes.`)
    }
    found[i] = v
  }
  // Any other character (NBSP, U+FEFF, controls, non-ASCII) stays in the value and is refused by the parser.
  return { contentDigest: found[0]!, signatureInput: found[1]!, signature: found[2]! }
}

/**
 * Removes leading and trailing SP and HTAB only: RFC 9110 OWS, what an RFC 9421 verifier
 * strips before building the signature base. `String#trim` would also strip NBSP, U+FEFF
 * and other Unicode spaces, and so accept a value the signer never signed.
 */
export function trimOws (value: string): string {
  let start = 0
  let end = value.length
  while (start < end && (value.charCodeAt(start) === 32 || value.charCodeAt(start) === 9)) start++
  while (end > start && (value.charCodeAt(end - 1) === 32 || value.charCodeAt(end - 1) === 9)) end--
  return start === 0 && end === value.length ? value : value.slice(start, end)
}

function headerValue (v: unknown, name: (typeof NAMES)[number]): string {
  if (typeof v === 'string') return v
  if (Array.isArray(v)) {
    if (v.length === 1 && typeof v[0] === 'string') return v[0]
    throw new VerificationError('malformed_header', `The ${DISPLAY[name]} header appears more than once.`)
  }
  throw new VerificationError('malformed_header', `The ${DISPLAY[name]} header is not a string.`)
}

/** True when a key other than the lower-case one names a signature field (e.g. both `signature` and `Signature`). */
function hasMixedCaseSignatureKey (rec: Record<string, unknown>): boolean {
  for (const key of Object.keys(rec)) {
    const n = key.length
    // Only a name of our lengths that is not already ours can be another spelling of one: the
    // usual headers are skipped without a `toLowerCase`.
    if ((n !== 9 && n !== 14 && n !== 15) || key === 'signature' || key === 'content-digest' || key === 'signature-input') continue
    const lower = key.toLowerCase()
    if (lower === 'content-digest' || lower === 'signature-input' || lower === 'signature') return true
  }
  return false
}
