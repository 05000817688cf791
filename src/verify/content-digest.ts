import { base64Decode, digest, hash, timingSafeEqual } from '#crypto'
import type { CryptoPort } from '../crypto/types.js'
import { VerificationError } from '../errors.js'
import { parseDictionaryField } from './structured-fields.js'

/** A parsed `Content-Digest`: the expected hash bytes per recognised algorithm. */
export type ParsedDigest = Array<[algorithm: 'sha256' | 'sha512', expected: Uint8Array]>

const RECOGNISED = { 'sha-256': ['sha256', 32], 'sha-512': ['sha512', 64] } as const
// RFC 9530 §7.2: registered but deprecated, "MUST NOT be used in a potentially adversarial setting".
const DEPRECATED = new Set(['md5', 'sha', 'unixsum', 'unixcksum', 'adler', 'crc32c'])
const MAX_MEMBERS = 4
const CANONICAL_SHA256 = /^sha-256=:([A-Za-z0-9+/]{43}=):$/

/** Parses `Content-Digest` (RFC 9530 §2): a dictionary of byte sequences; sha-256 and sha-512 are checked. */
export function parseContentDigest (value: string): ParsedDigest {
  const fast = CANONICAL_SHA256.exec(value)
  if (fast !== null) return [['sha256', base64Decode(fast[1]!)]]

  // The parser refuses a repeated algorithm, so the dictionary holds every member sent.
  const dict = parseDictionaryField(value, 'Content-Digest')
  if (dict.size > MAX_MEMBERS) throw new VerificationError('malformed_header', `Content-Digest has more than ${MAX_MEMBERS} members.`)

  const out: ParsedDigest = []
  for (const [algorithm, member] of dict) {
    const [digest] = member
    if (!(digest instanceof Uint8Array)) {
      throw new VerificationError('malformed_header', 'Each Content-Digest value must be a byte sequence (:base64:).')
    }
    if (DEPRECATED.has(algorithm)) {
      throw new VerificationError('unsupported_algorithm', `Content-Digest uses "${algorithm}", a deprecated algorithm; only sha-256 and sha-512 are accepted.`)
    }
    const known = RECOGNISED[algorithm as keyof typeof RECOGNISED]
    if (known === undefined) continue // unknown, non-deprecated algorithms are ignored (RFC 9530 §2)
    if (digest.byteLength !== known[1]) {
      throw new VerificationError('malformed_header', `The Content-Digest ${algorithm} value must be ${known[1]} bytes.`)
    }
    out.push([known[0], digest])
  }
  if (out.length === 0) throw new VerificationError('unsupported_algorithm', 'Content-Digest has no sha-256 or sha-512 member.')
  return out
}

/** Checks every recognised member against the raw body bytes, in constant time. */
export function checkContentDigest (digests: ParsedDigest, body: Uint8Array): void {
  for (const [algorithm, expected] of digests) compareDigest(hash(algorithm, body), expected)
}

/**
 * `checkContentDigest` for the verify path: synchronous on Node, a promise where the runtime's
 * hash is WebCrypto's asynchronous digest (the path waits for the signature there anyway).
 */
export function matchContentDigest (digests: ParsedDigest, body: Uint8Array): void | Promise<void> {
  let pending: Array<Promise<void>> | undefined
  for (const [algorithm, expected] of digests) {
    // Typed as the port says, whichever port the type-check resolved `#crypto` to.
    const actual: ReturnType<CryptoPort['digest']> = digest(algorithm, body)
    if (actual instanceof Promise) (pending ??= []).push(actual.then((bytes) => { compareDigest(bytes, expected) }))
    else compareDigest(actual, expected)
  }
  if (pending !== undefined) return Promise.all(pending).then(() => {})
}

function compareDigest (actual: Uint8Array, expected: Uint8Array): void {
  if (!timingSafeEqual(actual, expected)) {
    throw new VerificationError(
      'digest_mismatch',
      'The body does not match its Content-Digest: it was changed after MailChannels signed it. Pass the exact raw bytes received, not re-serialised JSON.',
    )
  }
}
