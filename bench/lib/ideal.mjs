// The hand-written "ideal" receiver, the baseline (ratio 1.00) of every table: the least work
// that still checks a delivery, written for speed with node:crypto.
//  1. Content-Digest: sha-256 of the raw body (crypto.hash), compared as base64 text;
//  2. Signature-Input: one regular expression for the exact shape the service sends, then
//     freshness (created within the last 300 s, at most 60 s ahead);
//  3. the Signature member of that label, 64 bytes;
//  4. Ed25519 (crypto.verify, synchronous) with a KeyObject cached per key id.
// It does not check the customer handle, the events or UTF-8, and keeps no replay record.
// With `sodium` (the sodium-native module), step 4 is libsodium's verify over the raw key instead:
// the same receiver with the library's Ed25519, to tell what the library adds from what its
// Ed25519 saves (bench/harness/adapters-pair.mjs --ideal).
import crypto from 'node:crypto'

const SIG_INPUT_RE = /^([A-Za-z0-9_.*-]+)=(\("content-digest"\);created=(\d+);alg="ed25519";keyid="([^"]+)")$/

/**
 * @param {Record<string, string>} keys key id -> SPKI DER public key, base64
 * @param {{ sodium?: any }} [options] sodium: the sodium-native module, to verify Ed25519 with libsodium
 */
export function createIdealVerifier (keys, { sodium } = {}) {
  const cache = new Map()
  function keyFor (keyId) {
    let key = cache.get(keyId)
    if (key === undefined && Object.hasOwn(keys, keyId)) {
      const der = Buffer.from(keys[keyId], 'base64')
      // An Ed25519 SPKI is a fixed 12-byte prefix and the 32-byte key: libsodium takes the key.
      key = sodium === undefined ? crypto.createPublicKey({ key: der, format: 'der', type: 'spki' }) : der.subarray(der.length - 32)
      cache.set(keyId, key)
    }
    return key
  }

  /** @returns {boolean} */
  function verify (body, headers) {
    const digest = headers['content-digest']
    const sigInput = headers['signature-input']
    const sigHeader = headers.signature
    if (typeof digest !== 'string' || typeof sigInput !== 'string' || typeof sigHeader !== 'string') return false
    if (!digest.startsWith('sha-256=:') || !digest.endsWith(':')) return false
    if (digest.slice(9, -1) !== crypto.hash('sha256', body, 'base64')) return false
    const m = SIG_INPUT_RE.exec(sigInput)
    if (m === null) return false
    const now = Math.floor(Date.now() / 1000)
    const created = Number(m[3])
    if (now - created > 300 || created - now > 60) return false
    const prefix = m[1] + '=:'
    if (!sigHeader.startsWith(prefix) || !sigHeader.endsWith(':')) return false
    const sig = Buffer.from(sigHeader.slice(prefix.length, -1), 'base64')
    if (sig.length !== 64) return false
    const key = keyFor(m[4])
    if (key === undefined) return false
    const base = `"content-digest": ${digest}\n"@signature-params": ${m[2]}`
    return sodium === undefined ? crypto.verify(null, Buffer.from(base), key, sig) : sodium.crypto_sign_verify_detached(sig, Buffer.from(base), key)
  }

  /** verify, then JSON.parse: the events, or null when the delivery does not verify. */
  function verifyAndParse (body, headers) {
    return verify(body, headers) ? JSON.parse(body.toString('utf8')) : null
  }

  return { verify, verifyAndParse }
}
