declare const verifyKey: unique symbol

/**
 * An Ed25519 public key imported for verifying: a `KeyObject` with the Node port, a
 * lazily imported `CryptoKey` with the WebCrypto port. Opaque outside `src/crypto`.
 */
export interface VerifyKey { readonly [verifyKey]: true }

/**
 * A WebCrypto `CryptoKey`, structurally (whichever runtime's type declarations describe it):
 * an Ed25519 public key with the `verify` usage is accepted as `publicKey`.
 */
export interface CryptoKeyLike {
  readonly type: string
  readonly extractable: boolean
  readonly algorithm: { readonly name: string }
  readonly usages: readonly string[]
}

/**
 * A Node.js `KeyObject`, structurally, so that the type declarations of the runtime-neutral entries
 * need no Node type declarations: an Ed25519 public `KeyObject` is accepted as `publicKey` on Node.
 */
export interface KeyObjectLike {
  readonly type: string
  readonly asymmetricKeyType?: string | undefined
}

export type DigestAlgorithm = 'sha256' | 'sha512'

/**
 * What the core needs from the runtime. `#crypto` resolves to `node.ts` on Node (the
 * measured fast path: synchronous `crypto.verify` on a cached `KeyObject`, one-shot
 * `crypto.hash`, the thread pool) and to `web.ts` everywhere else (WebCrypto, plain JS).
 */
export interface CryptoPort {
  readonly runtime: 'node' | 'web'
  /** One-shot hash of bytes or of a string's UTF-8, synchronously. */
  hash (algorithm: DigestAlgorithm, data: Uint8Array | string): Uint8Array
  /** The same hash as unpadded base64url text (on Node without an intermediate Buffer). */
  hashBase64url (algorithm: DigestAlgorithm, data: Uint8Array | string): string
  /**
   * The hash of bytes where the caller can wait: synchronously on Node, WebCrypto's
   * `crypto.subtle.digest` elsewhere, so the verify path carries no hashing code of its own
   * (`hash` stays for callers that must be synchronous).
   */
  digest (algorithm: DigestAlgorithm, data: Uint8Array): Uint8Array | Promise<Uint8Array>
  timingSafeEqual (a: Uint8Array, b: Uint8Array): boolean
  /** A key from the 32 raw bytes of an already checked Ed25519 point. */
  importRawEd25519 (raw: Uint8Array): VerifyKey
  /**
   * A key object the caller passed (a `CryptoKey`, or on Node also a `KeyObject`): the key and
   * its 32 raw bytes when they can be read synchronously (else `null`, checked at first use),
   * or `undefined` when it is not an Ed25519 public key.
   */
  fromKeyObject (material: object): { key: VerifyKey, raw: Uint8Array | null } | undefined
  sameKey (a: VerifyKey, b: VerifyKey): boolean
  /** Ed25519 verify; only a literal `true` is a valid signature. Never throws or rejects. */
  verify (key: VerifyKey, data: Uint8Array, signature: Uint8Array): boolean | Promise<boolean>
  /**
   * How many small-body verifies `verifyOnThreadPool: 'auto'` keeps off the calling thread at
   * once (0: none, `Infinity`: all). Loads libsodium on Node when it first asks.
   */
  offThreadSlots (): number
  /** How many `verifyOffThread` calls of this process have not answered yet (0 where nothing runs off thread). */
  offThreadInFlight (): number
  /** Ed25519 verify off the calling thread where the runtime can (Node's thread pool). */
  verifyOffThread (key: VerifyKey, data: Uint8Array, signature: Uint8Array): Promise<boolean>
  /** Bytes of a latin1 (one byte per char) string. */
  latin1 (text: string): Uint8Array
  base64Decode (text: string): Uint8Array
  base64url (bytes: Uint8Array): string
  /** Strict UTF-8 decode (no replacement); `undefined` when the bytes are not UTF-8. */
  utf8 (bytes: Uint8Array): string | undefined
}
