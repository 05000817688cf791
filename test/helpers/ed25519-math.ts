// An independent, slow (BigInt) Ed25519 point check, so tests do not trust the library's
// own small-order list: decode the point (RFC 8032 §5.1.3) and test whether 8·P is the identity.

const p = (1n << 255n) - 19n
const mod = (a: bigint): bigint => ((a % p) + p) % p
function pow (b: bigint, e: bigint): bigint {
  let r = 1n
  b = mod(b)
  while (e > 0n) {
    if (e & 1n) r = (r * b) % p
    b = (b * b) % p
    e >>= 1n
  }
  return r
}
const inv = (a: bigint): bigint => pow(a, p - 2n)
const d = mod(-121665n * inv(121666n))
const SQRT_M1 = pow(2n, (p - 1n) / 4n)

export type Decoded = { kind: 'point', x: bigint, y: bigint } | { kind: 'non-canonical' } | { kind: 'not-on-curve' }

export function decodePoint (raw: Uint8Array): Decoded {
  const bytes = Buffer.from(raw)
  const sign = (bytes[31]! >> 7) & 1
  bytes[31] = bytes[31]! & 0x7f
  const y = BigInt('0x' + Buffer.from(bytes).reverse().toString('hex'))
  if (y >= p) return { kind: 'non-canonical' }
  const u = mod(y * y - 1n)
  const v = mod(d * y * y + 1n)
  let x = mod(u * pow(v, 3n) * pow(u * pow(v, 7n), (p - 5n) / 8n))
  const vx2 = mod(v * x * x)
  if (vx2 !== u) {
    if (vx2 === mod(-u)) x = mod(x * SQRT_M1)
    else return { kind: 'not-on-curve' }
  }
  if (x === 0n && sign === 1) return { kind: 'non-canonical' }
  if (Number(x & 1n) !== sign) x = mod(-x)
  return { kind: 'point', x, y }
}

function add (a: { x: bigint, y: bigint }, b: { x: bigint, y: bigint }): { x: bigint, y: bigint } {
  const t = mod(d * a.x * b.x * a.y * b.y)
  return {
    x: mod((a.x * b.y + a.y * b.x) * inv(1n + t)),
    y: mod((a.y * b.y + a.x * b.x) * inv(1n - t)),
  }
}

/** True when the encoding decodes to a point of order dividing 8 (including the identity). */
export function isSmallOrder (raw: Uint8Array): boolean {
  const dec = decodePoint(raw)
  if (dec.kind !== 'point') return false
  let q = { x: dec.x, y: dec.y }
  for (let i = 0; i < 3; i++) q = add(q, q)
  return q.x === 0n && q.y === 1n
}
