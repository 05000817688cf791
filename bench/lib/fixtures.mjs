// Deliveries in the MailChannels shape, signed with a throw-away key: ~251-byte events, an
// RFC 9530 Content-Digest and an RFC 9421 Ed25519 signature over the same signature base the
// service builds. Plain node:crypto, independent of the library under test.
import crypto from 'node:crypto'
import { createRequire } from 'node:module'

// Signing is libsodium's when sodium-native is installed (a devDependency): the HTTP bench signs
// one delivery per request before each load run, and libsodium signs several times faster.
const sodium = (() => { try { return createRequire(import.meta.url)('sodium-native') } catch { return null } })()
const secretKeys = new WeakMap()
function sign (base, privateKey) {
  if (sodium === null) return crypto.sign(null, base, privateKey)
  let sk = secretKeys.get(privateKey)
  if (sk === undefined) {
    const seed = Buffer.from(privateKey.export({ format: 'jwk' }).d, 'base64url')
    sk = Buffer.alloc(64)
    sodium.crypto_sign_seed_keypair(Buffer.alloc(32), sk, seed)
    secretKeys.set(privateKey, sk)
  }
  const sig = Buffer.alloc(64)
  sodium.crypto_sign_detached(sig, base, sk)
  return sig
}

export const CUSTOMER_HANDLE = 'cust_8f3a2b'
export const KEY_ID = 'k1'

const EVENT_TYPES = ['delivered', 'processed', 'dropped', 'hard-bounced', 'open', 'click', 'complained', 'unsubscribed', 'soft-bounced']

/** One event, padded so that its JSON is ~250 bytes. */
function makeEvent (i) {
  const ev = {
    email: `recipient${i}@example.com`,
    customer_handle: CUSTOMER_HANDLE,
    timestamp: 1700000000 + i,
    event: EVENT_TYPES[i % EVENT_TYPES.length],
    request_id: `req_${(i * 2654435761 >>> 0).toString(16).padStart(8, '0')}`,
    smtp_id: `<${i}.${(i * 40503 >>> 0).toString(36)}@mail.example.net>`,
    status: '250',
    recipients: [`recipient${i}@example.com`],
    reason: '',
  }
  const len = JSON.stringify(ev).length
  if (len < 250) ev.reason = 'x'.repeat(250 - len)
  return ev
}

/** A JSON array of n events, as the raw body Buffer. */
export function makeBody (n) {
  return Buffer.from(JSON.stringify(Array.from({ length: n }, (_, i) => makeEvent(i))))
}

export function makeKeyPair () {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519')
  return { privateKey, spkiB64: publicKey.export({ format: 'der', type: 'spki' }).toString('base64') }
}

export function contentDigest (body) {
  return `sha-256=:${crypto.createHash('sha256').update(body).digest('base64')}:`
}

/**
 * Signed headers (lower-case names, as Node delivers them) for a body whose Content-Digest
 * header is `digest`. A different `created` gives a different signature base, hence a different
 * signature: another delivery of the same body (the label is not part of the base).
 */
export function signedHeaders (digest, privateKey, { label = 'sig_1', created = Math.floor(Date.now() / 1000) } = {}) {
  const params = `("content-digest");created=${created};alg="ed25519";keyid="${KEY_ID}"`
  const base = `"content-digest": ${digest}\n"@signature-params": ${params}`
  const sig = sign(Buffer.from(base), privateKey).toString('base64')
  return {
    'content-type': 'application/json',
    'content-digest': digest,
    'signature-input': `${label}=${params}`,
    signature: `${label}=:${sig}:`,
  }
}

/** The same body with one byte changed: must be rejected under the original headers. */
export function tamper (body) {
  const b = Buffer.from(body)
  b[b.indexOf(0x72 /* r */)] = 0x52 /* R */
  return b
}

/** Headers whose signature has one base64 character changed (the body is intact). */
export function corruptSignature (headers) {
  const i = headers.signature.indexOf('=:') + 2
  const c = headers.signature[i] === 'A' ? 'B' : 'A'
  return { ...headers, signature: headers.signature.slice(0, i) + c + headers.signature.slice(i + 1) }
}
