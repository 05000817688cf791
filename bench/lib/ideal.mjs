// The hand-written "ideal" receiver, the baseline (ratio 1.00) of every table: the least work
// that still checks a delivery, written for speed with node:crypto.
//  1. Content-Digest: sha-256 of the raw body (crypto.hash), compared as base64 text;
//  2. Signature-Input: one regular expression for the exact shape the service sends, then
//     freshness (created within the last 300 s, at most 60 s ahead);
//  3. the Signature member of that label, 64 bytes;
//  4. Ed25519 (crypto.verify, synchronous) with a KeyObject cached per key id.
// It does not check the customer handle, the events or UTF-8, and keeps no replay record.
import crypto from 'node:crypto'

const SIG_INPUT_RE = /^([A-Za-z0-9_.*-]+)=(\("content-digest"\);created=(\d+);alg="ed25519";keyid="([^"]+)")$/

/** @param {Record<string, string>} keys key id -> SPKI DER public key, base64 */
export function createIdealVerifier (keys) {
  const cache = new Map()
  function keyFor (keyId) {
    let key = cache.get(keyId)
    if (key === undefined && Object.hasOwn(keys, keyId)) {
      key = crypto.createPublicKey({ key: Buffer.from(keys[keyId], 'base64'), format: 'der', type: 'spki' })
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
    return crypto.verify(null, Buffer.from(base), key, sig)
  }

  /** verify, then JSON.parse: the events, or null when the delivery does not verify. */
  function verifyAndParse (body, headers) {
    return verify(body, headers) ? JSON.parse(body.toString('utf8')) : null
  }

  return { verify, verifyAndParse }
}
