import crypto, { type KeyObject } from 'node:crypto'

/** The fixed 12-byte DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410). */
export const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex')

// y-coordinates (little-endian, sign bit cleared) of the Ed25519 points of small order:
// with any of them as the public key, crafted signatures verify for many or all messages.
// y >= p (non-canonical) is rejected separately. Same list as libsodium's
// ge25519_has_small_order.
const SMALL_ORDER_Y = [
  '0000000000000000000000000000000000000000000000000000000000000000', // y = 0, order 4
  '0100000000000000000000000000000000000000000000000000000000000000', // y = 1, the identity
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', // order 8
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a', // order 8 (p minus the one above)
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // y = p - 1, order 2
].map((hex) => Buffer.from(hex, 'hex'))

/** p = 2^255 - 19, little-endian. */
const P = Buffer.from('edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', 'hex')

/** Why a key was refused (never echoes the key). */
export class KeyRejectedError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'KeyRejectedError'
  }
}

/**
 * True when the 32-byte encoded point has small order or a non-canonical y (y >= p),
 * whatever its sign bit.
 */
export function isWeakEd25519Point (raw: Uint8Array): boolean {
  const y = Buffer.from(raw)
  y[31] = y[31]! & 0x7f
  for (const bad of SMALL_ORDER_Y) if (y.equals(bad)) return true
  // Compare y with p from the most significant byte down.
  for (let i = 31; i >= 0; i--) {
    if (y[i]! !== P[i]!) return y[i]! > P[i]!
  }
  return true // y == p
}

/**
 * Turns key material as MailChannels serves it (base64 SPKI DER, or PEM) into an Ed25519
 * `KeyObject`, refusing anything else: other key types (RSA, X25519, P-256...), garbage,
 * and small-order or non-canonical points. Throws `KeyRejectedError`.
 */
export function importEd25519PublicKey (material: string): KeyObject {
  if (typeof material !== 'string' || material.length === 0 || material.length > 4096) {
    throw new KeyRejectedError('the key is not a non-empty string of reasonable length')
  }
  let key: KeyObject
  try {
    if (material.includes('-----BEGIN')) {
      const blocks = material.match(/-----BEGIN /g)?.length ?? 0
      if (blocks !== 1) throw new KeyRejectedError('the PEM holds more than one block')
      // createPublicKey would also derive a public key from a private key or a certificate; only SPKI is a served key.
      if (!material.includes('-----BEGIN PUBLIC KEY-----')) throw new KeyRejectedError('the PEM is not a PUBLIC KEY (SPKI) block')
      key = crypto.createPublicKey({ key: material, format: 'pem' })
    } else {
      const b64 = material.replace(/\s+/g, '')
      if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) throw new KeyRejectedError('the key is neither PEM nor base64')
      key = crypto.createPublicKey({ key: Buffer.from(b64, 'base64'), format: 'der', type: 'spki' })
    }
  } catch (err) {
    if (err instanceof KeyRejectedError) throw err
    throw new KeyRejectedError('the key is not a valid SPKI public key')
  }
  if (key.type !== 'public' || key.asymmetricKeyType !== 'ed25519') {
    throw new KeyRejectedError(`the key is ${key.asymmetricKeyType ?? 'of an unknown type'}, not Ed25519`)
  }
  const der = key.export({ format: 'der', type: 'spki' })
  if (isWeakEd25519Point(der.subarray(der.length - 32))) {
    throw new KeyRejectedError('the key is a small-order or non-canonical Ed25519 point, with which forged signatures verify')
  }
  return key
}
