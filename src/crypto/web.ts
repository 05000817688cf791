import { ED25519_SPKI_PREFIX, isWeakEd25519Point } from './ed25519-point.js'
import { sha256, sha512 } from '@noble/hashes/sha2.js'
import type { CryptoKeyLike, CryptoPort, DigestAlgorithm, VerifyKey } from './types.js'

// The WebCrypto port, for Workers, Deno, Bun, browsers, edge runtimes: only web-standard APIs
// (crypto.subtle, TextEncoder/TextDecoder, atob/btoa). The verify path hashes with WebCrypto's
// digest (`digest`); `hash` is @noble/hashes (plain JS) for the callers that must be synchronous
// (event fingerprints), so a bundle that only verifies leaves @noble/hashes out.

const ED25519 = { name: 'Ed25519' } as const
type SubtleKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>
const CryptoKeyClass = (globalThis as { CryptoKey?: abstract new () => CryptoKeyLike }).CryptoKey

/** A key: its raw bytes when known, and the CryptoKey, imported at first use and then reused. */
class WebKey {
  readonly raw: Uint8Array | null
  #key: SubtleKey | Promise<SubtleKey | null> | null
  constructor (raw: Uint8Array | null, key: SubtleKey | Promise<SubtleKey | null> | null) {
    this.raw = raw
    this.#key = key
  }

  /** The CryptoKey, or `null` when it cannot be used. Never rejects. */
  cryptoKey (): SubtleKey | Promise<SubtleKey | null> {
    if (this.#key === null) {
      const spki = new Uint8Array(44)
      spki.set(ED25519_SPKI_PREFIX)
      spki.set(this.raw!, 12)
      this.#key = crypto.subtle.importKey('spki', spki, ED25519, false, ['verify']).then((k) => (this.#key = k), () => null)
    }
    return this.#key as SubtleKey | Promise<SubtleKey | null>
  }
}

/**
 * A caller's extractable CryptoKey gets the small-order check at first use (reading its bytes
 * is asynchronous): a weak key verifies nothing. A non-extractable one cannot be read.
 */
async function checked (key: SubtleKey): Promise<SubtleKey | null> {
  try {
    const raw = new Uint8Array(await crypto.subtle.exportKey('raw', key))
    return isWeakEd25519Point(raw) ? null : key
  } catch {
    return null
  }
}

const encoder = /* @__PURE__ */ new TextEncoder()
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })

export const runtime = 'web'

export function hash (algorithm: DigestAlgorithm, data: Uint8Array | string): Uint8Array {
  const bytes = typeof data === 'string' ? encoder.encode(data) : data
  return algorithm === 'sha256' ? sha256(bytes) : sha512(bytes)
}

export function hashBase64url (algorithm: DigestAlgorithm, data: Uint8Array | string): string {
  return base64url(hash(algorithm, data))
}

const SUBTLE_NAME = { sha256: 'SHA-256', sha512: 'SHA-512' } as const

export async function digest (algorithm: DigestAlgorithm, data: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest(SUBTLE_NAME[algorithm], data))
}

export function timingSafeEqual (a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false
  let diff = 0
  for (let i = 0; i < a.byteLength; i++) diff |= a[i]! ^ b[i]!
  return diff === 0
}

export function importRawEd25519 (raw: Uint8Array): VerifyKey {
  return new WebKey(Uint8Array.from(raw), null) as unknown as VerifyKey
}

export function fromKeyObject (material: object): { key: VerifyKey, raw: Uint8Array | null } | undefined {
  if (CryptoKeyClass === undefined || !(material instanceof CryptoKeyClass)) return undefined
  if (material.type !== 'public' || material.algorithm.name !== 'Ed25519' || !material.usages.includes('verify')) return undefined
  const key = material as unknown as SubtleKey
  return { key: new WebKey(null, material.extractable ? checked(key) : key) as unknown as VerifyKey, raw: null }
}

export function sameKey (a: VerifyKey, b: VerifyKey): boolean {
  if (a === b) return true
  const ra = (a as unknown as WebKey).raw
  const rb = (b as unknown as WebKey).raw
  return ra !== null && rb !== null && timingSafeEqual(ra, rb)
}

export async function verify (key: VerifyKey, data: Uint8Array, signature: Uint8Array): Promise<boolean> {
  try {
    const k = await (key as unknown as WebKey).cryptoKey()
    return k !== null && (await crypto.subtle.verify(ED25519, k, signature, data)) === true
  } catch {
    return false
  }
}

export const verifyOffThread = verify

/** WebCrypto has no thread pool of its own to hand work to. */
export const offThreadSlots = (): number => 0
export const offThreadInFlight = (): number => 0

export function latin1 (text: string): Uint8Array {
  const out = new Uint8Array(text.length)
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i)
  return out
}

export function base64Decode (text: string): Uint8Array {
  let bin: string
  try {
    bin = atob(text)
  } catch {
    return new Uint8Array(0) // callers check the length
  }
  return latin1(bin)
}

export function base64url (bytes: Uint8Array): string {
  let bin = ''
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000))
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

export function utf8 (bytes: Uint8Array): string | undefined {
  try {
    return decoder.decode(bytes)
  } catch {
    return undefined
  }
}

void ({ runtime, hash, hashBase64url, digest, timingSafeEqual, importRawEd25519, fromKeyObject, sameKey, verify, offThreadSlots, offThreadInFlight, verifyOffThread, latin1, base64Decode, base64url, utf8 } satisfies CryptoPort)
