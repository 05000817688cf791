import { isAscii, isUtf8 } from 'node:buffer'
import crypto, { type KeyObject } from 'node:crypto'
import type { CryptoPort, DigestAlgorithm, VerifyKey } from './types.js'

// The Node port: node:crypto and Buffer, the measured fast path.

const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex')
// ASCII (the usual body) is valid UTF-8 and decodes byte for byte: latin1 is the cheaper
// decoder. Not for large bodies: from Node's EXTERN_APEX (src/string_bytes.cc) on, latin1
// strings are external, and their off-heap size triggers collections that cost more than it saves.
const LATIN1_MAX = 0xFBEE9

const asBuffer = (b: Uint8Array): Buffer => Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength)

export const runtime = 'node'

export function hash (algorithm: DigestAlgorithm, data: Uint8Array | string): Uint8Array {
  return crypto.hash(algorithm, data, 'buffer')
}

// Encoded by OpenSSL's side directly: a 'buffer' output allocates a fresh ArrayBuffer per call.
export function hashBase64url (algorithm: DigestAlgorithm, data: Uint8Array | string): string {
  return crypto.hash(algorithm, data, 'base64url')
}

export function timingSafeEqual (a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && crypto.timingSafeEqual(a, b)
}

export function importRawEd25519 (raw: Uint8Array): VerifyKey {
  return crypto.createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' }) as unknown as VerifyKey
}

export function fromKeyObject (material: object): { key: VerifyKey, raw: Uint8Array | null } | undefined {
  let key: KeyObject
  try {
    key = material instanceof crypto.KeyObject ? material : crypto.KeyObject.from(material as crypto.webcrypto.CryptoKey)
  } catch {
    return undefined
  }
  if (key.type !== 'public' || key.asymmetricKeyType !== 'ed25519') return undefined
  return { key: key as unknown as VerifyKey, raw: key.export({ format: 'der', type: 'spki' }).subarray(-32) }
}

export function sameKey (a: VerifyKey, b: VerifyKey): boolean {
  return a === b || (a as unknown as KeyObject).equals(b as unknown as KeyObject)
}

// Typed as the port is (a promise elsewhere) so that shared code handles both.
export function verify (key: VerifyKey, data: Uint8Array, signature: Uint8Array): boolean | Promise<boolean> {
  try {
    return crypto.verify(null, data, key as unknown as KeyObject, signature) === true
  } catch {
    return false
  }
}

export function verifyOffThread (key: VerifyKey, data: Uint8Array, signature: Uint8Array): Promise<boolean> {
  return new Promise((resolve) => {
    try {
      crypto.verify(null, data, key as unknown as KeyObject, signature, (err, ok) => { resolve(err === null && ok === true) })
    } catch {
      resolve(false)
    }
  })
}

export function latin1 (text: string): Uint8Array {
  return Buffer.from(text, 'latin1')
}

export function base64Decode (text: string): Uint8Array {
  return Buffer.from(text, 'base64')
}

export function base64url (bytes: Uint8Array): string {
  return asBuffer(bytes).toString('base64url')
}

export function utf8 (bytes: Uint8Array): string | undefined {
  const buf = asBuffer(bytes)
  if (buf.length < LATIN1_MAX && isAscii(buf)) return buf.toString('latin1')
  return isUtf8(buf) ? buf.toString('utf8') : undefined
}

void ({ runtime, hash, hashBase64url, timingSafeEqual, importRawEd25519, fromKeyObject, sameKey, verify, verifyOffThread, latin1, base64Decode, base64url, utf8 } satisfies CryptoPort)
