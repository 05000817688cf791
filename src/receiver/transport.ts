import { VerificationError } from '../errors.js'
import type { HeadersInput } from '../verify/headers.js'

type HeaderValue = string | string[] | number | undefined | null

/** `checkTransport` on the request's headers: Node's record (lower-case names) or a fetch `Headers`. */
export function checkHeaders (headers: HeadersInput, bodyLimit: number, contentTypes: ReadonlySet<string> | null): VerificationError | null {
  if (typeof headers.get === 'function') {
    const h = headers as Headers
    return checkTransport(h.get('content-type'), h.get('content-encoding'), h.get('content-length'), bodyLimit, contentTypes)
  }
  const h = headers as Record<string, HeaderValue>
  return checkTransport(h['content-type'], h['content-encoding'], h['content-length'], bodyLimit, contentTypes)
}

/**
 * The transport checks run before any body byte is read:
 * - `Content-Type`: any media type, or none, unless the receiver was given `contentTypes`
 *   (MailChannels does not document the type it sends; the digest, the signature and the strict
 *   JSON checks are what protect the bytes, not their label);
 * - `Content-Encoding` absent or `identity`: nothing is ever inflated, the digest covers the wire bytes;
 * - a `Content-Length` over the limit is refused at once.
 * Returns the failure, or null.
 */
export function checkTransport (
  contentType: HeaderValue,
  contentEncoding: HeaderValue,
  contentLength: HeaderValue,
  bodyLimit: number,
  contentTypes: ReadonlySet<string> | null = null,
): VerificationError | null {
  if (contentTypes !== null && !contentTypes.has(mediaTypeOf(contentType) ?? '')) {
    return new VerificationError('unsupported_media_type', `The Content-Type must be one of: ${[...contentTypes].join(', ')}.`)
  }
  if (contentEncoding !== undefined && contentEncoding !== null && !isIdentity(contentEncoding)) {
    return new VerificationError('unsupported_media_type', `Content-Encoding ${describeValue(contentEncoding)} is not supported: send the body uncompressed (no Content-Encoding, or identity).`)
  }
  return checkContentLength(contentLength, bodyLimit)
}

/** 413 `payload_too_large` when the declared `Content-Length` is over `bodyLimit` (the body itself is counted as it is read). */
export function checkContentLength (contentLength: HeaderValue, bodyLimit: number): VerificationError | null {
  return contentLength !== undefined && contentLength !== null && Number(contentLength) > bodyLimit ? tooLarge(bodyLimit) : null
}

/** The message of the 413 answered for a body over `bodyLimit` (the inspector's receiver answers it too). */
export function tooLargeMessage (bodyLimit: number): string {
  return `The body is larger than the limit of ${bodyLimit} bytes.`
}

/** The 413 failure for a body over `bodyLimit`. */
export function tooLarge (bodyLimit: number): VerificationError {
  return new VerificationError('payload_too_large', tooLargeMessage(bodyLimit))
}

/** The media type of a `Content-Type` value (`type/subtype`, lower case, parameters dropped), or null when absent. */
export function mediaTypeOf (value: HeaderValue): string | null {
  if (typeof value !== 'string') return null
  const semi = value.indexOf(';')
  return (semi === -1 ? value : value.slice(0, semi)).trim().toLowerCase()
}

const MEDIA_TYPE = /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/

/**
 * Validates the `contentTypes` option: a non-empty list of bare media types (`'application/json'`),
 * matched case-insensitively against the request's media type, parameters ignored. Null: any.
 */
export function resolveContentTypes (value: unknown): ReadonlySet<string> | null {
  if (value === undefined) return null
  if (!Array.isArray(value) || value.length === 0) {
    throw new TypeError("contentTypes must be a non-empty array of media types, such as ['application/json'] (leave it out to accept any media type)")
  }
  const set = new Set<string>()
  for (const entry of value) {
    const type = typeof entry === 'string' ? entry.trim().toLowerCase() : ''
    if (!MEDIA_TYPE.test(type)) throw new TypeError(`contentTypes: ${JSON.stringify(entry)} is not a media type; list types like 'application/json', without parameters`)
    set.add(type)
  }
  return set
}

function isIdentity (value: HeaderValue): boolean {
  if (typeof value !== 'string') return false
  const v = value.trim().toLowerCase()
  return v === '' || v === 'identity'
}

/** A received header value for a message: quoted when short, visible ASCII; never echoed at length. */
function describeValue (value: HeaderValue): string {
  const v = Array.isArray(value) ? value.join(', ') : String(value)
  return /^[\x20-\x7e]{1,40}$/.test(v) ? JSON.stringify(v) : '(an unsupported value)'
}
