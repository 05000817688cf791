import crypto, { type KeyObject } from 'node:crypto'
import { VerificationError } from '../errors.js'

/**
 * The RFC 9421 signature base MailChannels signs: the received
 * Content-Digest value, then the canonical `@signature-params`; `\n` between lines, no
 * trailing newline.
 */
export function signatureBase (contentDigest: string, params: string): Buffer {
  return Buffer.from(`"content-digest": ${contentDigest}\n"@signature-params": ${params}`, 'latin1')
}

const invalid = (): VerificationError =>
  new VerificationError('signature_invalid', 'The signature does not verify with the MailChannels signing key: the delivery was not signed by MailChannels, or was altered.')

/** Ed25519 verify on the calling thread (cheapest per core). Only a literal `true` passes. */
export function verifyEd25519 (base: Buffer, key: KeyObject, signature: Buffer): void {
  let ok = false
  try {
    ok = crypto.verify(null, base, key, signature)
  } catch {
    ok = false
  }
  if (ok !== true) throw invalid()
}

/** Ed25519 verify on the libuv thread pool, so a second core can share the work. */
export function verifyEd25519Async (base: Buffer, key: KeyObject, signature: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    try {
      crypto.verify(null, base, key, signature, (err, ok) => {
        if (err === null && ok === true) resolve()
        else reject(invalid())
      })
    } catch {
      reject(invalid())
    }
  })
}
