// Pure byte math on an encoded Ed25519 point, shared by both crypto ports and the key import.

/** The fixed 12-byte DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410 §4): the 32-byte point follows. */
export const ED25519_SPKI_PREFIX: Uint8Array = /* @__PURE__ */ Uint8Array.of(0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00)

/** p = 2^255 - 19. */
const P = (1n << 255n) - 19n
/**
 * The y of one pair of points of order 8 (the other pair's is p minus it). With a small-order
 * point as the public key, crafted signatures verify for many or all messages. The full list,
 * as libsodium's ge25519_has_small_order has it: y = 0 (order 4), 1 (the identity), p - 1
 * (order 2), this and p minus this (order 8); y >= p (non-canonical) is refused as well.
 */
const Y8 = 0x05fc536d880238b13933c6d305acdfd5f098eff289f4c345b027b2c28f95e826n

/**
 * True when the 32-byte encoded point has small order or a non-canonical y (y >= p),
 * whatever its sign bit. Runs once per key import, so a BigInt (compact) rather than byte loops.
 */
export function isWeakEd25519Point (raw: Uint8Array): boolean {
  if (raw.length !== 32) return true
  let y = 0n
  // Little-endian; the top bit (the sign of x) is masked off below (P + 18n is 2^255 - 1).
  for (let i = 31; i >= 0; i--) y = (y << 8n) | BigInt(raw[i]!)
  y &= P + 18n
  return y >= P - 1n || y < 2n || y === Y8 || y === P - Y8
}
