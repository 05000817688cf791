import { VerificationError } from '../errors.js'

type HeaderValue = string | string[] | number | undefined

/**
 * The transport checks run before any body byte is read (threat-model §1 step 1, T12, T15):
 * `Content-Type` must be `application/json` with no charset or `utf-8`; `Content-Encoding`
 * absent or `identity` (nothing is ever inflated: the digest covers the wire bytes); a
 * `Content-Length` over the limit is refused at once. Returns the failure, or null.
 */
export function checkTransport (contentType: HeaderValue, contentEncoding: HeaderValue, contentLength: HeaderValue, bodyLimit: number): VerificationError | null {
  if (!isJsonUtf8(contentType)) {
    return new VerificationError('unsupported_media_type', 'The Content-Type must be application/json (UTF-8).')
  }
  if (contentEncoding !== undefined && !isIdentity(contentEncoding)) {
    return new VerificationError('unsupported_media_type', 'Content-Encoding is not supported: the body must be sent uncompressed.')
  }
  if (contentLength !== undefined && Number(contentLength) > bodyLimit) {
    return tooLarge(bodyLimit)
  }
  return null
}

/** The 413 failure for a body over `bodyLimit`. */
export function tooLarge (bodyLimit: number): VerificationError {
  return new VerificationError('payload_too_large', `The body is larger than the limit of ${bodyLimit} bytes.`)
}

/** `application/json`, optionally with `charset=utf-8` (any case, optionally quoted); other parameters are ignored. */
export function isJsonUtf8 (value: HeaderValue): boolean {
  if (typeof value !== 'string') return false
  // Fast path: the exact value MailChannels sends.
  if (value === 'application/json') return true
  const parts = value.split(';')
  if (parts[0]!.trim().toLowerCase() !== 'application/json') return false
  for (let i = 1; i < parts.length; i++) {
    const p = parts[i]!
    const eq = p.indexOf('=')
    if (eq === -1) {
      if (p.trim() === '') continue
      return false
    }
    if (p.slice(0, eq).trim().toLowerCase() !== 'charset') continue
    let v = p.slice(eq + 1).trim()
    if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1)
    if (v.toLowerCase() !== 'utf-8') return false
  }
  return true
}

function isIdentity (value: HeaderValue): boolean {
  if (typeof value !== 'string') return false
  const v = value.trim().toLowerCase()
  return v === '' || v === 'identity'
}
