import { verifyOffThread } from '#crypto'
import type { VerifyKey } from '../crypto/types.js'
import { VerificationError } from '../errors.js'
import { parseEvents } from '../events/parse-events.js'
import type { WebhookEvent } from '../events/types.js'
import { keyStoreFor } from '../keys/key-store.js'
import type { ResolvedVerifyConfig } from './options.js'
import { matchContentDigest, parseContentDigest } from './content-digest.js'
import { readSignatureFields, type HeadersInput, type SignatureFields } from './headers.js'
import { parseSignature, type ParsedSignature } from './signature-input.js'
import { signatureBase, signatureInvalid, verifyEd25519, verifyEd25519Async } from './signature.js'

/** What a verified delivery yields. */
export interface VerifiedDelivery {
  events: WebhookEvent[]
  keyId: string
  /** Signature `created`, Unix seconds. */
  created: number
  /** The signature bytes and base, for replay detection (the same material means the same signed delivery). */
  signature: Uint8Array
  base: Uint8Array
}

/** The result of the local, synchronous stages: everything but the key and the signature. */
export interface CheckedDelivery {
  sig: ParsedSignature
  base: Uint8Array
  body: Uint8Array
}

/**
 * The local checks, all cheap: header shape and profile, freshness, key id allowed,
 * Content-Digest over the raw bytes. Nothing here touches the network. Synchronous on Node; a
 * promise where the runtime's digest is WebCrypto's.
 */
export function checkDelivery (config: ResolvedVerifyConfig, payload: unknown, headers: HeadersInput, nowMs: number): CheckedDelivery | Promise<CheckedDelivery> {
  const body = toBytes(payload)
  return checkFields(config, body, readSignatureFields(headers), nowMs)
}

/** `checkDelivery` once the signature fields were read (the body is already bytes). */
function checkFields (config: ResolvedVerifyConfig, body: Uint8Array, fields: SignatureFields, nowMs: number): CheckedDelivery | Promise<CheckedDelivery> {
  const digests = parseContentDigest(fields.contentDigest)
  const sig = parseSignature(fields.signatureInput, fields.signature)

  const now = Math.floor(nowMs / 1000)
  if (sig.created < now - config.maxAge) {
    throw new VerificationError('signature_expired', `The signature was created ${now - sig.created} s ago, more than maxAge (${config.maxAge} s). If deliveries are queued, verify with the receipt time as "now".`)
  }
  if (sig.created > now + config.clockSkew) {
    throw new VerificationError('signature_from_future', `The signature's created time is ${sig.created - now} s in the future, more than clockSkew (${config.clockSkew} s). Check this machine's clock (NTP).`)
  }
  if (sig.expires !== undefined && sig.expires < now) {
    throw new VerificationError('signature_expired', 'The signature has passed its "expires" time.')
  }
  if (config.keyIds !== null && !config.keyIds.has(sig.keyId)) {
    throw new VerificationError('unknown_key', 'The signature names a key id that is not in keyIds.')
  }
  const matched = matchContentDigest(digests, body)
  if (matched !== undefined) return matched.then(() => ({ sig, base: signatureBase(fields.contentDigest, sig.params), body }))
  return { sig, base: signatureBase(fields.contentDigest, sig.params), body }
}

/** The key, without waiting when it can: the configured key, a cached key, or a promise of a fetched one. */
export function resolveKey (config: ResolvedVerifyConfig, keyId: string): VerifyKey | Promise<VerifyKey> {
  if (config.publicKey !== null) return config.publicKey
  const store = config.keyStore ?? keyStoreFor(config.freshStorePerCall!.baseUrl, config.logger)
  return store.peek(keyId) ?? store.get(keyId, config.logger)
}

function finish (config: ResolvedVerifyConfig, checked: CheckedDelivery): VerifiedDelivery {
  const { sig, base, body } = checked
  return { events: parseEvents(body, config.maxEvents, config.allowCustomer), keyId: sig.keyId, created: sig.created, signature: sig.signature, base }
}

/**
 * The whole verification: local checks, key, signature, events. Returns synchronously when the key is at hand and `async` is false,
 * otherwise a promise. Throws (or rejects with) `VerificationError` only.
 *
 * @param async verify Ed25519 on the libuv pool (frees the event loop; pays a round trip).
 */
export function verifyDelivery (
  config: ResolvedVerifyConfig,
  payload: unknown,
  headers: HeadersInput,
  nowMs: number,
  async = false,
): VerifiedDelivery | Promise<VerifiedDelivery> {
  const checked = checkDelivery(config, payload, headers, nowMs)
  const next = async ? verifyOnPool : verifyHere
  return checked instanceof Promise ? checked.then((c) => next(config, c)) : next(config, checked)
}

/**
 * `verifyDelivery` for a body already read as bytes and its signature fields already read (the
 * Fetch API entry: `readFetchSignatureFields`), on the calling thread.
 */
export function verifyFields (config: ResolvedVerifyConfig, body: Uint8Array, fields: SignatureFields, nowMs: number): VerifiedDelivery | Promise<VerifiedDelivery> {
  const checked = checkFields(config, body, fields, nowMs)
  return checked instanceof Promise ? checked.then((c) => verifyHere(config, c)) : verifyHere(config, checked)
}

/** How Ed25519 is run: `verifyEd25519` (this thread where it can) or `verifyEd25519Async` (the pool). */
type Verifier = (base: Uint8Array, key: VerifyKey, signature: Uint8Array) => void | Promise<void>

/** Once the local checks passed: the key, the Ed25519 signature, then the events, on the calling thread. */
function verifyHere (config: ResolvedVerifyConfig, checked: CheckedDelivery): VerifiedDelivery | Promise<VerifiedDelivery> {
  return verifyWithKey(config, checked, resolveKey(config, checked.sig.keyId), verifyEd25519)
}

/** The same with the signature checked on the libuv pool (the receivers' choice for small bodies); apart so a Worker bundle leaves it out. */
function verifyOnPool (config: ResolvedVerifyConfig, checked: CheckedDelivery): VerifiedDelivery | Promise<VerifiedDelivery> {
  const key = resolveKey(config, checked.sig.keyId)
  if (key instanceof Promise) return verifyWithKey(config, checked, key, verifyEd25519Async)
  // The key at hand: one promise for the pool's answer and no async function around it, as
  // every hop costs the event loop on each delivery.
  // The verdict only (only a literal `true` passes; it never rejects).
  return verifyOffThread(key, checked.base, checked.sig.signature).then((ok) => {
    if (ok) return finish(config, checked)
    return retry(config, checked, key, signatureInvalid(), verifyEd25519Async)
  })
}

/** The signature checked with `key` (or the key once fetched), then the events. */
function verifyWithKey (config: ResolvedVerifyConfig, checked: CheckedDelivery, key: VerifyKey | Promise<VerifyKey>, verifier: Verifier): VerifiedDelivery | Promise<VerifiedDelivery> {
  if (key instanceof Promise) return key.then((k) => verifyWithKey(config, checked, k, verifier))
  let pending: void | Promise<void>
  try {
    pending = verifier(checked.base, key, checked.sig.signature)
  } catch (err) {
    return retry(config, checked, key, err, verifier)
  }
  if (pending === undefined) return finish(config, checked)
  // WebCrypto: the verify itself is asynchronous.
  return pending.then(() => finish(config, checked), (err: unknown) => retry(config, checked, key, err, verifier))
}

/** After a failed signature: `err` again without a key store (a configured key), else the retry with a refreshed key. */
function retry (config: ResolvedVerifyConfig, checked: CheckedDelivery, failed: VerifyKey, err: unknown, verifier: Verifier): Promise<VerifiedDelivery> {
  if (config.keyStore === null) throw err
  return retryWithRefreshedKey(config, checked, failed, err, verifier)
}

/**
 * The signature failed with a cached key: the key may have been rotated under the same id.
 * The store refetches at most once per cooldown; with a different key, verify once more.
 */
async function retryWithRefreshedKey (config: ResolvedVerifyConfig, checked: CheckedDelivery, failed: VerifyKey, err: unknown, verifier: Verifier): Promise<VerifiedDelivery> {
  const fresh = await config.keyStore!.refresh(checked.sig.keyId, failed, config.logger)
  if (fresh === undefined) throw err
  await verifier(checked.base, fresh, checked.sig.signature)
  return finish(config, checked)
}

const encoder = /* @__PURE__ */ new TextEncoder()

/** The raw body as bytes. A string is taken as the UTF-8 text received. */
export function toBytes (payload: unknown): Uint8Array {
  if (payload instanceof Uint8Array) return payload
  if (typeof payload === 'string') return encoder.encode(payload)
  throw new VerificationError('invalid_payload', 'payload must be the raw body as a Uint8Array (a Buffer is one) or string (not parsed JSON).')
}
