import { latin1, verify, verifyOffThread } from '#crypto'
import type { VerifyKey } from '../crypto/types.js'
import { VerificationError } from '../errors.js'

/**
 * The RFC 9421 signature base MailChannels signs: the received
 * Content-Digest value, then the canonical `@signature-params`; `\n` between lines, no
 * trailing newline.
 */
export function signatureBase (contentDigest: string, params: string): Uint8Array {
  return latin1(`"content-digest": ${contentDigest}\n"@signature-params": ${params}`)
}

/** The error of a signature that does not verify. */
export const signatureInvalid = (): VerificationError =>
  new VerificationError('signature_invalid', 'The signature does not verify with the MailChannels signing key: the delivery was not signed by MailChannels, or was altered.')

const invalid = signatureInvalid

const settle = (ok: boolean): void => { if (!ok) throw invalid() }

/**
 * Ed25519 verify: on the calling thread where the runtime can (Node: cheapest per core),
 * else a promise (WebCrypto). Only a literal `true` passes.
 */
export function verifyEd25519 (base: Uint8Array, key: VerifyKey, signature: Uint8Array): void | Promise<void> {
  const ok = verify(key, base, signature)
  if (ok === true) return
  if (ok === false) throw invalid()
  return ok.then(settle)
}

/** Ed25519 verify off the calling thread (Node's libuv pool, so a second core can share the work). */
export function verifyEd25519Async (base: Uint8Array, key: VerifyKey, signature: Uint8Array): Promise<void> {
  return verifyOffThread(key, base, signature).then(settle)
}
