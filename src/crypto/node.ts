import { isAscii, isUtf8 } from 'node:buffer'
import crypto, { type KeyObject } from 'node:crypto'
import { availableParallelism } from 'node:os'
import { loadSodiumVerify, type RawEd25519Verify } from './sodium.js'
import type { CryptoPort, DigestAlgorithm, VerifyKey } from './types.js'

// The Node port: node:crypto and Buffer, the measured fast path; Ed25519 through libsodium when
// the optional peer sodium-native is installed.

const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex')
// ASCII (the usual body) is valid UTF-8 and decodes byte for byte: latin1 is the cheaper
// decoder. Not for large bodies: from Node's EXTERN_APEX (src/string_bytes.cc) on, latin1
// strings are external, and their off-heap size triggers collections that cost more than it saves.
const LATIN1_MAX = 0xFBEE9

/** libsodium's verify, loaded at the first verify (undefined until then), or null without sodium-native. */
let sodiumVerify: RawEd25519Verify | null | undefined
const sodium = (): RawEd25519Verify | null => (sodiumVerify === undefined ? (sodiumVerify = loadSodiumVerify()) : sodiumVerify)
/** The 32 raw bytes of every key imported here (libsodium verifies from them). */
const rawKeys = new WeakMap<KeyObject, Uint8Array>()
function rawOf (key: KeyObject): Uint8Array {
  let raw = rawKeys.get(key)
  if (raw === undefined) {
    raw = key.export({ format: 'der', type: 'spki' }).subarray(-32)
    rawKeys.set(key, raw)
  }
  return raw
}

const asBuffer = (b: Uint8Array): Buffer => Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength)

export const runtime = 'node'

export function hash (algorithm: DigestAlgorithm, data: Uint8Array | string): Uint8Array {
  return crypto.hash(algorithm, data, 'buffer')
}

export const digest: (algorithm: DigestAlgorithm, data: Uint8Array) => Uint8Array = hash

// Encoded by OpenSSL's side directly: a 'buffer' output allocates a fresh ArrayBuffer per call.
export function hashBase64url (algorithm: DigestAlgorithm, data: Uint8Array | string): string {
  return crypto.hash(algorithm, data, 'base64url')
}

export function timingSafeEqual (a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && crypto.timingSafeEqual(a, b)
}

export function importRawEd25519 (raw: Uint8Array): VerifyKey {
  const key = crypto.createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' })
  rawKeys.set(key, Uint8Array.from(raw))
  return key as unknown as VerifyKey
}

export function fromKeyObject (material: object): { key: VerifyKey, raw: Uint8Array | null } | undefined {
  let key: KeyObject
  try {
    key = material instanceof crypto.KeyObject ? material : crypto.KeyObject.from(material as crypto.webcrypto.CryptoKey)
  } catch {
    return undefined
  }
  if (key.type !== 'public' || key.asymmetricKeyType !== 'ed25519') return undefined
  return { key: key as unknown as VerifyKey, raw: rawOf(key) }
}

export function sameKey (a: VerifyKey, b: VerifyKey): boolean {
  return a === b || (a as unknown as KeyObject).equals(b as unknown as KeyObject)
}

// Typed as the port is (a promise elsewhere) so that shared code handles both.
export function verify (key: VerifyKey, data: Uint8Array, signature: Uint8Array): boolean | Promise<boolean> {
  const libsodium = sodium()
  return libsodium === null ? verifyNodeCrypto(key, data, signature) : libsodium(rawOf(key as unknown as KeyObject), data, signature)
}

/** Ed25519 verify with node:crypto (OpenSSL), on the calling thread. */
export function verifyNodeCrypto (key: VerifyKey, data: Uint8Array, signature: Uint8Array): boolean {
  try {
    return crypto.verify(null, data, key as unknown as KeyObject, signature) === true
  } catch {
    return false
  }
}

/**
 * How many verifies `verifyOnThreadPool: 'auto'` keeps on the thread pool at once. Without
 * libsodium, every small body's (node:crypto on the loop costs the most). With libsodium, whose
 * verify on the loop costs less CPU than node:crypto's on the pool, only enough to keep the other
 * CPUs' pool threads busy (one running and one waiting per CPU): the rest stay on the loop. None
 * on one CPU, where the round trip is pure overhead.
 */
export function offThreadSlots (): number {
  const others = availableParallelism() - 1
  if (others < 1) return 0
  return sodium() === null ? Infinity : 2 * others
}

/** Verifies of this process on the libuv pool now (the pool is one per process, whatever the caller). */
let offThread = 0

export function offThreadInFlight (): number {
  return offThread
}

export function verifyOffThread (key: VerifyKey, data: Uint8Array, signature: Uint8Array): Promise<boolean> {
  return new Promise((resolve) => {
    try {
      crypto.verify(null, data, key as unknown as KeyObject, signature, (err, ok) => { offThread--; resolve(err === null && ok === true) })
      offThread++
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
  // The decoder writes U+FFFD for every invalid sequence, so a text without one came from valid
  // UTF-8 and needs no second pass over the bytes; the search is free on a one-byte string
  // (ASCII or Latin-1 text cannot hold U+FFFD). A U+FFFD may also have been sent: isUtf8 decides.
  const text = buf.toString('utf8')
  return !text.includes('\uFFFD') || isUtf8(buf) ? text : undefined
}

void ({ runtime, hash, hashBase64url, digest, timingSafeEqual, importRawEd25519, fromKeyObject, sameKey, verify, offThreadSlots, offThreadInFlight, verifyOffThread, latin1, base64Decode, base64url, utf8 } satisfies CryptoPort)
