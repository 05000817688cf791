// Pure byte math on an encoded Ed25519 point, shared by both crypto ports and the key import.

const hex = (h: string): Uint8Array => Uint8Array.from(h.match(/../g)!, (b) => parseInt(b, 16))

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
].map(hex)

/** p = 2^255 - 19, little-endian. */
const P = hex('edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f')

/**
 * True when the 32-byte encoded point has small order or a non-canonical y (y >= p),
 * whatever its sign bit.
 */
export function isWeakEd25519Point (raw: Uint8Array): boolean {
  if (raw.length !== 32) return true
  const y = Uint8Array.from(raw)
  y[31] = y[31]! & 0x7f
  for (const bad of SMALL_ORDER_Y) if (y.every((b, i) => b === bad[i])) return true
  // Compare y with p from the most significant byte down.
  for (let i = 31; i >= 0; i--) {
    if (y[i]! !== P[i]!) return y[i]! > P[i]!
  }
  return true // y == p
}

