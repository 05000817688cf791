import { createRequire } from 'node:module'

// libsodium's Ed25519 verify through the optional peer `sodium-native`, for the Node port only.
// Measured on the project's 2-core machine at 1.6-2.5x the speed of node:crypto's one-shot
// verify (OpenSSL 3 sets up an EVP context for every call; libsodium verifies straight from the
// 32 key bytes). It accepts no signature node:crypto rejects: both check S < L and the same
// cofactorless equation, and libsodium also refuses small-order and non-canonical R and A.

/** Verifies a 64-byte Ed25519 signature over `message` with the 32 raw bytes of a public key. */
export type RawEd25519Verify = (publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array) => boolean

interface SodiumNative {
  crypto_sign_verify_detached (signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean
  crypto_sign_PUBLICKEYBYTES?: number
  crypto_sign_BYTES?: number
}

/**
 * libsodium's verify when `sodium-native` can be loaded (installed, with a prebuilt binary for
 * this platform), else `null`. Never throws: a missing or broken addon means node:crypto.
 */
export function loadSodiumVerify (load: (id: string) => unknown = createRequire(import.meta.url)): RawEd25519Verify | null {
  let sodium: SodiumNative
  try {
    sodium = load('sodium-native') as SodiumNative
  } catch {
    return null
  }
  if (typeof sodium?.crypto_sign_verify_detached !== 'function' || sodium.crypto_sign_PUBLICKEYBYTES !== 32 || sodium.crypto_sign_BYTES !== 64) return null
  const verify = sodium.crypto_sign_verify_detached
  return (publicKey, message, signature) => {
    // sodium-native throws on wrong lengths; a signature of another length is simply invalid.
    if (signature.byteLength !== 64 || publicKey.byteLength !== 32) return false
    try {
      return verify(signature, message, publicKey) === true
    } catch {
      return false
    }
  }
}
